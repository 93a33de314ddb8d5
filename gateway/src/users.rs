//! Users, their keys, and who may do what to which bucket.
//!
//! * The root user (`root`) has the credentials of `[auth]` / `<data_dir>/credentials` and may
//!   do everything.
//! * Other users are added at run time (`lode admin user add`). Each has an access key and a
//!   secret key. SigV4 needs the secret itself on the server (it is an HMAC key, so it cannot be
//!   stored hashed): secrets are stored sealed with ChaCha20-Poly1305 under a master key that is
//!   not in the metadata store (`<data_dir>/master.key`, mode 0600, or `LODE_MASTER_KEY`). A copy
//!   of the metadata alone reveals no secret. Secrets are shown once, when created, and never
//!   logged.
//! * A bucket belongs to the user who created it. Its owner (and root) may do anything to it;
//!   another user needs a grant: `read` (GET, HEAD, list) or `write` (read plus PUT, DELETE,
//!   copy into, multipart). Only the owner or root deletes a bucket.
//!
//! Records live in the metadata store's system table: `user\0<name>` and
//! `grant\0<bucket>\0<user>`.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use chacha20poly1305::aead::{Aead, KeyInit};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use lode_metadata::records;
use lode_metadata::{MetaError, MetadataStore, Table, keys, transact};
use serde::{Deserialize, Serialize};

use crate::auth::Credentials;

/// The name of the root user.
pub const ROOT: &str = "root";

#[derive(Debug, thiserror::Error)]
pub enum UserError {
    #[error("user `{0}` already exists")]
    Exists(String),
    #[error("no user `{0}`")]
    NoSuchUser(String),
    #[error("invalid user name `{0}`: 1-64 characters of a-z, 0-9, '.', '_' or '-'")]
    BadName(String),
    #[error(
        "a sealed secret does not open with this master key (wrong LODE_MASTER_KEY or master.key?)"
    )]
    Unseal,
    /// Users other than root are not built in cluster mode yet.
    #[error("users other than root are not built in cluster mode yet")]
    NotInCluster,
    #[error(transparent)]
    Meta(#[from] MetaError),
}

/// What a caller may do to a bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Perm {
    Read,
    Write,
    /// The owner's rights (delete the bucket); never granted.
    Own,
}

#[derive(Serialize, Deserialize)]
struct UserRecord {
    access_key: String,
    /// nonce (12 bytes) || ciphertext of the secret key.
    sealed_secret: Vec<u8>,
    uid: Option<u32>,
    created_ms: i64,
}

impl records::Record for UserRecord {}
impl records::Record for Perm {}

/// A user as listed (no secret).
#[derive(Debug, Clone, Serialize)]
pub struct UserInfo {
    pub name: String,
    pub access_key: String,
    pub uid: Option<u32>,
    pub created_ms: i64,
}

struct Known {
    name: String,
    secret: String,
}

pub struct Users {
    meta: Arc<dyn MetadataStore>,
    cipher: ChaCha20Poly1305,
    root: Credentials,
    by_key: RwLock<HashMap<String, Known>>,
    /// Cluster mode, for now: root only; adding users or grants is refused.
    root_only: bool,
}

fn user_key(name: &str) -> Vec<u8> {
    let mut k = b"user\0".to_vec();
    k.extend_from_slice(name.as_bytes());
    k
}

fn grant_key(bucket: &str, user: &str) -> Vec<u8> {
    let mut k = b"grant\0".to_vec();
    k.extend_from_slice(&keys::object(bucket, user));
    k
}

fn grant_prefix(bucket: &str) -> Vec<u8> {
    let mut k = b"grant\0".to_vec();
    k.extend_from_slice(&keys::bucket_prefix(bucket));
    k
}

fn check_name(name: &str) -> Result<(), UserError> {
    let ok = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
        && name != ROOT;
    if ok {
        Ok(())
    } else {
        Err(UserError::BadName(name.to_owned()))
    }
}

impl Users {
    /// Loads every user, opening their secrets with `master_key`.
    pub fn open(
        meta: Arc<dyn MetadataStore>,
        master_key: [u8; 32],
        root: Credentials,
    ) -> Result<Self, UserError> {
        let u = Users {
            meta,
            cipher: ChaCha20Poly1305::new(Key::from_slice(&master_key)),
            root,
            by_key: RwLock::new(HashMap::new()),
            root_only: false,
        };
        let rows = u
            .meta
            .scan(Table::System, b"user\0", Some(b"user\x01"), usize::MAX)?;
        let mut map = HashMap::new();
        for (k, v) in rows {
            let name = String::from_utf8_lossy(&k[5..]).into_owned();
            let r: UserRecord = records::decode(&v)?;
            let secret = u.unseal(&r.sealed_secret)?;
            map.insert(r.access_key, Known { name, secret });
        }
        *u.by_key.write().expect("users") = map;
        Ok(u)
    }

    /// Only root: users and grants are refused (cluster mode, until users live in the cluster).
    pub fn root_only(mut self) -> Self {
        self.root_only = true;
        self
    }

    fn seal(&self, secret: &str) -> Vec<u8> {
        let nonce: [u8; 12] = rand::random();
        let mut out = nonce.to_vec();
        out.extend(
            self.cipher
                .encrypt(Nonce::from_slice(&nonce), secret.as_bytes())
                .expect("sealing cannot fail"),
        );
        out
    }

    fn unseal(&self, sealed: &[u8]) -> Result<String, UserError> {
        if sealed.len() < 12 {
            return Err(UserError::Unseal);
        }
        let plain = self
            .cipher
            .decrypt(Nonce::from_slice(&sealed[..12]), &sealed[12..])
            .map_err(|_| UserError::Unseal)?;
        String::from_utf8(plain).map_err(|_| UserError::Unseal)
    }

    /// The user name and secret of an access key (root included).
    pub fn lookup(&self, access_key: &str) -> Option<(String, String)> {
        if access_key == self.root.access_key {
            return Some((ROOT.to_owned(), self.root.secret_key.clone()));
        }
        self.by_key
            .read()
            .expect("users")
            .get(access_key)
            .map(|k| (k.name.clone(), k.secret.clone()))
    }

    /// The user name behind an access key.
    pub fn name_of(&self, access_key: &str) -> Option<String> {
        self.lookup(access_key).map(|(n, _)| n)
    }

    /// Adds a user with fresh keys; the returned secret is shown once.
    pub fn add(&self, name: &str, uid: Option<u32>) -> Result<Credentials, UserError> {
        if self.root_only {
            return Err(UserError::NotInCluster);
        }
        check_name(name)?;
        let creds = Credentials::generate();
        let rec = UserRecord {
            access_key: creds.access_key.clone(),
            sealed_secret: self.seal(&creds.secret_key),
            uid,
            created_ms: crate::objects::now_ms(),
        };
        let k = user_key(name);
        transact(&*self.meta, |t| {
            if t.get_for_update(Table::System, &k)?.is_some() {
                return Err(UserError::Exists(name.to_owned()));
            }
            t.put(Table::System, &k, &records::encode(&rec))?;
            Ok(())
        })?;
        self.by_key.write().expect("users").insert(
            creds.access_key.clone(),
            Known {
                name: name.to_owned(),
                secret: creds.secret_key.clone(),
            },
        );
        tracing::info!(user = name, access_key = %creds.access_key, "user added");
        Ok(creds)
    }

    /// Removes a user: their keys stop working at once. Their buckets stay (root can manage
    /// them) and their grants elsewhere are dropped.
    pub fn remove(&self, name: &str) -> Result<(), UserError> {
        let k = user_key(name);
        let rec: UserRecord = match self.meta.get(Table::System, &k)? {
            Some(v) => records::decode(&v)?,
            None => return Err(UserError::NoSuchUser(name.to_owned())),
        };
        let grants: Vec<Vec<u8>> = self
            .meta
            .scan(Table::System, b"grant\0", Some(b"grant\x01"), usize::MAX)?
            .into_iter()
            .map(|(k, _)| k)
            .filter(|k| k.ends_with(&[&[0u8][..], name.as_bytes()].concat()))
            .collect();
        transact(&*self.meta, |t| {
            t.delete(Table::System, &k)?;
            for g in &grants {
                t.delete(Table::System, g)?;
            }
            Ok::<_, UserError>(())
        })?;
        self.by_key.write().expect("users").remove(&rec.access_key);
        tracing::info!(user = name, "user removed");
        Ok(())
    }

    pub fn list(&self) -> Result<Vec<UserInfo>, UserError> {
        let rows = self
            .meta
            .scan(Table::System, b"user\0", Some(b"user\x01"), usize::MAX)?;
        rows.into_iter()
            .map(|(k, v)| {
                let r: UserRecord = records::decode(&v)?;
                Ok(UserInfo {
                    name: String::from_utf8_lossy(&k[5..]).into_owned(),
                    access_key: r.access_key,
                    uid: r.uid,
                    created_ms: r.created_ms,
                })
            })
            .collect()
    }

    /// The uid a user's buckets show on the mount, if set.
    pub fn uid_of(&self, name: &str) -> Option<u32> {
        let v = self.meta.get(Table::System, &user_key(name)).ok()??;
        records::decode::<UserRecord>(&v).ok()?.uid
    }

    /// Grants `perm` on `bucket` to `user` (`None` revokes).
    pub fn grant(&self, bucket: &str, user: &str, perm: Option<Perm>) -> Result<(), UserError> {
        if self.root_only {
            return Err(UserError::NotInCluster);
        }
        if user != ROOT && self.meta.get(Table::System, &user_key(user))?.is_none() {
            return Err(UserError::NoSuchUser(user.to_owned()));
        }
        let k = grant_key(bucket, user);
        transact(&*self.meta, |t| {
            match perm {
                Some(p) => t.put(Table::System, &k, &records::encode(&p))?,
                None => t.delete(Table::System, &k)?,
            }
            Ok::<_, UserError>(())
        })
    }

    /// Drops every grant on a deleted bucket (a new bucket of the same name starts clean).
    pub fn drop_bucket(&self, bucket: &str) -> Result<(), UserError> {
        let p = grant_prefix(bucket);
        let end = keys::prefix_successor(&p);
        let rows = self
            .meta
            .scan(Table::System, &p, end.as_deref(), usize::MAX)?;
        transact(&*self.meta, |t| {
            for (k, _) in &rows {
                t.delete(Table::System, k)?;
            }
            Ok::<_, UserError>(())
        })
    }

    /// Whether `user` may act with `want` on a bucket owned by `owner`.
    pub fn allowed(&self, user: &str, bucket: &str, owner: &str, want: Perm) -> bool {
        if user == ROOT || self.is_owner(user, owner) {
            return true;
        }
        if want == Perm::Own {
            return false;
        }
        match self.meta.get(Table::System, &grant_key(bucket, user)) {
            Ok(Some(v)) => records::decode::<Perm>(&v).is_ok_and(|have| have >= want),
            _ => false,
        }
    }

    /// Whether `owner` (as stored in a bucket record) is `user`. Buckets made before users
    /// existed record the root access key.
    pub fn is_owner(&self, user: &str, owner: &str) -> bool {
        owner == user || (user == ROOT && owner == self.root.access_key)
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use lode_metadata::MemMetadataStore;

    fn root() -> Credentials {
        Credentials {
            access_key: "ROOTKEY".into(),
            secret_key: "rootsecret".into(),
        }
    }

    #[test]
    fn users_keys_grants_and_sealing() {
        let meta: Arc<dyn MetadataStore> = Arc::new(MemMetadataStore::new());
        let users = Users::open(Arc::clone(&meta), [7; 32], root()).unwrap();
        let alice = users.add("alice", Some(1001)).unwrap();
        assert!(matches!(
            users.add("alice", None),
            Err(UserError::Exists(_))
        ));
        assert!(matches!(
            users.add("Root", None),
            Err(UserError::BadName(_))
        ));
        assert!(matches!(
            users.add("root", None),
            Err(UserError::BadName(_))
        ));
        assert_eq!(
            users.lookup(&alice.access_key),
            Some(("alice".into(), alice.secret_key.clone()))
        );
        assert_eq!(users.name_of("ROOTKEY").as_deref(), Some(ROOT));
        // Sealed at rest: the secret's bytes are nowhere in the store.
        let raw = meta
            .get(Table::System, &user_key("alice"))
            .unwrap()
            .unwrap();
        assert!(
            !raw.windows(alice.secret_key.len())
                .any(|w| w == alice.secret_key.as_bytes())
        );
        // Reopened with the same key: same users. With another key: a clear error.
        let again = Users::open(Arc::clone(&meta), [7; 32], root()).unwrap();
        assert_eq!(again.name_of(&alice.access_key).as_deref(), Some("alice"));
        assert!(matches!(
            Users::open(Arc::clone(&meta), [8; 32], root()),
            Err(UserError::Unseal)
        ));
        // Ownership and grants.
        users.add("bob", None).unwrap();
        assert!(users.allowed("alice", "a-bkt", "alice", Perm::Own));
        assert!(!users.allowed("bob", "a-bkt", "alice", Perm::Read));
        users.grant("a-bkt", "bob", Some(Perm::Read)).unwrap();
        assert!(users.allowed("bob", "a-bkt", "alice", Perm::Read));
        assert!(!users.allowed("bob", "a-bkt", "alice", Perm::Write));
        users.grant("a-bkt", "bob", Some(Perm::Write)).unwrap();
        assert!(users.allowed("bob", "a-bkt", "alice", Perm::Write));
        assert!(!users.allowed("bob", "a-bkt", "alice", Perm::Own));
        assert!(users.allowed(ROOT, "a-bkt", "alice", Perm::Own));
        assert!(users.allowed(ROOT, "old", "ROOTKEY", Perm::Own));
        users.drop_bucket("a-bkt").unwrap();
        assert!(!users.allowed("bob", "a-bkt", "alice", Perm::Read));
        users.grant("a-bkt", "bob", Some(Perm::Read)).unwrap();
        users.remove("bob").unwrap();
        assert_eq!(users.name_of("nope"), None);
        assert_eq!(users.list().unwrap().len(), 1);
        assert_eq!(
            meta.scan(Table::System, b"grant\0", Some(b"grant\x01"), 10)
                .unwrap()
                .len(),
            0
        );
    }
}
