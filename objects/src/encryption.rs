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

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::{KmsError, ObjError, ObjResult};
use crate::kms::KeyRing;
pub use crate::masters::{MasterError, MasterStore, root_from_master};
use crate::sse::{DataKey, SseError};
use lode_catalog::{Sse, SseKind};

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
