//! The Object Lock operations of the service: a bucket created locked, its lock configuration,
//! and each version's retention and legal hold. The rules they apply are [`crate::objlock`]'s.

use std::sync::Arc;

use lode_catalog::{BucketRecord, CatalogError, ObjectLock, ObjectRecord, Versioning};

use crate::error::refused;
use crate::objlock::{
    DefaultRetention, LockConfig, SETTING, check_retention, check_retention_change, lock_setting,
};
use crate::service::{VERSIONING_SETTING, check_version_id, versioning_setting};
use crate::{ObjError, ObjResult, ObjectService, now_ms};

impl ObjectService {
    /// CreateBucket with `x-amz-bucket-object-lock-enabled: true`: versioning is Enabled and
    /// object lock on, with no default retention.
    pub async fn create_bucket_locked(
        &self,
        name: &str,
        owner: &str,
        mut settings: Vec<(String, String)>,
    ) -> ObjResult<()> {
        let lock = serde_json::to_string(&LockConfig::default()).expect("serializes");
        settings.push((SETTING.to_owned(), lock));
        settings.push((VERSIONING_SETTING.to_owned(), "Enabled".to_owned()));
        self.create_bucket_with(name, owner, settings).await
    }

    /// PutObjectLockConfiguration: enables object lock on a bucket whose versioning is
    /// Enabled (else `InvalidBucketState`), with `rule` as its default retention.
    pub async fn put_object_lock_configuration(
        &self,
        bucket: &str,
        rule: Option<DefaultRetention>,
    ) -> ObjResult<()> {
        let value = serde_json::to_string(&LockConfig { rule }).expect("serializes");
        let f: lode_catalog::BucketFn = Arc::new(move |b: &BucketRecord| {
            if versioning_setting(b) != Versioning::Enabled {
                return Err(refused(ObjError::InvalidBucketState(
                    "Versioning must be 'Enabled' on the bucket to apply a Object Lock configuration"
                        .into(),
                )));
            }
            let mut b = b.clone();
            b.settings.retain(|(n, _)| n != SETTING);
            b.settings.push((SETTING.to_owned(), value.clone()));
            b.settings.sort();
            Ok(b)
        });
        self.catalog.update_bucket(bucket, f).await?;
        self.settings_changed(bucket).await;
        Ok(())
    }

    /// GetObjectLockConfiguration: `NoObjectLockConfiguration` where object lock is off.
    pub async fn object_lock_configuration(&self, bucket: &str) -> ObjResult<LockConfig> {
        lock_setting(&self.bucket(bucket).await?).ok_or(ObjError::NoObjectLockConfiguration)
    }

    /// The lock configuration of a bucket the request needs object lock on (`InvalidRequest`
    /// where it is off, as S3 answers retention and legal-hold calls there).
    async fn require_lock(&self, bucket: &str) -> ObjResult<LockConfig> {
        lock_setting(&self.bucket(bucket).await?).ok_or_else(|| {
            ObjError::InvalidRequest("Bucket is missing Object Lock Configuration".into())
        })
    }

    /// Rewrites the lock of a version (`None`: the current one) with `f`, in one commit.
    async fn update_lock(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<&str>,
        f: impl Fn(&ObjectLock) -> ObjResult<ObjectLock> + Send + Sync + 'static,
    ) -> ObjResult<()> {
        let update: lode_catalog::RecordFn = Arc::new(move |r: &ObjectRecord| {
            let mut r = r.clone();
            r.meta.lock = f(&r.meta.lock).map_err(refused)?;
            Ok(r)
        });
        let commit = async {
            match version_id {
                Some(v) => {
                    check_version_id(v)?;
                    match self.catalog.update_version(bucket, key, v, update).await {
                        Err(CatalogError::NoSuchKey) => Err(ObjError::NoSuchVersion),
                        r => r.map(|_| ()).map_err(Into::into),
                    }
                }
                None => self
                    .catalog
                    .update(bucket, key, update)
                    .await
                    .map(|_| ())
                    .map_err(Into::into),
            }
        };
        self.with_events(bucket, crate::bucket_events::How::Meta, commit)
            .await?
    }

    /// PutObjectRetention.
    pub async fn put_object_retention(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<&str>,
        mode: String,
        until_ms: i64,
        bypass: bool,
    ) -> ObjResult<()> {
        self.require_lock(bucket).await?;
        check_retention(Some(&mode), Some(until_ms), now_ms())?;
        self.update_lock(bucket, key, version_id, move |old| {
            check_retention_change(old, &mode, until_ms, bypass)?;
            Ok(ObjectLock {
                mode: Some(mode.clone()),
                retain_until_ms: Some(until_ms),
                legal_hold: old.legal_hold,
            })
        })
        .await
    }

    /// GetObjectRetention: (mode, retain-until ms); `NoSuchObjectLockConfiguration` if none.
    pub async fn object_retention(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<&str>,
    ) -> ObjResult<(String, i64)> {
        self.require_lock(bucket).await?;
        let l = self.lock_of(bucket, key, version_id).await?;
        match (l.mode, l.retain_until_ms) {
            (Some(m), Some(u)) => Ok((m, u)),
            _ => Err(ObjError::NoSuchObjectLockConfiguration),
        }
    }

    /// PutObjectLegalHold.
    pub async fn put_object_legal_hold(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<&str>,
        on: bool,
    ) -> ObjResult<()> {
        self.require_lock(bucket).await?;
        self.update_lock(bucket, key, version_id, move |old| {
            let mut l = old.clone();
            l.legal_hold = on;
            Ok(l)
        })
        .await
    }

    /// GetObjectLegalHold: whether it is on (`NoSuchObjectLockConfiguration` if never set
    /// and no retention either).
    pub async fn object_legal_hold(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<&str>,
    ) -> ObjResult<bool> {
        self.require_lock(bucket).await?;
        Ok(self.lock_of(bucket, key, version_id).await?.legal_hold)
    }

    async fn lock_of(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<&str>,
    ) -> ObjResult<ObjectLock> {
        Ok(match version_id {
            Some(v) => {
                self.open_object_version(bucket, key, v)
                    .await?
                    .record
                    .meta
                    .lock
            }
            None => self.head_object(bucket, key).await?.meta.lock,
        })
    }
}
