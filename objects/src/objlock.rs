//! S3 Object Lock. A bucket's lock configuration is a bucket setting ([`SETTING`]: enabled,
//! with an optional default retention); each version's retention and legal hold live in its
//! record ([`ObjectLock`] in its metadata), so they are read and changed in the same commits
//! as the version itself, on every catalog.
//!
//! A version is locked while it has a legal hold, or a retention whose date has not passed
//! (a `GOVERNANCE` one may be bypassed with `x-amz-bypass-governance-retention`). A locked
//! version cannot be removed ([`ObjectService::delete_object_version`] checks the lock inside
//! the commit that would remove it, so a lock set meanwhile holds), nor its metadata rewritten
//! in place (the mount's `chmod`/`utimes` answer `EPERM`); new versions, delete markers and tags
//! stay allowed, as in S3.
//!
//! These are the rules; the operations that set and read locks are [`crate::lock_ops`].

use std::sync::Arc;

use lode_catalog::{BucketRecord, RecordCheck};
use lode_catalog::{ObjectLock, ObjectRecord};
use serde::{Deserialize, Serialize};

use crate::error::refused;
use crate::{ObjError, ObjResult, now_ms};

/// The bucket setting that holds the lock configuration (JSON of [`LockConfig`]).
pub const SETTING: &str = "object-lock";
pub const GOVERNANCE: &str = "GOVERNANCE";
pub const COMPLIANCE: &str = "COMPLIANCE";
const DAY_MS: i64 = 86_400_000;

/// A bucket's object lock configuration: present means enabled.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockConfig {
    pub rule: Option<DefaultRetention>,
}

/// The retention new versions get when a write names none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DefaultRetention {
    pub mode: String,
    pub days: Option<u32>,
    pub years: Option<u32>,
}

impl DefaultRetention {
    /// Checks a rule as S3 does: one of `Days` or `Years` (both: `MalformedXML`, left to the
    /// door), positive (`InvalidRetentionPeriod`), a known mode.
    pub fn new(mode: &str, days: Option<i32>, years: Option<i32>) -> ObjResult<Self> {
        let positive = |n: Option<i32>| match n {
            None => Ok(None),
            Some(n) if n > 0 => Ok(Some(n as u32)),
            Some(_) => Err(ObjError::InvalidRetentionPeriod(
                "Default retention period must be a positive integer value".into(),
            )),
        };
        let (days, years) = (positive(days)?, positive(years)?);
        if days.is_none() == years.is_none() {
            return Err(ObjError::InvalidRetentionPeriod(
                "Default retention period must have exactly one of Days or Years".into(),
            ));
        }
        if !is_mode(mode) {
            return Err(ObjError::InvalidArgument(format!(
                "Unknown object lock mode {mode}"
            )));
        }
        Ok(Self {
            mode: mode.to_owned(),
            days,
            years,
        })
    }

    /// The retain-until date of a version made at `now_ms` (a year is 365 days).
    pub fn until_ms(&self, now_ms: i64) -> i64 {
        let days = i64::from(self.days.unwrap_or(0)) + 365 * i64::from(self.years.unwrap_or(0));
        now_ms.saturating_add(days.saturating_mul(DAY_MS))
    }
}

pub fn is_mode(m: &str) -> bool {
    m == GOVERNANCE || m == COMPLIANCE
}

/// A bucket record's lock configuration (`None`: object lock is not enabled).
pub fn lock_setting(b: &BucketRecord) -> Option<LockConfig> {
    b.settings
        .iter()
        .find(|(n, _)| n == SETTING)
        .map(|(_, v)| serde_json::from_str(v).unwrap_or_default())
}

/// Why `rec` may not be removed or rewritten at `now` (`None`: it may): a legal hold, or a
/// retention whose date has not passed (a `GOVERNANCE` one not when `bypass`).
pub fn lock_reason(rec: &ObjectRecord, now: i64, bypass: bool) -> Option<String> {
    let l = &rec.meta.lock;
    if l.legal_hold {
        return Some("Object is under a legal hold".into());
    }
    match (l.mode.as_deref(), l.retain_until_ms) {
        (Some(m), Some(until)) if until > now && !(bypass && m == GOVERNANCE) => Some(format!(
            "Object is WORM protected ({m} retention) and cannot be overwritten or removed"
        )),
        _ => None,
    }
}

/// The check a version removal runs inside its commit.
pub(crate) fn removal_check(bypass: bool) -> RecordCheck {
    Arc::new(
        move |rec: &ObjectRecord| match lock_reason(rec, now_ms(), bypass) {
            Some(why) => Err(refused(ObjError::ObjectLocked(why))),
            None => Ok(()),
        },
    )
}

/// The lock a new version gets in a bucket with configuration `cfg`: the one the write asked
/// for (checked), else the bucket's default retention. A lock asked for in a bucket without
/// object lock is `InvalidRequest`.
pub fn lock_for_write(
    cfg: Option<&LockConfig>,
    asked: ObjectLock,
    now: i64,
) -> ObjResult<ObjectLock> {
    let Some(cfg) = cfg else {
        if asked.is_empty() {
            return Ok(asked);
        }
        return Err(ObjError::InvalidRequest(
            "Bucket is missing Object Lock Configuration".into(),
        ));
    };
    check_retention(asked.mode.as_deref(), asked.retain_until_ms, now)?;
    let mut lock = asked;
    if lock.mode.is_none()
        && let Some(rule) = &cfg.rule
    {
        lock.mode = Some(rule.mode.clone());
        lock.retain_until_ms = Some(rule.until_ms(now));
    }
    Ok(lock)
}

/// A retention asked for: a mode and a date together, a known mode, a date in the future.
pub(crate) fn check_retention(mode: Option<&str>, until: Option<i64>, now: i64) -> ObjResult<()> {
    match (mode, until) {
        (None, None) => Ok(()),
        (Some(m), Some(u)) => {
            if !is_mode(m) {
                return Err(ObjError::InvalidArgument(format!(
                    "Unknown object lock mode {m}"
                )));
            }
            if u <= now {
                return Err(ObjError::InvalidArgument(
                    "The retain until date must be in the future!".into(),
                ));
            }
            Ok(())
        }
        _ => Err(ObjError::InvalidArgument(
            "x-amz-object-lock-retain-until-date and x-amz-object-lock-mode must both be supplied"
                .into(),
        )),
    }
}

/// A retention change as S3 allows it: a `COMPLIANCE` retention not yet over can only be
/// extended (same mode, a later date); a `GOVERNANCE` one likewise unless `bypass`.
pub(crate) fn check_retention_change(
    old: &ObjectLock,
    mode: &str,
    until: i64,
    bypass: bool,
) -> ObjResult<()> {
    let (Some(om), Some(ou)) = (old.mode.as_deref(), old.retain_until_ms) else {
        return Ok(());
    };
    if ou <= now_ms() {
        return Ok(());
    }
    let weaker = mode != om || until < ou;
    if weaker && (om == COMPLIANCE || !bypass) {
        return Err(ObjError::ObjectLocked(
            "The object's retention may only be extended (a GOVERNANCE one can be changed with x-amz-bypass-governance-retention)".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(lock: ObjectLock) -> ObjectRecord {
        let mut r = lode_catalog::delete_marker(None);
        r.delete_marker = false;
        r.meta.lock = lock;
        r
    }

    #[test]
    fn what_locks_a_version() {
        let gov = |until| ObjectLock {
            mode: Some(GOVERNANCE.into()),
            retain_until_ms: Some(until),
            legal_hold: false,
        };
        assert!(lock_reason(&rec(gov(2_000)), 1_000, false).is_some());
        assert!(
            lock_reason(&rec(gov(2_000)), 1_000, true).is_none(),
            "bypassed"
        );
        assert!(
            lock_reason(&rec(gov(2_000)), 3_000, false).is_none(),
            "passed"
        );
        let comp = ObjectLock {
            mode: Some(COMPLIANCE.into()),
            ..gov(2_000)
        };
        assert!(lock_reason(&rec(comp), 1_000, true).is_some(), "no bypass");
        let hold = ObjectLock {
            legal_hold: true,
            ..Default::default()
        };
        assert!(lock_reason(&rec(hold), 1_000, true).is_some());
        assert!(lock_reason(&rec(ObjectLock::default()), 1_000, false).is_none());
    }

    #[test]
    fn writes_get_the_asked_lock_or_the_default() {
        let cfg = LockConfig {
            rule: Some(DefaultRetention::new(COMPLIANCE, Some(2), None).unwrap()),
        };
        let l = lock_for_write(Some(&cfg), ObjectLock::default(), 1_000).unwrap();
        assert_eq!(l.mode.as_deref(), Some(COMPLIANCE));
        assert_eq!(l.retain_until_ms, Some(1_000 + 2 * DAY_MS));
        let asked = ObjectLock {
            mode: Some(GOVERNANCE.into()),
            retain_until_ms: Some(5_000),
            legal_hold: true,
        };
        assert_eq!(
            lock_for_write(Some(&cfg), asked.clone(), 1_000).unwrap(),
            asked
        );
        assert!(matches!(
            lock_for_write(None, asked, 1_000),
            Err(ObjError::InvalidRequest(_))
        ));
        let past = ObjectLock {
            mode: Some(GOVERNANCE.into()),
            retain_until_ms: Some(500),
            legal_hold: false,
        };
        assert!(matches!(
            lock_for_write(Some(&cfg), past, 1_000),
            Err(ObjError::InvalidArgument(_))
        ));
        assert!(matches!(
            DefaultRetention::new(GOVERNANCE, Some(0), None),
            Err(ObjError::InvalidRetentionPeriod(_))
        ));
        assert!(matches!(
            DefaultRetention::new(GOVERNANCE, Some(1), Some(1)),
            Err(ObjError::InvalidRetentionPeriod(_))
        ));
    }

    #[test]
    fn retention_only_extends_unless_governance_is_bypassed() {
        let far = now_ms() + 10 * DAY_MS;
        let old = ObjectLock {
            mode: Some(GOVERNANCE.into()),
            retain_until_ms: Some(far),
            legal_hold: false,
        };
        assert!(check_retention_change(&old, GOVERNANCE, far + 1, false).is_ok());
        assert!(check_retention_change(&old, GOVERNANCE, far - 1, false).is_err());
        assert!(check_retention_change(&old, GOVERNANCE, far - 1, true).is_ok());
        assert!(check_retention_change(&old, COMPLIANCE, far, false).is_err());
        assert!(check_retention_change(&old, COMPLIANCE, far, true).is_ok());
        let comp = ObjectLock {
            mode: Some(COMPLIANCE.into()),
            ..old
        };
        assert!(check_retention_change(&comp, GOVERNANCE, far, true).is_err());
        assert!(check_retention_change(&comp, COMPLIANCE, far - 1, true).is_err());
        assert!(check_retention_change(&comp, COMPLIANCE, far + 1, false).is_ok());
    }
}
