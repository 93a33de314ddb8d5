//! The lifecycle worker: a pass over every bucket with rules ([`pass`]), run every interval on
//! one gateway at a time ([`run`], a lease in the catalog's system key space), paced to a
//! number of actions per second. Each removal is a conditional delete of exactly the record it
//! judged (ETag and last-modified time to the millisecond), so an object written meanwhile is
//! never removed by a rule it was not judged by. What it did is counted in [`LifecycleStats`]
//! (the admin endpoint's `/metrics`) and logged. The rules themselves are
//! [`crate::lifecycle`]'s.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lode_catalog::{CatalogError, Cond, ObjectRecord, VersionEntry, VersionQuery, Versioning};
use serde::{Deserialize, Serialize};

use crate::error::{ObjError, ObjResult};
use crate::lifecycle::{Lifecycle, SETTING};
use crate::now_ms;
use crate::service::ObjectService;

/// Running totals, exported as metrics.
#[derive(Default)]
pub struct LifecycleStats {
    pub passes: AtomicU64,
    pub scanned: AtomicU64,
    pub expired: AtomicU64,
    pub aborted: AtomicU64,
    /// Noncurrent versions removed by `NoncurrentVersionExpiration`.
    pub noncurrent_expired: AtomicU64,
    /// Delete markers removed once they were the only version left.
    pub markers_removed: AtomicU64,
    /// Removals that object lock refused (the version is kept; a later pass tries again).
    pub locked_kept: AtomicU64,
    pub errors: AtomicU64,
    pub last_pass_end_ms: AtomicI64,
}

/// How the worker runs.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// A pass starts this long after the previous one started.
    pub interval: Duration,
    /// The length of a lifecycle "day" (24 h; shorter in tests).
    pub day_ms: i64,
    /// At most this many removals and aborts per second.
    pub max_actions_per_sec: u32,
    /// This gateway's name in the lease.
    pub holder: String,
}

/// Paces actions to a number per second.
struct Pacer {
    per_sec: u32,
    start: Instant,
    done: u64,
}

impl Pacer {
    async fn one(&mut self) {
        self.done += 1;
        let due = Duration::from_secs_f64(self.done as f64 / f64::from(self.per_sec.max(1)));
        let spent = self.start.elapsed();
        if due > spent {
            tokio::time::sleep(due - spent).await;
        }
    }
}

/// One pass over every bucket with rules, now.
pub async fn pass(svc: &ObjectService, cfg: &RunConfig, stats: &LifecycleStats) -> ObjResult<()> {
    // Its removals are lifecycle expirations (`s3:LifecycleExpiration:*` events).
    crate::bucket_events::Origin::new(crate::bucket_events::Door::Lifecycle)
        .scope(pass_now(svc, cfg, stats))
        .await
}

async fn pass_now(svc: &ObjectService, cfg: &RunConfig, stats: &LifecycleStats) -> ObjResult<()> {
    let mut pace = Pacer {
        per_sec: cfg.max_actions_per_sec,
        start: Instant::now(),
        done: 0,
    };
    for (bucket, rec) in svc.list_buckets().await? {
        let Some((_, json)) = rec.settings.iter().find(|(n, _)| n == SETTING) else {
            continue;
        };
        let lc = Lifecycle::decode(json)?;
        for prefix in lc.expiry_prefixes() {
            expire_under(svc, cfg, stats, &mut pace, &bucket, &lc, prefix).await?;
        }
        if lc.aborts() {
            abort_uploads(svc, cfg, stats, &mut pace, &bucket, &lc).await?;
        }
        if lc.acts_on_versions() && svc.versioning_of(&bucket).await? != Versioning::Off {
            for prefix in lc.version_prefixes() {
                expire_versions_under(svc, cfg, stats, &mut pace, &bucket, &lc, prefix).await?;
            }
        }
    }
    stats.passes.fetch_add(1, Ordering::Relaxed);
    stats.last_pass_end_ms.store(now_ms(), Ordering::Relaxed);
    Ok(())
}

/// A bucket deleted during the pass ends its part of the pass; any other error ends the pass.
fn gone(e: &ObjError) -> bool {
    matches!(e, ObjError::NoSuchBucket)
}

async fn expire_under(
    svc: &ObjectService,
    cfg: &RunConfig,
    stats: &LifecycleStats,
    pace: &mut Pacer,
    bucket: &str,
    lc: &Lifecycle,
    prefix: &str,
) -> ObjResult<()> {
    let mut after: Option<String> = None;
    loop {
        let page = match svc
            .list_objects(bucket, prefix.to_owned(), None, after.clone(), 1000)
            .await
        {
            Err(e) if gone(&e) => return Ok(()),
            r => r?,
        };
        let now = now_ms();
        for (key, rec) in &page.objects {
            stats.scanned.fetch_add(1, Ordering::Relaxed);
            let Some((due, rule)) = lc.expiry(key, rec, cfg.day_ms) else {
                continue;
            };
            if due > now {
                continue;
            }
            let cond = Cond {
                if_match: Some(rec.etag.clone()),
                if_match_modified_ms: Some(rec.last_modified_ms),
                ..Default::default()
            };
            match svc.delete_object_if(bucket, key, &cond).await {
                Ok(_) => {
                    stats.expired.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(bucket, key, rule, "lifecycle: expired object removed");
                }
                // Replaced or removed since it was listed: judged again next pass.
                Err(ObjError::PreconditionFailed | ObjError::NoSuchKey) => {}
                Err(e) if gone(&e) => return Ok(()),
                Err(e) => {
                    stats.errors.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(bucket, key, error = %e, "lifecycle: removal failed");
                }
            }
            pace.one().await;
        }
        if !page.truncated {
            return Ok(());
        }
        after = page.last;
    }
}

/// A key's versions as a pass met them (newest first), waiting for the key's end.
#[derive(Default)]
struct KeyVersions {
    key: String,
    entries: Vec<VersionEntry>,
}

async fn expire_versions_under(
    svc: &ObjectService,
    cfg: &RunConfig,
    stats: &LifecycleStats,
    pace: &mut Pacer,
    bucket: &str,
    lc: &Lifecycle,
    prefix: &str,
) -> ObjResult<()> {
    let mut q = VersionQuery {
        prefix: prefix.to_owned(),
        max: 1000,
        ..Default::default()
    };
    let mut group = KeyVersions::default();
    loop {
        let page = match svc.list_object_versions(bucket, q.clone()).await {
            Err(e) if gone(&e) => return Ok(()),
            r => r?,
        };
        for e in page.entries {
            if e.key != group.key && !group.entries.is_empty() {
                let g = std::mem::take(&mut group);
                judge_versions(svc, cfg, stats, pace, bucket, lc, g).await?;
            }
            group.key.clone_from(&e.key);
            group.entries.push(e);
        }
        if !page.truncated {
            break;
        }
        let Some((k, v)) = page.next else {
            break;
        };
        (q.key_marker, q.version_marker) = (Some(k), v);
    }
    if !group.entries.is_empty() {
        judge_versions(svc, cfg, stats, pace, bucket, lc, group).await?;
    }
    Ok(())
}

/// Applies the version rules to one key's versions (newest first).
async fn judge_versions(
    svc: &ObjectService,
    cfg: &RunConfig,
    stats: &LifecycleStats,
    pace: &mut Pacer,
    bucket: &str,
    lc: &Lifecycle,
    g: KeyVersions,
) -> ObjResult<()> {
    let now = now_ms();
    let key = g.key.as_str();
    let id = |r: &ObjectRecord| r.version_id.clone().unwrap_or_else(|| "null".into());
    if let [only] = g.entries.as_slice()
        && only.record.delete_marker
    {
        if let Some(rule) = lc.lone_marker_goes(key, &only.record, now, cfg.day_ms) {
            remove_version(svc, stats, pace, bucket, key, &id(&only.record), rule, true).await?;
        }
        return Ok(());
    }
    let mut newer_noncurrent = 0u32;
    for pair in g.entries.windows(2) {
        let (successor, v) = (&pair[0], &pair[1]);
        if !v.record.delete_marker
            && let Some((due, rule)) = lc.noncurrent_due(
                key,
                &v.record,
                successor.record.last_modified_ms,
                newer_noncurrent,
                cfg.day_ms,
            )
            && due <= now
        {
            remove_version(svc, stats, pace, bucket, key, &id(&v.record), rule, false).await?;
            continue;
        }
        newer_noncurrent += 1;
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
async fn remove_version(
    svc: &ObjectService,
    stats: &LifecycleStats,
    pace: &mut Pacer,
    bucket: &str,
    key: &str,
    version_id: &str,
    rule: &str,
    marker: bool,
) -> ObjResult<()> {
    match svc
        .delete_object_version(bucket, key, version_id, &Cond::default(), false)
        .await
    {
        Ok(_) => {
            let (counter, what) = if marker {
                (&stats.markers_removed, "expired delete marker removed")
            } else {
                (&stats.noncurrent_expired, "noncurrent version removed")
            };
            counter.fetch_add(1, Ordering::Relaxed);
            tracing::info!(bucket, key, version = version_id, rule, "lifecycle: {what}");
        }
        Err(e) if gone(&e) => {}
        // Object lock keeps it until its retention passes: tried again on a later pass.
        Err(crate::ObjError::ObjectLocked(why)) => {
            stats.locked_kept.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(
                bucket,
                key,
                version = version_id,
                why,
                "lifecycle: a locked version is kept"
            );
        }
        Err(e) => {
            stats.errors.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(bucket, key, error = %e, "lifecycle: version removal failed");
        }
    }
    pace.one().await;
    Ok(())
}

async fn abort_uploads(
    svc: &ObjectService,
    cfg: &RunConfig,
    stats: &LifecycleStats,
    pace: &mut Pacer,
    bucket: &str,
    lc: &Lifecycle,
) -> ObjResult<()> {
    let (mut key_marker, mut id_marker) = (None, None);
    loop {
        let page = match svc
            .list_uploads(bucket, String::new(), None, key_marker, id_marker, 1000)
            .await
        {
            Err(e) if gone(&e) => return Ok(()),
            r => r?,
        };
        let now = now_ms();
        for (key, id, up) in &page.uploads {
            let Some((due, rule)) = lc.abort_due(key, up.initiated_ms, cfg.day_ms) else {
                continue;
            };
            if due > now {
                continue;
            }
            match svc.abort_upload(bucket, key, id).await {
                Ok(()) => {
                    stats.aborted.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(bucket, key, upload = %id, rule, "lifecycle: incomplete upload aborted");
                }
                Err(ObjError::NoSuchUpload) => {}
                Err(e) if gone(&e) => return Ok(()),
                Err(e) => {
                    stats.errors.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(bucket, key, error = %e, "lifecycle: abort failed");
                }
            }
            pace.one().await;
        }
        if !page.truncated {
            return Ok(());
        }
        let Some((k, i)) = page.last else {
            return Ok(());
        };
        (key_marker, id_marker) = (Some(k), Some(i));
    }
}

/// The lease key in the catalog's system key space: one gateway runs passes at a time.
const LEASE: &[u8] = b"lifecycle/lease";

#[derive(Serialize, Deserialize)]
struct Lease {
    holder: String,
    until_ms: i64,
}

/// Takes (or keeps) the lease for `ttl`: false if another gateway holds it.
async fn take_lease(svc: &ObjectService, holder: &str, ttl: Duration) -> ObjResult<bool> {
    let me = holder.to_owned();
    let f: lode_catalog::SysFn = Arc::new(move |cur| {
        let now = now_ms();
        if let Some(l) = cur.and_then(|b| serde_json::from_slice::<Lease>(b).ok())
            && l.holder != me
            && l.until_ms > now
        {
            return Err(CatalogError::PreconditionFailed);
        }
        let l = Lease {
            holder: me.clone(),
            until_ms: now.saturating_add(ttl.as_millis() as i64),
        };
        Ok(Some(serde_json::to_vec(&l).expect("a lease serializes")))
    });
    match svc.catalog().sys_update(LEASE, f).await {
        Ok(()) => Ok(true),
        Err(CatalogError::PreconditionFailed) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// The worker: a pass every interval, on the gateway that holds the lease. Never returns.
pub async fn run(svc: Arc<ObjectService>, stats: Arc<LifecycleStats>, cfg: RunConfig) {
    let ttl = cfg.interval.saturating_mul(3).max(Duration::from_secs(30));
    loop {
        let started = Instant::now();
        match take_lease(&svc, &cfg.holder, ttl).await {
            Ok(true) => {
                if let Err(e) = pass(&svc, &cfg, &stats).await {
                    stats.errors.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(error = %e, "lifecycle pass failed; the next one retries");
                }
            }
            Ok(false) => tracing::debug!("lifecycle: another gateway holds the lease"),
            Err(e) => tracing::warn!(error = %e, "lifecycle: cannot take the lease"),
        }
        tokio::time::sleep(cfg.interval.saturating_sub(started.elapsed())).await;
    }
}
