//! The S3 side of lifecycle configurations: S3's document (s3s's types) checked against S3's
//! rules and turned into Lode's [`Lifecycle`], and back for GetBucketLifecycleConfiguration.
//! The codes and messages are the ones S3 documents or was observed to answer (SEMANTICS.md
//! rule 25). The worker that applies the rules is `lode_objects::lifecycle`.

use std::collections::HashSet;

use base64::Engine;
use lode_objects::lifecycle::{Filter, FilterForm, Lifecycle, Rule};
use s3s::dto::{
    AbortIncompleteMultipartUpload, BucketLifecycleConfiguration, ExpirationStatus,
    LifecycleExpiration, LifecycleRule, LifecycleRuleAndOperator, LifecycleRuleFilter,
    NoncurrentVersionExpiration, Tag, Timestamp, TransitionDefaultMinimumObjectSize,
};
use s3s::{S3Result, s3_error};

/// At most this many rules per bucket.
const MAX_RULES: usize = 1000;
const MAX_ID: usize = 255;
/// The largest size filter S3 takes: 50 TB.
const MAX_SIZE: i64 = 1_099_511_627_776_000;

fn malformed() -> s3s::S3Error {
    s3_error!(
        MalformedXML,
        "The XML you provided was not well-formed or did not validate against our published schema"
    )
}

/// An ID as S3 makes one for a rule sent without: base64 of a version-4 UUID's text.
fn new_rule_id() -> String {
    let mut b: [u8; 16] = rand::random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = hex::encode(b);
    let uuid = format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    );
    base64::engine::general_purpose::STANDARD.encode(uuid)
}

fn days(v: Option<i32>, what: &str) -> S3Result<Option<u32>> {
    match v {
        None => Ok(None),
        Some(d) if d > 0 => Ok(Some(d as u32)),
        Some(_) => Err(s3_error!(
            InvalidArgument,
            "{what} must be a positive integer"
        )),
    }
}

fn midnight_ms(t: &Timestamp) -> S3Result<i64> {
    let t = time::OffsetDateTime::from(t.clone());
    if t.time() != time::Time::MIDNIGHT {
        return Err(s3_error!(InvalidArgument, "'Date' must be at midnight GMT"));
    }
    Ok((t.unix_timestamp_nanos() / 1_000_000) as i64)
}

fn filter_tag(t: Tag) -> S3Result<(String, String)> {
    match t.key {
        Some(k) if !k.is_empty() => Ok((k, t.value.unwrap_or_default())),
        _ => Err(malformed()),
    }
}

fn size_filter(gt: Option<i64>, lt: Option<i64>) -> S3Result<(Option<u64>, Option<u64>)> {
    if let Some(l) = lt
        && !(1..=MAX_SIZE).contains(&l)
    {
        return Err(s3_error!(
            InvalidRequest,
            "'ObjectSizeLessThan' should be between 1 and {MAX_SIZE}."
        ));
    }
    if let Some(g) = gt
        && !(0..MAX_SIZE).contains(&g)
    {
        return Err(s3_error!(
            InvalidRequest,
            "'ObjectSizeGreaterThan' should be between 0 and {}.",
            MAX_SIZE - 1
        ));
    }
    if let (Some(g), Some(l)) = (gt, lt)
        && l <= g
    {
        return Err(s3_error!(
            InvalidRequest,
            "'ObjectSizeLessThan' has to be a value greater than 'ObjectSizeGreaterThan'."
        ));
    }
    Ok((gt.map(|g| g as u64), lt.map(|l| l as u64)))
}

/// A rule's filter: exactly one predicate directly in `<Filter>` (or none: every object); an
/// `<And>` of at least two.
fn filter(
    rule_prefix: Option<String>,
    f: Option<LifecycleRuleFilter>,
) -> S3Result<(FilterForm, Filter)> {
    let f = match (rule_prefix, f) {
        (Some(p), None) => {
            return Ok((
                FilterForm::RulePrefix,
                Filter {
                    prefix: p,
                    ..Default::default()
                },
            ));
        }
        (None, Some(f)) => f,
        _ => return Err(malformed()),
    };
    let n = usize::from(f.prefix.is_some())
        + usize::from(f.tag.is_some())
        + usize::from(f.object_size_greater_than.is_some())
        + usize::from(f.object_size_less_than.is_some())
        + usize::from(f.and.is_some());
    if n > 1 {
        return Err(malformed());
    }
    let (gt, lt) = size_filter(f.object_size_greater_than, f.object_size_less_than)?;
    if let Some(p) = f.prefix {
        return Ok((
            FilterForm::Prefix,
            Filter {
                prefix: p,
                ..Default::default()
            },
        ));
    }
    if let Some(t) = f.tag {
        return Ok((
            FilterForm::Tag,
            Filter {
                tags: vec![filter_tag(t)?],
                ..Default::default()
            },
        ));
    }
    if gt.is_some() {
        return Ok((
            FilterForm::SizeGreaterThan,
            Filter {
                size_gt: gt,
                ..Default::default()
            },
        ));
    }
    if lt.is_some() {
        return Ok((
            FilterForm::SizeLessThan,
            Filter {
                size_lt: lt,
                ..Default::default()
            },
        ));
    }
    let Some(a) = f.and else {
        return Ok((FilterForm::Empty, Filter::default()));
    };
    let LifecycleRuleAndOperator {
        prefix,
        tags,
        object_size_greater_than,
        object_size_less_than,
    } = a;
    let tags = tags
        .unwrap_or_default()
        .into_iter()
        .map(filter_tag)
        .collect::<S3Result<Vec<_>>>()?;
    let preds = usize::from(prefix.is_some())
        + tags.len()
        + usize::from(object_size_greater_than.is_some())
        + usize::from(object_size_less_than.is_some());
    if preds < 2 {
        return Err(malformed());
    }
    let mut keys: Vec<&str> = tags.iter().map(|(k, _)| k.as_str()).collect();
    keys.sort_unstable();
    if keys.windows(2).any(|w| w[0] == w[1]) {
        return Err(s3_error!(
            InvalidRequest,
            "Duplicate Tag Keys are not allowed."
        ));
    }
    let (gt, lt) = size_filter(object_size_greater_than, object_size_less_than)?;
    Ok((
        FilterForm::And,
        Filter {
            prefix: prefix.unwrap_or_default(),
            tags,
            size_gt: gt,
            size_lt: lt,
        },
    ))
}

fn rule(r: LifecycleRule) -> S3Result<Rule> {
    let enabled = match r.status.as_str() {
        ExpirationStatus::ENABLED => true,
        ExpirationStatus::DISABLED => false,
        _ => return Err(malformed()),
    };
    if r.transitions.as_ref().is_some_and(|t| !t.is_empty())
        || r.noncurrent_version_transitions
            .as_ref()
            .is_some_and(|t| !t.is_empty())
    {
        return Err(s3_error!(
            NotImplemented,
            "Lifecycle transitions are not implemented by Lode (it has one storage class)"
        ));
    }
    let id = match r.id {
        Some(id) if id.chars().count() > MAX_ID => {
            return Err(s3_error!(
                InvalidArgument,
                "ID length should not exceed allowed limit of 255"
            ));
        }
        Some(id) if !id.is_empty() => id,
        _ => new_rule_id(),
    };
    let legacy = r.prefix.is_some() && r.filter.is_none();
    let (form, filter) = filter(r.prefix, r.filter)?;
    let has_tags = !filter.tags.is_empty();
    let has_size = filter.size_gt.is_some() || filter.size_lt.is_some();
    let mut out = Rule {
        id,
        enabled,
        form,
        filter,
        expiration_days: None,
        expiration_date_ms: None,
        expired_object_delete_marker: None,
        noncurrent_days: None,
        newer_noncurrent_versions: None,
        abort_days: None,
    };
    if r.expiration.is_none()
        && r.noncurrent_version_expiration.is_none()
        && r.abort_incomplete_multipart_upload.is_none()
    {
        return Err(s3_error!(
            InvalidRequest,
            "At least one action needs to be specified in a rule"
        ));
    }
    if let Some(LifecycleExpiration {
        date,
        days: d,
        expired_object_delete_marker: marker,
    }) = r.expiration
    {
        match (&date, d, marker) {
            (None, None, None)
            | (Some(_), Some(_), _)
            | (Some(_), _, Some(_))
            | (_, Some(_), Some(_)) => {
                return Err(malformed());
            }
            _ => {}
        }
        if marker.is_some() && has_size {
            return Err(s3_error!(
                InvalidRequest,
                "ExpiredObjectDeleteMarker cannot be specified with Object Size."
            ));
        }
        if marker.is_some() && has_tags {
            return Err(s3_error!(
                InvalidRequest,
                "ExpiredObjectDeleteMarker cannot be specified with Tags."
            ));
        }
        out.expiration_days = days(d, "'Days' for Expiration action")?;
        out.expiration_date_ms = date.as_ref().map(midnight_ms).transpose()?;
        out.expired_object_delete_marker = marker;
    }
    if let Some(NoncurrentVersionExpiration {
        newer_noncurrent_versions,
        noncurrent_days,
    }) = r.noncurrent_version_expiration
    {
        let Some(nd) = noncurrent_days else {
            return Err(malformed());
        };
        out.noncurrent_days = days(
            Some(nd),
            "'NoncurrentDays' for NoncurrentVersionExpiration action",
        )?;
        if let Some(n) = newer_noncurrent_versions {
            if legacy {
                return Err(s3_error!(
                    InvalidRequest,
                    "NewerNoncurrentVersions element can only be used in Lifecycle V2."
                ));
            }
            out.newer_noncurrent_versions = days(
                Some(n),
                "'NewerNoncurrentVersions' for NoncurrentVersionExpiration action",
            )?;
        }
    }
    if let Some(AbortIncompleteMultipartUpload {
        days_after_initiation,
    }) = r.abort_incomplete_multipart_upload
    {
        if has_tags {
            return Err(s3_error!(
                InvalidRequest,
                "AbortIncompleteMultipartUpload cannot be specified with Tags."
            ));
        }
        if has_size {
            return Err(s3_error!(
                InvalidRequest,
                "AbortIncompleteMultipartUpload cannot be specified with Object Size."
            ));
        }
        let Some(d) = days_after_initiation else {
            return Err(malformed());
        };
        out.abort_days = days(
            Some(d),
            "'DaysAfterInitiation' for AbortIncompleteMultipartUpload action",
        )?;
    }
    Ok(out)
}

/// PutBucketLifecycleConfiguration's document, checked.
pub fn from_s3(
    cfg: Option<BucketLifecycleConfiguration>,
    min_size: Option<&TransitionDefaultMinimumObjectSize>,
) -> S3Result<Lifecycle> {
    let Some(cfg) = cfg else {
        return Err(malformed());
    };
    if let Some(m) = min_size
        && !matches!(
            m.as_str(),
            TransitionDefaultMinimumObjectSize::ALL_STORAGE_CLASSES_128K
                | TransitionDefaultMinimumObjectSize::VARIES_BY_STORAGE_CLASS
        )
    {
        return Err(s3_error!(
            InvalidRequest,
            "Invalid TransitionDefaultMinimumObjectSize found: {}",
            m.as_str()
        ));
    }
    if cfg.rules.is_empty() {
        return Err(s3_error!(
            InvalidRequest,
            "At least one lifecycle rule must be specified."
        ));
    }
    if cfg.rules.len() > MAX_RULES {
        return Err(s3_error!(
            InvalidRequest,
            "The number of lifecycle rules must not exceed the allowed limit of 1000 rules."
        ));
    }
    let mut rules = Vec::with_capacity(cfg.rules.len());
    let mut ids = HashSet::new();
    let mut forms: Option<bool> = None;
    for r in cfg.rules {
        let legacy = r.prefix.is_some() && r.filter.is_none();
        match forms {
            Some(false) if legacy => {
                return Err(s3_error!(
                    InvalidRequest,
                    "Base level prefix cannot be used in Lifecycle V2, prefixes are only supported in the Filter."
                ));
            }
            Some(true) if !legacy => {
                return Err(s3_error!(
                    InvalidRequest,
                    "Filter element can only be used in Lifecycle V2."
                ));
            }
            _ => forms = Some(legacy),
        }
        let rule = rule(r)?;
        if !ids.insert(rule.id.clone()) {
            return Err(s3_error!(
                InvalidArgument,
                "Rule ID must be unique. Found same ID for more than one rule"
            ));
        }
        rules.push(rule);
    }
    Ok(Lifecycle {
        rules,
        transition_min_size: min_size.map(|m| m.as_str().to_owned()),
    })
}

fn tag((k, v): &(String, String)) -> Tag {
    Tag {
        key: Some(k.clone()),
        value: Some(v.clone()),
    }
}

fn some_u(v: Option<u32>) -> Option<i32> {
    v.map(|d| d as i32)
}

/// GetBucketLifecycleConfiguration's rules: as they were sent (filters in their form; IDs
/// made for rules sent without one).
pub fn to_s3(lc: &Lifecycle) -> Vec<LifecycleRule> {
    lc.rules
        .iter()
        .map(|r| {
            let f = &r.filter;
            let size = |n: Option<u64>| n.map(|n| n as i64);
            let filter = match r.form {
                FilterForm::RulePrefix => None,
                FilterForm::Empty => Some(LifecycleRuleFilter::default()),
                FilterForm::Prefix => Some(LifecycleRuleFilter {
                    prefix: Some(f.prefix.clone()),
                    ..Default::default()
                }),
                FilterForm::Tag => Some(LifecycleRuleFilter {
                    tag: f.tags.first().map(tag),
                    ..Default::default()
                }),
                FilterForm::SizeGreaterThan => Some(LifecycleRuleFilter {
                    object_size_greater_than: size(f.size_gt),
                    ..Default::default()
                }),
                FilterForm::SizeLessThan => Some(LifecycleRuleFilter {
                    object_size_less_than: size(f.size_lt),
                    ..Default::default()
                }),
                FilterForm::And => Some(LifecycleRuleFilter {
                    and: Some(LifecycleRuleAndOperator {
                        prefix: Some(f.prefix.clone()).filter(|p| !p.is_empty()),
                        tags: Some(f.tags.iter().map(tag).collect())
                            .filter(|t: &Vec<Tag>| !t.is_empty()),
                        object_size_greater_than: size(f.size_gt),
                        object_size_less_than: size(f.size_lt),
                    }),
                    ..Default::default()
                }),
            };
            let expiration = (r.expiration_days.is_some()
                || r.expiration_date_ms.is_some()
                || r.expired_object_delete_marker.is_some())
            .then(|| LifecycleExpiration {
                date: r.expiration_date_ms.map(crate::timestamps::ts),
                days: some_u(r.expiration_days),
                expired_object_delete_marker: r.expired_object_delete_marker,
            });
            LifecycleRule {
                id: Some(r.id.clone()),
                status: ExpirationStatus::from(
                    if r.enabled {
                        ExpirationStatus::ENABLED
                    } else {
                        ExpirationStatus::DISABLED
                    }
                    .to_owned(),
                ),
                prefix: (r.form == FilterForm::RulePrefix).then(|| f.prefix.clone()),
                filter,
                expiration,
                noncurrent_version_expiration: r.noncurrent_days.map(|d| {
                    NoncurrentVersionExpiration {
                        noncurrent_days: Some(d as i32),
                        newer_noncurrent_versions: some_u(r.newer_noncurrent_versions),
                    }
                }),
                abort_incomplete_multipart_upload: r.abort_days.map(|d| {
                    AbortIncompleteMultipartUpload {
                        days_after_initiation: Some(d as i32),
                    }
                }),
                transitions: None,
                noncurrent_version_transitions: None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn made_ids_look_like_s3s() {
        let id = new_rule_id();
        assert_eq!(id.len(), 48);
        let text = String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(&id)
                .unwrap(),
        )
        .unwrap();
        assert_eq!(text.len(), 36);
        assert_eq!(&text[14..15], "4");
        assert_ne!(new_rule_id(), id);
    }
}
