//! Encryption at rest in the object service (issue 33): what a write asks for, the bucket's
//! default, the master key versions, and how a record's data key is found again.
//!
//! Every object gets its own random data key; its bytes are sealed in segments under it
//! ([`crate::sse`]); the record keeps the data key sealed by the newest master key version
//! (SSE-S3) or by the key ring (SSE-KMS), or, for SSE-C, only a salted MAC of the customer's
//! key. Master key versions are random keys kept in the catalog (so every gateway sees them),
//! each sealed by the **root key**: the one secret outside the catalog (`master.key` or
//! `LODE_MASTER_KEY`), which also seals users' secrets. Rotation adds a version; nothing is
//! re-encrypted.

use std::sync::{Arc, RwLock};

use serde::{Deserialize, Serialize};

use crate::error::{ObjError, ObjResult};
use crate::kms::{KeyRing, KmsError};
use crate::sse::{DataKey, MasterKeys, SseError};
use lode_catalog::{Catalog, CatalogError, Sse, SseKind};

/// The bucket setting that holds its default encryption (JSON of [`BucketEncryption`]).
pub const SETTING: &str = "encryption";

/// A server-side encryption algorithm as S3 names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Algorithm {
    /// `AES256`: SSE-S3.
    Aes256,
    /// `aws:kms`.
    Kms,
    /// `aws:kms:dsse`.
    KmsDsse,
}

impl Algorithm {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "AES256" => Some(Algorithm::Aes256),
            "aws:kms" => Some(Algorithm::Kms),
            "aws:kms:dsse" => Some(Algorithm::KmsDsse),
            _ => None,
        }
    }

    pub fn as_s3(&self) -> &'static str {
        match self {
            Algorithm::Aes256 => "AES256",
            Algorithm::Kms => "aws:kms",
            Algorithm::KmsDsse => "aws:kms:dsse",
        }
    }
}

/// A bucket's default encryption (PutBucketEncryption): what a write without its own
/// encryption headers gets, and whether SSE-C writes are allowed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BucketEncryption {
    pub algorithm: Algorithm,
    /// The KMS key of `aws:kms` / `aws:kms:dsse` (`None`: the key ring's default key).
    pub kms_key_id: Option<String>,
    pub bucket_key: bool,
    /// `BlockedEncryptionTypes` is `NONE`: SSE-C writes are allowed. AWS blocks them on every
    /// bucket created since April 2026 until this is set (SEMANTICS.md).
    pub allow_sse_c: bool,
}

impl BucketEncryption {
    /// What a bucket without the setting has (AWS's default for a new bucket): SSE-S3, SSE-C
    /// blocked.
    pub fn aws_default() -> Self {
        BucketEncryption {
            algorithm: Algorithm::Aes256,
            kms_key_id: None,
            bucket_key: false,
            allow_sse_c: false,
        }
    }

    pub fn encode(&self) -> String {
        serde_json::to_string(self).expect("a bucket encryption serializes")
    }

    pub fn decode(s: &str) -> Option<Self> {
        serde_json::from_str(s).ok()
    }
}

/// An SSE-C key as a request gave it. Never stored, printed or logged; wiped on drop.
#[derive(Clone)]
pub struct CustomerKey([u8; 32]);

impl CustomerKey {
    pub fn new(k: [u8; 32]) -> Self {
        CustomerKey(k)
    }

    fn bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl Drop for CustomerKey {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.0);
    }
}

impl std::fmt::Debug for CustomerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CustomerKey(..)")
    }
}

/// How a write asks for its bytes to be encrypted (its `x-amz-server-side-encryption*`
/// headers).
#[derive(Debug, Clone, Default)]
pub enum Asked {
    /// No headers: the bucket's default encryption.
    #[default]
    Default,
    /// `AES256`.
    S3 { bucket_key: Option<bool> },
    /// `aws:kms` or `aws:kms:dsse`.
    Kms {
        dsse: bool,
        key_id: Option<String>,
        /// `x-amz-server-side-encryption-context`, as given (base64 JSON).
        context: Option<String>,
        bucket_key: Option<bool>,
    },
    /// SSE-C.
    Customer(CustomerKey),
}

/// How the service encrypts: the master key versions, the key ring, and whether objects are
/// encrypted when neither the request nor the bucket asks (`[encryption] default`).
pub struct Encryption {
    pub masters: Arc<MasterStore>,
    pub ring: Arc<dyn KeyRing>,
    pub default_on: bool,
}

/// What seals one write: the object's data key, its encryption id, and the sequence base of
/// its first segment.
#[derive(Clone)]
pub(crate) struct Sealing {
    pub key: Arc<DataKey>,
    pub id: [u8; 16],
    pub base: u64,
}

/// What a new object is to be encrypted as, before any key is made ([`Encryption::plan`]).
pub(crate) enum Plan<'a> {
    S3 {
        bucket_key: bool,
    },
    Kms {
        /// `None`: the key ring's default key.
        key_id: Option<String>,
        context: Option<String>,
        dsse: bool,
        bucket_key: bool,
    },
    Customer(&'a CustomerKey),
}

/// The sequence base of part `n`'s first segment (each part numbers its own segments from
/// there; parts are at most 5 GiB, far fewer than 2^32 segments).
pub(crate) fn part_base(n: u32) -> u64 {
    u64::from(n) << 32
}

/// The additional context a KMS data key is sealed under: the request's encryption context
/// and the object's encryption id (stable across copies that share the key, and renames).
fn kms_context(context: Option<&str>, id: &[u8; 16]) -> Vec<u8> {
    let mut c = context.unwrap_or_default().as_bytes().to_vec();
    c.push(0);
    c.extend_from_slice(id);
    c
}

fn random_id() -> ObjResult<[u8; 16]> {
    use ring::rand::SecureRandom;
    let mut b = [0u8; 16];
    ring::rand::SystemRandom::new()
        .fill(&mut b)
        .map_err(|_| ObjError::Encryption(SseError::Random))?;
    Ok(b)
}

impl Encryption {
    /// What a new object written under `asked` into a bucket whose default is `bucket` (`None`:
    /// not set) is to be encrypted as, before any key is made. `None`: stored in clear.
    pub(crate) fn plan<'a>(
        &self,
        asked: &'a Asked,
        bucket: Option<&BucketEncryption>,
    ) -> ObjResult<Option<Plan<'a>>> {
        Ok(Some(match asked {
            Asked::Customer(k) => {
                if !bucket.is_some_and(|b| b.allow_sse_c) {
                    return Err(ObjError::SseCustomerBlocked);
                }
                Plan::Customer(k)
            }
            Asked::S3 { bucket_key } => Plan::S3 {
                bucket_key: bucket_key.unwrap_or(false),
            },
            Asked::Kms {
                dsse,
                key_id,
                context,
                bucket_key,
            } => Plan::Kms {
                key_id: key_id.clone().or_else(|| {
                    bucket
                        .filter(|b| b.algorithm != Algorithm::Aes256)
                        .and_then(|b| b.kms_key_id.clone())
                }),
                context: context.clone(),
                dsse: *dsse,
                bucket_key: bucket_key.unwrap_or_else(|| bucket.is_some_and(|b| b.bucket_key)),
            },
            Asked::Default => match bucket {
                Some(b) if b.algorithm != Algorithm::Aes256 => Plan::Kms {
                    key_id: b.kms_key_id.clone(),
                    context: None,
                    dsse: b.algorithm == Algorithm::KmsDsse,
                    bucket_key: b.bucket_key,
                },
                Some(b) => Plan::S3 {
                    bucket_key: b.bucket_key,
                },
                None if self.default_on => Plan::S3 { bucket_key: false },
                None => return Ok(None),
            },
        }))
    }

    /// The record entry and data key of a new object written under `asked` into a bucket
    /// whose default is `bucket` (`None`: not set). `None`: stored in clear.
    pub(crate) async fn for_write(
        &self,
        asked: &Asked,
        bucket: Option<&BucketEncryption>,
    ) -> ObjResult<Option<(Sse, Arc<DataKey>)>> {
        let Some(plan) = self.plan(asked, bucket)? else {
            return Ok(None);
        };
        let id = random_id()?;
        let new = |kind, sealed_key, key_version, bucket_key| Sse {
            kind,
            id,
            sealed_key,
            key_version,
            bucket_key,
            seq: vec![],
        };
        Ok(Some(match plan {
            Plan::Customer(k) => {
                let (salt, mac) = crate::sse::customer_key_check(k.bytes())?;
                let sse = new(SseKind::Customer { salt, mac }, vec![], 0, false);
                (sse, Arc::new(DataKey::from_bytes(*k.bytes())))
            }
            Plan::S3 { bucket_key } => {
                let dk = DataKey::generate()?;
                let (version, sealed) = self.masters.keys().seal_key(&dk)?;
                (new(SseKind::S3, sealed, version, bucket_key), Arc::new(dk))
            }
            Plan::Kms {
                key_id,
                context,
                dsse,
                bucket_key,
            } => {
                let key_id = self.kms_key(key_id).await?;
                let (dk, sealed) = self
                    .ring
                    .generate_data_key(&key_id, &kms_context(context.as_deref(), &id))
                    .await
                    .map_err(kms_error)?;
                let kind = SseKind::Kms {
                    key_id,
                    context,
                    dsse,
                };
                (new(kind, sealed, 0, bucket_key), Arc::new(dk))
            }
        }))
    }

    /// The key ring key a KMS write uses: the one named (bare or as an ARN), else the ring's
    /// default key.
    async fn kms_key(&self, named: Option<String>) -> ObjResult<String> {
        Ok(match named {
            Some(k) => crate::kms::bare_id(&k).to_owned(),
            None => self.ring.default_key().await.map_err(kms_error)?.id,
        })
    }

    /// The data key of a stored object (SSE-C: with the request's key, checked against the
    /// record's MAC).
    pub(crate) async fn data_key(
        &self,
        sse: &Sse,
        customer: Option<&CustomerKey>,
    ) -> ObjResult<Arc<DataKey>> {
        match &sse.kind {
            SseKind::S3 => Ok(Arc::new(
                self.masters
                    .open_data_key(sse.key_version, &sse.sealed_key)
                    .await?,
            )),
            SseKind::Kms {
                key_id, context, ..
            } => Ok(Arc::new(
                self.ring
                    .decrypt_data_key(
                        key_id,
                        &sse.sealed_key,
                        &kms_context(context.as_deref(), &sse.id),
                    )
                    .await
                    .map_err(kms_error)?,
            )),
            SseKind::Customer { salt, mac } => {
                let k = customer.ok_or(ObjError::SseCustomerKeyMissing)?;
                if !crate::sse::customer_key_matches(k.bytes(), salt, mac) {
                    return Err(ObjError::SseCustomerKeyWrong);
                }
                Ok(Arc::new(DataKey::from_bytes(*k.bytes())))
            }
        }
    }

    /// The same data key sealed for a copy of the object as `asked` (re-sealing instead of
    /// re-encrypting): `None` when the copy needs its bytes encrypted anew (into or out of
    /// SSE-C, or in clear from or to encrypted).
    pub(crate) async fn reseal(
        &self,
        src: &Sse,
        key: &DataKey,
        asked: &Asked,
        bucket: Option<&BucketEncryption>,
    ) -> ObjResult<Option<Sse>> {
        if matches!(src.kind, SseKind::Customer { .. }) {
            return Ok(None);
        }
        // What the copy would get as a new object, sealed with the source's key.
        let (kind, sealed_key, key_version, bucket_key) = match self.plan(asked, bucket)? {
            None | Some(Plan::Customer(_)) => return Ok(None),
            Some(Plan::S3 { bucket_key }) => {
                let (v, sealed) = self.masters.keys().seal_key(key)?;
                (SseKind::S3, sealed, v, bucket_key)
            }
            Some(Plan::Kms {
                key_id,
                context,
                dsse,
                bucket_key,
            }) => {
                let key_id = self.kms_key(key_id).await?;
                let sealed = self
                    .ring
                    .encrypt_data_key(&key_id, key, &kms_context(context.as_deref(), &src.id))
                    .await
                    .map_err(kms_error)?;
                let kind = SseKind::Kms {
                    key_id,
                    context,
                    dsse,
                };
                (kind, sealed, 0, bucket_key)
            }
        };
        Ok(Some(Sse {
            kind,
            id: src.id,
            sealed_key,
            key_version,
            bucket_key,
            seq: src.seq.clone(),
        }))
    }
}

/// A key ring failure as the service reports it.
pub(crate) fn kms_error(e: KmsError) -> ObjError {
    match e {
        KmsError::Sse(s) => ObjError::Encryption(s),
        e => ObjError::Kms(e),
    }
}

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

/// The plaintext length of each of a record's segments (their stored lengths when in clear).
pub(crate) fn plain_lens(rec: &lode_catalog::ObjectRecord) -> ObjResult<Vec<u64>> {
    let sealed = rec.meta.sse.is_some();
    rec.segments
        .iter()
        .map(|s| {
            let n = s.len();
            if !sealed {
                return Ok(n);
            }
            crate::sse::plain_len(n).ok_or(ObjError::Encryption(SseError::Truncated(n)))
        })
        .collect()
}

/// Plaintext `[from, to)` of the record's `i`-th segment, stored sealed as `stored` (of
/// `plain_total` plaintext bytes): only the pieces the range touches are opened.
pub(crate) fn open_piece(
    key: &DataKey,
    sse: &Sse,
    i: usize,
    stored: &[u8],
    plain_total: u64,
    from: u64,
    to: u64,
) -> ObjResult<bytes::Bytes> {
    let base = sse
        .seq_at(i)
        .ok_or(ObjError::Encryption(SseError::Corrupt))?;
    let (first, off, len) = crate::sse::span(from, to, plain_total);
    let part = stored
        .get(off as usize..(off + len) as usize)
        .ok_or(ObjError::Encryption(SseError::Truncated(
            stored.len() as u64
        )))?;
    let mut plain = vec![0u8; part.len()];
    let n = crate::sse::open_into(key, &sse.id, base + first, part, &mut plain)?;
    plain.truncate(n);
    let skip = first * crate::sse::SEGMENT as u64;
    let (a, b) = ((from - skip) as usize, (to - skip) as usize);
    if b > n {
        return Err(ObjError::Encryption(SseError::Truncated(
            stored.len() as u64
        )));
    }
    Ok(bytes::Bytes::from(plain).slice(a..b))
}

impl crate::service::ObjectService {
    /// The bucket's default encryption as set (GetBucketEncryption): `None` when never set.
    pub async fn bucket_encryption(&self, name: &str) -> ObjResult<Option<BucketEncryption>> {
        let b = self.bucket(name).await?;
        Ok(b.settings
            .iter()
            .find(|(n, _)| n == SETTING)
            .and_then(|(_, v)| BucketEncryption::decode(v)))
    }

    /// Replaces the bucket's default encryption (`None`: back to the server's default); every
    /// gateway follows it before this returns.
    pub async fn set_bucket_encryption(
        &self,
        name: &str,
        e: Option<BucketEncryption>,
    ) -> ObjResult<()> {
        self.set_setting(name, SETTING, e.map(|e| e.encode())).await
    }

    /// Turns encryption at rest on (once; later calls are ignored).
    pub fn set_encryption(&self, e: Arc<Encryption>) {
        let _ = self.enc.set(e);
    }

    /// Encryption at rest, when on.
    pub fn encryption(&self) -> Option<&Arc<Encryption>> {
        self.enc.get()
    }

    /// How a new object in `bucket` is sealed under `asked` and the bucket's default: its
    /// record entry (sequence bases still to be set) and what seals its bytes (`None`: in
    /// clear).
    pub(crate) async fn new_sealing(
        &self,
        bucket: &str,
        asked: &Asked,
    ) -> ObjResult<Option<(Sse, Sealing)>> {
        let Some((enc, default)) = self.encryption_for(bucket, asked).await? else {
            return Ok(None);
        };
        Ok(enc
            .for_write(asked, default.as_deref())
            .await?
            .map(|(sse, key)| {
                let s = Sealing {
                    key,
                    id: sse.id,
                    base: part_base(1),
                };
                (sse, s)
            }))
    }

    /// Whether a new object in `bucket` written under `asked` is encrypted (no key is made).
    pub(crate) async fn encrypts(&self, bucket: &str, asked: &Asked) -> ObjResult<bool> {
        Ok(match self.encryption_for(bucket, asked).await? {
            Some((enc, default)) => enc.plan(asked, default.as_deref())?.is_some(),
            None => false,
        })
    }

    /// Encryption and the bucket's default for a write under `asked` (`None`: encryption is
    /// off and nothing is asked; asked of a server without keys: `NotImplemented`).
    async fn encryption_for(
        &self,
        bucket: &str,
        asked: &Asked,
    ) -> ObjResult<Option<(&Arc<Encryption>, Option<Arc<BucketEncryption>>)>> {
        let Some(enc) = self.enc.get() else {
            return match asked {
                Asked::Default => Ok(None),
                _ => Err(ObjError::NotImplemented(
                    "Server-side encryption on a server without keys".into(),
                )),
            };
        };
        Ok(Some((enc, self.settings_of(bucket).await?.encryption)))
    }

    /// The data key of an encrypted record (SSE-C: `customer` must be its key).
    pub(crate) async fn key_of(
        &self,
        sse: &Sse,
        customer: Option<&CustomerKey>,
    ) -> ObjResult<Arc<DataKey>> {
        let enc = self.enc.get().ok_or_else(|| {
            ObjError::Internal("an encrypted object on a server without keys".into())
        })?;
        enc.data_key(sse, customer).await
    }

    /// Finds the data key of an opened object so that it can be read: SSE-S3 and SSE-KMS
    /// objects need nothing from the caller, SSE-C objects their key (missing: S3's `400`,
    /// wrong: `403`). A key given for an object that is not SSE-C is `400 InvalidRequest`, as
    /// S3 answers.
    pub async fn unlock(
        &self,
        h: &mut crate::service::ObjectHandle,
        customer: Option<&CustomerKey>,
    ) -> ObjResult<()> {
        let Some(sse) = &h.record.meta.sse else {
            return match customer {
                None => Ok(()),
                Some(_) => Err(not_applicable()),
            };
        };
        if customer.is_some() && !matches!(sse.kind, SseKind::Customer { .. }) {
            return Err(not_applicable());
        }
        if h.key.is_none() {
            h.key = Some(self.key_of(sse, customer).await?);
        }
        Ok(())
    }

    /// Checks an SSE-C key against a record without reading it (HEAD): the same answers as
    /// [`Self::unlock`].
    pub async fn check_key_of(
        &self,
        rec: &lode_catalog::ObjectRecord,
        customer: Option<&CustomerKey>,
    ) -> ObjResult<()> {
        match &rec.meta.sse {
            Some(
                sse @ Sse {
                    kind: SseKind::Customer { .. },
                    ..
                },
            ) => self.key_of(sse, customer).await.map(|_| ()),
            _ if customer.is_some() => Err(not_applicable()),
            _ => Ok(()),
        }
    }
}

/// An SSE-C key sent for an object that is not SSE-C.
fn not_applicable() -> ObjError {
    ObjError::InvalidRequest("The encryption parameters are not applicable to this object.".into())
}

/// What `lode admin master-key reseal` did.
#[derive(Debug, Default, Clone, Serialize)]
pub struct ResealReport {
    /// The version everything was re-sealed with.
    pub current: u32,
    /// Object versions (current and noncurrent) looked at, and those whose SSE-S3 data key
    /// was re-sealed.
    pub objects: u64,
    pub resealed: u64,
    /// Key ring keys whose material was re-sealed.
    pub kms_keys: u64,
    /// What an older version still seals after the pass, by version: multipart uploads in
    /// progress (re-sealed when they complete) and records that changed under the pass.
    pub remaining: std::collections::BTreeMap<u32, u64>,
}

impl crate::service::ObjectService {
    fn masters(&self) -> Result<&Arc<MasterStore>, MasterError> {
        self.encryption()
            .map(|e| &e.masters)
            .ok_or(MasterError::Off)
    }

    /// Re-seals every SSE-S3 data key (of every object version, in every bucket) and every key
    /// ring key sealed by an older master key version with the newest one, one metadata
    /// commit per record; the bytes are not touched (rotation re-seals keys, never data).
    pub async fn reseal_master_keys(&self) -> Result<ResealReport, MasterError> {
        let masters = self.masters()?;
        masters.reload().await?;
        let keys = masters.keys();
        let current = keys.current().ok_or(MasterError::NoSuchVersion(0))?;
        let mut rep = ResealReport {
            current,
            ..Default::default()
        };
        rep.kms_keys = self.enc_ring().reseal_material().await?;
        for bucket in self.all_buckets().await? {
            self.walk_sealed(&bucket, |key, rec, latest| {
                rep.objects += 1;
                let sse = rec.meta.sse.as_ref().filter(|s| stale(s, current))?;
                let (old, id) = (sse.key_version, sse.id);
                let (version, sealed) = match keys.reseal(old, &sse.sealed_key) {
                    Ok(r) => r,
                    Err(e) => return Some(Err(e.into())),
                };
                let f: lode_catalog::RecordFn = Arc::new(move |r| {
                    // Only the same object, still sealed by the same version, changes.
                    let mut r = r.clone();
                    match r.meta.sse.as_mut() {
                        Some(s) if s.id == id && s.key_version == old => {
                            (s.key_version, s.sealed_key) = (version, sealed.clone());
                            Ok(r)
                        }
                        _ => Err(CatalogError::PreconditionFailed),
                    }
                });
                Some(Ok((key.to_owned(), rec.version_id.clone(), latest, f)))
            })
            .await?
            .into_iter()
            .for_each(|done| rep.resealed += u64::from(done));
        }
        for (v, n) in self.sealed_by_old(current).await? {
            rep.remaining.insert(v, n);
        }
        tracing::info!(
            current,
            objects = rep.objects,
            resealed = rep.resealed,
            kms_keys = rep.kms_keys,
            remaining = ?rep.remaining,
            "master key reseal done"
        );
        Ok(rep)
    }

    /// Retires master key version `v` (`retired` false: puts it back in use): refused while
    /// any object version, upload or key ring key is still sealed by it.
    pub async fn retire_master_key(&self, v: u32, retired: bool) -> Result<(), MasterError> {
        let masters = self.masters()?;
        masters.reload().await?;
        if retired && masters.keys().current() != Some(v) {
            let left = self.sealed_by_old(u32::MAX).await?;
            if let Some(&count) = left.get(&v) {
                return Err(MasterError::InUse { version: v, count });
            }
        }
        masters.set_retired(v, retired).await
    }

    fn enc_ring(&self) -> &Arc<dyn KeyRing> {
        &self.encryption().expect("encryption is on").ring
    }

    async fn all_buckets(&self) -> Result<Vec<String>, MasterError> {
        Ok(self
            .catalog
            .list_buckets()
            .await?
            .into_iter()
            .map(|(n, _)| n)
            .collect())
    }

    /// How many object versions, uploads and key ring keys each master key version other than
    /// `current` seals.
    async fn sealed_by_old(
        &self,
        current: u32,
    ) -> Result<std::collections::BTreeMap<u32, u64>, MasterError> {
        let mut left = std::collections::BTreeMap::<u32, u64>::new();
        let masters = self.masters()?;
        for v in masters.keys().versions() {
            if v != current {
                let n = self.enc_ring().sealed_by(v).await?;
                if n > 0 {
                    *left.entry(v).or_default() += n;
                }
            }
        }
        for bucket in self.all_buckets().await? {
            self.walk_sealed(&bucket, |_, rec, _| {
                if let Some(s) = rec.meta.sse.as_ref().filter(|s| stale(s, current)) {
                    *left.entry(s.key_version).or_default() += 1;
                }
                None
            })
            .await?;
            let mut q = lode_catalog::UploadQuery {
                max: 1000,
                ..Default::default()
            };
            loop {
                let page = self.catalog.list_uploads(&bucket, &q).await?;
                for (_, _, u) in &page.uploads {
                    if let Some(s) = u.meta.sse.as_ref().filter(|s| stale(s, current)) {
                        *left.entry(s.key_version).or_default() += 1;
                    }
                }
                match page.last {
                    Some((k, id)) if page.truncated => {
                        (q.key_marker, q.id_marker) = (Some(k), Some(id))
                    }
                    _ => break,
                }
            }
        }
        Ok(left)
    }

    /// Walks every object version of `bucket` (delete markers hold no key): `f` sees each
    /// key, record (head form) and whether it is the current one, and may return a change to
    /// commit (key, version id, current, the change). Returns, for each change, whether it
    /// was committed (`false`: the record changed or went meanwhile).
    #[allow(clippy::type_complexity)]
    async fn walk_sealed(
        &self,
        bucket: &str,
        mut f: impl FnMut(
            &str,
            &lode_catalog::ObjectRecord,
            bool,
        )
            -> Option<ObjResult<(String, Option<String>, bool, lode_catalog::RecordFn)>>,
    ) -> Result<Vec<bool>, MasterError> {
        let mut done = vec![];
        let mut q = lode_catalog::VersionQuery {
            max: 1000,
            ..Default::default()
        };
        loop {
            let page = self
                .list_object_versions(bucket, q.clone())
                .await
                .map_err(|e| MasterError::Service(Box::new(e)))?;
            let mut changes = vec![];
            for e in &page.entries {
                if e.record.delete_marker {
                    continue;
                }
                if let Some(c) = f(&e.key, &e.record, e.is_latest) {
                    changes.push(c.map_err(|e| MasterError::Service(Box::new(e)))?);
                }
            }
            for (key, vid, latest, change) in changes {
                let r = match vid {
                    Some(v) if !latest => {
                        self.catalog.update_version(bucket, &key, &v, change).await
                    }
                    None if !latest => {
                        self.catalog
                            .update_version(bucket, &key, "null", change)
                            .await
                    }
                    _ => self.catalog.update(bucket, &key, change).await,
                };
                match r {
                    Ok(_) => done.push(true),
                    Err(
                        CatalogError::PreconditionFailed
                        | CatalogError::NoSuchKey
                        | CatalogError::NoSuchBucket,
                    ) => done.push(false),
                    Err(e) => return Err(e.into()),
                }
            }
            match page.next {
                Some((k, v)) if page.truncated => (q.key_marker, q.version_marker) = (Some(k), v),
                _ => break,
            }
        }
        Ok(done)
    }
}

/// Whether an entry is an SSE-S3 key sealed by a master key version other than `current`.
fn stale(s: &Sse, current: u32) -> bool {
    matches!(s.kind, SseKind::S3) && s.key_version != current
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn master_versions_load_rotate_and_refuse_a_wrong_root() {
        let cat: Arc<dyn Catalog> = Arc::new(lode_catalog::mem_catalog());
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
        let cat: Arc<dyn Catalog> = Arc::new(lode_catalog::mem_catalog());
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
