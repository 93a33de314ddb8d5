//! The master key versions of encryption at rest (SSE-S3 data keys and the key ring's key
//! material are sealed by them), kept in the catalog, each sealed by the root key that the
//! server's master key derives; rotation, retirement and the errors of both.

use std::sync::{Arc, RwLock};

use lode_catalog::{Catalog, CatalogError};

use crate::error::{KmsError, ObjError};
use crate::sse::{DataKey, MasterKeys, SseError};

/// The master key versions (SSE-S3 and the key ring's key material), kept in the catalog,
/// each sealed by the root key.
pub struct MasterStore {
    root: DataKey,
    catalog: Arc<dyn Catalog>,
    keys: RwLock<Arc<MasterKeys>>,
    /// Versions an operator retired: they open nothing for a request (only `reseal` still
    /// uses them), until unretired.
    retired: RwLock<std::collections::BTreeSet<u32>>,
}

impl std::fmt::Debug for MasterStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MasterStore")
            .field("versions", &self.keys().versions())
            .finish()
    }
}

const MASTER_PREFIX: &[u8] = b"sse\0master\0";
const RETIRED_PREFIX: &[u8] = b"sse\0retired\0";
/// What labels a master key version's seal under the root key.
const ROOT_LABEL: &[u8] = b"lode-sse-master-key-v1";

fn version_key(v: u32) -> Vec<u8> {
    versioned_key(MASTER_PREFIX, v)
}

fn versioned_key(prefix: &[u8], v: u32) -> Vec<u8> {
    let mut k = prefix.to_vec();
    k.extend_from_slice(format!("{v:010}").as_bytes());
    k
}

/// Why the master keys could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum MasterError {
    #[error(
        "the root key does not open the stored master key version {0}: this is not the \
         master.key / LODE_MASTER_KEY these objects were written with (Lode will not serve \
         data it cannot decrypt)"
    )]
    WrongRootKey(u32),
    #[error("stored master key entry {0:?} is malformed")]
    Malformed(String),
    #[error("there is no master key version {0}")]
    NoSuchVersion(u32),
    #[error("master key version {0} is the current one: rotate first")]
    Current(u32),
    #[error(
        "{count} records are still sealed by master key version {version}: run `lode admin \
         master-key reseal` (multipart uploads in progress are re-sealed when they complete)"
    )]
    InUse { version: u32, count: u64 },
    #[error("encryption at rest is not on")]
    Off,
    #[error(transparent)]
    Kms(#[from] KmsError),
    #[error(transparent)]
    Service(Box<ObjError>),
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    #[error(transparent)]
    Sse(#[from] SseError),
}

/// The root key of encryption at rest, derived (HKDF-SHA256) from the server's master key, so
/// that the one secret an operator keeps serves both users' secrets and data keys without a
/// key used for two purposes.
pub fn root_from_master(master: &[u8; 32]) -> [u8; 32] {
    use ring::hkdf;
    let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, b"lode").extract(master);
    let okm = prk
        .expand(&[b"lode-sse-root-v1"], hkdf::HKDF_SHA256)
        .expect("32 bytes of HKDF-SHA256 output");
    let mut out = [0u8; 32];
    okm.fill(&mut out).expect("32 bytes of HKDF-SHA256 output");
    out
}

impl MasterStore {
    /// Loads the master key versions, creating version 1 on first start. A root key that does
    /// not open them is [`MasterError::WrongRootKey`].
    pub async fn open(catalog: Arc<dyn Catalog>, root: [u8; 32]) -> Result<Self, MasterError> {
        let s = MasterStore {
            root: DataKey::from_bytes(root),
            catalog,
            keys: RwLock::new(Arc::new(MasterKeys::new([]))),
            retired: Default::default(),
        };
        s.reload().await?;
        if s.keys().current().is_none() {
            s.create(1).await?;
            s.reload().await?;
        }
        Ok(s)
    }

    /// The versions as loaded.
    pub fn keys(&self) -> Arc<MasterKeys> {
        Arc::clone(&self.keys.read().expect("master keys"))
    }

    /// Reads the versions again (another gateway may have rotated).
    pub async fn reload(&self) -> Result<(), MasterError> {
        let mut opened = vec![];
        for (k, v) in self.catalog.sys_scan(MASTER_PREFIX).await? {
            let name = String::from_utf8_lossy(&k[MASTER_PREFIX.len()..]).into_owned();
            let version: u32 = name.parse().map_err(|_| MasterError::Malformed(name))?;
            let key = crate::sse::open_key_with(&self.root, &v, ROOT_LABEL)
                .map_err(|_| MasterError::WrongRootKey(version))?;
            opened.push((version, key));
        }
        let mut retired = std::collections::BTreeSet::new();
        for (k, _) in self.catalog.sys_scan(RETIRED_PREFIX).await? {
            let name = String::from_utf8_lossy(&k[RETIRED_PREFIX.len()..]).into_owned();
            retired.insert(name.parse().map_err(|_| MasterError::Malformed(name))?);
        }
        *self.keys.write().expect("master keys") = Arc::new(MasterKeys::from_opened(opened));
        *self.retired.write().expect("retired versions") = retired;
        Ok(())
    }

    /// The versions an operator retired.
    pub fn retired(&self) -> Vec<u32> {
        self.retired
            .read()
            .expect("retired versions")
            .iter()
            .copied()
            .collect()
    }

    /// Marks version `v` retired (or, `retired` false, in use again). Retiring checks first,
    /// with `in_use`, that nothing is sealed by it any more; the current version cannot be
    /// retired.
    pub(crate) async fn set_retired(&self, v: u32, retired: bool) -> Result<(), MasterError> {
        self.reload().await?;
        let keys = self.keys();
        if !keys.versions().contains(&v) {
            return Err(MasterError::NoSuchVersion(v));
        }
        if retired && keys.current() == Some(v) {
            return Err(MasterError::Current(v));
        }
        let f = Arc::new(move |_: Option<&[u8]>| Ok(retired.then(Vec::new)));
        self.catalog
            .sys_update(&versioned_key(RETIRED_PREFIX, v), f)
            .await?;
        self.reload().await?;
        tracing::info!(
            version = v,
            retired,
            "master key version retirement changed"
        );
        Ok(())
    }

    /// Stores version `v` if no version `v` is there (a concurrent creator's stays).
    async fn create(&self, v: u32) -> Result<bool, MasterError> {
        let fresh = DataKey::generate()?;
        let sealed = crate::sse::seal_key_with(&self.root, &fresh, ROOT_LABEL)?;
        let f = Arc::new(move |cur: Option<&[u8]>| match cur {
            Some(_) => Err(CatalogError::PreconditionFailed),
            None => Ok(Some(sealed.clone())),
        });
        match self.catalog.sys_update(&version_key(v), f).await {
            Ok(()) => Ok(true),
            Err(CatalogError::PreconditionFailed) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Adds a new master key version: new objects' data keys are sealed with it; every older
    /// version still opens what it sealed. Returns the new version.
    pub async fn rotate(&self) -> Result<u32, MasterError> {
        loop {
            self.reload().await?;
            let next = self.keys().current().unwrap_or(0) + 1;
            if self.create(next).await? {
                self.reload().await?;
                tracing::info!(version = next, "new master key version");
                return Ok(next);
            }
        }
    }

    /// Opens a data key sealed by master key `version`, reading the versions again once when
    /// this gateway does not have it yet.
    pub async fn open_data_key(&self, version: u32, sealed: &[u8]) -> Result<DataKey, SseError> {
        if self
            .retired
            .read()
            .expect("retired versions")
            .contains(&version)
        {
            return Err(SseError::Retired(version));
        }
        match self.keys().open_key(version, sealed) {
            Err(SseError::NoMasterKey(_)) => {
                if let Err(e) = self.reload().await {
                    tracing::warn!(error = %e, "reloading the master keys failed");
                }
                self.keys().open_key(version, sealed)
            }
            r => r,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn master_versions_load_rotate_and_refuse_a_wrong_root() {
        let cat: Arc<dyn Catalog> = Arc::new(lode_catalog_kv::mem_catalog());
        let m = MasterStore::open(Arc::clone(&cat), [1; 32]).await.unwrap();
        assert_eq!(m.keys().versions(), [1]);
        let dk = DataKey::generate().unwrap();
        let (v, sealed) = m.keys().seal_key(&dk).unwrap();
        assert_eq!(v, 1);
        // Another gateway with the same root sees the same version, and rotates.
        let other = MasterStore::open(Arc::clone(&cat), [1; 32]).await.unwrap();
        assert_eq!(other.rotate().await.unwrap(), 2);
        let (v2, sealed2) = other.keys().seal_key(&dk).unwrap();
        assert_eq!(v2, 2);
        // The first opens version 2's keys after reading the versions again on the miss,
        // and version 1's as before.
        assert!(m.open_data_key(2, &sealed2).await.is_ok());
        assert!(m.open_data_key(1, &sealed).await.is_ok());
        assert_eq!(m.keys().versions(), [1, 2]);
        // A wrong root key is refused at start, naming no key.
        let e = MasterStore::open(Arc::clone(&cat), [2; 32])
            .await
            .unwrap_err();
        assert!(matches!(e, MasterError::WrongRootKey(_)), "{e}");
        assert!(!format!("{m:?}").contains("1, 1"));
    }

    #[tokio::test]
    async fn a_retired_version_opens_nothing_until_unretired_and_the_current_one_cannot_retire() {
        let cat: Arc<dyn Catalog> = Arc::new(lode_catalog_kv::mem_catalog());
        let m = MasterStore::open(Arc::clone(&cat), [1; 32]).await.unwrap();
        let dk = DataKey::generate().unwrap();
        let (_, sealed) = m.keys().seal_key(&dk).unwrap();
        assert!(matches!(
            m.set_retired(1, true).await,
            Err(MasterError::Current(1))
        ));
        assert!(matches!(
            m.set_retired(9, true).await,
            Err(MasterError::NoSuchVersion(9))
        ));
        m.rotate().await.unwrap();
        m.set_retired(1, true).await.unwrap();
        assert!(matches!(
            m.open_data_key(1, &sealed).await,
            Err(SseError::Retired(1))
        ));
        // Re-sealing still opens it (what reseal does), and a gateway that loads later sees
        // the retirement.
        assert_eq!(m.keys().reseal(1, &sealed).unwrap().0, 2);
        let other = MasterStore::open(Arc::clone(&cat), [1; 32]).await.unwrap();
        assert_eq!(other.retired(), [1]);
        m.set_retired(1, false).await.unwrap();
        assert!(m.open_data_key(1, &sealed).await.is_ok());
    }
}
