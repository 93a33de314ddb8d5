//! Lifecycle: a bucket's rules (PutBucketLifecycleConfiguration, kept in the bucket record's
//! settings as JSON) and the worker that applies them.
//!
//! What a rule does here, as S3 defines it for a bucket that was never versioned (Lode builds
//! no versioning yet, so the noncurrent-version and delete-marker actions are accepted, kept
//! and answered back, and have nothing to act on):
//! * `Expiration` by `Days` or `Date` removes the object for good once it falls due: `Days`
//!   counts from the object's last-modified time, and the result is rounded up to the next
//!   midnight UTC (a "day" is [`RunConfig::day_ms`], 24 h unless configured shorter, and the
//!   rounding is to its multiples); a `Date` is due from that date on.
//! * `AbortIncompleteMultipartUpload` aborts uploads whose key has the rule's prefix, due
//!   `DaysAfterInitiation` after initiation, rounded the same way.
//! * Filters: a prefix, tags (each key and value exactly; an object may have more), and sizes
//!   (`ObjectSizeGreaterThan`/`LessThan`, exclusive). A disabled rule does nothing.
//!
//! The worker ([`run`]) makes a pass every interval, on one gateway at a time (a lease in the
//! catalog's system key space), paced to a number of actions per second. Each removal is a
//! conditional delete of exactly the record it judged (ETag and last-modified time to the
//! millisecond), so an object written meanwhile is never removed by a rule it was not judged
//! by. What it did is counted in [`LifecycleStats`] (the admin endpoint's `/metrics`) and
//! logged.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lode_catalog::{CatalogError, Cond, ObjectRecord, VersionEntry, VersionQuery, Versioning};
use serde::{Deserialize, Serialize};

use crate::error::{ObjError, ObjResult};
use crate::service::{ObjectService, now_ms};

/// The name of the bucket setting that holds the rules.
pub const SETTING: &str = "lifecycle";

/// A bucket's lifecycle configuration, as Lode keeps it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lifecycle {
    pub rules: Vec<Rule>,
    /// `x-amz-transition-default-minimum-object-size` as set (`None`: the default).
    #[serde(default)]
    pub transition_min_size: Option<String>,
}

/// How a rule's filter was written (it is answered back the same way).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FilterForm {
    /// The deprecated rule-level `<Prefix>` (no `<Filter>`).
    RulePrefix,
    /// `<Filter/>`: every object.
    Empty,
    Prefix,
    Tag,
    SizeGreaterThan,
    SizeLessThan,
    And,
}

/// What a rule applies to: every predicate holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Filter {
    pub prefix: String,
    /// (key, value); a filter tag written without a value matches the empty value.
    pub tags: Vec<(String, String)>,
    pub size_gt: Option<u64>,
    pub size_lt: Option<u64>,
}

impl Filter {
    pub fn matches(&self, key: &str, rec: &ObjectRecord) -> bool {
        key.starts_with(&self.prefix)
            && self.size_gt.is_none_or(|n| rec.size > n)
            && self.size_lt.is_none_or(|n| rec.size < n)
            && self.tags.iter().all(|t| rec.meta.tags.contains(t))
    }
}

/// One rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rule {
    pub id: String,
    pub enabled: bool,
    pub form: FilterForm,
    pub filter: Filter,
    #[serde(default)]
    pub expiration_days: Option<u32>,
    /// Midnight UTC of the `Date`, in ms since the epoch.
    #[serde(default)]
    pub expiration_date_ms: Option<i64>,
    #[serde(default)]
    pub expired_object_delete_marker: Option<bool>,
    #[serde(default)]
    pub noncurrent_days: Option<u32>,
    #[serde(default)]
    pub newer_noncurrent_versions: Option<u32>,
    #[serde(default)]
    pub abort_days: Option<u32>,
}

/// `days` after `from_ms`, rounded up to the next multiple of `day_ms` (midnight UTC when a day
/// is 24 h: S3's "rounding up the resulting time to the next day at midnight UTC").
pub fn due_ms(from_ms: i64, days: u32, day_ms: i64) -> i64 {
    let t = from_ms.saturating_add(i64::from(days).saturating_mul(day_ms));
    t.div_euclid(day_ms)
        .saturating_add(i64::from(t.rem_euclid(day_ms) != 0))
        .saturating_mul(day_ms)
}

impl Lifecycle {
    /// Decodes the bucket setting.
    pub fn decode(json: &str) -> ObjResult<Self> {
        serde_json::from_str(json)
            .map_err(|e| ObjError::Internal(format!("a bucket's lifecycle setting: {e}")))
    }

    pub fn encode(&self) -> String {
        serde_json::to_string(self).expect("a lifecycle configuration always serializes")
    }

    /// When the object at `key` expires under these rules, and by which rule: the earliest due
    /// time of the enabled rules with an `Expiration` by days or date whose filter matches
    /// (overlapping rules: the shorter one is honoured, as in S3).
    pub fn expiry(&self, key: &str, rec: &ObjectRecord, day_ms: i64) -> Option<(i64, &str)> {
        self.rules
            .iter()
            .filter(|r| r.enabled && r.filter.matches(key, rec))
            .filter_map(|r| {
                let due = match (r.expiration_days, r.expiration_date_ms) {
                    (Some(d), _) => due_ms(rec.last_modified_ms, d, day_ms),
                    (None, Some(t)) => t,
                    (None, None) => return None,
                };
                Some((due, r.id.as_str()))
            })
            .min()
    }

    /// When an upload of `key` initiated at `initiated_ms` is aborted, and by which rule.
    pub fn abort_due(&self, key: &str, initiated_ms: i64, day_ms: i64) -> Option<(i64, &str)> {
        self.rules
            .iter()
            .filter(|r| r.enabled && key.starts_with(&r.filter.prefix))
            .filter_map(|r| Some((due_ms(initiated_ms, r.abort_days?, day_ms), r.id.as_str())))
            .min()
    }

    /// The prefixes a pass must scan for expirations (none if no enabled rule expires
    /// objects), without any that another one covers.
    fn expiry_prefixes(&self) -> Vec<&str> {
        self.prefixes_of(|r| r.expiration_days.is_some() || r.expiration_date_ms.is_some())
    }

    /// The prefixes of the enabled rules that `pick` chooses, without any that another one
    /// covers (a pass scans each once).
    fn prefixes_of(&self, pick: impl Fn(&Rule) -> bool) -> Vec<&str> {
        let mut p: Vec<&str> = self
            .rules
            .iter()
            .filter(|r| r.enabled && pick(r))
            .map(|r| r.filter.prefix.as_str())
            .collect();
        p.sort_unstable();
        p.dedup();
        let mut out: Vec<&str> = Vec::new();
        for x in p {
            if !out.iter().any(|o| x.starts_with(o)) {
                out.push(x);
            }
        }
        out
    }

    fn aborts(&self) -> bool {
        self.rules
            .iter()
            .any(|r| r.enabled && r.abort_days.is_some())
    }

    /// Whether a rule acts on noncurrent versions or delete markers (in a versioned bucket).
    fn acts_on_versions(&self) -> bool {
        self.rules.iter().any(|r| {
            r.enabled
                && (r.noncurrent_days.is_some()
                    || r.expired_object_delete_marker == Some(true)
                    || r.expiration_days.is_some())
        })
    }

    /// The prefixes a pass must scan for versions, without any another one covers.
    fn version_prefixes(&self) -> Vec<&str> {
        self.prefixes_of(|_| true)
    }

    /// When noncurrent version `rec` of `key` goes, and by which rule: it became noncurrent at
    /// `since_ms` (its successor's creation) and has `newer` noncurrent versions newer than
    /// it; a rule keeps the `NewerNoncurrentVersions` newest and the rest `NoncurrentDays`
    /// after they became noncurrent (S3: both must be exceeded).
    pub fn noncurrent_due(
        &self,
        key: &str,
        rec: &ObjectRecord,
        since_ms: i64,
        newer: u32,
        day_ms: i64,
    ) -> Option<(i64, &str)> {
        self.rules
            .iter()
            .filter(|r| r.enabled && r.filter.matches(key, rec))
            .filter(|r| r.newer_noncurrent_versions.is_none_or(|n| newer >= n))
            .filter_map(|r| Some((due_ms(since_ms, r.noncurrent_days?, day_ms), r.id.as_str())))
            .min()
    }

    /// Whether the delete marker `rec`, the only version left of `key`, goes now, and by which
    /// rule: `ExpiredObjectDeleteMarker`, or an `Expiration` by days once the marker is that
    /// old (S3 cleans such markers up with the age rule).
    pub fn lone_marker_goes(
        &self,
        key: &str,
        rec: &ObjectRecord,
        now_ms: i64,
        day_ms: i64,
    ) -> Option<&str> {
        self.rules
            .iter()
            .filter(|r| r.enabled && key.starts_with(&r.filter.prefix))
            .find(|r| {
                r.expired_object_delete_marker == Some(true)
                    || r.expiration_days
                        .is_some_and(|d| due_ms(rec.last_modified_ms, d, day_ms) <= now_ms)
            })
            .map(|r| r.id.as_str())
    }
}

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
                    svc.notify_changed(bucket, key, true);
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
            svc.notify_changed(bucket, key, false);
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

#[cfg(test)]
mod tests {
    use super::*;
    use lode_catalog::{ObjectMeta, Segment};

    const DAY: i64 = 86_400_000;

    fn obj(size: u64, modified: i64, tags: &[(&str, &str)]) -> ObjectRecord {
        ObjectRecord {
            size,
            etag: "e".into(),
            last_modified_ms: modified,
            meta: ObjectMeta {
                tags: tags
                    .iter()
                    .map(|(k, v)| ((*k).into(), (*v).into()))
                    .collect(),
                ..Default::default()
            },
            checksums: Default::default(),
            segments: vec![Segment::Inline(vec![])],
            parts: vec![],
            upload_id: None,
            version_id: None,
            delete_marker: false,
        }
    }

    fn rule(id: &str, filter: Filter) -> Rule {
        Rule {
            id: id.into(),
            enabled: true,
            form: FilterForm::And,
            filter,
            expiration_days: None,
            expiration_date_ms: None,
            expired_object_delete_marker: None,
            noncurrent_days: None,
            newer_noncurrent_versions: None,
            abort_days: None,
        }
    }

    #[test]
    fn due_rounds_up_to_the_next_midnight() {
        // S3's example: created 1/15/2014 10:30 UTC, 3 days: due 1/19/2014 00:00 UTC.
        let created = 1_389_781_800_000; // 2014-01-15T10:30:00Z
        assert_eq!(due_ms(created, 3, DAY), 1_390_089_600_000); // 2014-01-19T00:00:00Z
        // Already at midnight: stays.
        assert_eq!(due_ms(1_390_089_600_000, 1, DAY), 1_390_176_000_000);
        // A short "day" rounds to its own multiples.
        assert_eq!(due_ms(1_500, 1, 1_000), 3_000);
    }

    #[test]
    fn filters_and_the_shorter_rule_win() {
        let mut a = rule(
            "logs",
            Filter {
                prefix: "logs/".into(),
                ..Default::default()
            },
        );
        a.expiration_days = Some(30);
        let mut b = rule(
            "tagged-small",
            Filter {
                prefix: "logs/".into(),
                tags: vec![("tmp".into(), "1".into())],
                size_gt: Some(10),
                size_lt: Some(100),
            },
        );
        b.expiration_days = Some(1);
        let mut c = rule("dated", Filter::default());
        c.expiration_date_ms = Some(5 * DAY);
        c.enabled = false;
        let lc = Lifecycle {
            rules: vec![a, b, c],
            transition_min_size: None,
        };
        let t0 = 10 * DAY + 1;
        let plain = obj(50, t0, &[]);
        assert_eq!(lc.expiry("logs/x", &plain, DAY), Some((41 * DAY, "logs")));
        let small = obj(50, t0, &[("tmp", "1"), ("other", "")]);
        assert_eq!(
            lc.expiry("logs/x", &small, DAY),
            Some((12 * DAY, "tagged-small"))
        );
        // Sizes are exclusive; a tag's value must match exactly.
        for o in [
            obj(10, t0, &[("tmp", "1")]),
            obj(100, t0, &[("tmp", "1")]),
            obj(50, t0, &[("tmp", "2")]),
        ] {
            assert_eq!(lc.expiry("logs/x", &o, DAY).unwrap().1, "logs");
        }
        // The disabled rule does nothing; outside every prefix nothing expires.
        assert_eq!(lc.expiry("data/x", &plain, DAY), None);
        assert_eq!(lc.expiry_prefixes(), vec!["logs/"]);
    }

    #[test]
    fn noncurrent_versions_and_lone_markers() {
        let mut nc = rule(
            "nc",
            Filter {
                prefix: "nc/".into(),
                ..Default::default()
            },
        );
        nc.noncurrent_days = Some(2);
        nc.newer_noncurrent_versions = Some(1);
        let mut dm = rule(
            "dm",
            Filter {
                prefix: "dm/".into(),
                ..Default::default()
            },
        );
        dm.expired_object_delete_marker = Some(true);
        let mut age = rule(
            "age",
            Filter {
                prefix: "age/".into(),
                ..Default::default()
            },
        );
        age.expiration_days = Some(3);
        let lc = Lifecycle {
            rules: vec![nc, dm, age],
            transition_min_size: None,
        };
        assert!(lc.acts_on_versions());
        let v = obj(10, 0, &[]);
        // The newest noncurrent version is kept whatever its age; older ones go two days
        // after they became noncurrent (rounded up to a day).
        assert_eq!(lc.noncurrent_due("nc/k", &v, DAY / 2, 0, DAY), None);
        assert_eq!(
            lc.noncurrent_due("nc/k", &v, DAY / 2, 1, DAY),
            Some((3 * DAY, "nc"))
        );
        assert_eq!(lc.noncurrent_due("other", &v, 0, 5, DAY), None);
        let marker = obj(0, 10 * DAY, &[]);
        assert_eq!(
            lc.lone_marker_goes("dm/k", &marker, 10 * DAY, DAY),
            Some("dm")
        );
        assert_eq!(lc.lone_marker_goes("age/k", &marker, 12 * DAY, DAY), None);
        assert_eq!(
            lc.lone_marker_goes("age/k", &marker, 13 * DAY, DAY),
            Some("age")
        );
        assert_eq!(lc.lone_marker_goes("nc/k", &marker, 99 * DAY, DAY), None);
    }

    #[test]
    fn aborts_and_prefix_cover() {
        let mut a = rule(
            "mpu",
            Filter {
                prefix: "up/".into(),
                ..Default::default()
            },
        );
        a.abort_days = Some(2);
        let mut e1 = rule("all", Filter::default());
        e1.expiration_days = Some(1);
        let mut e2 = rule(
            "sub",
            Filter {
                prefix: "a/".into(),
                ..Default::default()
            },
        );
        e2.expiration_days = Some(1);
        let lc = Lifecycle {
            rules: vec![a, e1, e2],
            transition_min_size: None,
        };
        assert_eq!(lc.abort_due("up/k", DAY / 2, DAY), Some((3 * DAY, "mpu")));
        assert_eq!(lc.abort_due("other", 0, DAY), None);
        assert!(lc.aborts());
        assert_eq!(lc.expiry_prefixes(), vec![""]);
        assert_eq!(lc.version_prefixes(), vec![""]);
        let json = lc.encode();
        assert_eq!(Lifecycle::decode(&json).unwrap(), lc);
    }
}
