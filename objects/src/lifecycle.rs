//! Lifecycle: a bucket's rules (PutBucketLifecycleConfiguration, kept in the bucket record's
//! settings as JSON): what falls due when. The worker that applies them is
//! [`crate::lifecycle_run`].
//!
//! What a rule does, as S3 defines it:
//! * `Expiration` by `Days` or `Date` removes the current version once it falls due (a delete
//!   marker in a versioned bucket): `Days` counts from the object's last-modified time, and the
//!   result is rounded up to the next midnight UTC (a "day" is
//!   [`crate::lifecycle_run::RunConfig::day_ms`], 24 h unless configured shorter, and the
//!   rounding is to its multiples); a `Date` is due from that date on.
//! * `NoncurrentVersionExpiration` removes noncurrent versions `NoncurrentDays` after they
//!   became noncurrent, keeping the newest `NewerNoncurrentVersions`;
//!   `ExpiredObjectDeleteMarker` removes a delete marker left as a key's only version.
//! * `AbortIncompleteMultipartUpload` aborts uploads whose key has the rule's prefix, due
//!   `DaysAfterInitiation` after initiation, rounded the same way.
//! * Filters: a prefix, tags (each key and value exactly; an object may have more), and sizes
//!   (`ObjectSizeGreaterThan`/`LessThan`, exclusive). A disabled rule does nothing.

use lode_catalog::ObjectRecord;
use serde::{Deserialize, Serialize};

use crate::error::{ObjError, ObjResult};

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
    pub(crate) fn expiry_prefixes(&self) -> Vec<&str> {
        self.prefixes_of(|r| r.expiration_days.is_some() || r.expiration_date_ms.is_some())
    }

    /// The prefixes of the enabled rules that `pick` chooses, without any that another one
    /// covers (a pass scans each once).
    pub(crate) fn prefixes_of(&self, pick: impl Fn(&Rule) -> bool) -> Vec<&str> {
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

    pub(crate) fn aborts(&self) -> bool {
        self.rules
            .iter()
            .any(|r| r.enabled && r.abort_days.is_some())
    }

    /// Whether a rule acts on noncurrent versions or delete markers (in a versioned bucket).
    pub(crate) fn acts_on_versions(&self) -> bool {
        self.rules.iter().any(|r| {
            r.enabled
                && (r.noncurrent_days.is_some()
                    || r.expired_object_delete_marker == Some(true)
                    || r.expiration_days.is_some())
        })
    }

    /// The prefixes a pass must scan for versions, without any another one covers.
    pub(crate) fn version_prefixes(&self) -> Vec<&str> {
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
