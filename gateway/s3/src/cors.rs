//! CORS at the HTTP layer, from the bucket's rules (`lode_objects::cors`): a preflight
//! (`OPTIONS`) is answered here and never reaches s3s, and every answer to a request that
//! carries `Origin` (errors included) gets the `Access-Control-*` headers of the rule that
//! allows it. Requests without `Origin` (SDKs, the CLI) cost nothing here.

use http::{HeaderMap, HeaderValue, Method, StatusCode};
use lode_objects::ObjectService;
use lode_objects::cors::CorsRule;

const VARY: &str = "Origin, Access-Control-Request-Headers, Access-Control-Request-Method";

fn header<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

fn set(resp: &mut http::Response<s3s::Body>, name: &'static str, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        resp.headers_mut().insert(name, v);
    }
}

/// The headers of `rule` allowing `origin`: origin (or `*`), methods, exposed headers, max age,
/// credentials.
fn allow(resp: &mut http::Response<s3s::Body>, rule: &CorsRule, origin: &str) {
    let (allowed, credentials) = rule.allow_origin(origin);
    set(resp, "access-control-allow-origin", allowed);
    set(
        resp,
        "access-control-allow-methods",
        &rule.allowed_methods.join(", "),
    );
    if credentials {
        set(resp, "access-control-allow-credentials", "true");
    }
    if !rule.expose_headers.is_empty() {
        set(
            resp,
            "access-control-expose-headers",
            &rule.expose_headers.join(", "),
        );
    }
    if let Some(age) = rule.max_age_seconds {
        set(resp, "access-control-max-age", &age.to_string());
    }
}

/// The answer to a preflight `OPTIONS` for `bucket`: `400` without `Origin` or
/// `Access-Control-Request-Method`, `403 CORSResponse` when the bucket has no rules or none
/// allows the origin, method and every requested header; else `200` with the rule's headers.
pub async fn preflight(
    svc: &ObjectService,
    bucket: Option<&str>,
    headers: &HeaderMap,
    request_id: &str,
) -> http::Response<s3s::Body> {
    let refuse =
        |status, code, msg: &str| crate::wire::error_response(status, code, msg, request_id);
    let Some(origin) = header(headers, "origin") else {
        return refuse(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "Insufficient information. Origin request header needed.",
        );
    };
    let Some(method) = header(headers, "access-control-request-method") else {
        return refuse(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "Invalid Access-Control-Request-Method: null",
        );
    };
    let rules = match bucket {
        Some(b) => svc.cors_of(b).await.ok().flatten(),
        None => None,
    };
    let Some(rules) = rules else {
        return refuse(
            StatusCode::FORBIDDEN,
            "CORSResponse",
            "CORS is not enabled for this bucket.",
        );
    };
    let asked: Vec<&str> = header(headers, "access-control-request-headers")
        .map(|h| {
            h.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .collect()
        })
        .unwrap_or_default();
    let Some(rule) = rules.find(origin, method, &asked) else {
        return refuse(
            StatusCode::FORBIDDEN,
            "CORSResponse",
            "This CORS request is not allowed. This is usually because the evalution of Origin, request method / Access-Control-Request-Method or Access-Control-Request-Headers are not whitelisted by the resource's CORS spec.",
        );
    };
    let mut resp = http::Response::new(s3s::Body::empty());
    allow(&mut resp, rule, origin);
    if !asked.is_empty() {
        set(
            &mut resp,
            "access-control-allow-headers",
            &asked.join(", ").to_ascii_lowercase(),
        );
    }
    set(&mut resp, "vary", VARY);
    resp
}

/// What a browser's request needs to be decorated after its answer: its origin, and the
/// method the rules are matched with (an `Access-Control-Request-Method` it carries, else its
/// own).
pub struct Browser {
    origin: String,
    method: String,
}

impl Browser {
    /// `None` for a request without `Origin` (no CORS work at all).
    pub fn of<B>(req: &http::Request<B>) -> Option<Browser> {
        let origin = header(req.headers(), "origin")?.to_owned();
        let method = header(req.headers(), "access-control-request-method")
            .map(str::to_owned)
            .unwrap_or_else(|| req.method().as_str().to_owned());
        Some(Browser { origin, method })
    }

    /// Adds the allowing rule's headers (and `Vary`) to `resp`, whatever its status, when the
    /// bucket has rules; nothing otherwise.
    pub async fn decorate(
        &self,
        svc: &ObjectService,
        bucket: &str,
        resp: &mut http::Response<s3s::Body>,
    ) {
        let Ok(Some(rules)) = svc.cors_of(bucket).await else {
            return;
        };
        set(resp, "vary", VARY);
        if let Some(rule) = rules.find(&self.origin, &self.method, &[]) {
            allow(resp, rule, &self.origin);
        }
    }
}

/// Whether `method` is a preflight.
pub fn is_preflight(method: &Method) -> bool {
    method == Method::OPTIONS
}
