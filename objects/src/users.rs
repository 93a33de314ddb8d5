//! Users, their keys, and who may do what to which bucket: the store every door and the admin
//! API ask (the binary loads the master key that seals the secrets and hands it in).
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
//! Records live in the catalog's system key space (`lode_catalog::Catalog::sys_*`): on one
//! node the metadata store's system table, in cluster mode the cluster's, so every gateway
//! knows them: `user\0<name>`, `akey\0<access key>` (its user's name) and
//! `grant\0<bucket>\0<user>`. Each gateway answers from a snapshot, reloaded after its own
//! changes and in cluster mode every two seconds (a user removed or a grant changed through one
//! gateway takes effect on the others within that); an unknown access key is looked up in the
//! catalog at once, so a new user works through every gateway right away.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use chacha20poly1305::aead::{Aead, KeyInit};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use lode_catalog::{Catalog, CatalogError, MetaError, keys, records};
use serde::{Deserialize, Serialize};

/// An access key and its secret key (the root user's, or a user's as made by [`Users::add`]).
/// Its `Debug` never shows the secret.
#[derive(Clone, Serialize, Deserialize)]
pub struct Credentials {
    pub access_key: String,
    pub secret_key: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key", &self.access_key)
            .finish_non_exhaustive()
    }
}

/// `len` characters drawn from `alphabet`.
fn random_string(len: usize, alphabet: &[u8]) -> String {
    (0..len)
        .map(|_| alphabet[rand::random_range(0..alphabet.len())] as char)
        .collect()
}

impl Credentials {
    /// A fresh access key (`LODE` + 16) and secret key (40 characters).
    pub fn generate() -> Self {
        Credentials {
            access_key: format!(
                "LODE{}",
                random_string(16, b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
            ),
            secret_key: random_string(
                40,
                b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+/",
            ),
        }
    }
}

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
    #[error("invalid email address `{0}`: one `@`, at most 254 characters, no spaces")]
    BadEmail(String),
    #[error("the email address `{0}` is another user's")]
    EmailTaken(String),
    #[error(
        "a sealed secret does not open with this master key (wrong LODE_MASTER_KEY or master.key?)"
    )]
    Unseal,
    #[error(transparent)]
    Meta(#[from] MetaError),
    #[error(transparent)]
    Catalog(#[from] CatalogError),
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
    /// The address ACL grants may name the user by (`emailAddress=`), if given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub email: Option<String>,
}

struct Known {
    name: String,
    secret: String,
}

pub struct Users {
    catalog: Arc<dyn Catalog>,
    cipher: ChaCha20Poly1305,
    root: Credentials,
    snap: RwLock<Snapshot>,
}

/// What a gateway knows of users and grants, from the last reload.
#[derive(Default)]
struct Snapshot {
    by_key: HashMap<String, Known>,
    users: Vec<UserInfo>,
    grants: HashMap<(String, String), Perm>,
    /// Email address (lower case) -> user name.
    emails: HashMap<String, String>,
}

/// `email\0<address, lower case>` -> user name: the one user an ACL's `emailAddress` names
/// (kept beside the user record, whose format it leaves alone).
fn email_key(addr: &str) -> Vec<u8> {
    let mut k = b"email\0".to_vec();
    k.extend_from_slice(addr.as_bytes());
    k
}

/// An email address as stored: lower case, checked for form.
fn check_email(addr: &str) -> Result<String, UserError> {
    let a = addr.trim().to_ascii_lowercase();
    let ok = a.len() <= 254
        && a.split('@').count() == 2
        && a.split('@').all(|p| !p.is_empty())
        && !a
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '"');
    if ok {
        Ok(a)
    } else {
        Err(UserError::BadEmail(addr.to_owned()))
    }
}

fn user_key(name: &str) -> Vec<u8> {
    let mut k = b"user\0".to_vec();
    k.extend_from_slice(name.as_bytes());
    k
}

/// `akey\0<access key>` -> user name: finds a key's user without loading every user.
fn akey(access_key: &str) -> Vec<u8> {
    let mut k = b"akey\0".to_vec();
    k.extend_from_slice(access_key.as_bytes());
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
    /// Loads every user and grant, opening their secrets with `master_key`.
    pub async fn open(
        catalog: Arc<dyn Catalog>,
        master_key: [u8; 32],
        root: Credentials,
    ) -> Result<Self, UserError> {
        let u = Users {
            catalog,
            cipher: ChaCha20Poly1305::new(Key::from_slice(&master_key)),
            root,
            snap: RwLock::new(Snapshot::default()),
        };
        u.reload().await?;
        Ok(u)
    }

    /// Reads every user and grant again.
    pub async fn reload(&self) -> Result<(), UserError> {
        let mut snap = Snapshot::default();
        for (k, v) in self.catalog.sys_scan(b"user\0").await? {
            let name = String::from_utf8_lossy(&k[5..]).into_owned();
            let r: UserRecord = records::decode(&v)?;
            let secret = self.unseal(&r.sealed_secret)?;
            snap.users.push(UserInfo {
                name: name.clone(),
                access_key: r.access_key.clone(),
                uid: r.uid,
                created_ms: r.created_ms,
                email: None,
            });
            snap.by_key.insert(r.access_key, Known { name, secret });
        }
        for (k, v) in self.catalog.sys_scan(b"email\0").await? {
            let addr = String::from_utf8_lossy(&k[6..]).into_owned();
            let name = String::from_utf8_lossy(&v).into_owned();
            if let Some(u) = snap.users.iter_mut().find(|u| u.name == name) {
                u.email = Some(addr.clone());
                snap.emails.insert(addr, name);
            }
        }
        for (k, v) in self.catalog.sys_scan(b"grant\0").await? {
            let rest = &k[6..];
            let Some(i) = rest.iter().position(|&b| b == keys::SEP) else {
                continue;
            };
            let bucket = String::from_utf8_lossy(&rest[..i]).into_owned();
            let user = String::from_utf8_lossy(&rest[i + 1..]).into_owned();
            snap.grants.insert((bucket, user), records::decode(&v)?);
        }
        *self.snap.write().expect("users") = snap;
        Ok(())
    }

    /// Reloads every `every` in the background (cluster mode: changes made through other
    /// gateways).
    pub fn spawn_refresh(self: &Arc<Self>, every: Duration) {
        let me = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(u) = me.upgrade() else { return };
                if let Err(e) = u.reload().await {
                    tracing::warn!(error = %e, "reloading users failed");
                }
            }
        });
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

    /// The user name and secret of an access key (root included), as last loaded.
    pub fn lookup(&self, access_key: &str) -> Option<(String, String)> {
        if access_key == self.root.access_key {
            return Some((ROOT.to_owned(), self.root.secret_key.clone()));
        }
        self.snap
            .read()
            .expect("users")
            .by_key
            .get(access_key)
            .map(|k| (k.name.clone(), k.secret.clone()))
    }

    /// Like [`Users::lookup`]; an unknown key is looked up in the catalog (its `akey\0` index
    /// entry, then the user), so a user added through another gateway works at once.
    pub async fn lookup_fresh(&self, access_key: &str) -> Option<(String, String)> {
        if let Some(found) = self.lookup(access_key) {
            return Some(found);
        }
        match self.fetch(access_key).await {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!(error = %e, "looking a user up failed");
                None
            }
        }
    }

    /// Reads one user by access key from the catalog into the snapshot.
    async fn fetch(&self, access_key: &str) -> Result<Option<(String, String)>, UserError> {
        let Some(name) = self.catalog.sys_get(&akey(access_key)).await? else {
            return Ok(None);
        };
        let name = String::from_utf8_lossy(&name).into_owned();
        let Some(v) = self.catalog.sys_get(&user_key(&name)).await? else {
            return Ok(None);
        };
        let r: UserRecord = records::decode(&v)?;
        if r.access_key != access_key {
            return Ok(None);
        }
        let secret = self.unseal(&r.sealed_secret)?;
        let mut snap = self.snap.write().expect("users");
        snap.users.push(UserInfo {
            name: name.clone(),
            access_key: r.access_key.clone(),
            uid: r.uid,
            created_ms: r.created_ms,
            email: None,
        });
        snap.by_key.insert(
            r.access_key,
            Known {
                name: name.clone(),
                secret: secret.clone(),
            },
        );
        Ok(Some((name, secret)))
    }

    /// The user name behind an access key.
    pub fn name_of(&self, access_key: &str) -> Option<String> {
        self.lookup(access_key).map(|(n, _)| n)
    }

    /// Adds a user with fresh keys (and the email address ACL grants may name them by); the
    /// returned secret is shown once.
    pub async fn add(
        &self,
        name: &str,
        uid: Option<u32>,
        email: Option<&str>,
    ) -> Result<Credentials, UserError> {
        check_name(name)?;
        let email = email.map(check_email).transpose()?;
        if let Some(addr) = &email {
            if self.catalog.sys_get(&user_key(name)).await?.is_some() {
                return Err(UserError::Exists(name.to_owned()));
            }
            // Claimed first: an address names one user. A claim left by a user that was never
            // made (the add failed after it) names no user and is taken over.
            let who = name.as_bytes().to_vec();
            let known: std::collections::HashSet<Vec<u8>> = self
                .catalog
                .sys_scan(b"user\0")
                .await?
                .into_iter()
                .map(|(k, _)| k[5..].to_vec())
                .collect();
            let claim = Arc::new(move |cur: Option<&[u8]>| match cur {
                Some(other) if other != who.as_slice() && known.contains(other) => {
                    Err(CatalogError::PreconditionFailed)
                }
                _ => Ok(Some(who.clone())),
            });
            match self.catalog.sys_update(&email_key(addr), claim).await {
                Err(CatalogError::PreconditionFailed) => {
                    return Err(UserError::EmailTaken(addr.clone()));
                }
                r => r?,
            }
        }
        let creds = Credentials::generate();
        let rec = records::encode(&UserRecord {
            access_key: creds.access_key.clone(),
            sealed_secret: self.seal(&creds.secret_key),
            uid,
            created_ms: crate::now_ms(),
        });
        let create = Arc::new(move |cur: Option<&[u8]>| match cur {
            Some(_) => Err(CatalogError::PreconditionFailed),
            None => Ok(Some(rec.clone())),
        });
        match self.catalog.sys_update(&user_key(name), create).await {
            Err(CatalogError::PreconditionFailed) => {
                return Err(UserError::Exists(name.to_owned()));
            }
            r => r?,
        }
        // The key's index entry, so that any gateway finds the new key at once.
        let who = name.as_bytes().to_vec();
        self.catalog
            .sys_update(
                &akey(&creds.access_key),
                Arc::new(move |_| Ok(Some(who.clone()))),
            )
            .await?;
        self.reload().await?;
        tracing::info!(user = name, access_key = %creds.access_key, "user added");
        Ok(creds)
    }

    /// Removes a user: their keys stop working at once (on other gateways within the refresh
    /// interval). Their buckets stay (root can manage them) and their grants are dropped.
    pub async fn remove(&self, name: &str) -> Result<(), UserError> {
        let k = user_key(name);
        let Some(v) = self.catalog.sys_get(&k).await? else {
            return Err(UserError::NoSuchUser(name.to_owned()));
        };
        let rec: UserRecord = records::decode(&v)?;
        self.catalog.sys_update(&k, Arc::new(|_| Ok(None))).await?;
        for (e, who) in self.catalog.sys_scan(b"email\0").await? {
            if who == name.as_bytes() {
                self.catalog.sys_update(&e, Arc::new(|_| Ok(None))).await?;
            }
        }
        self.catalog
            .sys_update(&akey(&rec.access_key), Arc::new(|_| Ok(None)))
            .await?;
        let suffix = [&[keys::SEP][..], name.as_bytes()].concat();
        for (g, _) in self.catalog.sys_scan(b"grant\0").await? {
            if g.ends_with(&suffix) {
                self.catalog.sys_update(&g, Arc::new(|_| Ok(None))).await?;
            }
        }
        self.reload().await?;
        tracing::info!(user = name, "user removed");
        Ok(())
    }

    /// Every user, as last loaded.
    pub fn list(&self) -> Result<Vec<UserInfo>, UserError> {
        Ok(self.snap.read().expect("users").users.clone())
    }

    /// The uid a user's buckets show on the mount, if set.
    pub fn uid_of(&self, name: &str) -> Option<u32> {
        self.snap
            .read()
            .expect("users")
            .users
            .iter()
            .find(|u| u.name == name)?
            .uid
    }

    /// Grants `perm` on `bucket` to `user` (`None` revokes).
    pub async fn grant(
        &self,
        bucket: &str,
        user: &str,
        perm: Option<Perm>,
    ) -> Result<(), UserError> {
        if user != ROOT && self.catalog.sys_get(&user_key(user)).await?.is_none() {
            return Err(UserError::NoSuchUser(user.to_owned()));
        }
        let value = perm.map(|p| records::encode(&p));
        self.catalog
            .sys_update(
                &grant_key(bucket, user),
                Arc::new(move |_| Ok(value.clone())),
            )
            .await?;
        self.reload().await
    }

    /// Drops every grant on a deleted bucket (a new bucket of the same name starts clean).
    pub async fn drop_bucket(&self, bucket: &str) -> Result<(), UserError> {
        for (k, _) in self.catalog.sys_scan(&grant_prefix(bucket)).await? {
            self.catalog.sys_update(&k, Arc::new(|_| Ok(None))).await?;
        }
        self.reload().await
    }

    /// Whether `user` may act with `want` on a bucket owned by `owner`.
    pub fn allowed(&self, user: &str, bucket: &str, owner: &str, want: Perm) -> bool {
        if user == ROOT || self.is_owner(user, owner) {
            return true;
        }
        if want == Perm::Own {
            return false;
        }
        self.snap
            .read()
            .expect("users")
            .grants
            .get(&(bucket.to_owned(), user.to_owned()))
            .is_some_and(|have| *have >= want)
    }

    /// The grants on `bucket`, by user name (sorted).
    pub fn grants_on(&self, bucket: &str) -> Vec<(String, Perm)> {
        let mut out: Vec<(String, Perm)> = self
            .snap
            .read()
            .expect("users")
            .grants
            .iter()
            .filter(|((b, _), _)| b == bucket)
            .map(|((_, u), p)| (u.clone(), *p))
            .collect();
        out.sort();
        out
    }

    /// The user name of an owner as stored (a bucket record's, an upload's): buckets made
    /// before users existed record the root access key, uploads record the access key.
    pub fn owner_name(&self, stored: &str) -> String {
        if stored == self.root.access_key {
            return ROOT.to_owned();
        }
        self.name_of(stored).unwrap_or_else(|| stored.to_owned())
    }

    /// Whether `owner` (as stored in a bucket record) is `user`. Buckets made before users
    /// existed record the root access key.
    pub fn is_owner(&self, user: &str, owner: &str) -> bool {
        owner == user || (user == ROOT && owner == self.root.access_key)
    }
}

/// Canonical ids name users (root included) in ACLs, and so do the email addresses users were
/// given (`lode admin user add NAME --email ADDR`).
impl crate::acl::Directory for Users {
    fn by_id(&self, id: &str) -> Option<String> {
        let id = id.to_ascii_lowercase();
        if crate::policy::canonical_id(ROOT) == id {
            return Some(ROOT.to_owned());
        }
        self.snap
            .read()
            .expect("users")
            .users
            .iter()
            .find(|u| crate::policy::canonical_id(&u.name) == id)
            .map(|u| u.name.clone())
    }

    fn by_email(&self, email: &str) -> Option<String> {
        self.snap
            .read()
            .expect("users")
            .emails
            .get(&email.trim().to_ascii_lowercase())
            .cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> Credentials {
        Credentials {
            access_key: "ROOTKEY".into(),
            secret_key: "rootsecret".into(),
        }
    }

    /// An email address names one user for ACL grants, in any case; a second user may not
    /// take it; removing the user frees it; canonical ids name users and root.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn emails_and_canonical_ids_name_users() {
        use crate::acl::Directory;
        let catalog: Arc<dyn Catalog> = Arc::new(lode_catalog_kv::mem_catalog());
        let users = Users::open(Arc::clone(&catalog), [7; 32], root())
            .await
            .unwrap();
        users
            .add("carol", None, Some("Carol@Example.com"))
            .await
            .unwrap();
        assert_eq!(
            users.by_email("carol@example.COM").as_deref(),
            Some("carol")
        );
        assert_eq!(users.by_email("dan@example.com"), None);
        assert!(matches!(
            users.add("dan", None, Some("CAROL@example.com")).await,
            Err(UserError::EmailTaken(_))
        ));
        assert!(matches!(
            users.add("dan", None, Some("no at sign")).await,
            Err(UserError::BadEmail(_))
        ));
        // A failed add made no user, and an existing name keeps its own address.
        assert!(users.name_of("dan").is_none() && users.list().unwrap().len() == 1);
        assert!(matches!(
            users.add("carol", None, Some("other@example.com")).await,
            Err(UserError::Exists(_))
        ));
        assert_eq!(users.by_email("other@example.com"), None);
        let listed = users.list().unwrap();
        assert_eq!(listed[0].email.as_deref(), Some("carol@example.com"));
        let id = crate::policy::canonical_id("carol");
        assert_eq!(users.by_id(&id.to_uppercase()).as_deref(), Some("carol"));
        assert_eq!(
            users.by_id(&crate::policy::canonical_id(ROOT)).as_deref(),
            Some(ROOT)
        );
        assert_eq!(users.by_id(&"0".repeat(64)), None);
        users.remove("carol").await.unwrap();
        assert_eq!(users.by_email("carol@example.com"), None);
        users
            .add("dan", None, Some("carol@example.com"))
            .await
            .unwrap();
        assert_eq!(users.by_email("carol@example.com").as_deref(), Some("dan"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn users_keys_grants_and_sealing() {
        let catalog: Arc<dyn Catalog> = Arc::new(lode_catalog_kv::mem_catalog());
        let users = Users::open(Arc::clone(&catalog), [7; 32], root())
            .await
            .unwrap();
        let alice = users.add("alice", Some(1001), None).await.unwrap();
        assert!(matches!(
            users.add("alice", None, None).await,
            Err(UserError::Exists(_))
        ));
        assert!(matches!(
            users.add("Root", None, None).await,
            Err(UserError::BadName(_))
        ));
        assert!(matches!(
            users.add("root", None, None).await,
            Err(UserError::BadName(_))
        ));
        assert_eq!(
            users.lookup(&alice.access_key),
            Some(("alice".into(), alice.secret_key.clone()))
        );
        assert_eq!(users.name_of("ROOTKEY").as_deref(), Some(ROOT));
        // Sealed at rest: the secret's bytes are nowhere in the store.
        let raw = catalog.sys_get(&user_key("alice")).await.unwrap().unwrap();
        assert!(
            !raw.windows(alice.secret_key.len())
                .any(|w| w == alice.secret_key.as_bytes())
        );
        // Reopened with the same key: same users. With another key: a clear error.
        let again = Users::open(Arc::clone(&catalog), [7; 32], root())
            .await
            .unwrap();
        assert_eq!(again.name_of(&alice.access_key).as_deref(), Some("alice"));
        assert!(matches!(
            Users::open(Arc::clone(&catalog), [8; 32], root()).await,
            Err(UserError::Unseal)
        ));
        // Ownership and grants.
        users.add("bob", None, None).await.unwrap();
        assert!(users.allowed("alice", "a-bkt", "alice", Perm::Own));
        assert!(!users.allowed("bob", "a-bkt", "alice", Perm::Read));
        users.grant("a-bkt", "bob", Some(Perm::Read)).await.unwrap();
        assert!(users.allowed("bob", "a-bkt", "alice", Perm::Read));
        assert!(!users.allowed("bob", "a-bkt", "alice", Perm::Write));
        users
            .grant("a-bkt", "bob", Some(Perm::Write))
            .await
            .unwrap();
        assert!(users.allowed("bob", "a-bkt", "alice", Perm::Write));
        assert!(!users.allowed("bob", "a-bkt", "alice", Perm::Own));
        assert!(users.allowed(ROOT, "a-bkt", "alice", Perm::Own));
        assert!(users.allowed(ROOT, "old", "ROOTKEY", Perm::Own));
        users.drop_bucket("a-bkt").await.unwrap();
        assert!(!users.allowed("bob", "a-bkt", "alice", Perm::Read));
        users.grant("a-bkt", "bob", Some(Perm::Read)).await.unwrap();
        users.remove("bob").await.unwrap();
        assert_eq!(users.name_of("nope"), None);
        assert_eq!(users.list().unwrap().len(), 1);
        assert_eq!(catalog.sys_scan(b"grant\0").await.unwrap().len(), 0);
    }
}
