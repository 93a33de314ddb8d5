//! SSE-KMS: the key ring boundary, and Lode's own key ring.
//!
//! [`KeyRing`] is what the object service asks for data keys under a customer-managed key; it
//! names no engine, so an external KMS (KMIP, Vault's transit engine, the AWS KMS API) can stand
//! behind it later. [`LocalKeyRing`] keeps its keys in the catalog's system table (every gateway
//! sees them), each key's material sealed by the master keys ([`crate::sse::MasterKeys`]).

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::masters::MasterStore;
use crate::sse::DataKey;
use lode_catalog::{Catalog, CatalogError};

/// Where a key can be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum KeyState {
    Enabled,
    /// Its objects cannot be read or written until it is enabled again.
    Disabled,
    /// As disabled, and gone for good after `at_ms` (AWS: 7-30 days after the request).
    PendingDeletion {
        at_ms: i64,
    },
}

/// A key as listed (never its material).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyInfo {
    pub id: String,
    pub description: String,
    pub state: KeyState,
    pub created_ms: i64,
}

pub use crate::error::KmsError;

/// The key ring boundary: customer-managed keys and the data keys made under them.
#[async_trait::async_trait]
pub trait KeyRing: Send + Sync {
    async fn create_key(&self, description: &str) -> Result<KeyInfo, KmsError>;
    async fn list_keys(&self) -> Result<Vec<KeyInfo>, KmsError>;
    async fn describe_key(&self, id: &str) -> Result<KeyInfo, KmsError>;
    /// Enables, disables or schedules the deletion of a key.
    async fn set_state(&self, id: &str, state: KeyState) -> Result<KeyInfo, KmsError>;
    /// A fresh data key for one object under key `id`, and its sealed form (opaque: only
    /// [`KeyRing::decrypt_data_key`] with the same `id` and `context` opens it).
    async fn generate_data_key(
        &self,
        id: &str,
        context: &[u8],
    ) -> Result<(DataKey, Vec<u8>), KmsError>;
    async fn decrypt_data_key(
        &self,
        id: &str,
        sealed: &[u8],
        context: &[u8],
    ) -> Result<DataKey, KmsError>;
    /// Seals an existing data key under key `id` (a copy that keeps its source's bytes).
    async fn encrypt_data_key(
        &self,
        id: &str,
        key: &DataKey,
        context: &[u8],
    ) -> Result<Vec<u8>, KmsError>;
    /// The key used when a request names none (AWS: the account's `aws/s3` key), made on
    /// first use.
    async fn default_key(&self) -> Result<KeyInfo, KmsError>;
    /// Re-seals the key material the ring keeps sealed by Lode's master key versions with the
    /// newest version (`lode admin master-key reseal`): how many keys it re-sealed. A ring whose material lives elsewhere has
    /// none.
    async fn reseal_material(&self) -> Result<u64, KmsError> {
        Ok(0)
    }
    /// How many keys' material master key version `v` seals.
    async fn sealed_by(&self, v: u32) -> Result<u64, KmsError> {
        let _ = v;
        Ok(0)
    }
}

/// The id of the key ring's default key ([`KeyRing::default_key`]).
pub const DEFAULT_KEY: &str = "alias/aws/s3";

/// How long a key's state, as read, is trusted before it is read again: a key disabled through
/// another gateway stops opening data keys here within this time (through this gateway, at
/// once).
const KEY_TTL: std::time::Duration = std::time::Duration::from_secs(1);

/// A stored key: its metadata and its material, sealed by a master key version.
#[derive(Clone, Serialize, Deserialize)]
struct StoredKey {
    info: KeyInfo,
    master_version: u32,
    sealed: Vec<u8>,
}

fn key_key(id: &str) -> Vec<u8> {
    let mut k = b"kms\0".to_vec();
    k.extend_from_slice(id.as_bytes());
    k
}

/// Lode's own key ring over the catalog.
pub struct LocalKeyRing {
    catalog: Arc<dyn Catalog>,
    master: Arc<MasterStore>,
    /// Keys as read lately (for [`KEY_TTL`]), so that reads of SSE-KMS objects do not each
    /// read the catalog.
    cache: std::sync::Mutex<std::collections::HashMap<String, (StoredKey, std::time::Instant)>>,
}

/// At most this many keys are cached.
const CACHED_KEYS: usize = 4096;

impl LocalKeyRing {
    pub fn new(catalog: Arc<dyn Catalog>, master: Arc<MasterStore>) -> Self {
        LocalKeyRing {
            catalog,
            master,
            cache: Default::default(),
        }
    }

    async fn stored(&self, id: &str) -> Result<StoredKey, KmsError> {
        let id = bare_id(id);
        if let Some((s, at)) = self.cache.lock().expect("keys").get(id)
            && at.elapsed() < KEY_TTL
        {
            return Ok(s.clone());
        }
        let v = self
            .catalog
            .sys_get(&key_key(id))
            .await?
            .ok_or_else(|| KmsError::NotFound(id.to_owned()))?;
        let s: StoredKey = serde_json::from_slice(&v)
            .map_err(|e| KmsError::Invalid(format!("stored key: {e}")))?;
        let mut c = self.cache.lock().expect("keys");
        if c.len() >= CACHED_KEYS {
            c.clear();
        }
        c.insert(id.to_owned(), (s.clone(), std::time::Instant::now()));
        Ok(s)
    }

    /// The key's material, when the key may be used.
    async fn usable(&self, id: &str) -> Result<DataKey, KmsError> {
        let s = self.stored(id).await?;
        match s.info.state {
            KeyState::Enabled => {}
            KeyState::Disabled => return Err(KmsError::Disabled(s.info.id)),
            KeyState::PendingDeletion { .. } => return Err(KmsError::PendingDeletion(s.info.id)),
        }
        Ok(self
            .master
            .open_data_key(s.master_version, &s.sealed)
            .await?)
    }

    /// Stores a new key under `id` (refused when one is there).
    async fn store_new(&self, id: &str, description: &str) -> Result<KeyInfo, KmsError> {
        let material = DataKey::generate()?;
        let (master_version, sealed) = self.master.keys().seal_key(&material)?;
        let info = KeyInfo {
            id: id.to_owned(),
            description: description.to_owned(),
            state: KeyState::Enabled,
            created_ms: crate::now_ms(),
        };
        let v = serde_json::to_vec(&StoredKey {
            info: info.clone(),
            master_version,
            sealed,
        })
        .expect("a key serializes");
        let create = Arc::new(move |cur: Option<&[u8]>| match cur {
            Some(_) => Err(CatalogError::PreconditionFailed),
            None => Ok(Some(v.clone())),
        });
        self.catalog.sys_update(&key_key(id), create).await?;
        tracing::info!(key = %id, "KMS key created");
        Ok(info)
    }
}

/// A key id as given: bare, or inside a key ARN (`arn:aws:kms:<region>:<account>:key/<id>`).
pub fn bare_id(id: &str) -> &str {
    id.rsplit_once(":key/").map_or(id, |(_, k)| k)
}

/// The context a data key is sealed with: the purpose and the caller's context.
fn context_aad(id: &str, context: &[u8]) -> Vec<u8> {
    let mut a = b"lode-kms-data-key-v1\0".to_vec();
    a.extend_from_slice(id.as_bytes());
    a.push(0);
    a.extend_from_slice(context);
    a
}

#[async_trait::async_trait]
impl KeyRing for LocalKeyRing {
    async fn create_key(&self, description: &str) -> Result<KeyInfo, KmsError> {
        if description.len() > 8192 {
            return Err(KmsError::Invalid(
                "a description holds at most 8192 bytes".into(),
            ));
        }
        let b: [u8; 16] = rand::random();
        let h = hex::encode(b);
        // AWS's key id shape: a UUID.
        let id = format!(
            "{}-{}-{}-{}-{}",
            &h[..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..]
        );
        self.store_new(&id, description).await
    }

    async fn list_keys(&self) -> Result<Vec<KeyInfo>, KmsError> {
        let mut out = vec![];
        for (_, v) in self.catalog.sys_scan(b"kms\0").await? {
            let s: StoredKey = serde_json::from_slice(&v)
                .map_err(|e| KmsError::Invalid(format!("stored key: {e}")))?;
            out.push(s.info);
        }
        Ok(out)
    }

    async fn describe_key(&self, id: &str) -> Result<KeyInfo, KmsError> {
        Ok(self.stored(id).await?.info)
    }

    async fn set_state(&self, id: &str, state: KeyState) -> Result<KeyInfo, KmsError> {
        let id = bare_id(id).to_owned();
        let mut s = self.stored(&id).await?;
        s.info.state = state;
        let v = serde_json::to_vec(&s).expect("a key serializes");
        let missing = id.clone();
        let put = Arc::new(move |cur: Option<&[u8]>| match cur {
            None => Err(CatalogError::PreconditionFailed),
            Some(_) => Ok(Some(v.clone())),
        });
        match self.catalog.sys_update(&key_key(&id), put).await {
            Err(CatalogError::PreconditionFailed) => return Err(KmsError::NotFound(missing)),
            r => r?,
        }
        self.cache.lock().expect("keys").remove(&id);
        tracing::info!(key = %id, ?state, "KMS key state changed");
        Ok(s.info)
    }

    async fn generate_data_key(
        &self,
        id: &str,
        context: &[u8],
    ) -> Result<(DataKey, Vec<u8>), KmsError> {
        let kek = self.usable(id).await?;
        let dk = DataKey::generate()?;
        let sealed = crate::sse::seal_key_with(&kek, &dk, &context_aad(bare_id(id), context))?;
        Ok((dk, sealed))
    }

    async fn decrypt_data_key(
        &self,
        id: &str,
        sealed: &[u8],
        context: &[u8],
    ) -> Result<DataKey, KmsError> {
        let kek = self.usable(id).await?;
        Ok(crate::sse::open_key_with(
            &kek,
            sealed,
            &context_aad(bare_id(id), context),
        )?)
    }

    async fn encrypt_data_key(
        &self,
        id: &str,
        key: &DataKey,
        context: &[u8],
    ) -> Result<Vec<u8>, KmsError> {
        let kek = self.usable(id).await?;
        Ok(crate::sse::seal_key_with(
            &kek,
            key,
            &context_aad(bare_id(id), context),
        )?)
    }

    async fn reseal_material(&self) -> Result<u64, KmsError> {
        let keys = self.master.keys();
        let Some(current) = keys.current() else {
            return Ok(0);
        };
        let mut n = 0;
        for (k, v) in self.catalog.sys_scan(b"kms\0").await? {
            let s: StoredKey = serde_json::from_slice(&v)
                .map_err(|e| KmsError::Invalid(format!("stored key: {e}")))?;
            if s.master_version == current {
                continue;
            }
            let (version, sealed) = keys.reseal(s.master_version, &s.sealed)?;
            let old = s.master_version;
            // Only the material changes: a state set meanwhile stays.
            let f = Arc::new(move |cur: Option<&[u8]>| {
                let Some(cur) = cur else {
                    return Ok(None);
                };
                let mut c: StoredKey =
                    serde_json::from_slice(cur).map_err(|_| CatalogError::PreconditionFailed)?;
                if c.master_version != old {
                    return Err(CatalogError::PreconditionFailed);
                }
                c.master_version = version;
                c.sealed = sealed.clone();
                Ok(Some(serde_json::to_vec(&c).expect("a key serializes")))
            });
            match self.catalog.sys_update(&k, f).await {
                Ok(()) => n += 1,
                // Changed meanwhile: counted by the next check.
                Err(CatalogError::PreconditionFailed) => {}
                Err(e) => return Err(e.into()),
            }
        }
        self.cache.lock().expect("keys").clear();
        Ok(n)
    }

    async fn sealed_by(&self, v: u32) -> Result<u64, KmsError> {
        let mut n = 0;
        for (_, s) in self.catalog.sys_scan(b"kms\0").await? {
            let s: StoredKey = serde_json::from_slice(&s)
                .map_err(|e| KmsError::Invalid(format!("stored key: {e}")))?;
            n += u64::from(s.master_version == v);
        }
        Ok(n)
    }

    async fn default_key(&self) -> Result<KeyInfo, KmsError> {
        match self.stored(DEFAULT_KEY).await {
            Ok(s) => Ok(s.info),
            Err(KmsError::NotFound(_)) => {
                match self
                    .store_new(DEFAULT_KEY, "Default key for SSE-KMS (aws/s3)")
                    .await
                {
                    // Another gateway made it first.
                    Err(KmsError::Catalog(CatalogError::PreconditionFailed)) => {
                        Ok(self.stored(DEFAULT_KEY).await?.info)
                    }
                    r => r,
                }
            }
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sse::SseError;

    async fn ring() -> LocalKeyRing {
        let catalog: Arc<dyn Catalog> = Arc::new(lode_catalog_kv::mem_catalog());
        let master = MasterStore::open(Arc::clone(&catalog), [3u8; 32])
            .await
            .unwrap();
        LocalKeyRing::new(catalog, Arc::new(master))
    }

    #[tokio::test]
    async fn keys_make_data_keys_that_only_they_open() {
        let r = ring().await;
        let k = r.create_key("team a").await.unwrap();
        assert_eq!(k.id.len(), 36);
        assert_eq!(r.list_keys().await.unwrap(), vec![k.clone()]);
        let (dk, sealed) = r.generate_data_key(&k.id, b"bucket/key").await.unwrap();
        let arn = format!("arn:aws:kms:us-east-1:000000000000:key/{}", k.id);
        let back = r
            .decrypt_data_key(&arn, &sealed, b"bucket/key")
            .await
            .unwrap();
        // Same key: what one seals the other opens.
        let sealed_seg = crate::sse::seal(&dk, &[1; 16], 0, b"x").unwrap();
        assert_eq!(
            crate::sse::open(&back, &[1; 16], 0, &sealed_seg).unwrap(),
            b"x"
        );
        // Another context or another key does not open it.
        assert!(matches!(
            r.decrypt_data_key(&k.id, &sealed, b"other").await,
            Err(KmsError::Sse(SseError::Corrupt))
        ));
        let k2 = r.create_key("team b").await.unwrap();
        assert!(matches!(
            r.decrypt_data_key(&k2.id, &sealed, b"bucket/key").await,
            Err(KmsError::Sse(SseError::Corrupt))
        ));
        assert!(matches!(
            r.generate_data_key("nope", b"").await,
            Err(KmsError::NotFound(_))
        ));
    }

    #[tokio::test]
    async fn a_disabled_key_opens_nothing_until_enabled() {
        let r = ring().await;
        let k = r.create_key("").await.unwrap();
        let (_, sealed) = r.generate_data_key(&k.id, b"c").await.unwrap();
        r.set_state(&k.id, KeyState::Disabled).await.unwrap();
        assert!(matches!(
            r.decrypt_data_key(&k.id, &sealed, b"c").await,
            Err(KmsError::Disabled(_))
        ));
        assert!(matches!(
            r.generate_data_key(&k.id, b"c").await,
            Err(KmsError::Disabled(_))
        ));
        r.set_state(&k.id, KeyState::PendingDeletion { at_ms: 1 })
            .await
            .unwrap();
        assert!(matches!(
            r.decrypt_data_key(&k.id, &sealed, b"c").await,
            Err(KmsError::PendingDeletion(_))
        ));
        r.set_state(&k.id, KeyState::Enabled).await.unwrap();
        assert!(r.decrypt_data_key(&k.id, &sealed, b"c").await.is_ok());
        assert!(matches!(
            r.set_state("nope", KeyState::Enabled).await,
            Err(KmsError::NotFound(_))
        ));
        // The stored key holds no material in clear.
        let stored = r.catalog.sys_get(&key_key(&k.id)).await.unwrap().unwrap();
        let text = String::from_utf8_lossy(&stored);
        assert!(text.contains("\"sealed\"") && !text.contains("material"));
    }
}
