//! Users: the store is the object service's ([`lode_objects::users`]); this module loads the
//! master key that seals their secrets.

pub use lode_objects::users::{Perm, ROOT, UserError, UserInfo, Users};

/// Loads `<data_dir>/master.key`, or `LODE_MASTER_KEY` (64 hex digits) when given, creating the
/// file (0600) on first start.
pub fn master_key(data_dir: &std::path::Path, given: Option<&str>) -> anyhow::Result<[u8; 32]> {
    use anyhow::Context;
    if let Some(hexkey) = given {
        let b = hex::decode(hexkey.trim()).context("LODE_MASTER_KEY is not hex")?;
        return b
            .try_into()
            .map_err(|_| anyhow::anyhow!("LODE_MASTER_KEY must be 32 bytes (64 hex digits)"));
    }
    let path = data_dir.join("master.key");
    if path.exists() {
        let b = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        return b
            .try_into()
            .map_err(|_| anyhow::anyhow!("{} must hold 32 bytes", path.display()));
    }
    let key: [u8; 32] = rand::random();
    crate::auth::write_private(&path, &key)?;
    Ok(key)
}
