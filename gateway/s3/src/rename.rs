//! S3 RenameObject (`PUT /{bucket}/{key}?renameObject`, the S3 Express API), served on every
//! bucket. s3s 0.14 does not model it, so it is an s3s custom route: s3s has checked the
//! signature when [`RenameRoute::call`] runs; the route checks the grant (write on the bucket)
//! and maps every failure through `crate::error`, as the S3 handlers do.
//!
//! One catalog commit moves the record, the same one a rename on the mount makes; every
//! condition is checked inside it (SEMANTICS.md rule 22).

use std::sync::Arc;

use hyper::http::Extensions;
use hyper::{HeaderMap, Method, Uri};
use s3s::dto::{Timestamp, TimestampFormat};
use s3s::host::S3Host;
use s3s::path::S3Path;
use s3s::route::S3Route;
use s3s::{Body, S3Request, S3Response, S3Result, s3_error};

use crate::access::{Authz, Peer, ReqInfo};
use crate::host::VirtualHosts;
use lode_objects::{ObjectRecord, RenameCondition};

pub struct RenameRoute {
    pub authz: Arc<Authz>,
    pub hosts: Option<VirtualHosts>,
}

/// `renameObject` among the query's parameter names.
fn is_rename(uri: &Uri) -> bool {
    uri.query().is_some_and(|q| {
        q.split('&')
            .any(|p| p.split_once('=').map_or(p, |(k, _)| k) == "renameObject")
    })
}

/// A header's value as UTF-8 text (clients that do not URL-encode `x-amz-rename-source` send
/// a key's UTF-8 bytes as they are).
fn header<'a>(h: &'a HeaderMap, name: &str) -> S3Result<Option<&'a str>> {
    match h.get(name) {
        None => Ok(None),
        Some(v) => std::str::from_utf8(v.as_bytes())
            .map(|s| Some(s.trim()))
            .map_err(|_| s3_error!(InvalidArgument, "The {name} header is not valid UTF-8")),
    }
}

/// An HTTP-date header as whole seconds since the epoch; one that is not a valid date is
/// ignored (RFC 7232, as for the GET conditions).
fn date(h: &HeaderMap, name: &str) -> S3Result<Option<i64>> {
    let Some(v) = header(h, name)? else {
        return Ok(None);
    };
    Ok(Timestamp::parse(TimestampFormat::HttpDate, v)
        .ok()
        .map(|t| time::OffsetDateTime::from(t).unix_timestamp()))
}

/// An IP address, with or without a port: such a host is path-style (as s3s decides).
fn is_address(host: &str) -> bool {
    host.parse::<std::net::SocketAddr>().is_ok()
        || host.parse::<std::net::IpAddr>().is_ok()
        || host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .is_some_and(|h| h.parse::<std::net::Ipv6Addr>().is_ok())
}

fn same_etag(want: &str, rec: &ObjectRecord) -> bool {
    want == "*" || want.trim_matches('"') == rec.etag
}

/// The conditions of one RenameObject request.
#[derive(Debug, Default, Clone)]
struct Conds {
    src_match: Option<String>,
    src_none_match: Option<String>,
    src_modified_since: Option<i64>,
    src_unmodified_since: Option<i64>,
    dst_match: Option<String>,
    dst_none_match: Option<String>,
    dst_modified_since: Option<i64>,
    dst_unmodified_since: Option<i64>,
}

impl Conds {
    fn parse(h: &HeaderMap) -> S3Result<Self> {
        let s = |n| header(h, n).map(|v| v.map(str::to_owned));
        Ok(Conds {
            src_match: s("x-amz-rename-source-if-match")?,
            src_none_match: s("x-amz-rename-source-if-none-match")?,
            src_modified_since: date(h, "x-amz-rename-source-if-modified-since")?,
            src_unmodified_since: date(h, "x-amz-rename-source-if-unmodified-since")?,
            dst_match: s("if-match")?,
            dst_none_match: s("if-none-match")?,
            dst_modified_since: date(h, "if-modified-since")?,
            dst_unmodified_since: date(h, "if-unmodified-since")?,
        })
    }

    /// Whether the rename may go on, given the source and what the target holds.
    fn holds(&self, src: &ObjectRecord, dst: Option<&ObjectRecord>) -> bool {
        let secs = |r: &ObjectRecord| r.last_modified_ms.div_euclid(1000);
        // The source exists (the catalog answered NoSuchKey otherwise).
        let source = self.src_match.as_deref().is_none_or(|m| same_etag(m, src))
            && self
                .src_none_match
                .as_deref()
                .is_none_or(|m| !same_etag(m, src))
            && self.src_modified_since.is_none_or(|t| secs(src) > t)
            && self.src_unmodified_since.is_none_or(|t| secs(src) <= t);
        // The target: If-Match and If-Modified-Since need one; If-None-Match `*` needs none.
        let target = self
            .dst_match
            .as_deref()
            .is_none_or(|m| dst.is_some_and(|d| same_etag(m, d)))
            && self
                .dst_none_match
                .as_deref()
                .is_none_or(|m| dst.is_none_or(|d| !same_etag(m, d)))
            && self
                .dst_modified_since
                .is_none_or(|t| dst.is_some_and(|d| secs(d) > t))
            && self
                .dst_unmodified_since
                .is_none_or(|t| dst.is_none_or(|d| secs(d) <= t));
        source && target
    }
}

/// The source key of `x-amz-rename-source` (URL-encoded), in the documented form
/// `[/]bucket/key` (pattern `/?.+/.+`). The bucket must be the request's: a rename stays in
/// one bucket. (A bare key is not guessed at: `photos/a.jpg` in bucket `photos` could name
/// either key.)
fn source_key(raw: &str, bucket: &str) -> S3Result<String> {
    let decoded = urlencoding::decode(raw)
        .map_err(|_| s3_error!(InvalidArgument, "x-amz-rename-source is not valid UTF-8"))?;
    let v = decoded.strip_prefix('/').unwrap_or(&decoded);
    let Some((b, key)) = v
        .split_once('/')
        .filter(|(b, k)| !b.is_empty() && !k.is_empty())
    else {
        return Err(s3_error!(
            InvalidArgument,
            "x-amz-rename-source must name a bucket and a key: bucket/key"
        ));
    };
    if b != bucket {
        return Err(s3_error!(
            InvalidRequest,
            "RenameObject renames within one bucket: the source names another"
        ));
    }
    Ok(key.to_owned())
}

impl RenameRoute {
    /// The request's path, path-style or virtual-hosted as s3s resolves it (`Err(Ok(..))`: a
    /// refusal of the request as such; `Err(Err(()))`: a path s3s does not parse).
    fn path(&self, uri: &Uri, headers: &HeaderMap) -> Result<S3Path, Result<s3s::S3Error, ()>> {
        let path = urlencoding::decode(uri.path())
            .map_err(|_| Ok(s3_error!(InvalidURI, "The request path is not valid UTF-8")))?;
        let host = header(headers, "host").map_err(Ok)?;
        let parsed = match (&self.hosts, host) {
            (Some(vh), Some(h)) if !is_address(h) => {
                let v = vh.parse_host_header(h).map_err(Ok)?;
                s3s::path::parse_virtual_hosted_style(v.bucket(), &path)
            }
            _ => s3s::path::parse_path_style(&path),
        };
        parsed.map_err(|_| Err(()))
    }

    /// The request's bucket and key, path-style or virtual-hosted as s3s resolves them.
    fn target(&self, uri: &Uri, headers: &HeaderMap) -> S3Result<(String, String)> {
        match self.path(uri, headers) {
            Ok(S3Path::Object { bucket, key }) => Ok((bucket.into(), key.into())),
            Ok(_) => Err(s3_error!(
                MethodNotAllowed,
                "RenameObject needs a bucket and a key"
            )),
            Err(Ok(e)) => Err(e),
            Err(Err(())) => Err(s3_error!(InvalidURI, "Could not parse the request path")),
        }
    }
}

#[async_trait::async_trait]
impl S3Route for RenameRoute {
    fn is_match(&self, method: &Method, uri: &Uri, _: &HeaderMap, _: &mut Extensions) -> bool {
        method == Method::PUT && (is_rename(uri) || crate::wire::is_bucket_encryption(uri))
    }

    async fn call(&self, req: S3Request<Body>) -> S3Result<S3Response<Body>> {
        if is_rename(&req.uri) {
            self.rename(req).await
        } else {
            self.put_bucket_encryption(req).await
        }
    }
}

/// At most this much of a PutBucketEncryption body is read.
const ENCRYPTION_BODY_LIMIT: usize = 64 << 10;

impl RenameRoute {
    /// PutBucketEncryption, read here because s3s 0.14 refuses its `BlockedEncryptionTypes`
    /// (the body's signature and hash were checked by s3s as it is read): the element is taken
    /// out, the rest parsed by s3s's own XML reader, and both applied as the S3 handler would.
    #[tracing::instrument(skip_all, fields(op = "PutBucketEncryption"))]
    async fn put_bucket_encryption(&self, mut req: S3Request<Body>) -> S3Result<S3Response<Body>> {
        use s3s::xml::Deserialize;
        let Some(creds) = &req.credentials else {
            return Err(s3_error!(AccessDenied, "Access Denied"));
        };
        let bucket = self.target_bucket(&req.uri, &req.headers)?;
        let info = ReqInfo {
            headers: &req.headers,
            uri: &req.uri,
            peer: req.extensions.get::<Peer>().copied(),
        };
        self.authz
            .authorize(
                Some(creds.access_key.as_str()),
                &info,
                "PutBucketEncryption",
                &bucket,
                None,
                "s3:PutEncryptionConfiguration",
            )
            .await?;
        let body = req
            .input
            .store_all_limited(ENCRYPTION_BODY_LIMIT)
            .await
            .map_err(|e| s3_error!(InvalidRequest, "reading the request body failed: {e}"))?;
        let (xml, blocked) = crate::sse::split_blocked(&body);
        let mut d = s3s::xml::Deserializer::new(&xml);
        let cfg = s3s::dto::ServerSideEncryptionConfiguration::deserialize(&mut d).map_err(|_| {
            s3_error!(
                MalformedXML,
                "The XML you provided was not well-formed or did not validate against our published schema"
            )
        })?;
        crate::s3::apply_bucket_encryption(&self.authz.svc, &bucket, &cfg, blocked.as_deref())
            .await?;
        Ok(S3Response::new(Body::empty()))
    }

    /// The request's bucket (a bucket-level request), path-style or virtual-hosted.
    fn target_bucket(&self, uri: &Uri, headers: &HeaderMap) -> S3Result<String> {
        match self.path(uri, headers) {
            Ok(S3Path::Bucket { bucket }) => Ok(bucket.into()),
            Ok(_) => Err(s3_error!(
                MethodNotAllowed,
                "The specified method is not allowed against this resource."
            )),
            Err(Ok(e)) => Err(e),
            Err(Err(())) => Err(s3_error!(InvalidURI, "Could not parse the request path")),
        }
    }

    #[tracing::instrument(skip_all, fields(op = "RenameObject"))]
    async fn rename(&self, req: S3Request<Body>) -> S3Result<S3Response<Body>> {
        let Some(creds) = &req.credentials else {
            return Err(s3_error!(AccessDenied, "Access Denied"));
        };
        let (bucket, key) = self.target(&req.uri, &req.headers)?;
        let info = ReqInfo {
            headers: &req.headers,
            uri: &req.uri,
            peer: req.extensions.get::<Peer>().copied(),
        };
        let ak = Some(creds.access_key.as_str());
        self.authz
            .authorize(
                ak,
                &info,
                "RenameObject",
                &bucket,
                Some(&key),
                "s3:PutObject",
            )
            .await?;
        let Some(raw) = header(&req.headers, "x-amz-rename-source")? else {
            return Err(s3_error!(
                InvalidArgument,
                "RenameObject needs the x-amz-rename-source header"
            ));
        };
        let from = source_key(raw, &bucket)?;
        self.authz
            .authorize(
                ak,
                &info,
                "DeleteObject",
                &bucket,
                Some(&from),
                "s3:DeleteObject",
            )
            .await?;
        if from.ends_with('/') || key.ends_with('/') {
            return Err(s3_error!(
                InvalidRequest,
                "RenameObject does not rename keys that end with a slash"
            ));
        }
        if let Some(t) = header(&req.headers, "x-amz-client-token")?
            && (t.is_empty() || t.len() > 64 || !t.bytes().all(|b| (33..=126).contains(&b)))
        {
            return Err(s3_error!(
                InvalidArgument,
                "x-amz-client-token must be 1 to 64 ASCII characters from 33 to 126"
            ));
        }
        let conds = Conds::parse(&req.headers)?;
        let cond: RenameCondition = Arc::new(move |src, dst| conds.holds(src, dst));
        let svc = &self.authz.svc;
        match svc.rename_object_when(&bucket, &from, &key, cond).await {
            Ok(()) => {}
            // No source: say which is missing, the key or its bucket.
            Err(lode_objects::ObjError::NoSuchKey) => {
                svc.bucket(&bucket).await.map_err(crate::error::s3_error)?;
                return Err(s3_error!(NoSuchKey, "The rename source does not exist"));
            }
            Err(e) => return Err(crate::error::s3_error(e)),
        }
        tracing::debug!(bucket, from, to = key, "renamed");
        Ok(S3Response::new(Body::empty()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(etag: &str, secs: i64) -> ObjectRecord {
        ObjectRecord {
            size: 1,
            etag: etag.into(),
            last_modified_ms: secs * 1000 + 999,
            meta: Default::default(),
            checksums: Default::default(),
            segments: vec![],
            parts: vec![],
            upload_id: None,
            version_id: None,
            delete_marker: false,
        }
    }

    #[test]
    fn rename_source_forms() {
        assert_eq!(source_key("/bk/b%20c%25", "bk").unwrap(), "b c%");
        assert_eq!(source_key("/bk/x/y", "bk").unwrap(), "x/y");
        assert_eq!(source_key("bk/x", "bk").unwrap(), "x");
        assert_eq!(source_key("bk/bk/x", "bk").unwrap(), "bk/x");
        assert!(source_key("bkx/y", "bk").is_err(), "another bucket");
        assert!(source_key("/other/bk/x", "bk").is_err(), "another bucket");
        assert!(source_key("a", "bk").is_err());
        assert!(source_key("/", "bk").is_err());
        assert!(source_key("/bk/", "bk").is_err());
    }

    #[test]
    fn query_names_the_operation() {
        let u = |s: &str| s.parse::<Uri>().unwrap();
        assert!(is_rename(&u("/b/k?renameObject")));
        assert!(is_rename(&u("/b/k?x-id=RenameObject&renameObject=")));
        assert!(!is_rename(&u("/b/k?renameObjects")));
        assert!(!is_rename(&u("/b/renameObject")));
    }

    #[test]
    fn conditions_on_source_and_target() {
        let (s, d) = (rec("s", 100), rec("d", 200));
        let c = |f: &dyn Fn(&mut Conds)| {
            let mut c = Conds::default();
            f(&mut c);
            c
        };
        assert!(Conds::default().holds(&s, Some(&d)));
        assert!(c(&|c| c.src_match = Some("\"s\"".into())).holds(&s, None));
        assert!(!c(&|c| c.src_match = Some("\"x\"".into())).holds(&s, None));
        assert!(!c(&|c| c.src_none_match = Some("*".into())).holds(&s, None));
        assert!(c(&|c| c.src_modified_since = Some(99)).holds(&s, None));
        assert!(!c(&|c| c.src_modified_since = Some(100)).holds(&s, None));
        assert!(c(&|c| c.src_unmodified_since = Some(100)).holds(&s, None));
        assert!(!c(&|c| c.src_unmodified_since = Some(99)).holds(&s, None));
        assert!(c(&|c| c.dst_match = Some("d".into())).holds(&s, Some(&d)));
        assert!(!c(&|c| c.dst_match = Some("d".into())).holds(&s, None));
        assert!(!c(&|c| c.dst_none_match = Some("*".into())).holds(&s, Some(&d)));
        assert!(c(&|c| c.dst_none_match = Some("*".into())).holds(&s, None));
        assert!(c(&|c| c.dst_none_match = Some("x".into())).holds(&s, Some(&d)));
        assert!(!c(&|c| c.dst_modified_since = Some(100)).holds(&s, None));
        assert!(c(&|c| c.dst_modified_since = Some(100)).holds(&s, Some(&d)));
        assert!(c(&|c| c.dst_unmodified_since = Some(100)).holds(&s, None));
        assert!(!c(&|c| c.dst_unmodified_since = Some(100)).holds(&s, Some(&d)));
    }
}
