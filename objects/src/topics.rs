//! Topics: event destinations made through the SNS-compatible API (what RGW offers:
//! `CreateTopic` with a `push-endpoint` attribute, `ListTopics`, `GetTopicAttributes`,
//! `DeleteTopic`), beside the operator's `[notify.<name>]`. A topic is a record in the catalog's
//! system key space, so every gateway of a cluster sees it; each gateway re-reads them every
//! [`SYNC_EVERY`] (and at once after a change it made) and runs a delivery worker per topic.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The system keys of topics: `topic\0<name>`.
pub const PREFIX: &[u8] = b"topic\0";
/// How often a gateway reads the topics again (a topic made through another gateway).
pub const SYNC_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Topic {
    pub name: String,
    /// As given (`push-endpoint`, `amqp-exchange`, `OpaqueData`, ...).
    pub attributes: BTreeMap<String, String>,
    /// The user who made it.
    pub owner: String,
}

impl Topic {
    pub fn key(name: &str) -> Vec<u8> {
        let mut k = PREFIX.to_vec();
        k.extend_from_slice(name.as_bytes());
        k
    }

    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a topic encodes")
    }

    pub fn decode(b: &[u8]) -> Option<Self> {
        serde_json::from_slice(b).ok()
    }

    /// AWS's rule for topic names: 1 to 256 letters, digits, `-` and `_`.
    pub fn valid_name(name: &str) -> bool {
        (1..=256).contains(&name.len())
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    }

    /// `push-endpoint`, or empty.
    pub fn endpoint(&self) -> &str {
        self.attributes
            .get("push-endpoint")
            .map_or("", String::as_str)
    }
}

/// `url` without its secret, for answers and logs: `scheme://user:…@host` for a user and
/// password, `scheme://…@host` for a userinfo of one part (a NATS token, say, is a secret too).
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let auth = &url[s + 3..at];
            match auth.split_once(':') {
                Some((user, _)) => format!("{}://{user}:…@{}", &url[..s], &url[at + 1..]),
                None => format!("{}://…@{}", &url[..s], &url[at + 1..]),
            }
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_keys_and_redaction() {
        assert!(Topic::valid_name("jobs_1-a"));
        assert!(
            !Topic::valid_name("")
                && !Topic::valid_name("a.b")
                && !Topic::valid_name(&"x".repeat(257))
        );
        let t = Topic {
            name: "t".into(),
            attributes: [("push-endpoint".to_owned(), "http://h/".to_owned())].into(),
            owner: "root".into(),
        };
        assert_eq!(Topic::decode(&t.encode()), Some(t.clone()));
        assert_eq!(t.endpoint(), "http://h/");
        assert_eq!(Topic::key("t"), b"topic\0t");
        assert_eq!(redact("amqp://u:secret@h:5672/v"), "amqp://u:…@h:5672/v");
        assert_eq!(redact("http://h/x"), "http://h/x");
        assert_eq!(redact("nats://s3cr3ttoken@h:4222"), "nats://…@h:4222");
    }
}
