//! The admin endpoint: `/healthz` (JSON; 503 while the datapath refuses writes), `/metrics`
//! (Prometheus text), `/api/profile` (JSON; `?scope=cluster`: every gateway's, added up, in
//! cluster mode) and the dashboard page (`/`, `/dashboard`; `?scope=cluster` likewise). Metric
//! names are defined once, here.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use lode_objects::ObjectService;
use lode_objects::scrub::ScrubStats;

use crate::profile::Profile;

pub const METRIC_UP: &str = "lode_up";
pub const METRIC_FREE_BYTES: &str = "lode_datapath_free_bytes";
pub const METRIC_TOTAL_BYTES: &str = "lode_datapath_total_bytes";
pub const METRIC_POISONED: &str = "lode_datapath_write_poisoned";
pub const METRIC_SCRUB_BYTES: &str = "lode_scrub_read_bytes_total";
pub const METRIC_SCRUB_CHUNKS: &str = "lode_scrub_chunks_total";
pub const METRIC_SCRUB_CORRUPT: &str = "lode_scrub_corrupt_chunks_total";
pub const METRIC_SCRUB_PASSES: &str = "lode_scrub_passes_total";
pub const METRIC_SCRUB_LAST: &str = "lode_scrub_last_pass_end_timestamp_seconds";
/// Cluster mode: RADOS operations sent, labelled by pool and kind (read, write).
pub const METRIC_RADOS_OPS: &str = "lode_rados_ops_total";
/// GETs' first-chunk reads started beside the lookup, by outcome (used, wasted).
pub const METRIC_EARLY_READS: &str = "lode_get_early_reads_total";

/// More Prometheus text for `/metrics` (the backend's own counters).
pub type MetricsFn = Arc<dyn Fn() -> String + Send + Sync>;

/// The dashboard: one static page (inline CSS and JS, no CDN) that polls `/api/profile`.
const DASHBOARD: &str = include_str!("dashboard.html");

fn health(svc: &ObjectService) -> (http::StatusCode, String) {
    let (free, total) = svc.space();
    let poisoned = svc.is_read_only();
    let body = serde_json::json!({
        "status": if poisoned { "read-only" } else { "ok" },
        "reason": if poisoned { Some("a device write or fsync failed; writes are refused until restart") } else { None },
        "version": env!("CARGO_PKG_VERSION"),
        "datapath_backend": svc.blob_backend(),
        "free_bytes": free,
        "total_bytes": total,
    });
    let status = if poisoned {
        http::StatusCode::SERVICE_UNAVAILABLE
    } else {
        http::StatusCode::OK
    };
    (status, body.to_string())
}

fn metrics(svc: &ObjectService, s: &ScrubStats, profile: &Profile) -> String {
    use std::sync::atomic::Ordering::Relaxed;
    let (free, total) = svc.space();
    let rows: &[(&str, &str, &str, f64)] = &[
        (METRIC_UP, "1 while the process serves.", "gauge", 1.0),
        (
            METRIC_FREE_BYTES,
            "Free space on the datapath devices (cluster mode: the data pool's MAX AVAIL; 0 while unknown).",
            "gauge",
            free as f64,
        ),
        (
            METRIC_TOTAL_BYTES,
            "Capacity of the datapath devices (cluster mode: the data pool's stored + MAX AVAIL).",
            "gauge",
            total as f64,
        ),
        (
            METRIC_POISONED,
            "1 after a device write/fsync error (writes refused).",
            "gauge",
            f64::from(u8::from(svc.is_read_only())),
        ),
        (
            METRIC_SCRUB_BYTES,
            "Bytes read and checked by the scrubber.",
            "counter",
            s.bytes.load(Relaxed) as f64,
        ),
        (
            METRIC_SCRUB_CHUNKS,
            "Chunks read and checked by the scrubber.",
            "counter",
            s.chunks.load(Relaxed) as f64,
        ),
        (
            METRIC_SCRUB_CORRUPT,
            "Chunks that failed their crc32c check (or could not be read) during scrub.",
            "counter",
            s.corrupt.load(Relaxed) as f64,
        ),
        (
            METRIC_SCRUB_PASSES,
            "Finished scrub passes.",
            "counter",
            s.passes.load(Relaxed) as f64,
        ),
        (
            METRIC_SCRUB_LAST,
            "End of the last finished scrub pass (Unix time).",
            "gauge",
            s.last_pass_end_ms.load(Relaxed) as f64 / 1000.0,
        ),
    ];
    prometheus_rows(rows) + &profile.prometheus()
}

/// Every event destination's figures (`lode admin notify status`).
fn notify_status(svc: &ObjectService) -> String {
    let status = svc.deliveries().map(|d| d.status()).unwrap_or_default();
    serde_json::json!({ "destinations": status }).to_string()
}

/// One figure of a destination's status.
type Figure = fn(&lode_objects::event_delivery::DestinationStatus) -> u64;

/// The event destinations' figures (`lode_events_*{destination}`).
fn event_metrics(svc: &ObjectService) -> String {
    let Some(d) = svc.deliveries() else {
        return String::new();
    };
    let status = d.status();
    if status.is_empty() {
        return String::new();
    }
    let series: [(&str, &str, &str, Figure); 5] = [
        (
            "lode_events_backlog",
            "Events waiting for delivery.",
            "gauge",
            |s| s.backlog,
        ),
        (
            "lode_events_delivered_total",
            "Events delivered.",
            "counter",
            |s| s.delivered,
        ),
        (
            "lode_events_retried_total",
            "Events delivered after more than one attempt.",
            "counter",
            |s| s.retried,
        ),
        (
            "lode_events_failed_total",
            "Delivery attempts that failed.",
            "counter",
            |s| s.failed,
        ),
        (
            "lode_events_dropped_total",
            "Events dropped because the backlog was full.",
            "counter",
            |s| s.dropped,
        ),
    ];
    let mut out = String::new();
    for (name, help, kind, get) in series {
        out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
        for s in &status {
            out.push_str(&format!(
                "{name}{{destination=\"{}\"}} {}\n",
                s.name,
                get(s)
            ));
        }
    }
    out
}

/// GETs whose first chunk was read beside the record lookup (cluster mode), by whether the
/// record named that chunk (`lode_objects::early_read`).
fn early_read_metrics(svc: &ObjectService) -> String {
    let name = METRIC_EARLY_READS;
    let c = svc.early_read_counts();
    format!(
        "# HELP {name} GET first-chunk reads started beside the record lookup, by outcome (used: the record named that chunk).\n# TYPE {name} counter\n{name}{{outcome=\"used\"}} {}\n{name}{{outcome=\"wasted\"}} {}\n",
        c.used, c.wasted
    )
}

/// The lifecycle worker's counters (`lode_lifecycle_*`).
fn lifecycle_metrics(s: &lode_objects::lifecycle_run::LifecycleStats) -> String {
    use std::sync::atomic::Ordering::Relaxed;
    let rows: &[(&str, &str, &str, f64)] = &[
        (
            "lode_lifecycle_passes_total",
            "Finished lifecycle passes (on this gateway).",
            "counter",
            s.passes.load(Relaxed) as f64,
        ),
        (
            "lode_lifecycle_scanned_objects_total",
            "Objects the lifecycle worker judged.",
            "counter",
            s.scanned.load(Relaxed) as f64,
        ),
        (
            "lode_lifecycle_expired_objects_total",
            "Objects removed by an expiration rule.",
            "counter",
            s.expired.load(Relaxed) as f64,
        ),
        (
            "lode_lifecycle_noncurrent_versions_expired_total",
            "Noncurrent versions removed by a NoncurrentVersionExpiration rule.",
            "counter",
            s.noncurrent_expired.load(Relaxed) as f64,
        ),
        (
            "lode_lifecycle_delete_markers_removed_total",
            "Delete markers removed once they were the only version of their key.",
            "counter",
            s.markers_removed.load(Relaxed) as f64,
        ),
        (
            "lode_lifecycle_locked_versions_kept_total",
            "Version removals that object lock refused (kept until their retention passes).",
            "counter",
            s.locked_kept.load(Relaxed) as f64,
        ),
        (
            "lode_lifecycle_aborted_uploads_total",
            "Incomplete multipart uploads aborted by a rule.",
            "counter",
            s.aborted.load(Relaxed) as f64,
        ),
        (
            "lode_lifecycle_errors_total",
            "Lifecycle actions or passes that failed (retried by the next pass).",
            "counter",
            s.errors.load(Relaxed) as f64,
        ),
        (
            "lode_lifecycle_last_pass_end_timestamp_seconds",
            "End of the last finished lifecycle pass (Unix time).",
            "gauge",
            s.last_pass_end_ms.load(Relaxed) as f64 / 1000.0,
        ),
    ];
    prometheus_rows(rows)
}

/// Prometheus text for (name, help, kind, value) rows.
fn prometheus_rows(rows: &[(&str, &str, &str, f64)]) -> String {
    let mut out = String::new();
    for (name, help, kind, v) in rows {
        out += &format!("# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}\n");
    }
    out
}

fn scrub_report(s: &ScrubStats) -> String {
    use std::sync::atomic::Ordering::Relaxed;
    serde_json::json!({
        "passes": s.passes.load(Relaxed),
        "chunks": s.chunks.load(Relaxed),
        "bytes": s.bytes.load(Relaxed),
        "corrupt_chunks": s.corrupt.load(Relaxed),
        "last_pass_end_ms": s.last_pass_end_ms.load(Relaxed),
        "last_pass_bad": *s.last_bad.lock().expect("scrub stats"),
    })
    .to_string()
}

/// Serves the admin endpoint on `listener` until the process ends.
fn query(req: &http::Request<hyper::body::Incoming>) -> std::collections::HashMap<String, String> {
    req.uri()
        .query()
        .unwrap_or("")
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_owned(), percent_decode(v)))
        .collect()
}

/// Decodes `%XX` escapes (the CLI encodes every byte outside `[A-Za-z0-9._-]`).
fn percent_decode(v: &str) -> String {
    let b = v.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && let Some(x) = v
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(x);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Encodes every byte outside `[A-Za-z0-9._-]` as `%XX`.
pub fn percent_encode(v: &str) -> String {
    v.bytes()
        .map(|c| {
            if c.is_ascii_alphanumeric() || b"._-".contains(&c) {
                (c as char).to_string()
            } else {
                format!("%{c:02X}")
            }
        })
        .collect()
}

/// Constant-time comparison of the bearer token with the root secret.
fn authorized(req: &http::Request<hyper::body::Incoming>, secret: &str) -> bool {
    let Some(token) = req
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    else {
        return false;
    };
    token.len() == secret.len()
        && token
            .bytes()
            .zip(secret.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

/// The answer to an admin API call without root's secret key.
fn unauthorized() -> (http::StatusCode, String) {
    (
        http::StatusCode::UNAUTHORIZED,
        r#"{"error":"send the root secret key as a bearer token"}"#.to_owned(),
    )
}

/// The user and grant API (`lode admin` talks to it): root's secret key as a bearer token.
async fn user_api(
    req: &http::Request<hyper::body::Incoming>,
    users: &crate::users::Users,
    root_secret: &str,
) -> (http::StatusCode, String) {
    use crate::users::{Perm, UserError};
    use http::StatusCode as S;
    if !authorized(req, root_secret) {
        return unauthorized();
    }
    let q = query(req);
    let arg = |k: &str| q.get(k).cloned().unwrap_or_default();
    let r: Result<serde_json::Value, UserError> = match (req.method().as_str(), req.uri().path()) {
        ("GET", "/api/users") => users.list().map(|l| serde_json::json!(l)),
        ("POST", "/api/users") => {
            let uid = q.get("uid").and_then(|u| u.parse().ok());
            users.add(&arg("name"), uid, q.get("email").map(String::as_str)).await.map(|c| {
                serde_json::json!({"name": arg("name"), "access_key": c.access_key, "secret_key": c.secret_key})
            })
        }
        ("DELETE", "/api/users") => users
            .remove(&arg("name"))
            .await
            .map(|()| serde_json::json!({})),
        ("PUT", "/api/grants") => {
            let perm = match arg("perm").as_str() {
                "read" => Perm::Read,
                "write" => Perm::Write,
                _ => {
                    return (
                        S::BAD_REQUEST,
                        r#"{"error":"perm must be read or write"}"#.to_owned(),
                    );
                }
            };
            users
                .grant(&arg("bucket"), &arg("user"), Some(perm))
                .await
                .map(|()| serde_json::json!({}))
        }
        ("DELETE", "/api/grants") => users
            .grant(&arg("bucket"), &arg("user"), None)
            .await
            .map(|()| serde_json::json!({})),
        _ => return (S::NOT_FOUND, r#"{"error":"not found"}"#.to_owned()),
    };
    match r {
        Ok(v) => (S::OK, v.to_string()),
        Err(e) => {
            let st = match e {
                UserError::Exists(_) => S::CONFLICT,
                UserError::NoSuchUser(_) => S::NOT_FOUND,
                UserError::BadName(_) | UserError::BadEmail(_) => S::BAD_REQUEST,
                UserError::EmailTaken(_) => S::CONFLICT,
                _ => S::INTERNAL_SERVER_ERROR,
            };
            (st, serde_json::json!({"error": e.to_string()}).to_string())
        }
    }
}

/// A master key operation's answer.
fn master_answer(
    r: Result<serde_json::Value, lode_objects::encryption::MasterError>,
) -> (http::StatusCode, String) {
    use http::StatusCode as S;
    use lode_objects::encryption::MasterError as E;
    match r {
        Ok(v) => (S::OK, v.to_string()),
        Err(e) => {
            let st = match e {
                E::NoSuchVersion(_) | E::Off => S::NOT_FOUND,
                E::Current(_) | E::InUse { .. } => S::CONFLICT,
                _ => S::INTERNAL_SERVER_ERROR,
            };
            (st, serde_json::json!({"error": e.to_string()}).to_string())
        }
    }
}

/// The key ring and the master key versions (`lode admin kms ...`, `lode admin master-key
/// ...`): root's secret key as a bearer token. Answers name keys by id and state, never their
/// material.
async fn key_api(
    req: &http::Request<hyper::body::Incoming>,
    svc: &lode_objects::ObjectService,
    root_secret: &str,
) -> (http::StatusCode, String) {
    use http::StatusCode as S;
    use lode_objects::kms::{KeyState, KmsError};
    if !authorized(req, root_secret) {
        return unauthorized();
    }
    let Some(enc) = svc.encryption() else {
        return (
            S::NOT_FOUND,
            r#"{"error":"encryption at rest is not on"}"#.to_owned(),
        );
    };
    let q = query(req);
    let arg = |k: &str| q.get(k).cloned().unwrap_or_default();
    let ring = &enc.ring;
    let r: Result<serde_json::Value, KmsError> = match (req.method().as_str(), req.uri().path()) {
        ("GET", "/api/kms/keys") => ring.list_keys().await.map(|l| serde_json::json!(l)),
        ("POST", "/api/kms/keys") => ring
            .create_key(&arg("description"))
            .await
            .map(|k| serde_json::json!(k)),
        ("PUT", "/api/kms/state") => {
            let state = match arg("state").as_str() {
                "enable" => KeyState::Enabled,
                "disable" => KeyState::Disabled,
                "schedule-deletion" => {
                    let days: i64 = q.get("days").and_then(|d| d.parse().ok()).unwrap_or(30);
                    if !(7..=30).contains(&days) {
                        return (
                            S::BAD_REQUEST,
                            r#"{"error":"the pending window is 7 to 30 days"}"#.to_owned(),
                        );
                    }
                    KeyState::PendingDeletion {
                        at_ms: lode_objects::now_ms() + days * 86_400_000,
                    }
                }
                _ => {
                    return (
                        S::BAD_REQUEST,
                        r#"{"error":"state must be enable, disable or schedule-deletion"}"#
                            .to_owned(),
                    );
                }
            };
            ring.set_state(&arg("id"), state)
                .await
                .map(|k| serde_json::json!(k))
        }
        ("GET", "/api/master-key") => Ok(serde_json::json!({
            "versions": enc.masters.keys().versions(),
            "current": enc.masters.keys().current(),
            "retired": enc.masters.retired(),
        })),
        ("POST", "/api/master-key/rotate") => {
            return master_answer(
                enc.masters
                    .rotate()
                    .await
                    .map(|v| serde_json::json!({ "current": v })),
            );
        }
        ("POST", "/api/master-key/reseal") => {
            return master_answer(svc.reseal_master_keys().await.map(|r| serde_json::json!(r)));
        }
        ("POST", p @ ("/api/master-key/retire" | "/api/master-key/unretire")) => {
            let Some(v) = q.get("version").and_then(|v| v.parse().ok()) else {
                return (
                    S::BAD_REQUEST,
                    r#"{"error":"version must be a number"}"#.to_owned(),
                );
            };
            let retire = p.ends_with("/retire");
            return master_answer(
                svc.retire_master_key(v, retire)
                    .await
                    .map(|()| serde_json::json!({ "version": v, "retired": retire })),
            );
        }
        _ => return (S::NOT_FOUND, r#"{"error":"not found"}"#.to_owned()),
    };
    match r {
        Ok(v) => (S::OK, v.to_string()),
        Err(e) => {
            let st = match e {
                KmsError::NotFound(_) => S::NOT_FOUND,
                KmsError::Invalid(_) => S::BAD_REQUEST,
                _ => S::INTERNAL_SERVER_ERROR,
            };
            (st, serde_json::json!({"error": e.to_string()}).to_string())
        }
    }
}

/// A bucket's effective access (`lode admin access BUCKET`): owner, grants, policy (and whether
/// it is public), Block Public Access (the bucket's own and what holds with the account's),
/// whether anonymous callers can reach anything through the policy or the bucket's ACL (object
/// ACLs are not scanned), the bucket's ACL and object ownership, and the CORS rules.
async fn access_api(
    req: &http::Request<hyper::body::Incoming>,
    svc: &ObjectService,
    users: &crate::users::Users,
    root_secret: &str,
) -> (http::StatusCode, String) {
    use http::StatusCode as S;
    if !authorized(req, root_secret) {
        return unauthorized();
    }
    let bucket = query(req).get("bucket").cloned().unwrap_or_default();
    let err = |s: S, e: &dyn std::fmt::Display| {
        (s, serde_json::json!({"error": e.to_string()}).to_string())
    };
    let rec = match svc.bucket(&bucket).await {
        Ok(r) => r,
        Err(e @ lode_objects::ObjError::NoSuchBucket) => return err(S::NOT_FOUND, &e),
        Err(e) => return err(S::INTERNAL_SERVER_ERROR, &e),
    };
    let policy_text = match svc.bucket_policy(&bucket).await {
        Ok(p) => p,
        Err(e) => return err(S::INTERNAL_SERVER_ERROR, &e),
    };
    let policy = policy_text
        .as_deref()
        .and_then(|t| lode_objects::policy::Policy::parse(t, &bucket).ok());
    let policy_public = policy.as_ref().is_some_and(|p| p.is_public());
    let own_block = svc.bucket_public_access_block(&bucket).await.ok().flatten();
    let block = match svc.public_access_block_of(&bucket).await {
        Ok(b) => b,
        Err(e) => return err(S::INTERNAL_SERVER_ERROR, &e),
    };
    let cors = svc.bucket_cors(&bucket).await.ok().flatten();
    let owner = users.owner_name(&rec.owner);
    let (acl, ownership) = match (
        svc.bucket_acl(&bucket).await,
        svc.bucket_ownership(&bucket).await,
    ) {
        (Ok(a), Ok(o)) => (
            a.unwrap_or_else(|| lode_objects::acl::Acl::private(&owner)),
            o.unwrap_or_default(),
        ),
        (Err(e), _) | (_, Err(e)) => return err(S::INTERNAL_SERVER_ERROR, &e),
    };
    // What the bucket's ACL gives the public (nothing when ACLs are disabled, or ignored).
    let acl_public = ownership.acls_enabled() && acl.is_public() && !block.ignore_public_acls;
    let v = serde_json::json!({
        "bucket": bucket,
        "owner": owner,
        "grants": users.grants_on(&bucket).into_iter()
            .map(|(u, p)| serde_json::json!({"user": u, "perm": p})).collect::<Vec<_>>(),
        "policy": policy_text.as_deref().and_then(|t| serde_json::from_str::<serde_json::Value>(t).ok()),
        "policy_is_public": policy_public,
        "public_access_block": own_block,
        "effective_public_access_block": block,
        "acl": acl.grants.iter().map(|g| serde_json::json!({
            "grantee": match &g.grantee {
                lode_objects::acl::Grantee::User(u) => u.clone(),
                other => other.uri().unwrap_or_default().to_owned(),
            },
            "permission": g.permission.as_str(),
        })).collect::<Vec<_>>(),
        "acl_is_public": acl_public,
        "object_ownership": ownership.as_str(),
        "acls_enabled": ownership.acls_enabled(),
        "anonymous_access": (policy_public && !block.restrict_public_buckets)
            || (acl_public && acl.grants.iter().any(|g| g.grantee == lode_objects::acl::Grantee::AllUsers)),
        "cors": cors,
    });
    (S::OK, v.to_string())
}

/// What the admin endpoint reads and manages.
pub struct Admin {
    pub svc: Arc<ObjectService>,
    pub users: Arc<crate::users::Users>,
    /// The IO profile both doors record into.
    pub profile: Arc<Profile>,
    /// The background scrubber's totals.
    pub scrub: Arc<ScrubStats>,
    /// The lifecycle worker's totals.
    pub lifecycle: Arc<lode_objects::lifecycle_run::LifecycleStats>,
    /// Root's secret key (the user API authenticates with it).
    pub root_secret: String,
    /// The backend's own counters (cluster mode: RADOS ops per pool).
    pub extra_metrics: Option<MetricsFn>,
    /// Cluster mode: the gateways' registry, for the whole cluster's profile.
    pub cluster: Option<Arc<dyn crate::profile::ClusterProfile>>,
}

pub async fn serve(listener: TcpListener, admin: Admin) {
    let admin = Arc::new(admin);
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let admin = Arc::clone(&admin);
        let service = hyper::service::service_fn(
            move |req: http::Request<hyper::body::Incoming>| {
                let admin = Arc::clone(&admin);
                async move {
                    let Admin {
                        svc,
                        users,
                        profile,
                        scrub,
                        lifecycle,
                        root_secret,
                        extra_metrics,
                        cluster,
                    } = &*admin;
                    let cluster_scope = req
                        .uri()
                        .query()
                        .is_some_and(|q| q.split('&').any(|kv| kv == "scope=cluster"));
                    let path = req.uri().path().to_owned();
                    let (status, ctype, body) = match (req.method(), path.as_str()) {
                        (_, "/api/users" | "/api/grants") => {
                            let (s, b) = user_api(&req, users, root_secret).await;
                            (s, "application/json", b)
                        }
                        (_, p) if p.starts_with("/api/kms/") || p.starts_with("/api/master-key") => {
                            let (s, b) = key_api(&req, svc, root_secret).await;
                            (s, "application/json", b)
                        }
                        // Open like /metrics and /api/profile (the dashboard reads it): names,
                        // ARNs and counters, no credentials.
                        (&http::Method::GET, "/api/notify") => {
                            (http::StatusCode::OK, "application/json", notify_status(svc))
                        }
                        (&http::Method::GET, "/api/access") => {
                            let (s, b) = access_api(&req, svc, users, root_secret).await;
                            (s, "application/json", b)
                        }
                        (&http::Method::GET, "/healthz") => {
                            let (s, b) = health(svc);
                            (s, "application/json", b)
                        }
                        (&http::Method::GET, "/api/profile") if cluster_scope => {
                            match cluster {
                                Some(reg) => match reg.cluster_snapshot().await {
                                    Ok(snap) => (
                                        http::StatusCode::OK,
                                        "application/json",
                                        serde_json::to_string(&snap).unwrap_or_default(),
                                    ),
                                    Err(e) => {
                                        tracing::warn!(error = %e, "reading the cluster's profile failed");
                                        (
                                            http::StatusCode::SERVICE_UNAVAILABLE,
                                            "application/json",
                                            serde_json::json!({"error": format!("reading the cluster's profile: {e}")}).to_string(),
                                        )
                                    }
                                },
                                None => (
                                    http::StatusCode::BAD_REQUEST,
                                    "application/json",
                                    serde_json::json!({"error": "scope=cluster needs cluster mode (lode serve --cluster ceph)"}).to_string(),
                                ),
                            }
                        }
                        (&http::Method::GET, "/api/profile") => (
                            http::StatusCode::OK,
                            "application/json",
                            serde_json::to_string(&profile.snapshot()).unwrap_or_default(),
                        ),
                        (&http::Method::GET, "/" | "/dashboard") => (
                            http::StatusCode::OK,
                            "text/html; charset=utf-8",
                            DASHBOARD.to_owned(),
                        ),
                        (&http::Method::GET, "/api/scrub") => (
                            http::StatusCode::OK,
                            "application/json",
                            scrub_report(scrub),
                        ),
                        (&http::Method::GET, "/metrics") => (
                            http::StatusCode::OK,
                            "text/plain; version=0.0.4",
                            metrics(svc, scrub, profile)
                                + &lifecycle_metrics(lifecycle)
                                + &event_metrics(svc)
                                + &early_read_metrics(svc)
                                + &extra_metrics.as_ref().map(|f| f()).unwrap_or_default(),
                        ),
                        _ => (
                            http::StatusCode::NOT_FOUND,
                            "text/plain",
                            "not found\n".to_owned(),
                        ),
                    };
                    let mut r = http::Response::new(Full::new(Bytes::from(body)));
                    *r.status_mut() = status;
                    r.headers_mut().insert(
                        http::header::CONTENT_TYPE,
                        http::HeaderValue::from_static(ctype),
                    );
                    Ok::<_, std::convert::Infallible>(r)
                }
            },
        );
        tokio::spawn(async move {
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    use lode_datapath::{Datapath, FaultyChunkStore, MemChunkStore};
    use lode_metadata::MemMetadataStore;
    use lode_objects::{Integrity, ObjectMeta, ServiceConfig, WriteCond};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn healthz_turns_503_when_a_device_write_fails_and_reads_go_on() {
        let faulty = Arc::new(FaultyChunkStore::new(Arc::new(MemChunkStore::new(&[
            64 << 20
        ]))));
        let dp = Arc::new(Datapath::new(faulty.clone(), true));
        let svc = crate::server::local_service(
            Arc::new(MemMetadataStore::new()),
            dp,
            ServiceConfig::default(),
        )
        .unwrap();
        svc.create_bucket("bkt", "me").await.unwrap();
        let body = |n: usize| {
            futures::stream::iter(vec![Ok::<_, std::io::Error>(Bytes::from(vec![7u8; n]))])
        };
        let put = |k: &'static str, n: usize| {
            svc.put_object(
                "bkt",
                k,
                ObjectMeta::default(),
                body(n),
                None,
                Integrity::default(),
                WriteCond::default(),
            )
        };
        put("before", 1 << 20).await.unwrap();
        assert_eq!(health(&svc).0, http::StatusCode::OK);
        let m = |svc: &ObjectService| metrics(svc, &ScrubStats::default(), &Profile::default());
        assert!(m(&svc).contains(&format!("{METRIC_POISONED} 0")));
        faulty.fail_writes.store(true, Ordering::SeqCst);
        assert!(put("fails", 1 << 20).await.is_err());
        let (status, body_text) = health(&svc);
        assert_eq!(status, http::StatusCode::SERVICE_UNAVAILABLE);
        assert!(body_text.contains("read-only"), "{body_text}");
        assert!(m(&svc).contains(&format!("{METRIC_POISONED} 1")));
        // Reads go on; writes stay refused even after the device "recovers".
        faulty.fail_writes.store(false, Ordering::SeqCst);
        assert!(svc.open_object("bkt", "before").await.is_ok());
        assert!(matches!(
            put("after", 1 << 20).await,
            Err(lode_objects::ObjError::Chunk(
                lode_objects::ChunkError::Poisoned
            ))
        ));
    }
}
