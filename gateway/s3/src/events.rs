//! The S3 door's side of bucket event notifications: Put/GetBucketNotificationConfiguration
//! documents to and from the object service's model (`lode_objects::bucket_events`).

use lode_objects::bucket_events::{EventRule, Notifications, RuleKind, destination_of};
use s3s::dto::{
    Event, FilterRule, FilterRuleName, NotificationConfiguration, NotificationConfigurationFilter,
    QueueConfiguration, S3KeyFilter, TopicConfiguration,
};
use s3s::{S3Error, S3ErrorCode};

fn invalid(message: impl Into<String>) -> S3Error {
    S3Error::with_message(S3ErrorCode::InvalidArgument, message.into())
}

/// The prefix and suffix of a configuration's filter: at most one of each.
fn filter_of(f: Option<NotificationConfigurationFilter>) -> Result<(String, String), S3Error> {
    let (mut prefix, mut suffix) = (None, None);
    let rules = f.and_then(|f| f.key).and_then(|k| k.filter_rules);
    for r in rules.unwrap_or_default() {
        let name = r.name.as_ref().map(|n| n.as_str().to_ascii_lowercase());
        let value = r.value.unwrap_or_default();
        if value.len() > 1024 {
            return Err(invalid("A filter rule's value is at most 1024 characters."));
        }
        let slot = match name.as_deref() {
            Some("prefix") => &mut prefix,
            Some("suffix") => &mut suffix,
            _ => {
                return Err(invalid("filter rule name must be either prefix or suffix"));
            }
        };
        if slot.replace(value).is_some() {
            return Err(invalid(format!(
                "Cannot specify more than one {} rule in a filter.",
                name.unwrap_or_default()
            )));
        }
    }
    Ok((prefix.unwrap_or_default(), suffix.unwrap_or_default()))
}

/// A new configuration's id when none is given (AWS makes one up too).
fn generated_id(kind: RuleKind, n: usize) -> String {
    let k = match kind {
        RuleKind::Queue => "queue",
        RuleKind::Topic => "topic",
    };
    format!("{k}-{n}-{:x}", lode_objects::now_ms())
}

fn rule(
    kind: RuleKind,
    n: usize,
    id: Option<String>,
    arn: String,
    events: Vec<Event>,
    filter: Option<NotificationConfigurationFilter>,
) -> Result<EventRule, S3Error> {
    let (prefix, suffix) = filter_of(filter)?;
    let dest = destination_of(&arn, kind)
        .ok_or_else(|| {
            invalid(format!(
                "Unable to validate the following destination configurations: {arn}"
            ))
        })?
        .to_owned();
    Ok(EventRule {
        id: id
            .filter(|i| !i.is_empty())
            .unwrap_or_else(|| generated_id(kind, n)),
        kind,
        arn,
        dest,
        events: events.iter().map(|e| e.as_ref().to_owned()).collect(),
        prefix,
        suffix,
    })
}

/// A PutBucketNotificationConfiguration document as the service's model. Lambda and
/// EventBridge destinations are refused as AWS refuses a destination it cannot validate.
pub fn from_dto(c: NotificationConfiguration) -> Result<Notifications, S3Error> {
    if let Some(l) = c.lambda_function_configurations.filter(|l| !l.is_empty()) {
        return Err(invalid(format!(
            "Unable to validate the following destination configurations: {}",
            l[0].lambda_function_arn
        )));
    }
    if c.event_bridge_configuration.is_some() {
        return Err(invalid(
            "Unable to validate the following destination configurations: EventBridge is not a destination Lode delivers to",
        ));
    }
    let mut rules = vec![];
    for q in c.queue_configurations.unwrap_or_default() {
        let n = rules.len();
        rules.push(rule(
            RuleKind::Queue,
            n,
            q.id,
            q.queue_arn,
            q.events,
            q.filter,
        )?);
    }
    for t in c.topic_configurations.unwrap_or_default() {
        let n = rules.len();
        rules.push(rule(
            RuleKind::Topic,
            n,
            t.id,
            t.topic_arn,
            t.events,
            t.filter,
        )?);
    }
    Ok(Notifications { rules })
}

fn filter_dto(r: &EventRule) -> Option<NotificationConfigurationFilter> {
    let mut rules = vec![];
    for (name, v) in [
        (FilterRuleName::PREFIX, &r.prefix),
        (FilterRuleName::SUFFIX, &r.suffix),
    ] {
        if !v.is_empty() {
            rules.push(FilterRule {
                name: Some(FilterRuleName::from_static(name)),
                value: Some(v.clone()),
            });
        }
    }
    let empty = rules.is_empty();
    let filter = NotificationConfigurationFilter {
        key: Some(S3KeyFilter {
            filter_rules: Some(rules),
        }),
    };
    (!empty).then_some(filter)
}

/// The stored configuration as GetBucketNotificationConfiguration shows it: (queue, topic)
/// configurations, `None` for an empty list.
pub fn to_dto(
    n: &Notifications,
) -> (
    Option<Vec<QueueConfiguration>>,
    Option<Vec<TopicConfiguration>>,
) {
    let events = |r: &EventRule| r.events.iter().map(|e| Event::from(e.clone())).collect();
    let queues: Vec<QueueConfiguration> = n
        .rules
        .iter()
        .filter(|r| r.kind == RuleKind::Queue)
        .map(|r| QueueConfiguration {
            events: events(r),
            filter: filter_dto(r),
            id: Some(r.id.clone()),
            queue_arn: r.arn.clone(),
        })
        .collect();
    let topics: Vec<TopicConfiguration> = n
        .rules
        .iter()
        .filter(|r| r.kind == RuleKind::Topic)
        .map(|r| TopicConfiguration {
            events: events(r),
            filter: filter_dto(r),
            id: Some(r.id.clone()),
            topic_arn: r.arn.clone(),
        })
        .collect();
    (
        (!queues.is_empty()).then_some(queues),
        (!topics.is_empty()).then_some(topics),
    )
}
