//! The encryption operations of the service: a bucket's default encryption, what a read needs
//! to open an object (SSE-C keys checked), and the master-key admin (rotate, retire, reseal).
//! The model they apply is [`crate::encryption`]'s, the master keys [`crate::masters`]'.

use std::sync::Arc;

use lode_catalog::{CatalogError, Sse, SseKind};
use serde::Serialize;

use crate::encryption::*;
use crate::error::{ObjError, ObjResult};
use crate::kms::KeyRing;
use crate::masters::{MasterError, MasterStore};
use crate::sse::DataKey;

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
                let commit = async {
                    match vid {
                        Some(v) if !latest => {
                            self.catalog.update_version(bucket, &key, &v, change).await
                        }
                        None if !latest => {
                            self.catalog
                                .update_version(bucket, &key, "null", change)
                                .await
                        }
                        _ => self.catalog.update(bucket, &key, change).await,
                    }
                };
                let r = self
                    .with_events(bucket, crate::bucket_events::How::Meta, commit)
                    .await
                    .map_err(|e| MasterError::Service(Box::new(e)))?;
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
