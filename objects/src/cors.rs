//! Bucket CORS rules (Put/Get/DeleteBucketCors) and how a browser's request is matched
//! against them: the first rule whose origin and method (and, for a preflight, every requested
//! header) match decides, as on S3. A bucket setting like the others, stored as JSON, so every
//! gateway answers with the same rules.

use serde::{Deserialize, Serialize};

/// The bucket setting the rules are stored under.
pub const SETTING: &str = "cors";
/// S3's limit on the number of rules.
pub const MAX_RULES: usize = 100;
/// The methods a rule may allow.
const METHODS: &[&str] = &["GET", "PUT", "HEAD", "POST", "DELETE"];

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CorsRule {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub allowed_methods: Vec<String>,
    pub allowed_origins: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_headers: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expose_headers: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_age_seconds: Option<i32>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cors {
    pub rules: Vec<CorsRule>,
}

/// A refused configuration: S3's error code for it and the message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct CorsError {
    /// `MalformedXML` or `InvalidRequest`.
    pub code: &'static str,
    pub message: String,
}

fn refuse<T>(code: &'static str, message: String) -> Result<T, CorsError> {
    Err(CorsError { code, message })
}

impl Cors {
    /// S3's checks of a PutBucketCors document.
    pub fn validate(&self) -> Result<(), CorsError> {
        if self.rules.is_empty() {
            return refuse(
                "MalformedXML",
                "The XML you provided was not well-formed or did not validate against our published schema".into(),
            );
        }
        if self.rules.len() > MAX_RULES {
            return refuse(
                "InvalidRequest",
                format!(
                    "The number of CORS rules should not exceed allowed limit of {MAX_RULES} rules."
                ),
            );
        }
        for r in &self.rules {
            if r.allowed_methods.is_empty() || r.allowed_origins.is_empty() {
                return refuse(
                    "MalformedXML",
                    "The XML you provided was not well-formed or did not validate against our published schema".into(),
                );
            }
            if r.id.as_ref().is_some_and(|id| id.len() > 255) {
                return refuse(
                    "InvalidRequest",
                    "The ID of a CORS rule is at most 255 characters.".into(),
                );
            }
            if let Some(m) = r
                .allowed_methods
                .iter()
                .find(|m| !METHODS.contains(&m.as_str()))
            {
                return refuse(
                    "InvalidRequest",
                    format!(
                        "Found unsupported HTTP method in CORS config. Unsupported method is {m}"
                    ),
                );
            }
            if let Some(o) = r
                .allowed_origins
                .iter()
                .find(|o| o.matches('*').count() > 1)
            {
                return refuse(
                    "InvalidRequest",
                    format!("AllowedOrigin \"{o}\" can not have more than one wildcard."),
                );
            }
            if let Some(h) = r
                .allowed_headers
                .iter()
                .find(|h| h.matches('*').count() > 1)
            {
                return refuse(
                    "InvalidRequest",
                    format!("AllowedHeader \"{h}\" can not have more than one wildcard."),
                );
            }
            if r.max_age_seconds.is_some_and(|s| s < 0) {
                return refuse(
                    "InvalidRequest",
                    "MaxAgeSeconds must not be negative.".into(),
                );
            }
        }
        Ok(())
    }

    pub fn encode(&self) -> String {
        serde_json::to_string(self).expect("CORS rules serialize")
    }

    pub fn decode(json: &str) -> Result<Cors, serde_json::Error> {
        serde_json::from_str(json)
    }

    /// The rule that allows a request from `origin` with `method` and the request headers
    /// `headers` (a preflight's `Access-Control-Request-Headers`; none for an actual request).
    pub fn find(&self, origin: &str, method: &str, headers: &[&str]) -> Option<&CorsRule> {
        self.rules.iter().find(|r| {
            r.allowed_origins.iter().any(|o| one_star(o, origin, false))
                && r.allowed_methods.iter().any(|m| m == method)
                && headers
                    .iter()
                    .all(|h| r.allowed_headers.iter().any(|a| one_star(a, h, true)))
        })
    }
}

impl CorsRule {
    /// What `Access-Control-Allow-Origin` answers: `*` for a rule open to every origin (and
    /// then no credentials), else the request's origin.
    pub fn allow_origin<'a>(&self, origin: &'a str) -> (&'a str, bool) {
        if self.allowed_origins.iter().any(|o| o == "*") {
            ("*", false)
        } else {
            (origin, true)
        }
    }
}

/// `pattern` with at most one `*` against `s` (`ignore_case` for header names).
fn one_star(pattern: &str, s: &str, ignore_case: bool) -> bool {
    let eq = |a: &str, b: &str| {
        if ignore_case {
            a.eq_ignore_ascii_case(b)
        } else {
            a == b
        }
    };
    match pattern.split_once('*') {
        None => eq(pattern, s),
        Some((pre, post)) => {
            s.len() >= pre.len() + post.len()
                && s.is_char_boundary(pre.len())
                && s.is_char_boundary(s.len() - post.len())
                && eq(&s[..pre.len()], pre)
                && eq(&s[s.len() - post.len()..], post)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(methods: &[&str], origins: &[&str]) -> CorsRule {
        CorsRule {
            allowed_methods: methods.iter().map(|s| s.to_string()).collect(),
            allowed_origins: origins.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn origins_match_with_one_wildcard_first_rule_wins() {
        let c = Cors {
            rules: vec![
                rule(&["GET"], &["*suffix"]),
                rule(&["GET"], &["start*end"]),
                rule(&["GET"], &["prefix*"]),
                rule(&["PUT"], &["*.put"]),
            ],
        };
        c.validate().unwrap();
        let hit = |o: &str, m: &str| c.find(o, m, &[]).is_some();
        assert!(hit("foo.suffix", "GET") && !hit("foo.suffix", "PUT"));
        assert!(hit("startend", "GET") && hit("start12end", "GET") && !hit("0start12end", "GET"));
        assert!(hit("prefix.suffix", "GET") && !hit("bla.prefix", "GET"));
        assert!(hit("foo.put", "PUT") && !hit("foo.put", "GET"));
        assert!(!hit("foo.bar", "GET"));
    }

    #[test]
    fn preflight_headers_must_all_be_allowed() {
        let mut r = rule(&["PUT"], &["https://app.example"]);
        r.allowed_headers = vec!["content-type".into(), "x-amz-meta-*".into()];
        let c = Cors { rules: vec![r] };
        let o = "https://app.example";
        assert!(
            c.find(o, "PUT", &["Content-Type", "x-amz-meta-label"])
                .is_some()
        );
        assert!(
            c.find(o, "PUT", &["content-type", "authorization"])
                .is_none()
        );
        let any = Cors {
            rules: vec![CorsRule {
                allowed_headers: vec!["*".into()],
                ..rule(&["GET"], &["*"])
            }],
        };
        let r = any.find("http://x", "GET", &["anything"]).unwrap();
        assert_eq!(r.allow_origin("http://x"), ("*", false));
    }

    #[test]
    fn bad_configurations_are_refused_with_s3s_codes() {
        let bad = |c: Cors| c.validate().unwrap_err();
        assert_eq!(bad(Cors::default()).code, "MalformedXML");
        assert_eq!(
            bad(Cors {
                rules: vec![rule(&[], &["*"])]
            })
            .code,
            "MalformedXML"
        );
        let e = bad(Cors {
            rules: vec![rule(&["PATCH"], &["*"])],
        });
        assert!(e.code == "InvalidRequest" && e.message.contains("PATCH"));
        let e = bad(Cors {
            rules: vec![rule(&["GET"], &["*.a.*"])],
        });
        assert!(e.message.contains("more than one wildcard"));
        let mut h = rule(&["GET"], &["*"]);
        h.allowed_headers = vec!["x-*-*".into()];
        assert!(
            bad(Cors { rules: vec![h] })
                .message
                .contains("AllowedHeader")
        );
        let many = Cors {
            rules: vec![rule(&["GET"], &["*"]); MAX_RULES + 1],
        };
        assert_eq!(bad(many).code, "InvalidRequest");
        let c = Cors {
            rules: vec![rule(&["GET", "PUT"], &["*"])],
        };
        assert_eq!(Cors::decode(&c.encode()).unwrap(), c);
    }
}
