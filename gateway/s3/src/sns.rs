//! The SNS-compatible topic API (RGW's): `CreateTopic` (with `push-endpoint` and the other
//! attributes RGW takes), `ListTopics`, `GetTopicAttributes`, `SetTopicAttributes` and
//! `DeleteTopic`, as form POSTs to `/` signed for the `sns` service, so that boto3's `sns`
//! client pointed at Lode manages topics as it does against RGW. The topics themselves are the
//! object service's ([`lode_objects::topics`]).
//!
//! s3s checks the signatures of S3 and STS only, so this door checks its own (SigV4 with
//! the `sns` service, the body's hash computed here, the date within 15 minutes), before s3s
//! sees the request.
//!
//! Making, changing or removing a topic is root's: a topic makes Lode send requests to the
//! address it names. Any signed-in user may list and read them; passwords in endpoints are
//! never shown.

use std::collections::BTreeMap;

use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode, Uri};
use http_body_util::BodyExt;
use lode_objects::topics::{Topic, redact};
use s3s::Body;

use lode_objects::users::Users;

/// At most this much of a request body is read.
const BODY_LIMIT: usize = 64 << 10;
const XMLNS: &str = "https://sns.amazonaws.com/doc/2010-03-31/";

/// A request of the topic API: a POST to `/` signed for the `sns` service.
pub fn is_sns(method: &Method, uri: &Uri, headers: &HeaderMap) -> bool {
    method == Method::POST
        && uri.path() == "/"
        && headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|a| a.contains("/sns/aws4_request"))
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// An SNS (query protocol) error answer.
fn error(status: StatusCode, code: &str, message: &str, request_id: &str) -> http::Response<Body> {
    let sender = if status.is_server_error() {
        "Receiver"
    } else {
        "Sender"
    };
    let xml = format!(
        "<?xml version=\"1.0\"?><ErrorResponse xmlns=\"{XMLNS}\"><Error><Type>{sender}</Type><Code>{code}</Code><Message>{}</Message></Error><RequestId>{request_id}</RequestId></ErrorResponse>",
        xml_escape(message)
    );
    http::Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, "text/xml")
        .body(Body::from(xml))
        .expect("a response")
}

fn answer(action: &str, result: &str, request_id: &str) -> http::Response<Body> {
    let xml = format!(
        "<?xml version=\"1.0\"?><{action}Response xmlns=\"{XMLNS}\">{result}<ResponseMetadata><RequestId>{request_id}</RequestId></ResponseMetadata></{action}Response>"
    );
    http::Response::builder()
        .header(http::header::CONTENT_TYPE, "text/xml")
        .body(Body::from(xml))
        .expect("a response")
}

/// The signing key of SigV4 for `date`/`region`/`service`.
fn signing_key(secret: &str, date: &str, region: &str, service: &str) -> ring::hmac::Key {
    use ring::hmac;
    let mac = |k: &[u8], d: &str| hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, k), d.as_bytes());
    let k = mac(format!("AWS4{secret}").as_bytes(), date);
    let k = mac(k.as_ref(), region);
    let k = mac(k.as_ref(), service);
    let k = mac(k.as_ref(), "aws4_request");
    hmac::Key::new(hmac::HMAC_SHA256, k.as_ref())
}

/// The access key a request's Authorization header names.
fn access_key_of(headers: &HeaderMap) -> Option<String> {
    let auth = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    let cred = auth.split("Credential=").nth(1)?;
    Some(cred.split('/').next()?.to_owned())
}

/// Checks a request's SigV4 header signature over `body`; returns the access key.
fn verify(
    headers: &HeaderMap,
    uri: &Uri,
    body: &[u8],
    secret_of: impl Fn(&str) -> Option<String>,
) -> Result<String, (StatusCode, &'static str, String)> {
    let bad = |m: &str| (StatusCode::FORBIDDEN, "SignatureDoesNotMatch", m.to_owned());
    let auth = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| bad("no Authorization header"))?;
    let rest = auth
        .strip_prefix("AWS4-HMAC-SHA256 ")
        .ok_or_else(|| bad("only AWS4-HMAC-SHA256 signatures are taken"))?;
    let mut cred = "";
    let mut signed = "";
    let mut sig = "";
    for part in rest.split(',') {
        let part = part.trim();
        if let Some(v) = part.strip_prefix("Credential=") {
            cred = v;
        } else if let Some(v) = part.strip_prefix("SignedHeaders=") {
            signed = v;
        } else if let Some(v) = part.strip_prefix("Signature=") {
            sig = v;
        }
    }
    let scope: Vec<&str> = cred.split('/').collect();
    let [access_key, date, region, service, "aws4_request"] = scope[..] else {
        return Err(bad("malformed credential scope"));
    };
    if service != "sns" || signed.is_empty() || sig.is_empty() {
        return Err(bad("malformed Authorization header"));
    }
    let amz_date = headers
        .get("x-amz-date")
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| bad("no X-Amz-Date header"))?;
    let when = time::PrimitiveDateTime::parse(
        amz_date,
        time::macros::format_description!("[year][month][day]T[hour][minute][second]Z"),
    )
    .map_err(|_| bad("malformed X-Amz-Date"))?
    .assume_utc();
    if (time::OffsetDateTime::now_utc() - when).abs() > time::Duration::minutes(15)
        || !amz_date.starts_with(date)
    {
        return Err((
            StatusCode::FORBIDDEN,
            "SignatureDoesNotMatch",
            "Signature expired or not yet valid (X-Amz-Date)".into(),
        ));
    }
    let mut canonical_headers = String::new();
    for name in signed.split(';') {
        let value = if name == "host" {
            headers
                .get(http::header::HOST)
                .and_then(|v| v.to_str().ok())
                .or_else(|| uri.authority().map(|a| a.as_str()))
        } else {
            headers.get(name).and_then(|v| v.to_str().ok())
        }
        .ok_or_else(|| bad("a signed header is missing"))?;
        let value = value.split_whitespace().collect::<Vec<_>>().join(" ");
        canonical_headers.push_str(&format!("{name}:{value}\n"));
    }
    let body_hash = hex::encode(ring::digest::digest(&ring::digest::SHA256, body));
    let canonical = format!(
        "POST\n{}\n{}\n{canonical_headers}\n{signed}\n{body_hash}",
        uri.path(),
        uri.query().unwrap_or("")
    );
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{date}/{region}/{service}/aws4_request\n{}",
        hex::encode(ring::digest::digest(
            &ring::digest::SHA256,
            canonical.as_bytes()
        ))
    );
    let secret = secret_of(access_key).ok_or((
        StatusCode::FORBIDDEN,
        "InvalidClientTokenId",
        "The security token included in the request is invalid.".to_owned(),
    ))?;
    let key = signing_key(&secret, date, region, service);
    let want = hex::decode(sig).map_err(|_| bad("malformed signature"))?;
    ring::hmac::verify(&key, to_sign.as_bytes(), &want).map_err(|_| {
        bad("The request signature we calculated does not match the signature you provided.")
    })?;
    Ok(access_key.to_owned())
}

/// The topic's ARN (RGW's form: no account).
pub fn arn(region: &str, name: &str) -> String {
    format!("arn:aws:sns:{region}::{name}")
}

/// The name in a topic ARN (its last field).
fn name_of_arn(arn: &str) -> Option<&str> {
    let name = arn.rsplit(':').next()?;
    (arn.starts_with("arn:") && arn.split(':').nth(2) == Some("sns") && Topic::valid_name(name))
        .then_some(name)
}

/// The attributes of a form: `Attributes.entry.N.key` / `.value` pairs.
fn attributes(form: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (k, v) in form {
        if let Some(n) = k
            .strip_prefix("Attributes.entry.")
            .and_then(|r| r.strip_suffix(".key"))
            && let Some(val) = form.get(&format!("Attributes.entry.{n}.value"))
        {
            out.insert(v.clone(), val.clone());
        }
    }
    out
}

/// What GetTopicAttributes shows of a topic: its attributes (passwords out) and RGW's
/// `TopicArn`, `User`, `Name`, `EndPoint`.
fn shown_attributes(t: &Topic, region: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = t
        .attributes
        .iter()
        .map(|(k, v)| {
            let v = if k == "push-endpoint" {
                redact(v)
            } else {
                v.clone()
            };
            (k.clone(), v)
        })
        .collect();
    out.push(("TopicArn".into(), arn(region, &t.name)));
    out.push(("User".into(), t.owner.clone()));
    out.push(("Name".into(), t.name.clone()));
    out
}

/// Serves one topic API request: its signature, then its action.
pub async fn serve(
    svc: &lode_objects::ObjectService,
    users: &Users,
    req: http::Request<Body>,
    rid: &str,
) -> http::Response<Body> {
    let refusal = |status: StatusCode, code: &str, message: &str| error(status, code, message, rid);
    let (parts, body) = req.into_parts();
    let body: Bytes = match http_body_util::Limited::new(body, BODY_LIMIT)
        .collect()
        .await
    {
        Ok(b) => b.to_bytes(),
        Err(_) => {
            return refusal(
                StatusCode::BAD_REQUEST,
                "InvalidParameter",
                "The request body is too large or could not be read.",
            );
        }
    };
    let secret = match access_key_of(&parts.headers) {
        Some(ak) => users.lookup_fresh(&ak).await.map(|(_, s)| s.to_string()),
        None => None,
    };
    let access_key = match verify(&parts.headers, &parts.uri, &body, |_| secret.clone()) {
        Ok(ak) => ak,
        Err((status, code, m)) => return refusal(status, code, &m),
    };
    let Some(user) = users.name_of(&access_key) else {
        return refusal(StatusCode::FORBIDDEN, "AuthorizationError", "Access Denied");
    };
    let form: BTreeMap<String, String> = form_urlencoded::parse(&body)
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    let action = form.get("Action").map_or("", String::as_str);
    let region = svc
        .deliveries()
        .map_or_else(|| "us-east-1".to_owned(), |d| d.region.clone());
    let mutates = matches!(action, "CreateTopic" | "DeleteTopic" | "SetTopicAttributes");
    if mutates && user != lode_objects::users::ROOT {
        return refusal(
            StatusCode::FORBIDDEN,
            "AuthorizationError",
            "Only the account's root user may make, change or remove topics",
        );
    }
    // The topic a TopicArn names (`None`: missing or malformed).
    let topic_of = |form: &BTreeMap<String, String>| -> Option<String> {
        form.get("TopicArn")
            .and_then(|a| name_of_arn(a))
            .map(str::to_owned)
    };
    let bad_arn = || {
        refusal(
            StatusCode::BAD_REQUEST,
            "InvalidParameter",
            "Invalid parameter: TopicArn",
        )
    };
    let fail = |e: lode_objects::error::ObjError| match e {
        lode_objects::error::ObjError::InvalidArgument(m) => {
            refusal(StatusCode::BAD_REQUEST, "InvalidParameter", &m)
        }
        e => {
            tracing::warn!(error = %e, "topic API request failed");
            refusal(
                StatusCode::SERVICE_UNAVAILABLE,
                "ServiceUnavailable",
                "The service is unavailable; try again.",
            )
        }
    };
    let result = match action {
        "CreateTopic" => {
            let Some(name) = form.get("Name") else {
                return refusal(
                    StatusCode::BAD_REQUEST,
                    "InvalidParameter",
                    "Invalid parameter: Name",
                );
            };
            let t = Topic {
                name: name.clone(),
                attributes: attributes(&form),
                owner: user.clone(),
            };
            if let Err(e) = svc.create_topic(t).await {
                return fail(e);
            }
            format!(
                "<CreateTopicResult><TopicArn>{}</TopicArn></CreateTopicResult>",
                xml_escape(&arn(&region, name))
            )
        }
        "DeleteTopic" => {
            let Some(name) = topic_of(&form) else {
                return bad_arn();
            };
            if let Err(e) = svc.delete_topic(&name).await {
                return fail(e);
            }
            String::new()
        }
        "ListTopics" => {
            let topics = match svc.topics().await {
                Ok(t) => t,
                Err(e) => return fail(e),
            };
            let members: String = topics
                .iter()
                .map(|t| {
                    format!(
                        "<member><TopicArn>{}</TopicArn></member>",
                        xml_escape(&arn(&region, &t.name))
                    )
                })
                .collect();
            format!("<ListTopicsResult><Topics>{members}</Topics></ListTopicsResult>")
        }
        "GetTopicAttributes" | "SetTopicAttributes" => {
            let Some(name) = topic_of(&form) else {
                return bad_arn();
            };
            let mut t = match svc.topic(&name).await {
                Ok(Some(t)) => t,
                Ok(None) => {
                    return refusal(StatusCode::NOT_FOUND, "NotFound", "Topic does not exist");
                }
                Err(e) => return fail(e),
            };
            if action == "SetTopicAttributes" {
                let (Some(k), Some(v)) = (form.get("AttributeName"), form.get("AttributeValue"))
                else {
                    return refusal(
                        StatusCode::BAD_REQUEST,
                        "InvalidParameter",
                        "Invalid parameter: AttributeName",
                    );
                };
                t.attributes.insert(k.clone(), v.clone());
                if let Err(e) = svc.create_topic(t).await {
                    return fail(e);
                }
                String::new()
            } else {
                let entries: String = shown_attributes(&t, &region)
                    .iter()
                    .map(|(k, v)| {
                        format!(
                            "<entry><key>{}</key><value>{}</value></entry>",
                            xml_escape(k),
                            xml_escape(v)
                        )
                    })
                    .collect();
                format!(
                    "<GetTopicAttributesResult><Attributes>{entries}</Attributes></GetTopicAttributesResult>"
                )
            }
        }
        other => {
            return refusal(
                StatusCode::BAD_REQUEST,
                "InvalidAction",
                &format!("The action {other} is not valid for this endpoint."),
            );
        }
    };
    answer(action, &result, rid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arns_and_attribute_forms() {
        assert_eq!(arn("us-east-1", "jobs"), "arn:aws:sns:us-east-1::jobs");
        assert_eq!(name_of_arn("arn:aws:sns:us-east-1::jobs"), Some("jobs"));
        assert_eq!(name_of_arn("arn:aws:sqs:us-east-1::jobs"), None);
        assert_eq!(name_of_arn("jobs"), None);
        let form: BTreeMap<String, String> = [
            ("Attributes.entry.1.key", "push-endpoint"),
            ("Attributes.entry.1.value", "http://h/"),
            ("Attributes.entry.2.key", "OpaqueData"),
            ("Attributes.entry.2.value", "x"),
            ("Name", "t"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let a = attributes(&form);
        assert_eq!(
            a.get("push-endpoint").map(String::as_str),
            Some("http://h/")
        );
        assert_eq!(a.len(), 2);
        assert_eq!(xml_escape("a<&>\""), "a&lt;&amp;&gt;&quot;");
    }
}
