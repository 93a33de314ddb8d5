//! Bucket event notifications: the configuration (Put/GetBucketNotificationConfiguration, a
//! bucket setting like the others), who caused a change ([`Origin`], set by the doors), and
//! the AWS event record the service renders into the outbox in the same commit as the change
//! (`lode_catalog::events`). Delivery is `event_delivery`'s.

use std::borrow::Cow;
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

pub use crate::notify::Door;

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

    /// The current request's door (the admin's outside any request).
    pub fn current_door() -> Door {
        ORIGIN.try_with(|o| o.borrow().door).unwrap_or(Door::Admin)
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
    /// A change S3 makes no event of: metadata changed in place on the mount (mode, owner,
    /// times), retention or legal hold set, a key re-wrapped. Announced all the same.
    Meta,
}

/// What the service arms a commit with: the bucket's rules, the origin, the operation.
pub(crate) struct Draft {
    pub rules: Arc<Notifications>,
    pub origin: Origin,
    pub how: How,
    pub region: String,
    pub owner: String,
    /// Which destinations got an entry (their workers are woken after the commit).
    pub hit: std::sync::Mutex<Vec<(String, u64)>>,
    /// The changes the commit made, announced once it applied (`None`: nobody listens, or
    /// the caller announces coarser ones). A commit that ran again may add those of its lost
    /// attempt: an announcement means "look again", never "this is the state".
    pub seen: Option<std::sync::Mutex<Vec<crate::notify::ObjectChange>>>,
}

impl Draft {
    /// The event name (without `s3:`) of `change` under this operation; `None`: none fires.
    fn name(&self, what: &What<'_>) -> Option<&'static str> {
        Some(match (self.how, what) {
            (How::Meta, _) => return None,
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
        if let Some(seen) = &self.seen {
            let change = crate::notify::ObjectChange::of(c, self.origin.door);
            let mut seen = seen.lock().expect("seen");
            if !seen.contains(&change) {
                seen.push(change);
            }
        }
        let Some(name) = self.name(&c.what) else {
            return vec![];
        };
        let mut out = vec![];
        for rule in self.rules.rules.iter().filter(|r| r.wants(name, c.key)) {
            let body = stored(self, rule, c, name, seq);
            self.hit.lock().expect("hit").push((rule.dest.clone(), seq));
            out.push((rule.dest.clone(), body));
        }
        out
    }
}

/// AWS's event record (one of `Records`), serialized as it is: field names are AWS's.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Record<'a> {
    event_version: &'a str,
    event_source: &'a str,
    aws_region: &'a str,
    event_time: String,
    event_name: &'a str,
    user_identity: Principal<'a>,
    request_parameters: RequestParameters<'a>,
    response_elements: ResponseElements<'a>,
    s3: S3Entity<'a>,
    lode: LodeFields,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Principal<'a> {
    principal_id: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct RequestParameters<'a> {
    #[serde(rename = "sourceIPAddress")]
    source_ip_address: &'a str,
}

#[derive(Serialize)]
struct ResponseElements<'a> {
    #[serde(rename = "x-amz-request-id")]
    request_id: &'a str,
    #[serde(rename = "x-amz-id-2")]
    id_2: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct S3Entity<'a> {
    s3_schema_version: &'a str,
    configuration_id: &'a str,
    bucket: BucketEntity<'a>,
    object: ObjectEntity<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct BucketEntity<'a> {
    name: &'a str,
    owner_identity: Principal<'a>,
    arn: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ObjectEntity<'a> {
    key: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    size: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    e_tag: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    version_id: Option<&'a str>,
    sequencer: String,
}

#[derive(Serialize)]
struct LodeFields {
    door: &'static str,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    rename: bool,
}

/// An event as the outbox keeps it: what its message needs that is not constant, under short
/// names (a third of the message's size: the outbox entry is written with every change, in
/// the same commit). [`expand`] makes the message from it at delivery.
#[derive(Serialize, Deserialize)]
struct Stored<'a> {
    /// The event name (`ObjectCreated:Put`; `s3:TestEvent` for a test event).
    #[serde(rename = "n", borrow)]
    name: Cow<'a, str>,
    #[serde(rename = "b", borrow)]
    bucket: Cow<'a, str>,
    #[serde(rename = "k", borrow, default)]
    key: Cow<'a, str>,
    #[serde(rename = "s", default, skip_serializing_if = "Option::is_none")]
    size: Option<u64>,
    #[serde(rename = "e", borrow, default, skip_serializing_if = "Option::is_none")]
    etag: Option<Cow<'a, str>>,
    #[serde(rename = "v", borrow, default, skip_serializing_if = "Option::is_none")]
    version_id: Option<Cow<'a, str>>,
    #[serde(rename = "q", default)]
    seq: u64,
    /// When the change was committed (ms since the epoch).
    #[serde(rename = "t")]
    time_ms: i64,
    #[serde(rename = "p", borrow, default)]
    principal: Cow<'a, str>,
    #[serde(rename = "i", borrow, default)]
    source_ip: Cow<'a, str>,
    #[serde(rename = "r", borrow, default)]
    request_id: Cow<'a, str>,
    #[serde(rename = "c", borrow, default)]
    config_id: Cow<'a, str>,
    #[serde(rename = "o", borrow, default)]
    owner: Cow<'a, str>,
    #[serde(rename = "g", borrow, default)]
    region: Cow<'a, str>,
    #[serde(rename = "d", borrow, default)]
    door: Cow<'a, str>,
    #[serde(rename = "m", default, skip_serializing_if = "std::ops::Not::not")]
    rename: bool,
}

/// The outbox entry for `c` under `rule`.
fn stored(d: &Draft, rule: &EventRule, c: &Change<'_>, name: &str, seq: u64) -> Vec<u8> {
    let (size, etag, version_id) = match c.what {
        What::Written { record } => (
            Some(record.size),
            Some(record.etag.as_str()),
            record.version_id.as_deref(),
        ),
        What::Removed { version_id } | What::MarkerCreated { version_id } => {
            (None, None, version_id)
        }
    };
    let e = Stored {
        name: Cow::Borrowed(name),
        bucket: Cow::Borrowed(c.bucket),
        key: Cow::Borrowed(c.key),
        size,
        etag: etag.map(Cow::Borrowed),
        version_id: version_id.map(Cow::Borrowed),
        seq,
        time_ms: crate::now_ms(),
        principal: Cow::Borrowed(d.origin.principal.as_deref().unwrap_or("anonymous")),
        source_ip: Cow::Borrowed(d.origin.source_ip.as_deref().unwrap_or_default()),
        request_id: Cow::Borrowed(&d.origin.request_id),
        config_id: Cow::Borrowed(&rule.id),
        owner: Cow::Borrowed(&d.owner),
        region: Cow::Borrowed(&d.region),
        door: Cow::Borrowed(d.origin.door.as_str()),
        rename: d.how == How::Rename,
    };
    serde_json::to_vec(&e).expect("an event encodes")
}

/// The message an outbox entry stands for: AWS's `{"Records": [record]}`, or its
/// `s3:TestEvent` message. An entry that does not decode is sent as it is (never dropped).
pub fn expand(entry: &[u8]) -> Vec<u8> {
    let Ok(e) = serde_json::from_slice::<Stored<'_>>(entry) else {
        return entry.to_vec();
    };
    let time = iso8601_ms(e.time_ms);
    if e.name == "s3:TestEvent" {
        return serde_json::to_vec(&serde_json::json!({
            "Service": "Amazon S3",
            "Event": "s3:TestEvent",
            "Time": time,
            "Bucket": e.bucket,
            "RequestId": e.request_id,
            "HostId": e.request_id,
        }))
        .expect("a test event encodes");
    }
    let created_or_removed =
        e.name.starts_with("ObjectCreated") || e.name.starts_with("ObjectRemoved");
    let record = Record {
        event_version: if created_or_removed { "2.1" } else { "2.3" },
        event_source: "lode:s3",
        aws_region: &e.region,
        event_time: time,
        event_name: &e.name,
        user_identity: Principal {
            principal_id: &e.principal,
        },
        request_parameters: RequestParameters {
            source_ip_address: &e.source_ip,
        },
        response_elements: ResponseElements {
            request_id: &e.request_id,
            id_2: &e.request_id,
        },
        s3: S3Entity {
            s3_schema_version: "1.0",
            configuration_id: &e.config_id,
            bucket: BucketEntity {
                name: &e.bucket,
                owner_identity: Principal {
                    principal_id: &e.owner,
                },
                arn: format!("arn:aws:s3:::{}", e.bucket),
            },
            object: ObjectEntity {
                key: url_encode_key(&e.key),
                size: e.size,
                e_tag: e.etag.as_deref(),
                version_id: e.version_id.as_deref(),
                sequencer: format!("{:016X}", e.seq),
            },
        },
        lode: LodeFields {
            door: door_name(&e.door),
            rename: e.rename,
        },
    };
    #[derive(Serialize)]
    #[serde(rename_all = "PascalCase")]
    struct Message<'a> {
        records: [Record<'a>; 1],
    }
    serde_json::to_vec(&Message { records: [record] }).expect("an event record encodes")
}

fn door_name(d: &str) -> &'static str {
    [Door::S3, Door::Posix, Door::Lifecycle, Door::Admin]
        .into_iter()
        .map(Door::as_str)
        .find(|n| *n == d)
        .unwrap_or("admin")
}

/// AWS's `s3:TestEvent`, as an outbox entry, sent to each destination when a configuration is
/// set.
pub fn test_event(bucket: &str, request_id: &str) -> Vec<u8> {
    let e = Stored {
        name: Cow::Borrowed("s3:TestEvent"),
        bucket: Cow::Borrowed(bucket),
        key: Cow::Borrowed(""),
        size: None,
        etag: None,
        version_id: None,
        seq: 0,
        time_ms: crate::now_ms(),
        principal: Cow::Borrowed(""),
        source_ip: Cow::Borrowed(""),
        request_id: Cow::Borrowed(request_id),
        config_id: Cow::Borrowed(""),
        owner: Cow::Borrowed(""),
        region: Cow::Borrowed(""),
        door: Cow::Borrowed(""),
        rename: false,
    };
    serde_json::to_vec(&e).expect("a test event encodes")
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

    #[test]
    fn an_outbox_entry_expands_to_awss_record() {
        let rules = Arc::new(Notifications {
            rules: vec![rule("cfg", &["s3:ObjectCreated:*"], "", "")],
        });
        let mut origin = Origin::new(Door::Posix);
        origin.principal = Some("alice".into());
        origin.request_id = "RID".into();
        let d = Draft {
            rules,
            origin,
            how: How::Rename,
            region: "eu-1".into(),
            owner: "bob".into(),
            hit: Default::default(),
            seen: None,
        };
        let mut rec = lode_catalog::delete_marker(None);
        rec.delete_marker = false;
        rec.size = 7;
        rec.etag = "abc".into();
        let c = Change {
            bucket: "bk",
            key: "d/\"x\" é",
            what: What::Written { record: &rec },
        };
        let out = d.render(&c, 0x1234);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].0, "q");
        let m: serde_json::Value = serde_json::from_slice(&expand(&out[0].1)).unwrap();
        let r = &m["Records"][0];
        assert_eq!(r["eventName"], "ObjectCreated:Put");
        assert_eq!(r["eventVersion"], "2.1");
        assert_eq!(r["awsRegion"], "eu-1");
        assert_eq!(r["userIdentity"]["principalId"], "alice");
        assert_eq!(r["responseElements"]["x-amz-request-id"], "RID");
        assert_eq!(r["s3"]["configurationId"], "cfg");
        assert_eq!(r["s3"]["bucket"]["ownerIdentity"]["principalId"], "bob");
        assert_eq!(r["s3"]["object"]["key"], "d%2F%22x%22+%C3%A9");
        assert_eq!(r["s3"]["object"]["size"], 7);
        assert_eq!(r["s3"]["object"]["eTag"], "abc");
        assert_eq!(r["s3"]["object"]["sequencer"], "0000000000001234");
        assert!(r["s3"]["object"].get("versionId").is_none());
        assert_eq!(r["lode"]["door"], "posix");
        assert_eq!(r["lode"]["rename"], true);
        // The entry is much smaller than the message.
        assert!(out[0].1.len() * 2 < expand(&out[0].1).len());
        let t: serde_json::Value = serde_json::from_slice(&expand(&test_event("bk", "R"))).unwrap();
        assert_eq!(t["Event"], "s3:TestEvent");
        assert_eq!(t["Bucket"], "bk");
        // Not an entry of ours: sent as it is.
        assert_eq!(expand(b"raw"), b"raw");
    }
}
