//! Bucket event notifications: the configuration (Put/GetBucketNotificationConfiguration, a
//! bucket setting like the others), who caused a change ([`Origin`], set by the doors), and
//! the AWS event record the service renders into the outbox in the same commit as the change
//! (`lode_catalog::events`). Delivery is `event_delivery`'s.

use std::sync::Arc;

use lode_catalog::events::{Change, EventDraft, What};
use serde::{Deserialize, Serialize};

/// The bucket setting the configuration is stored under.
pub const SETTING: &str = "notification";
/// Most configurations (queue and topic together) a bucket may have.
pub const MAX_RULES: usize = 100;

/// The event types a configuration may name (AWS's list); those Lode never fires (restore,
/// replication, tiering, transition, lost objects) are accepted, as on AWS.
pub const EVENT_TYPES: &[&str] = &[
    "s3:TestEvent",
    "s3:ObjectCreated:*",
    "s3:ObjectCreated:Put",
    "s3:ObjectCreated:Post",
    "s3:ObjectCreated:Copy",
    "s3:ObjectCreated:CompleteMultipartUpload",
    "s3:ObjectRemoved:*",
    "s3:ObjectRemoved:Delete",
    "s3:ObjectRemoved:DeleteMarkerCreated",
    "s3:ObjectRestore:*",
    "s3:ObjectRestore:Post",
    "s3:ObjectRestore:Completed",
    "s3:ObjectRestore:Delete",
    "s3:ReducedRedundancyLostObject",
    "s3:Replication:*",
    "s3:Replication:OperationFailedReplication",
    "s3:Replication:OperationMissedThreshold",
    "s3:Replication:OperationReplicatedAfterThreshold",
    "s3:Replication:OperationNotTracked",
    "s3:LifecycleExpiration:*",
    "s3:LifecycleExpiration:Delete",
    "s3:LifecycleExpiration:DeleteMarkerCreated",
    "s3:LifecycleTransition",
    "s3:IntelligentTiering",
    "s3:ObjectTagging:*",
    "s3:ObjectTagging:Put",
    "s3:ObjectTagging:Delete",
    "s3:ObjectAcl:Put",
];

/// Which part of a notification configuration a rule came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RuleKind {
    /// `QueueConfiguration` (an SQS ARN).
    Queue,
    /// `TopicConfiguration` (an SNS ARN).
    Topic,
}

/// One configuration of a bucket's notification configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventRule {
    pub id: String,
    pub kind: RuleKind,
    /// The ARN as given.
    pub arn: String,
    /// The destination it names (`[notify.<name>]`).
    pub dest: String,
    /// Event types, as given (`s3:ObjectCreated:*`).
    pub events: Vec<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub prefix: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub suffix: String,
}

/// A bucket's notification configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notifications {
    pub rules: Vec<EventRule>,
}

/// A refused configuration: S3's error code and message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ConfigError {
    /// `InvalidArgument` or `MalformedXML`.
    pub code: &'static str,
    pub message: String,
}

fn invalid<T>(message: impl Into<String>) -> Result<T, ConfigError> {
    Err(ConfigError {
        code: "InvalidArgument",
        message: message.into(),
    })
}

/// The destination an ARN names: `arn:<partition>:<sqs|sns>:<region>:<account>:<name>`, the
/// service matching the configuration's kind, `name` one of `known`.
pub fn destination_of(arn: &str, kind: RuleKind) -> Option<&str> {
    let parts: Vec<&str> = arn.split(':').collect();
    let [arn_, _partition, service, _region, _account, name] = parts[..] else {
        return None;
    };
    let want = match kind {
        RuleKind::Queue => "sqs",
        RuleKind::Topic => "sns",
    };
    (arn_ == "arn" && service == want && !name.is_empty()).then_some(name)
}

/// The ARN Lode gives destination `name` in a configuration of `kind`.
pub fn arn_of(name: &str, kind: RuleKind) -> String {
    match kind {
        RuleKind::Queue => format!("arn:lode:sqs:::{name}"),
        RuleKind::Topic => format!("arn:lode:sns:::{name}"),
    }
}

/// Whether event type `pattern` (as configured; `*` at the end matches the rest) covers the
/// event named `name` (`ObjectCreated:Put`, without `s3:`).
pub fn covers(pattern: &str, name: &str) -> bool {
    let Some(p) = pattern.strip_prefix("s3:") else {
        return false;
    };
    match p.strip_suffix('*') {
        Some(head) => name.starts_with(head),
        None => p == name,
    }
}

/// Whether two event type patterns can both cover one event.
fn events_overlap(a: &str, b: &str) -> bool {
    let stem = |p: &str| p.strip_suffix('*').map(str::to_owned);
    match (stem(a), stem(b)) {
        (Some(x), Some(y)) => x.starts_with(&y) || y.starts_with(&x),
        (Some(x), None) => b.starts_with(&x),
        (None, Some(y)) => a.starts_with(&y),
        (None, None) => a == b,
    }
}

impl EventRule {
    /// Whether the rule wants the event `name` of `key`.
    pub fn wants(&self, name: &str, key: &str) -> bool {
        key.starts_with(&self.prefix)
            && key.ends_with(&self.suffix)
            && self.events.iter().any(|e| covers(e, name))
    }

    /// Whether some key can match both rules' filters (AWS: "overlapping prefixes or suffixes
    /// for the same event type").
    fn filters_overlap(&self, o: &EventRule) -> bool {
        let prefixes = self.prefix.starts_with(&o.prefix) || o.prefix.starts_with(&self.prefix);
        let suffixes = self.suffix.ends_with(&o.suffix) || o.suffix.ends_with(&self.suffix);
        prefixes && suffixes
    }
}

impl Notifications {
    /// S3's checks of a PutBucketNotificationConfiguration document; `known` says whether a
    /// destination name is configured.
    pub fn validate(&self, known: &dyn Fn(&str) -> bool) -> Result<(), ConfigError> {
        if self.rules.len() > MAX_RULES {
            return invalid(format!(
                "A bucket may have at most {MAX_RULES} notification configurations."
            ));
        }
        let mut ids = std::collections::HashSet::new();
        for r in &self.rules {
            if r.events.is_empty() {
                return invalid("A notification configuration must name at least one event.");
            }
            if let Some(e) = r.events.iter().find(|e| !EVENT_TYPES.contains(&e.as_str())) {
                return invalid(format!("The event is not supported for notifications: {e}"));
            }
            if r.id.len() > 255 {
                return invalid("A notification configuration's Id is at most 255 characters.");
            }
            if !ids.insert(r.id.as_str()) {
                return invalid(format!(
                    "Two notification configurations have the same Id: {}",
                    r.id
                ));
            }
            if !known(&r.dest) {
                return invalid(format!(
                    "Unable to validate the following destination configurations: {}",
                    r.arn
                ));
            }
        }
        for (i, a) in self.rules.iter().enumerate() {
            for b in &self.rules[i + 1..] {
                let common_event = a
                    .events
                    .iter()
                    .any(|x| b.events.iter().any(|y| events_overlap(x, y)));
                if common_event && a.filters_overlap(b) {
                    return invalid(
                        "Configurations overlap. Configurations on the same bucket cannot share a common event type.",
                    );
                }
            }
        }
        Ok(())
    }

    pub fn encode(&self) -> String {
        serde_json::to_string(self).expect("notification configuration encodes")
    }

    pub fn decode(json: &str) -> Result<Notifications, serde_json::Error> {
        serde_json::from_str(json)
    }

    /// The destinations its rules name, each once.
    pub fn destinations(&self) -> Vec<String> {
        let mut d: Vec<String> = self.rules.iter().map(|r| r.dest.clone()).collect();
        d.sort();
        d.dedup();
        d
    }
}

/// Which door or worker a change came through (the event's `lode.door`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Door {
    S3,
    Posix,
    Lifecycle,
    Admin,
}

impl Door {
    pub fn as_str(self) -> &'static str {
        match self {
            Door::S3 => "s3",
            Door::Posix => "posix",
            Door::Lifecycle => "lifecycle",
            Door::Admin => "admin",
        }
    }
}

/// Who caused the changes of a request: set by the door around it ([`Origin::scope`]).
#[derive(Debug, Clone)]
pub struct Origin {
    pub door: Door,
    /// The user (access key or user name; `None`: anonymous).
    pub principal: Option<String>,
    pub source_ip: Option<String>,
    pub request_id: String,
    /// The S3 operation is a browser POST upload (`ObjectCreated:Post`).
    pub post: bool,
}

tokio::task_local! {
    static ORIGIN: std::cell::RefCell<Origin>;
}

impl Origin {
    pub fn new(door: Door) -> Self {
        Origin {
            door,
            principal: None,
            source_ip: None,
            request_id: String::new(),
            post: false,
        }
    }

    /// Runs `fut` as a request from this origin.
    pub async fn scope<F: Future>(self, fut: F) -> F::Output {
        ORIGIN.scope(std::cell::RefCell::new(self), fut).await
    }

    /// The current request's origin (`None` outside any).
    pub fn current() -> Option<Origin> {
        ORIGIN.try_with(|o| o.borrow().clone()).ok()
    }

    /// Changes the current request's origin (the S3 door learns its principal once the
    /// request is authenticated); nothing outside a request.
    pub fn update(f: impl FnOnce(&mut Origin)) {
        let _ = ORIGIN.try_with(|o| f(&mut o.borrow_mut()));
    }
}

/// What kind of operation a commit is, for the event's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum How {
    /// PutObject (or a POST upload, per the origin), an append, a file closed on the mount.
    Put,
    Copy,
    Complete,
    /// DeleteObject(s), an unlink on the mount.
    Delete,
    /// A rename: the source's removal and the target's creation.
    Rename,
    TaggingPut,
    TaggingDelete,
    AclPut,
    /// A lifecycle expiry.
    Expiration,
}

/// What the service arms a commit with: the bucket's rules, the origin, the operation.
pub(crate) struct Draft {
    pub rules: Arc<Notifications>,
    pub origin: Origin,
    pub how: How,
    pub region: String,
    pub owner: String,
    /// Which destinations got an entry (their workers are woken after the commit).
    pub hit: std::sync::Mutex<Vec<String>>,
}

impl Draft {
    /// The event name (without `s3:`) of `change` under this operation; `None`: none fires.
    fn name(&self, what: &What<'_>) -> Option<&'static str> {
        Some(match (self.how, what) {
            (How::Expiration, What::Removed { .. }) => "LifecycleExpiration:Delete",
            (How::Expiration, What::MarkerCreated { .. }) => {
                "LifecycleExpiration:DeleteMarkerCreated"
            }
            (_, What::Removed { .. }) => "ObjectRemoved:Delete",
            (_, What::MarkerCreated { .. }) => "ObjectRemoved:DeleteMarkerCreated",
            (How::Put | How::Rename, What::Written { .. }) if self.origin.post => {
                "ObjectCreated:Post"
            }
            (How::Put | How::Rename, What::Written { .. }) => "ObjectCreated:Put",
            (How::Copy, What::Written { .. }) => "ObjectCreated:Copy",
            (How::Complete, What::Written { .. }) => "ObjectCreated:CompleteMultipartUpload",
            (How::TaggingPut, What::Written { .. }) => "ObjectTagging:Put",
            (How::TaggingDelete, What::Written { .. }) => "ObjectTagging:Delete",
            (How::AclPut, What::Written { .. }) => "ObjectAcl:Put",
            (How::Delete | How::Expiration, What::Written { .. }) => return None,
        })
    }
}

impl EventDraft for Draft {
    fn render(&self, c: &Change<'_>, seq: u64) -> Vec<(String, Vec<u8>)> {
        let Some(name) = self.name(&c.what) else {
            return vec![];
        };
        let mut out = vec![];
        for rule in self.rules.rules.iter().filter(|r| r.wants(name, c.key)) {
            let record = record(self, rule, c, name, seq);
            let body = serde_json::json!({ "Records": [record] }).to_string();
            self.hit.lock().expect("hit").push(rule.dest.clone());
            out.push((rule.dest.clone(), body.into_bytes()));
        }
        out
    }
}

/// AWS's event record for `c` under `rule`.
fn record(d: &Draft, rule: &EventRule, c: &Change<'_>, name: &str, seq: u64) -> serde_json::Value {
    let mut object = serde_json::json!({
        "key": url_encode_key(c.key),
        "sequencer": format!("{seq:016X}"),
    });
    let version = match c.what {
        What::Written { record } => {
            object["size"] = record.size.into();
            object["eTag"] = record.etag.clone().into();
            record.version_id.clone()
        }
        What::Removed { version_id } | What::MarkerCreated { version_id } => {
            version_id.map(str::to_owned)
        }
    };
    if let Some(v) = version {
        object["versionId"] = v.into();
    }
    let version = if name.starts_with("ObjectCreated") || name.starts_with("ObjectRemoved") {
        "2.1"
    } else {
        "2.3"
    };
    let principal = d
        .origin
        .principal
        .clone()
        .unwrap_or_else(|| "anonymous".into());
    let mut lode = serde_json::json!({ "door": d.origin.door.as_str() });
    if d.how == How::Rename {
        lode["rename"] = true.into();
    }
    serde_json::json!({
        "eventVersion": version,
        "eventSource": "lode:s3",
        "awsRegion": d.region,
        "eventTime": iso8601_ms(crate::now_ms()),
        "eventName": name,
        "userIdentity": { "principalId": principal },
        "requestParameters": {
            "sourceIPAddress": d.origin.source_ip.clone().unwrap_or_default()
        },
        "responseElements": {
            "x-amz-request-id": d.origin.request_id,
            "x-amz-id-2": d.origin.request_id,
        },
        "s3": {
            "s3SchemaVersion": "1.0",
            "configurationId": rule.id,
            "bucket": {
                "name": c.bucket,
                "ownerIdentity": { "principalId": d.owner },
                "arn": format!("arn:aws:s3:::{}", c.bucket),
            },
            "object": object,
        },
        "lode": lode,
    })
}

/// AWS's `s3:TestEvent` message, sent to each destination when a configuration is set.
pub fn test_event(bucket: &str, request_id: &str) -> Vec<u8> {
    serde_json::json!({
        "Service": "Amazon S3",
        "Event": "s3:TestEvent",
        "Time": iso8601_ms(crate::now_ms()),
        "Bucket": bucket,
        "RequestId": request_id,
        "HostId": request_id,
    })
    .to_string()
    .into_bytes()
}

/// A key as AWS puts it in an event: form-URL-encoded (a space is `+`, `/` is `%2F`; letters,
/// digits and `.-_*` as they are).
pub fn url_encode_key(key: &str) -> String {
    let mut s = String::with_capacity(key.len());
    for b in key.bytes() {
        match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'.' | b'-' | b'_' | b'*' => {
                s.push(b as char)
            }
            b' ' => s.push('+'),
            _ => s.push_str(&format!("%{b:02X}")),
        }
    }
    s
}

/// `1970-01-01T00:00:00.000Z`.
fn iso8601_ms(ms: i64) -> String {
    let t = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    let f = time::macros::format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
    );
    t.format(&f).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(id: &str, events: &[&str], prefix: &str, suffix: &str) -> EventRule {
        EventRule {
            id: id.into(),
            kind: RuleKind::Queue,
            arn: arn_of("q", RuleKind::Queue),
            dest: "q".into(),
            events: events.iter().map(|e| e.to_string()).collect(),
            prefix: prefix.into(),
            suffix: suffix.into(),
        }
    }

    fn check(rules: Vec<EventRule>) -> Result<(), ConfigError> {
        Notifications { rules }.validate(&|d| d == "q")
    }

    #[test]
    fn configurations_are_checked_as_aws_checks_them() {
        assert!(check(vec![rule("a", &["s3:ObjectCreated:*"], "in/", "")]).is_ok());
        // Disjoint prefixes, or disjoint events, may share.
        assert!(
            check(vec![
                rule("a", &["s3:ObjectCreated:*"], "in/", ""),
                rule("b", &["s3:ObjectCreated:*"], "out/", ""),
                rule("c", &["s3:ObjectRemoved:*"], "", ""),
            ])
            .is_ok()
        );
        assert!(
            check(vec![
                rule("a", &["s3:ObjectCreated:Put"], "", ".jpg"),
                rule("b", &["s3:ObjectCreated:Put"], "", ".png"),
            ])
            .is_ok()
        );
        for bad in [
            vec![
                rule("a", &["s3:ObjectCreated:*"], "in/", ""),
                rule("b", &["s3:ObjectCreated:Put"], "in/x", ""),
            ],
            vec![
                rule("a", &["s3:ObjectCreated:*"], "", ".jpg"),
                rule("b", &["s3:ObjectCreated:Copy"], "", "x.jpg"),
            ],
            vec![rule("a", &["s3:ObjectCreated:Bogus"], "", "")],
            vec![rule("a", &[], "", "")],
            vec![
                rule("a", &["s3:ObjectCreated:*"], "", ""),
                rule("a", &["s3:ObjectRemoved:*"], "", ""),
            ],
        ] {
            let e = check(bad).unwrap_err();
            assert_eq!(e.code, "InvalidArgument", "{e}");
        }
        let mut unknown = rule("a", &["s3:ObjectCreated:*"], "", "");
        unknown.dest = "nope".into();
        assert!(
            check(vec![unknown])
                .unwrap_err()
                .message
                .contains("destination")
        );
    }

    #[test]
    fn arns_name_their_destination_by_kind() {
        assert_eq!(
            destination_of("arn:lode:sqs:::q", RuleKind::Queue),
            Some("q")
        );
        assert_eq!(
            destination_of("arn:aws:sns:us-east-1:123:t", RuleKind::Topic),
            Some("t")
        );
        assert_eq!(destination_of("arn:lode:sns:::q", RuleKind::Queue), None);
        assert_eq!(destination_of("arn:lode:lambda:::q", RuleKind::Queue), None);
        assert_eq!(destination_of("q", RuleKind::Queue), None);
    }

    #[test]
    fn event_names_and_keys_are_rendered_as_aws_renders_them() {
        assert!(covers("s3:ObjectCreated:*", "ObjectCreated:Copy"));
        assert!(!covers("s3:ObjectCreated:Put", "ObjectCreated:Copy"));
        assert!(!covers("s3:ObjectRemoved:*", "ObjectCreated:Put"));
        assert_eq!(
            url_encode_key("a dir/red flower+1.jpg"),
            "a+dir%2Fred+flower%2B1.jpg"
        );
        assert_eq!(url_encode_key("é"), "%C3%A9");
        assert_eq!(iso8601_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso8601_ms(1_795_000_000_123), "2026-11-18T11:06:40.123Z");
    }
}
