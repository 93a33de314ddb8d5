//! The S3 door: the `s3s::S3` trait over the object service. This module only translates
//! between S3 DTOs and the object service; the object logic lives in `objects`.

use std::collections::HashMap;
use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use lode_objects::{Checksums, ObjectMeta, ObjectRecord, UploadRecord};
use s3s::dto::*;
use s3s::{S3, S3Request, S3Response, S3Result, s3_error};
use tracing::instrument;

use crate::error::{IntoS3, ObjError, s3_error as obj_s3};
use crate::timestamps::{ts, ts_ms};
use lode_objects::checksum::{Algo, ChecksumSet};
use lode_objects::tags::TagSet;
use lode_objects::{Integrity, ObjectService, WriteCond};

/// The region where S3 answers a CreateBucket of a bucket the caller already owns with `200 OK`.
const LEGACY_REGION: &str = "us-east-1";

/// s3s's tag list (`TagSet` is Lode's pairs).
type TagSet_ = s3s::dto::TagSet;

/// The `x-amz-server-side-encryption*` headers of a write (every write operation's input
/// names them alike).
macro_rules! write_sse {
    ($i:expr) => {
        crate::sse::WriteHeaders {
            sse: $i.server_side_encryption.as_ref(),
            kms_key: $i.ssekms_key_id.as_ref(),
            context: $i.ssekms_encryption_context.as_ref(),
            bucket_key: $i.bucket_key_enabled,
            customer: customer_headers!($i),
        }
    };
}

/// The SSE-C headers of a request: (algorithm, key, key MD5).
macro_rules! customer_headers {
    ($i:expr) => {
        (
            $i.sse_customer_algorithm.as_ref(),
            $i.sse_customer_key.as_ref(),
            $i.sse_customer_key_md5.as_ref(),
        )
    };
}

/// The SSE-C headers of a copy's source.
macro_rules! source_customer_headers {
    ($i:expr) => {
        (
            $i.copy_source_sse_customer_algorithm.as_ref(),
            $i.copy_source_sse_customer_key.as_ref(),
            $i.copy_source_sse_customer_key_md5.as_ref(),
        )
    };
}

pub struct LodeS3 {
    svc: Arc<ObjectService>,
    users: Arc<lode_objects::users::Users>,
    /// For what is judged inside an operation (DeleteObjects' keys under a bucket policy).
    authz: crate::access::Authz,
    region: String,
    /// SSE-C keys are taken over plain HTTP (`[encryption] allow_sse_c_over_http`).
    sse_c_over_http: bool,
}

impl LodeS3 {
    pub fn new(authz: crate::access::Authz, region: String) -> Self {
        Self {
            svc: Arc::clone(&authz.svc),
            users: Arc::clone(&authz.users),
            authz,
            region,
            sse_c_over_http: false,
        }
    }

    /// Takes SSE-C keys over plain HTTP too (AWS refuses them).
    pub fn allow_sse_c_over_http(mut self, allow: bool) -> Self {
        self.sse_c_over_http = allow;
        self
    }

    /// Whether the request came over TLS, for the SSE-C headers.
    fn transport<T>(&self, req: &S3Request<T>) -> crate::sse::Transport {
        crate::sse::Transport {
            secure: req
                .extensions
                .get::<crate::access::Peer>()
                .is_some_and(|p| p.secure),
            allow_plain: self.sse_c_over_http,
        }
    }

    /// `x-amz-expiration` for the current object `rec` at `bucket/key`: when a lifecycle rule
    /// expires it, and which (`expiry-date="<HTTP date>", rule-id="<id>"`, as S3 sends it).
    async fn expiration(&self, bucket: &str, key: &str, rec: &ObjectRecord) -> Option<String> {
        let (due, rule) = self.svc.expiration_of(bucket, key, rec).await?;
        let date = fmt_http_date(&ts(due))?;
        Some(format!("expiry-date=\"{date}\", rule-id=\"{rule}\""))
    }

    /// `x-amz-abort-date` and `x-amz-abort-rule-id` of an upload initiated at `initiated_ms`.
    async fn abort_rule(
        &self,
        bucket: &str,
        key: &str,
        initiated_ms: i64,
    ) -> (Option<Timestamp>, Option<String>) {
        match self.svc.abort_rule_of(bucket, key, initiated_ms).await {
            Some((due, rule)) => (Some(ts(due)), Some(rule)),
            None => (None, None),
        }
    }

    /// Whether `bucket` is versioned (Enabled or Suspended), for the version headers.
    async fn versioned(&self, bucket: &str) -> bool {
        self.svc
            .versioning_of(bucket)
            .await
            .is_ok_and(|v| v != lode_objects::Versioning::Off)
    }

    /// The object (or one version of it) to read. A key whose newest version is a delete
    /// marker answers `404 NoSuchKey` with `x-amz-delete-marker: true` and the marker's id.
    async fn open_for_read(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<&str>,
        to_get: bool,
    ) -> S3Result<lode_objects::ObjectHandle> {
        let r = match (version_id, to_get) {
            (Some(v), true) => self.svc.open_object_version_to_get(bucket, key, v).await,
            (Some(v), false) => self.svc.open_object_version(bucket, key, v).await,
            (None, true) => self.svc.open_object_to_get(bucket, key).await,
            (None, false) => self.svc.open_object(bucket, key).await,
        };
        match r {
            Err(ObjError::NoSuchKey) => Err(self.absent(bucket, key).await),
            r => r.s3(),
        }
    }

    /// The record (without its inline payload) of the object or one version of it, for HEAD
    /// and GetObjectAttributes; absent keys and delete markers as [`Self::open_for_read`].
    async fn head_for_read(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<&str>,
    ) -> S3Result<ObjectRecord> {
        match version_id {
            Some(v) => Ok(self
                .open_for_read(bucket, key, Some(v), false)
                .await?
                .record
                .into_head()),
            None => match self.svc.head_object(bucket, key).await {
                Err(ObjError::NoSuchKey) => Err(self.absent(bucket, key).await),
                r => r.s3(),
            },
        }
    }

    /// `404 NoSuchKey`, with the delete marker's headers when one hides the key.
    async fn absent(&self, bucket: &str, key: &str) -> s3s::S3Error {
        let mut e = obj_s3(ObjError::NoSuchKey);
        if let Ok(Some(newest)) = self.svc.newest_version(bucket, key).await
            && newest.delete_marker
        {
            let mut h = http::HeaderMap::new();
            h.insert(
                "x-amz-delete-marker",
                http::HeaderValue::from_static("true"),
            );
            if let Ok(v) =
                http::HeaderValue::from_str(newest.version_id.as_deref().unwrap_or("null"))
            {
                h.insert("x-amz-version-id", v);
            }
            e.set_headers(h);
        }
        e
    }

    /// The owner and ACL an object write stores ([`ObjectMeta::owner`], [`ObjectMeta::acl`])
    /// for its `x-amz-acl` or `x-amz-grant-*` headers, under the bucket's object ownership and
    /// Block Public Access. An anonymous writer's object is the bucket owner's.
    async fn write_acl(
        &self,
        bucket: &str,
        creds: Option<&s3s::auth::Credentials>,
        canned: Option<&str>,
        headers: &[(lode_objects::acl::Permission, &str)],
    ) -> S3Result<lode_objects::acl::Stored> {
        let Some(access) = self.svc.access_of(bucket).await.s3()? else {
            return Err(obj_s3(ObjError::NoSuchBucket));
        };
        let bucket_owner = self.users.owner_name(&access.owner);
        let writer = creds
            .and_then(|c| self.users.name_of(&c.access_key))
            .unwrap_or_else(|| bucket_owner.clone());
        self.resolving(|| {
            lode_objects::acl::object_write(
                &writer,
                &bucket_owner,
                access.ownership,
                canned,
                headers,
                access.block.block_public_acls,
                &*self.users,
            )
        })
        .await
    }

    /// Runs `f`, which resolves the users an ACL names; when it finds one unknown, the users are
    /// read again first (a user added through another gateway a moment ago) and `f` runs once
    /// more.
    async fn resolving<T>(&self, f: impl Fn() -> Result<T, ObjError>) -> S3Result<T> {
        match f() {
            Err(ObjError::InvalidArgument(_) | ObjError::UnresolvableGrantByEmail(_)) => {
                if let Err(e) = self.users.reload().await {
                    tracing::warn!(error = %e, "reloading users failed");
                }
                f().s3()
            }
            r => r.s3(),
        }
    }

    /// A new bucket's access settings from its CreateBucket (`x-amz-acl`, `x-amz-grant-*`,
    /// `x-amz-object-ownership`), to be stored with it in one commit.
    async fn new_bucket_access(
        &self,
        i: &CreateBucketInput,
        creator: &str,
    ) -> S3Result<Vec<(String, String)>> {
        use lode_objects::acl::{self, Acl, Ownership};
        let headers = crate::acl::header_grants(
            i.grant_full_control.as_ref(),
            i.grant_read.as_ref(),
            i.grant_read_acp.as_ref(),
            i.grant_write.as_ref(),
            i.grant_write_acp.as_ref(),
        );
        let acl = match (i.acl.as_ref(), headers.is_empty()) {
            (Some(_), false) => {
                return Err(s3_error!(
                    InvalidRequest,
                    "Specifying both Canned ACLs and Header Grants is not allowed"
                ));
            }
            (Some(c), true) => Some(Acl::canned(c.as_str(), creator, creator).s3()?),
            (None, false) => Some(
                self.resolving(|| Acl::from_headers(&headers, &*self.users))
                    .await?,
            ),
            (None, true) => None,
        }
        .filter(|a| !a.is_owner_only(creator));
        let ownership = match &i.object_ownership {
            None => None,
            Some(o) => Some(Ownership::parse(o.as_str()).ok_or_else(|| {
                s3_error!(
                    InvalidArgument,
                    "Invalid x-amz-object-ownership header: {}",
                    o.as_str()
                )
            })?),
        };
        if ownership == Some(Ownership::BucketOwnerEnforced) && acl.is_some() {
            return Err(obj_s3(ObjError::BucketAclWithOwnership));
        }
        if acl.as_ref().is_some_and(Acl::is_public)
            && self.svc.config().public_access_block.block_public_acls
        {
            return Err(obj_s3(ObjError::PublicAclBlocked));
        }
        let mut settings = vec![];
        if let Some(a) = acl {
            settings.push((acl::SETTING.to_owned(), a.encode_setting()));
        }
        if let Some(o) = ownership {
            settings.push((acl::OWNERSHIP_SETTING.to_owned(), o.as_str().to_owned()));
        }
        Ok(settings)
    }

    /// An ACL set by PutBucketAcl or PutObjectAcl (canned, grant headers, or body) for a
    /// resource owned by `owner` in `bucket`, owned by `bucket_owner`, checked against the
    /// bucket's object ownership and Block Public Access.
    async fn asked_acl(
        &self,
        bucket: &str,
        canned: Option<&str>,
        headers: &[(lode_objects::acl::Permission, &str)],
        body: Option<&AccessControlPolicy>,
        owner: &str,
        bucket_owner: &str,
    ) -> S3Result<lode_objects::acl::Acl> {
        use lode_objects::acl::Acl;
        let asked = usize::from(canned.is_some())
            + usize::from(!headers.is_empty())
            + usize::from(body.is_some());
        if asked > 1 {
            return Err(s3_error!(
                InvalidRequest,
                "Specifying more than one of a canned ACL, header grants and an ACL body is not allowed"
            ));
        }
        let acl = match (canned, body) {
            (Some(c), _) => Acl::canned(c, owner, bucket_owner).s3()?,
            (None, Some(b)) => {
                let grants = crate::acl::body_grants(b, owner)?;
                self.resolving(|| Acl::from_grants(&grants, &*self.users))
                    .await?
            }
            (None, None) if !headers.is_empty() => {
                self.resolving(|| Acl::from_headers(headers, &*self.users))
                    .await?
            }
            (None, None) => {
                return Err(s3_error!(
                    MissingSecurityHeader,
                    "Your request was missing a required header: an ACL (x-amz-acl, x-amz-grant-*, or an AccessControlPolicy body)"
                ));
            }
        };
        let access = self
            .svc
            .access_of(bucket)
            .await
            .s3()?
            .ok_or_else(|| obj_s3(ObjError::NoSuchBucket))?;
        // ACLs disabled (BucketOwnerEnforced): only the bucket owner's full control.
        if !access.ownership.acls_enabled()
            && !lode_objects::acl::disabled_accepts(canned, Some(&acl), bucket_owner)
        {
            return Err(obj_s3(ObjError::AclNotSupported));
        }
        if acl.is_public() && access.block.block_public_acls {
            return Err(obj_s3(ObjError::PublicAclBlocked));
        }
        Ok(acl)
    }

    /// Whom a listing (or an object's ACL) names as owner of objects stored without one: the
    /// bucket's owner, and whether its ACLs are disabled (every object is then the bucket
    /// owner's).
    async fn listing_owner(&self, bucket: &str) -> S3Result<(String, bool)> {
        match self.svc.access_of(bucket).await.s3()? {
            Some(a) => Ok((self.users.owner_name(&a.owner), !a.ownership.acls_enabled())),
            None => Err(obj_s3(ObjError::NoSuchBucket)),
        }
    }

    /// The user name of a bucket's owner (`NoSuchBucket` when there is no such bucket).
    async fn bucket_owner_name(&self, bucket: &str) -> S3Result<String> {
        match self.svc.bucket_owner(bucket).await.s3()? {
            Some(stored) => Ok(self.users.owner_name(&stored)),
            None => Err(obj_s3(ObjError::NoSuchBucket)),
        }
    }

    /// The user name behind the request's access key.
    fn user(&self, creds: Option<&s3s::auth::Credentials>) -> String {
        creds
            .and_then(|c| self.users.name_of(&c.access_key))
            .unwrap_or_default()
    }
}

/// The object lock a write asks for (`x-amz-object-lock-mode`, `-retain-until-date`,
/// `-legal-hold`); the service checks it against the bucket.
fn asked_lock(
    mode: Option<&ObjectLockMode>,
    until: Option<&Timestamp>,
    hold: Option<&ObjectLockLegalHoldStatus>,
) -> S3Result<lode_objects::ObjectLock> {
    Ok(lode_objects::ObjectLock {
        mode: mode.map(|m| m.as_str().to_owned()),
        retain_until_ms: until.map(ts_ms),
        legal_hold: legal_hold_on(hold.map(ObjectLockLegalHoldStatus::as_str))?,
    })
}

/// A legal hold status: `ON` or `OFF` (absent: off), else `MalformedXML` as S3 answers.
fn legal_hold_on(s: Option<&str>) -> S3Result<bool> {
    match s {
        None | Some(ObjectLockLegalHoldStatus::OFF) => Ok(false),
        Some(ObjectLockLegalHoldStatus::ON) => Ok(true),
        Some(_) => Err(s3_error!(
            MalformedXML,
            "The XML you provided was not well-formed or did not validate against our published schema"
        )),
    }
}

/// A retention mode from an S3 document: exactly `GOVERNANCE` or `COMPLIANCE`, else
/// `MalformedXML` (S3's answer, lower case included).
fn lock_mode(m: Option<&str>) -> S3Result<String> {
    match m {
        Some(m) if lode_objects::objlock::is_mode(m) => Ok(m.to_owned()),
        _ => Err(s3_error!(
            MalformedXML,
            "The XML you provided was not well-formed or did not validate against our published schema"
        )),
    }
}

/// The object lock headers of GET and HEAD.
fn lock_out(
    l: &lode_objects::ObjectLock,
) -> (
    Option<ObjectLockMode>,
    Option<Timestamp>,
    Option<ObjectLockLegalHoldStatus>,
) {
    (
        l.mode.clone().map(ObjectLockMode::from),
        l.retain_until_ms.map(ts),
        l.legal_hold
            .then(|| ObjectLockLegalHoldStatus::from_static(ObjectLockLegalHoldStatus::ON)),
    )
}

fn ts_secs(t: &Timestamp) -> i64 {
    time::OffsetDateTime::from(t.clone()).unix_timestamp()
}

fn fmt_http_date(t: &Timestamp) -> Option<String> {
    let mut v = vec![];
    t.format(TimestampFormat::HttpDate, &mut v).ok()?;
    String::from_utf8(v).ok()
}

fn parse_http_date(s: &str) -> Option<Timestamp> {
    Timestamp::parse(TimestampFormat::HttpDate, s).ok()
}

fn owner_of(req_creds: Option<&s3s::auth::Credentials>) -> String {
    req_creds.map(|c| c.access_key.clone()).unwrap_or_default()
}

/// The `Initiator` of a multipart upload: its user, as `Owner` names users.
fn initiator(name: &str) -> Initiator {
    let o = crate::acl::owner(name);
    Initiator {
        display_name: o.display_name,
        id: o.id,
    }
}

/// Strips `aws-chunked` (a transfer detail) from Content-Encoding, as S3 does.
fn clean_encoding(e: Option<String>) -> Option<String> {
    let e = e?;
    let kept: Vec<&str> = e
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty() && !t.eq_ignore_ascii_case("aws-chunked"))
        .collect();
    if kept.is_empty() {
        None
    } else {
        Some(kept.join(", "))
    }
}

#[allow(clippy::too_many_arguments)]
/// A body sent with neither Content-Length nor Transfer-Encoding would be read as empty: S3
/// refuses it with `411 MissingContentLength` instead of storing an empty object.
fn require_length(headers: &http::HeaderMap, content_length: Option<i64>) -> S3Result<()> {
    if content_length.is_none() && !headers.contains_key(http::header::TRANSFER_ENCODING) {
        return Err(s3_error!(
            MissingContentLength,
            "You must provide the Content-Length HTTP header."
        ));
    }
    Ok(())
}

/// The stored content type, or S3's default for objects stored without one.
fn content_type_of(m: &ObjectMeta) -> String {
    m.content_type
        .clone()
        .unwrap_or_else(|| "binary/octet-stream".to_owned())
}

fn object_meta(
    content_type: Option<String>,
    cache_control: Option<String>,
    content_disposition: Option<String>,
    content_encoding: Option<String>,
    content_language: Option<String>,
    expires: Option<Timestamp>,
    metadata: Option<Metadata>,
) -> ObjectMeta {
    let mut user: Vec<(String, String)> = metadata
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), v))
        .collect();
    user.sort();
    ObjectMeta {
        content_type,
        cache_control,
        content_disposition,
        content_encoding: clean_encoding(content_encoding),
        content_language,
        expires: expires.as_ref().and_then(fmt_http_date),
        user,
        tags: vec![],
        lock: Default::default(),
        owner: None,
        acl: None,
        sse: None,
    }
}

/// PutBucketEncryption: one rule, `AES256`, `aws:kms` or `aws:kms:dsse` (a KMS key only with
/// the latter two), `BucketKeyEnabled`, and `BlockedEncryptionTypes` (`blocked`, comma-joined:
/// `NONE` allows SSE-C writes, `SSE-C` blocks them; absent: as it was).
pub(crate) async fn apply_bucket_encryption(
    svc: &ObjectService,
    bucket: &str,
    cfg: &ServerSideEncryptionConfiguration,
    blocked: Option<&str>,
) -> S3Result<()> {
    use lode_objects::encryption::{Algorithm, BucketEncryption};
    let [rule] = cfg.rules.as_slice() else {
        return Err(s3_error!(
            MalformedXML,
            "The XML you provided was not well-formed or did not validate against our published schema: exactly one Rule is allowed"
        ));
    };
    let (algorithm, kms_key_id) = match &rule.apply_server_side_encryption_by_default {
        None => (Algorithm::Aes256, None),
        Some(d) => {
            let a = Algorithm::parse(d.sse_algorithm.as_str()).ok_or_else(|| {
                s3_error!(
                    MalformedXML,
                    "The XML you provided was not well-formed or did not validate against our published schema: unknown SSEAlgorithm"
                )
            })?;
            if a == Algorithm::Aes256 && d.kms_master_key_id.is_some() {
                return Err(s3_error!(
                    InvalidArgument,
                    "a KMSMasterKeyID is not applicable if the default sse algorithm is not aws:kms or aws:kms:dsse"
                ));
            }
            (a, d.kms_master_key_id.clone())
        }
    };
    let allow_sse_c = match blocked {
        None => svc
            .bucket_encryption(bucket)
            .await
            .s3()?
            .is_some_and(|e| e.allow_sse_c),
        Some("NONE") => true,
        Some("SSE-C") => false,
        Some(other) => {
            return Err(s3_error!(
                InvalidArgument,
                "Invalid BlockedEncryptionTypes EncryptionType: {other} (valid: NONE, SSE-C)"
            ));
        }
    };
    let e = BucketEncryption {
        algorithm,
        kms_key_id,
        bucket_key: rule.bucket_key_enabled.unwrap_or(false),
        allow_sse_c,
    };
    svc.set_bucket_encryption(bucket, Some(e)).await.s3()
}

/// The version id a delete answers with (`null` for the `null` version).
fn version_out(d: &lode_objects::Deleted) -> Option<String> {
    d.version_id
        .clone()
        .or_else(|| d.delete_marker.then(|| "null".to_owned()))
}

/// A record's version id as S3 answers it in a versioned bucket (`null` for the `null`
/// version); `None` in a bucket that was never versioned (no header).
fn version_header(rec_version: Option<&str>, versioned: bool) -> Option<String> {
    versioned.then(|| rec_version.unwrap_or("null").to_owned())
}

/// `x-amz-tagging` (PutObject, CopyObject, CreateMultipartUpload) as a tag set (absent: none).
fn header_tags(h: Option<&str>) -> S3Result<TagSet> {
    h.map_or(Ok(vec![]), lode_objects::tags::parse_header).s3()
}

/// A `Tagging` document's tags: every `Tag` needs its `Key` and `Value` (else MalformedXML).
fn doc_tags(t: Tagging) -> S3Result<TagSet> {
    t.tag_set
        .into_iter()
        .map(|t| match (t.key, t.value) {
            (Some(k), Some(v)) => Ok((k, v)),
            _ => Err(s3_error!(
                MalformedXML,
                "The XML you provided was not well-formed or did not validate against our published schema"
            )),
        })
        .collect()
}

fn tag_set(tags: TagSet) -> TagSet_ {
    tags.into_iter()
        .map(|(k, v)| Tag {
            key: Some(k),
            value: Some(v),
        })
        .collect()
}

fn user_meta(m: &ObjectMeta) -> Option<Metadata> {
    if m.user.is_empty() {
        None
    } else {
        Some(m.user.iter().cloned().collect::<HashMap<_, _>>())
    }
}

fn etag(e: &str) -> ETag {
    ETag::Strong(e.to_owned())
}

/// s3s's aws-chunked trailer, as the object service reads it.
struct S3sTrailers(s3s::TrailingHeaders);

impl lode_objects::Trailers for S3sTrailers {
    fn take(&self) -> Option<http::HeaderMap> {
        self.0.take()
    }
}

/// The algorithms to compute for an upload: the announced one, the header values, the trailer.
/// A `Content-MD5` header that is not the base64 of 16 bytes (an empty one included) is
/// `400 InvalidDigest` before any byte of the body is read.
fn integrity<T>(
    req: &S3Request<T>,
    content_md5: Option<String>,
    algorithm: Option<&ChecksumAlgorithm>,
    expected: ChecksumSet,
) -> S3Result<Integrity> {
    if let Some(raw) = req.headers.get("content-md5") {
        use base64::engine::general_purpose::STANDARD;
        let ok = raw
            .to_str()
            .ok()
            .and_then(|s| STANDARD.decode(s.trim()).ok())
            .is_some_and(|b| b.len() == 16);
        if !ok {
            return Err(obj_s3(ObjError::InvalidDigest));
        }
    }
    let mut algos: Vec<Algo> = expected.values.iter().map(|(a, _)| *a).collect();
    if let Some(a) = algorithm {
        let a = Algo::parse(a.as_str())
            .ok_or_else(|| s3_error!(InvalidArgument, "Unsupported checksum algorithm"))?;
        algos.push(a);
    }
    if let Some(t) = req.headers.get("x-amz-trailer") {
        let t = t
            .to_str()
            .map_err(|_| s3_error!(InvalidArgument, "invalid x-amz-trailer"))?;
        for name in t.split(',') {
            match Algo::parse(name) {
                Some(a) => algos.push(a),
                None => {
                    return Err(s3_error!(
                        InvalidArgument,
                        "Unsupported trailer: {}",
                        name.trim()
                    ));
                }
            }
        }
    }
    algos.dedup();
    Ok(Integrity {
        content_md5,
        expected,
        algos,
        trailers: req
            .trailing_headers
            .clone()
            .map(|t| Box::new(S3sTrailers(t)) as Box<dyn lode_objects::Trailers>),
        sse: Default::default(),
    })
}

/// (crc32, crc32c, crc64nvme, sha1, sha256, type), in the order of the DTO fields.
type ChecksumFields = (
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<ChecksumType>,
);

fn checksum_fields(c: &Checksums) -> ChecksumFields {
    (
        c.crc32.clone(),
        c.crc32c.clone(),
        c.crc64nvme.clone(),
        c.sha1.clone(),
        c.sha256.clone(),
        c.kind.clone().map(ChecksumType::from),
    )
}

/// `If-Match` / `If-None-Match: *` of PutObject and CompleteMultipartUpload.
fn write_cond(
    if_match: Option<&ETagCondition>,
    if_none_match: Option<&ETagCondition>,
) -> WriteCond {
    WriteCond {
        if_match: if_match.map(|c| match c {
            ETagCondition::Any => "*".to_owned(),
            ETagCondition::ETag(e) => e.value().to_owned(),
        }),
        if_none_match_any: if_none_match.is_some_and(ETagCondition::is_any),
        if_none_match: match if_none_match {
            Some(ETagCondition::ETag(e)) => Some(e.value().to_owned()),
            _ => None,
        },
        ..Default::default()
    }
}

/// The conditions of DeleteObject (`If-Match`, `x-amz-if-match-size`,
/// `x-amz-if-match-last-modified-time`) and of each object of DeleteObjects (`ETag`, `Size`,
/// `LastModifiedTime`). `If-Match` of an absent key is `NoSuchKey`; the size and time
/// conditions hold for an absent key, as AWS documents them.
fn delete_cond(
    etag: Option<&str>,
    size: Option<i64>,
    modified: Option<&Timestamp>,
) -> S3Result<WriteCond> {
    let size = size
        .map(u64::try_from)
        .transpose()
        .map_err(|_| s3_error!(InvalidArgument, "A size condition cannot be negative"))?;
    Ok(WriteCond {
        if_match: etag.map(str::to_owned),
        if_match_size: size,
        if_match_modified_s: modified.map(ts_secs),
        ..Default::default()
    })
}

/// GET/HEAD preconditions (RFC 7232 order, as S3 applies them).
fn check_read_conditions(
    rec: &ObjectRecord,
    if_match: Option<&ETagCondition>,
    if_none_match: Option<&ETagCondition>,
    if_modified_since: Option<&Timestamp>,
    if_unmodified_since: Option<&Timestamp>,
) -> Result<(), ObjError> {
    let lm = rec.last_modified_ms.div_euclid(1000);
    let matches = |c: &ETagCondition| match c {
        ETagCondition::Any => true,
        ETagCondition::ETag(e) => e.value() == rec.etag,
    };
    if let Some(c) = if_match {
        if !matches(c) {
            return Err(ObjError::PreconditionFailed);
        }
    } else if let Some(t) = if_unmodified_since
        && lm > ts_secs(t)
    {
        return Err(ObjError::PreconditionFailed);
    }
    if let Some(c) = if_none_match {
        if matches(c) {
            return Err(ObjError::NotModified);
        }
    } else if let Some(t) = if_modified_since
        && lm <= ts_secs(t)
    {
        return Err(ObjError::NotModified);
    }
    Ok(())
}

/// GET/HEAD preconditions as S3 answers them: a `304 Not Modified` carries the object's ETag
/// and Last-Modified, as AWS sends them.
fn read_conditions(
    rec: &ObjectRecord,
    if_match: Option<&ETagCondition>,
    if_none_match: Option<&ETagCondition>,
    if_modified_since: Option<&Timestamp>,
    if_unmodified_since: Option<&Timestamp>,
) -> S3Result<()> {
    check_read_conditions(
        rec,
        if_match,
        if_none_match,
        if_modified_since,
        if_unmodified_since,
    )
    .map_err(|e| {
        let not_modified = matches!(e, ObjError::NotModified);
        let mut err = obj_s3(e);
        if not_modified {
            let mut h = http::HeaderMap::new();
            if let Ok(v) = http::HeaderValue::from_str(&format!("\"{}\"", rec.etag)) {
                h.insert(http::header::ETAG, v);
            }
            if let Some(v) = fmt_http_date(&ts(rec.last_modified_ms))
                .and_then(|d| http::HeaderValue::from_str(&d).ok())
            {
                h.insert(http::header::LAST_MODIFIED, v);
            }
            err.set_headers(h);
        }
        err
    })
}

/// The bucket and key of `x-amz-copy-source` (access points and versions are not built).
/// The bucket, key and version (if named) of the `x-amz-copy-source` of CopyObject or
/// UploadPartCopy (`op`).
fn source_version<'a>(
    c: &'a CopySource,
    op: &str,
) -> S3Result<(&'a str, &'a str, Option<&'a str>)> {
    match c {
        CopySource::Bucket {
            bucket,
            key,
            version_id,
        } => Ok((bucket, key, version_id.as_deref())),
        _ => Err(obj_s3(ObjError::NotImplemented(format!(
            "{op} from an access point"
        )))),
    }
}

/// A copy source that names a delete marker by its version id: `400 InvalidRequest`, as S3
/// answers (a GET of it is `405`).
fn copy_source_error(e: ObjError) -> s3s::S3Error {
    match e {
        ObjError::DeleteMarker(_) => s3_error!(
            InvalidRequest,
            "The source of a copy request may not specifically refer to a delete marker by version id."
        ),
        e => obj_s3(e),
    }
}

/// The `x-amz-copy-source-if-*` conditions of CopyObject and UploadPartCopy.
struct CopySourceConds {
    if_match: Option<ETagCondition>,
    if_none_match: Option<ETagCondition>,
    if_modified_since: Option<Timestamp>,
    if_unmodified_since: Option<Timestamp>,
}

impl CopySourceConds {
    fn check(&self, rec: &ObjectRecord) -> Result<(), ObjError> {
        check_read_conditions(
            rec,
            self.if_match.as_ref(),
            self.if_none_match.as_ref(),
            self.if_modified_since.as_ref(),
            self.if_unmodified_since.as_ref(),
        )
        .map_err(|e| match e {
            // For copies every failed source condition is a 412.
            ObjError::NotModified => ObjError::PreconditionFailed,
            e => e,
        })
    }
}

/// What a GET or HEAD returns: the byte range, Content-Range, part count and checksums.
struct ReadPlan {
    start: u64,
    end: u64,
    content_range: Option<String>,
    parts_count: Option<i32>,
    sums: Checksums,
}

fn plan_read(
    rec: &ObjectRecord,
    part_number: Option<i32>,
    range: Option<Range>,
    checksum_mode: Option<&ChecksumMode>,
) -> S3Result<ReadPlan> {
    let mut plan = ReadPlan {
        start: 0,
        end: rec.size,
        content_range: None,
        parts_count: None,
        sums: Checksums::default(),
    };
    let mut part_sums = None;
    if let Some(n) = part_number {
        if range.is_some() {
            return Err(s3_error!(
                InvalidRequest,
                "Cannot specify both Range header and partNumber query parameter"
            ));
        }
        let (s, e, idx) = part_range(rec, n).s3()?;
        (plan.start, plan.end) = (s, e);
        if !rec.parts.is_empty() {
            plan.parts_count = Some(rec.parts.len() as i32);
            plan.content_range = Some(format!("bytes {}-{}/{}", s, e.saturating_sub(1), rec.size));
            part_sums = Some(rec.parts[idx].checksums.clone());
        }
    } else if let Some(r) = range {
        let rr = r
            .check(rec.size)
            .map_err(|_| obj_s3(ObjError::InvalidRange))?;
        (plan.start, plan.end) = (rr.start, rr.end);
        plan.content_range = Some(format!("bytes {}-{}/{}", rr.start, rr.end - 1, rec.size));
    }
    // Checksums only on request, and only for the whole object or a whole part.
    if checksum_mode.is_some_and(|m| m.as_str() == ChecksumMode::ENABLED) {
        if let Some(p) = part_sums {
            // A part's own checksum, typed as the object's: a part of a COMPOSITE object
            // reports COMPOSITE, as S3 does.
            let kind = match p.is_empty() {
                true => None,
                false => rec.checksums.kind.clone().or(p.kind.clone()),
            };
            plan.sums = Checksums { kind, ..p };
        } else if plan.content_range.is_none() {
            plan.sums = rec.checksums.clone();
        }
    }
    Ok(plan)
}

/// The byte range of the part numbered `n` (as uploaded; a completion may skip numbers) and its
/// index among the object's parts. An object from a single PUT has part 1 only.
fn part_range(rec: &ObjectRecord, n: i32) -> Result<(u64, u64, usize), ObjError> {
    if !(1..=lode_objects::MAX_PARTS).contains(&n) {
        return Err(ObjError::InvalidArgument(format!(
            "Part number must be an integer between 1 and {}, inclusive",
            lode_objects::MAX_PARTS
        )));
    }
    if rec.parts.is_empty() {
        return if n == 1 {
            Ok((0, rec.size, 0))
        } else {
            Err(ObjError::InvalidPartNumber)
        };
    }
    let idx = rec
        .parts
        .iter()
        .position(|p| i64::from(p.number) == i64::from(n))
        .ok_or(ObjError::InvalidPartNumber)?;
    let start: u64 = rec.parts[..idx].iter().map(|p| p.size).sum();
    Ok((start, start + rec.parts[idx].size, idx))
}

fn list_token(last: &str) -> String {
    URL_SAFE_NO_PAD.encode(last.as_bytes())
}

fn parse_token(t: &str) -> S3Result<String> {
    URL_SAFE_NO_PAD
        .decode(t)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or_else(|| {
            s3_error!(
                InvalidArgument,
                "The continuation token provided is incorrect"
            )
        })
}

fn url_encode(s: &str) -> String {
    // S3's encoding-type=url: percent-encode everything but unreserved characters and '/'.
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `encoding-type`: only `url` exists.
fn url_encoding(e: Option<&EncodingType>) -> S3Result<bool> {
    match e.map(EncodingType::as_str) {
        None => Ok(false),
        Some("url") => Ok(true),
        Some(_) => Err(s3_error!(
            InvalidArgument,
            "Invalid Encoding Method specified in Request"
        )),
    }
}

fn max_keys(m: Option<i32>) -> S3Result<usize> {
    match m {
        None => Ok(1000),
        Some(n) if n < 0 => Err(s3_error!(InvalidArgument, "max-keys must be non-negative")),
        Some(n) => Ok((n as usize).min(1000)),
    }
}

/// A listed object's `ChecksumAlgorithm`: the algorithms of the checksums it has (every object
/// Lode stores has one, CRC64NVME when its upload or its write on the mount named none).
fn checksum_algorithms(c: lode_objects::ChecksumNames) -> Option<Vec<ChecksumAlgorithm>> {
    let v: Vec<ChecksumAlgorithm> = c.algorithms().map(ChecksumAlgorithm::from_static).collect();
    (!v.is_empty()).then_some(v)
}

fn list_entries(
    page: &lode_objects::ListPage,
    objects: Vec<lode_objects::Brief>,
    fetch_owner: Option<(&str, bool)>,
    enc: bool,
) -> (Vec<Object>, Vec<CommonPrefix>) {
    let e = |s: &str| if enc { url_encode(s) } else { s.to_owned() };
    let contents = objects
        .into_iter()
        .map(|r| Object {
            key: Some(if enc { url_encode(&r.key) } else { r.key }),
            e_tag: Some(etag(&r.etag)),
            last_modified: Some(ts(r.last_modified_ms)),
            size: Some(r.size as i64),
            storage_class: Some(ObjectStorageClass::from_static(
                ObjectStorageClass::STANDARD,
            )),
            // The object's owner (`None` stored: the bucket's, `fetch_owner`).
            // With FetchOwner (v1: always): the object's owner (`None` stored, or ACLs
            // disabled: the bucket's owner, given with whether they are).
            owner: fetch_owner.map(|(b, enforced)| {
                crate::acl::owner(match (&r.owner, enforced) {
                    (Some(o), false) => o,
                    _ => b,
                })
            }),
            checksum_algorithm: checksum_algorithms(r.checksums),
            checksum_type: r.checksums.kind().map(ChecksumType::from_static),
            restore_status: None,
        })
        .collect();
    let prefixes = page
        .common_prefixes
        .iter()
        .map(|p| CommonPrefix { prefix: Some(e(p)) })
        .collect();
    (contents, prefixes)
}

#[async_trait::async_trait]
impl S3 for LodeS3 {
    #[instrument(skip_all, fields(bucket = %req.input.bucket))]
    async fn create_bucket(
        &self,
        req: S3Request<CreateBucketInput>,
    ) -> S3Result<S3Response<CreateBucketOutput>> {
        if let Some(lc) = req
            .input
            .create_bucket_configuration
            .as_ref()
            .and_then(|c| c.location_constraint.as_ref())
            && lc.as_str() != self.region
            && !lc.as_str().is_empty()
        {
            return Err(s3_error!(
                IllegalLocationConstraintException,
                "The {} location constraint is incompatible for the region specific endpoint this request was sent to ({}).",
                lc.as_str(),
                self.region
            ));
        }
        let creator = self.user(req.credentials.as_ref());
        let settings = self.new_bucket_access(&req.input, &creator).await?;
        let made = if req.input.object_lock_enabled_for_bucket == Some(true) {
            self.svc
                .create_bucket_locked(&req.input.bucket, &creator, settings)
                .await
        } else {
            self.svc
                .create_bucket_with(&req.input.bucket, &creator, settings)
                .await
        };
        match made {
            // S3's legacy rule in us-east-1: creating a bucket you already own succeeds (and
            // changes nothing); every other region answers 409 BucketAlreadyOwnedByYou.
            Err(ObjError::BucketAlreadyOwnedByYou) if self.region == LEGACY_REGION => {}
            r => r.s3()?,
        }
        Ok(S3Response::new(CreateBucketOutput {
            location: Some(format!("/{}", req.input.bucket)),
        }))
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket))]
    async fn delete_bucket(
        &self,
        req: S3Request<DeleteBucketInput>,
    ) -> S3Result<S3Response<DeleteBucketOutput>> {
        self.svc.delete_bucket(&req.input.bucket).await.s3()?;
        if let Err(e) = self.users.drop_bucket(&req.input.bucket).await {
            tracing::warn!(error = %e, "dropping the grants of a deleted bucket failed");
        }
        Ok(S3Response::new(DeleteBucketOutput {}))
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket))]
    async fn head_bucket(
        &self,
        req: S3Request<HeadBucketInput>,
    ) -> S3Result<S3Response<HeadBucketOutput>> {
        self.svc.bucket(&req.input.bucket).await.s3()?;
        Ok(S3Response::new(HeadBucketOutput {
            bucket_region: Some(self.region.clone()),
            ..Default::default()
        }))
    }

    #[instrument(skip_all)]
    async fn list_buckets(
        &self,
        req: S3Request<ListBucketsInput>,
    ) -> S3Result<S3Response<ListBucketsOutput>> {
        let user = self.user(req.credentials.as_ref());
        let i = &req.input;
        // AWS: 1..=10000, and 10000 when not given.
        let max = match i.max_buckets {
            None => 10_000,
            Some(n) if (1..=10_000).contains(&n) => n as usize,
            Some(_) => {
                return Err(s3_error!(
                    InvalidArgument,
                    "max-buckets must be an integer between 1 and 10000"
                ));
            }
        };
        let after = i
            .continuation_token
            .as_deref()
            .map(parse_token)
            .transpose()?;
        // Every bucket lives in this gateway's region.
        let region_ok = i.bucket_region.as_deref().is_none_or(|r| r == self.region);
        let mut visible = self
            .svc
            .list_buckets()
            .await
            .s3()?
            .into_iter()
            .filter(|_| region_ok)
            .filter(|(n, _)| i.prefix.as_deref().is_none_or(|p| n.starts_with(p)))
            .filter(|(n, _)| after.as_deref().is_none_or(|a| n.as_str() > a))
            .filter(|(n, r)| {
                self.users
                    .allowed(&user, n, &r.owner, lode_objects::users::Perm::Read)
            });
        let buckets: Vec<Bucket> = visible
            .by_ref()
            .take(max)
            .map(|(name, r)| Bucket {
                name: Some(name),
                creation_date: Some(ts(r.created_ms)),
                bucket_region: Some(self.region.clone()),
            })
            .collect();
        let more = visible.next().is_some();
        let token = more
            .then(|| {
                buckets
                    .last()
                    .and_then(|b| b.name.as_deref())
                    .map(list_token)
            })
            .flatten();
        Ok(S3Response::new(ListBucketsOutput {
            buckets: Some(buckets),
            owner: Some(crate::acl::owner(&user)),
            continuation_token: token,
            prefix: i.prefix.clone(),
        }))
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket))]
    async fn get_bucket_location(
        &self,
        req: S3Request<GetBucketLocationInput>,
    ) -> S3Result<S3Response<GetBucketLocationOutput>> {
        self.svc.bucket(&req.input.bucket).await.s3()?;
        let loc = (self.region != "us-east-1")
            .then(|| BucketLocationConstraint::from(self.region.clone()));
        Ok(S3Response::new(GetBucketLocationOutput {
            location_constraint: loc,
        }))
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket, key = %req.input.key))]
    async fn put_object(
        &self,
        mut req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        let body = req.input.body.take();
        require_length(&req.headers, req.input.content_length)?;
        let i = &req.input;
        // A form upload's `acl` field (AWS's name for it), hoisted by the HTTP layer.
        let form_acl = (req.method == http::Method::POST)
            .then(|| req.headers.get(crate::wire::FORM_ACL))
            .flatten()
            .and_then(|v| v.to_str().ok());
        let (acl_owner, acl) = self
            .write_acl(
                &i.bucket,
                req.credentials.as_ref(),
                i.acl.as_ref().map(|a| a.as_str()).or(form_acl),
                &crate::acl::header_grants(
                    i.grant_full_control.as_ref(),
                    i.grant_read.as_ref(),
                    i.grant_read_acp.as_ref(),
                    None,
                    i.grant_write_acp.as_ref(),
                ),
            )
            .await?;
        let append_at = match i.write_offset_bytes {
            None => None,
            Some(n) => Some(u64::try_from(n).map_err(|_| {
                s3_error!(
                    InvalidArgument,
                    "x-amz-write-offset-bytes cannot be negative"
                )
            })?),
        };
        let expected = ChecksumSet::from_fields(
            i.checksum_crc32.clone(),
            i.checksum_crc32c.clone(),
            i.checksum_crc64nvme.clone(),
            i.checksum_sha1.clone(),
            i.checksum_sha256.clone(),
        );
        let mut integ = integrity(
            &req,
            i.content_md5.clone(),
            i.checksum_algorithm.as_ref(),
            expected,
        )?;
        integ.sse = write_sse!(i).asked(self.transport(&req))?;
        let i = req.input;
        let tags = header_tags(i.tagging.as_deref())?;
        let lock = asked_lock(
            i.object_lock_mode.as_ref(),
            i.object_lock_retain_until_date.as_ref(),
            i.object_lock_legal_hold_status.as_ref(),
        )?;
        let mut meta = object_meta(
            i.content_type,
            i.cache_control,
            i.content_disposition,
            i.content_encoding,
            i.content_language,
            i.expires,
            i.metadata,
        );
        let probe_tags = tags.clone();
        meta.tags = tags;
        meta.lock = lock;
        meta.owner = acl_owner;
        meta.acl = acl;
        let cond = write_cond(i.if_match.as_ref(), i.if_none_match.as_ref());
        let body = body.unwrap_or_else(|| StreamingBlob::from(s3s::Body::empty()));
        let r = match append_at {
            None => self
                .svc
                .put_object(&i.bucket, &i.key, meta, body, i.content_length, integ, cond)
                .await
                .s3()?,
            Some(offset) => self
                .svc
                .append_object(
                    &i.bucket,
                    &i.key,
                    offset,
                    meta,
                    body,
                    i.content_length,
                    integ,
                    cond,
                )
                .await
                .s3()?,
        };
        let (crc32, crc32c, crc64nvme, sha1, sha256, ctype) = checksum_fields(&r.checksums);
        let versioned = self.versioned(&i.bucket).await;
        // What the lifecycle rules judge of the new object: its size, tags and time.
        let probe = ObjectRecord {
            size: r.size,
            etag: r.etag.clone(),
            last_modified_ms: r.last_modified_ms,
            meta: ObjectMeta {
                tags: probe_tags,
                ..Default::default()
            },
            checksums: Checksums::default(),
            segments: vec![],
            parts: vec![],
            upload_id: None,
            version_id: None,
            delete_marker: false,
        };
        let expiration = self.expiration(&i.bucket, &i.key, &probe).await;
        let shown = crate::sse::shown(
            r.sse.as_ref(),
            i.sse_customer_key_md5.as_ref(),
            &self.region,
        );
        Ok(S3Response::new(PutObjectOutput {
            server_side_encryption: shown.sse,
            ssekms_key_id: shown.kms_key,
            bucket_key_enabled: shown.bucket_key,
            sse_customer_algorithm: shown.customer_algorithm,
            sse_customer_key_md5: shown.customer_md5,
            ssekms_encryption_context: shown.context,
            expiration,
            version_id: version_header(r.version_id.as_deref(), versioned),
            e_tag: Some(etag(&r.etag)),
            size: Some(r.size as i64),
            checksum_crc32: crc32,
            checksum_crc32c: crc32c,
            checksum_crc64nvme: crc64nvme,
            checksum_sha1: sha1,
            checksum_sha256: sha256,
            checksum_type: ctype,
            ..Default::default()
        }))
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket, key = %req.input.key))]
    async fn get_object(
        &self,
        req: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        let t = self.transport(&req);
        let i = req.input;
        let mut h = self
            .open_for_read(&i.bucket, &i.key, i.version_id.as_deref(), true)
            .await?;
        let customer = crate::sse::customer_key(customer_headers!(i), t)?;
        self.svc.unlock(&mut h, customer.as_ref()).await.s3()?;
        let rec = h.record.clone();
        let version_id = version_header(rec.version_id.as_deref(), self.versioned(&i.bucket).await);
        let expiration = match i.version_id {
            None => self.expiration(&i.bucket, &i.key, &rec).await,
            Some(_) => None,
        };
        read_conditions(
            &rec,
            i.if_match.as_ref(),
            i.if_none_match.as_ref(),
            i.if_modified_since.as_ref(),
            i.if_unmodified_since.as_ref(),
        )?;
        let plan = plan_read(&rec, i.part_number, i.range, i.checksum_mode.as_ref())?;
        let (start, end) = (plan.start, plan.end);
        let (crc32, crc32c, crc64nvme, sha1, sha256, ctype) = checksum_fields(&plan.sums);
        let stream = self.svc.read_range(h, start, end);
        let m = &rec.meta;
        let (lock_mode, lock_until, lock_hold) = lock_out(&m.lock);
        let shown = crate::sse::record_shown(&rec, i.sse_customer_key_md5.as_ref(), &self.region);
        let out = GetObjectOutput {
            server_side_encryption: shown.sse,
            ssekms_key_id: shown.kms_key,
            bucket_key_enabled: shown.bucket_key,
            sse_customer_algorithm: shown.customer_algorithm,
            sse_customer_key_md5: shown.customer_md5,
            body: Some(StreamingBlob::wrap(sync_wrapper::SyncStream::new(
                Box::pin(stream),
            ))),
            content_length: Some((end - start) as i64),
            content_range: plan.content_range,
            accept_ranges: Some("bytes".into()),
            e_tag: Some(etag(&rec.etag)),
            last_modified: Some(ts(rec.last_modified_ms)),
            metadata: user_meta(m),
            content_type: i.response_content_type.or_else(|| Some(content_type_of(m))),
            cache_control: i.response_cache_control.or_else(|| m.cache_control.clone()),
            content_disposition: i
                .response_content_disposition
                .or_else(|| m.content_disposition.clone()),
            content_encoding: i
                .response_content_encoding
                .or_else(|| m.content_encoding.clone()),
            content_language: i
                .response_content_language
                .or_else(|| m.content_language.clone()),
            expires: i
                .response_expires
                .or_else(|| m.expires.as_deref().and_then(parse_http_date)),
            parts_count: plan.parts_count,
            checksum_crc32: crc32,
            checksum_crc32c: crc32c,
            checksum_crc64nvme: crc64nvme,
            checksum_sha1: sha1,
            checksum_sha256: sha256,
            checksum_type: ctype,
            tag_count: (!m.tags.is_empty()).then_some(m.tags.len() as i32),
            version_id,
            object_lock_mode: lock_mode,
            object_lock_retain_until_date: lock_until,
            object_lock_legal_hold_status: lock_hold,
            expiration,
            ..Default::default()
        };
        let mut resp = S3Response::new(out);
        if resp.output.content_range.is_some() {
            resp.status = Some(http::StatusCode::PARTIAL_CONTENT);
        }
        Ok(resp)
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket, key = %req.input.key))]
    async fn head_object(
        &self,
        req: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        let t = self.transport(&req);
        let i = req.input;
        let rec = &self
            .head_for_read(&i.bucket, &i.key, i.version_id.as_deref())
            .await?;
        let customer = crate::sse::customer_key(customer_headers!(i), t)?;
        self.svc.check_key_of(rec, customer.as_ref()).await.s3()?;
        let version_id = version_header(rec.version_id.as_deref(), self.versioned(&i.bucket).await);
        let expiration = match i.version_id {
            None => self.expiration(&i.bucket, &i.key, rec).await,
            Some(_) => None,
        };
        read_conditions(
            rec,
            i.if_match.as_ref(),
            i.if_none_match.as_ref(),
            i.if_modified_since.as_ref(),
            i.if_unmodified_since.as_ref(),
        )?;
        let plan = plan_read(rec, i.part_number, i.range, i.checksum_mode.as_ref())?;
        let (crc32, crc32c, crc64nvme, sha1, sha256, ctype) = checksum_fields(&plan.sums);
        let m = &rec.meta;
        let partial = plan.content_range.is_some();
        let (lock_mode, lock_until, lock_hold) = lock_out(&m.lock);
        let shown = crate::sse::record_shown(rec, i.sse_customer_key_md5.as_ref(), &self.region);
        let out = HeadObjectOutput {
            server_side_encryption: shown.sse,
            ssekms_key_id: shown.kms_key,
            bucket_key_enabled: shown.bucket_key,
            sse_customer_algorithm: shown.customer_algorithm,
            sse_customer_key_md5: shown.customer_md5,
            content_length: Some((plan.end - plan.start) as i64),
            content_range: plan.content_range,
            accept_ranges: Some("bytes".into()),
            e_tag: Some(etag(&rec.etag)),
            last_modified: Some(ts(rec.last_modified_ms)),
            metadata: user_meta(m),
            content_type: Some(content_type_of(m)),
            cache_control: m.cache_control.clone(),
            content_disposition: m.content_disposition.clone(),
            content_encoding: m.content_encoding.clone(),
            content_language: m.content_language.clone(),
            expires: m.expires.as_deref().and_then(parse_http_date),
            parts_count: plan.parts_count,
            checksum_crc32: crc32,
            checksum_crc32c: crc32c,
            checksum_crc64nvme: crc64nvme,
            checksum_sha1: sha1,
            checksum_sha256: sha256,
            checksum_type: ctype,
            version_id,
            object_lock_mode: lock_mode,
            object_lock_retain_until_date: lock_until,
            object_lock_legal_hold_status: lock_hold,
            expiration,
            ..Default::default()
        };
        let mut resp = S3Response::new(out);
        if partial {
            resp.status = Some(http::StatusCode::PARTIAL_CONTENT);
        }
        // S3 answers it on HEAD too, though its model's HeadObjectOutput has no field for it.
        if !m.tags.is_empty() {
            resp.headers.insert(
                http::HeaderName::from_static("x-amz-tagging-count"),
                http::HeaderValue::from(m.tags.len()),
            );
        }
        Ok(resp)
    }

    /// GetObjectAttributes: ETag, Checksum, ObjectParts (paged with `x-amz-max-parts` and
    /// `x-amz-part-number-marker`; only for multipart objects), StorageClass, ObjectSize.
    #[instrument(skip_all, fields(bucket = %req.input.bucket, key = %req.input.key))]
    async fn get_object_attributes(
        &self,
        req: S3Request<GetObjectAttributesInput>,
    ) -> S3Result<S3Response<GetObjectAttributesOutput>> {
        let t = self.transport(&req);
        let i = req.input;
        // SDKs send one `x-amz-object-attributes` header with comma-separated names.
        let names: Vec<&str> = i
            .object_attributes
            .iter()
            .flat_map(|a| a.as_str().split(','))
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .collect();
        let wanted = |a: &str| names.contains(&a);
        if names.is_empty()
            || names.iter().any(|a| {
                ![
                    ObjectAttributes::ETAG,
                    ObjectAttributes::CHECKSUM,
                    ObjectAttributes::OBJECT_PARTS,
                    ObjectAttributes::STORAGE_CLASS,
                    ObjectAttributes::OBJECT_SIZE,
                ]
                .contains(a)
            })
        {
            return Err(s3_error!(
                InvalidArgument,
                "Invalid attribute name specified."
            ));
        }
        let max = match i.max_parts {
            None => 1000,
            Some(n) if n >= 0 => n.min(1000) as usize,
            Some(_) => return Err(s3_error!(InvalidArgument, "max-parts must be non-negative")),
        };
        let marker = i.part_number_marker.unwrap_or(0);
        let rec = self
            .head_for_read(&i.bucket, &i.key, i.version_id.as_deref())
            .await?;
        // An SSE-C object's attributes need its key, as its HEAD does.
        let customer = crate::sse::customer_key(customer_headers!(i), t)?;
        self.svc.check_key_of(&rec, customer.as_ref()).await.s3()?;
        let version_id = version_header(rec.version_id.as_deref(), self.versioned(&i.bucket).await);
        let checksum =
            (wanted(ObjectAttributes::CHECKSUM) && !rec.checksums.is_empty()).then(|| {
                let (crc32, crc32c, crc64nvme, sha1, sha256, ctype) =
                    checksum_fields(&rec.checksums);
                Checksum {
                    checksum_crc32: crc32,
                    checksum_crc32c: crc32c,
                    checksum_crc64nvme: crc64nvme,
                    checksum_sha1: sha1,
                    checksum_sha256: sha256,
                    checksum_type: ctype,
                }
            });
        let object_parts =
            (wanted(ObjectAttributes::OBJECT_PARTS) && !rec.parts.is_empty()).then(|| {
                let after: Vec<_> = rec
                    .parts
                    .iter()
                    .filter(|p| i64::from(p.number) > i64::from(marker))
                    .collect();
                let truncated = after.len() > max;
                let page: Vec<ObjectPart> = after
                    .into_iter()
                    .take(max)
                    .map(|p| {
                        let (crc32, crc32c, crc64nvme, sha1, sha256, _) =
                            checksum_fields(&p.checksums);
                        ObjectPart {
                            part_number: Some(p.number as i32),
                            size: Some(p.size as i64),
                            checksum_crc32: crc32,
                            checksum_crc32c: crc32c,
                            checksum_crc64nvme: crc64nvme,
                            checksum_sha1: sha1,
                            checksum_sha256: sha256,
                        }
                    })
                    .collect();
                GetObjectAttributesParts {
                    total_parts_count: Some(rec.parts.len() as i32),
                    part_number_marker: Some(marker),
                    next_part_number_marker: page.last().and_then(|p| p.part_number),
                    max_parts: Some(max as i32),
                    is_truncated: Some(truncated),
                    parts: Some(page),
                }
            });
        Ok(S3Response::new(GetObjectAttributesOutput {
            e_tag: wanted(ObjectAttributes::ETAG).then(|| etag(&rec.etag)),
            last_modified: Some(ts(rec.last_modified_ms)),
            checksum,
            object_parts,
            storage_class: wanted(ObjectAttributes::STORAGE_CLASS)
                .then(|| StorageClass::from_static(StorageClass::STANDARD)),
            object_size: wanted(ObjectAttributes::OBJECT_SIZE).then_some(rec.size as i64),
            version_id,
            ..Default::default()
        }))
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket, key = %req.input.key))]
    async fn delete_object(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        let i = &req.input;
        let if_match = i.if_match.as_ref().map(|c| match c {
            ETagCondition::Any => "*",
            ETagCondition::ETag(e) => e.value(),
        });
        let cond = delete_cond(
            if_match,
            i.if_match_size,
            i.if_match_last_modified_time.as_ref(),
        )?;
        let bypass = i.bypass_governance_retention == Some(true);
        let done = match i.version_id.as_deref() {
            Some(v) => self
                .svc
                .delete_object_version(&i.bucket, &i.key, v, &cond, bypass)
                .await
                .s3()?,
            None => self
                .svc
                .delete_object_if(&i.bucket, &i.key, &cond)
                .await
                .s3()?,
        };
        Ok(S3Response::new(DeleteObjectOutput {
            delete_marker: done.delete_marker.then_some(true),
            version_id: version_out(&done),
            ..Default::default()
        }))
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket))]
    async fn delete_objects(
        &self,
        req: S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        let i = &req.input;
        self.svc.bucket(&i.bucket).await.s3()?;
        if i.delete.objects.len() > 1000 {
            return Err(s3_error!(
                MalformedXML,
                "At most 1000 keys can be deleted in one request"
            ));
        }
        let quiet = i.delete.quiet.unwrap_or(false);
        let bypass = i.bypass_governance_retention == Some(true);
        let mut deleted = vec![];
        let mut errors = vec![];
        // Under a bucket policy each key is judged on its own (the access check let the
        // request through for this).
        let judged = self.authz.has_policy(&i.bucket).await;
        let info = crate::access::ReqInfo {
            headers: &req.headers,
            uri: &req.uri,
            peer: req.extensions.get::<crate::access::Peer>().copied(),
        };
        let ak = req.credentials.as_ref().map(|c| c.access_key.as_str());
        for o in i.delete.objects.iter().cloned() {
            if judged {
                let action = crate::access::action_of("DeleteObject", o.version_id.is_some());
                if let Err(e) = self
                    .authz
                    .authorize(ak, &info, "DeleteObject", &i.bucket, Some(&o.key), &action)
                    .await
                {
                    errors.push(Error {
                        code: Some(e.code().as_str().to_owned()),
                        key: Some(o.key),
                        message: e.message().map(str::to_owned),
                        version_id: o.version_id.clone(),
                    });
                    continue;
                }
            }
            let cond = delete_cond(
                o.e_tag.as_ref().map(ETag::value),
                o.size,
                o.last_modified_time.as_ref(),
            );
            let done = match (cond, o.version_id.as_deref()) {
                (Ok(cond), Some(v)) => {
                    self.svc
                        .delete_object_version(&i.bucket, &o.key, v, &cond, bypass)
                        .await
                }
                (Ok(cond), None) => self.svc.delete_object_if(&i.bucket, &o.key, &cond).await,
                (Err(e), _) => Err(lode_objects::ObjError::InvalidArgument(
                    e.message().unwrap_or("invalid condition").to_owned(),
                )),
            };
            match done {
                Ok(d) => {
                    if !quiet {
                        // S3: a simple delete in a versioned bucket names the marker it made;
                        // a delete of a version names it (and its marker id if it was one).
                        let marker_id = d.delete_marker.then(|| version_out(&d)).flatten();
                        deleted.push(DeletedObject {
                            key: Some(o.key),
                            version_id: o.version_id.clone(),
                            delete_marker: d.delete_marker.then_some(true),
                            delete_marker_version_id: marker_id,
                        })
                    }
                }
                Err(e) => {
                    let s3e = obj_s3(e);
                    errors.push(Error {
                        code: Some(s3e.code().as_str().to_owned()),
                        key: Some(o.key),
                        message: s3e.message().map(str::to_owned),
                        version_id: o.version_id.clone(),
                    });
                }
            }
        }
        Ok(S3Response::new(DeleteObjectsOutput {
            deleted: Some(deleted),
            errors: (!errors.is_empty()).then_some(errors),
            ..Default::default()
        }))
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket, key = %req.input.key))]
    async fn copy_object(
        &self,
        req: S3Request<CopyObjectInput>,
    ) -> S3Result<S3Response<CopyObjectOutput>> {
        let t = self.transport(&req);
        let i = req.input;
        let sse = write_sse!(i).asked(t)?;
        let source_key = crate::sse::customer_key(source_customer_headers!(i), t)?;
        let (acl_owner, acl) = self
            .write_acl(
                &i.bucket,
                req.credentials.as_ref(),
                i.acl.as_ref().map(|a| a.as_str()),
                &crate::acl::header_grants(
                    i.grant_full_control.as_ref(),
                    i.grant_read.as_ref(),
                    i.grant_read_acp.as_ref(),
                    None,
                    i.grant_write_acp.as_ref(),
                ),
            )
            .await?;
        let (sb, sk, src_version) = source_version(&i.copy_source, "CopyObject")?;
        let replace = i
            .metadata_directive
            .as_ref()
            .is_some_and(|d| d.as_str() == MetadataDirective::REPLACE);
        let new_meta = replace.then(|| {
            object_meta(
                i.content_type.clone(),
                i.cache_control.clone(),
                i.content_disposition.clone(),
                i.content_encoding.clone(),
                i.content_language.clone(),
                i.expires.clone(),
                i.metadata.clone(),
            )
        });
        let new_tags = match i.tagging_directive.as_ref().map(|d| d.as_str()) {
            None | Some(TaggingDirective::COPY) => None,
            Some(TaggingDirective::REPLACE) => Some(header_tags(i.tagging.as_deref())?),
            Some(_) => return Err(s3_error!(InvalidArgument, "Unknown tagging directive.")),
        };
        let conds = CopySourceConds {
            if_match: i.copy_source_if_match.clone(),
            if_none_match: i.copy_source_if_none_match.clone(),
            if_modified_since: i.copy_source_if_modified_since.clone(),
            if_unmodified_since: i.copy_source_if_unmodified_since.clone(),
        };
        let check = move |rec: &ObjectRecord| conds.check(rec);
        let changes = lode_objects::CopyChanges {
            meta: new_meta,
            tags: new_tags,
            lock: asked_lock(
                i.object_lock_mode.as_ref(),
                i.object_lock_retain_until_date.as_ref(),
                i.object_lock_legal_hold_status.as_ref(),
            )?,
            owner: acl_owner,
            acl,
            sse,
            source_key,
        };
        let rec = self
            .svc
            .copy_object((sb, sk), src_version, (&i.bucket, &i.key), changes, check)
            .await
            .map_err(copy_source_error)?;
        let versioned = self.versioned(&i.bucket).await;
        let (crc32, crc32c, crc64nvme, sha1, sha256, ctype) = checksum_fields(&rec.checksums);
        let expiration = self.expiration(&i.bucket, &i.key, &rec).await;
        let shown = crate::sse::record_shown(&rec, i.sse_customer_key_md5.as_ref(), &self.region);
        Ok(S3Response::new(CopyObjectOutput {
            server_side_encryption: shown.sse,
            ssekms_key_id: shown.kms_key,
            bucket_key_enabled: shown.bucket_key,
            sse_customer_algorithm: shown.customer_algorithm,
            sse_customer_key_md5: shown.customer_md5,
            ssekms_encryption_context: shown.context,
            expiration,
            version_id: version_header(rec.version_id.as_deref(), versioned),
            copy_source_version_id: src_version.map(str::to_owned),
            copy_object_result: Some(CopyObjectResult {
                e_tag: Some(etag(&rec.etag)),
                last_modified: Some(ts(rec.last_modified_ms)),
                checksum_crc32: crc32,
                checksum_crc32c: crc32c,
                checksum_crc64nvme: crc64nvme,
                checksum_sha1: sha1,
                checksum_sha256: sha256,
                checksum_type: ctype,
            }),
            ..Default::default()
        }))
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket, key = %req.input.key))]
    async fn get_object_tagging(
        &self,
        req: S3Request<GetObjectTaggingInput>,
    ) -> S3Result<S3Response<GetObjectTaggingOutput>> {
        let i = req.input;
        let tags = self
            .svc
            .object_tags(&i.bucket, &i.key, i.version_id.as_deref())
            .await
            .s3()?;
        Ok(S3Response::new(GetObjectTaggingOutput {
            tag_set: tag_set(tags),
            version_id: i.version_id,
        }))
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket, key = %req.input.key))]
    async fn put_object_tagging(
        &self,
        req: S3Request<PutObjectTaggingInput>,
    ) -> S3Result<S3Response<PutObjectTaggingOutput>> {
        let i = req.input;
        let tags = doc_tags(i.tagging)?;
        self.svc
            .set_object_tags(&i.bucket, &i.key, i.version_id.as_deref(), tags)
            .await
            .s3()?;
        Ok(S3Response::new(PutObjectTaggingOutput {
            version_id: i.version_id,
        }))
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket, key = %req.input.key))]
    async fn delete_object_tagging(
        &self,
        req: S3Request<DeleteObjectTaggingInput>,
    ) -> S3Result<S3Response<DeleteObjectTaggingOutput>> {
        let i = req.input;
        self.svc
            .set_object_tags(&i.bucket, &i.key, i.version_id.as_deref(), vec![])
            .await
            .s3()?;
        Ok(S3Response::new(DeleteObjectTaggingOutput {
            version_id: i.version_id,
        }))
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket))]
    async fn get_bucket_tagging(
        &self,
        req: S3Request<GetBucketTaggingInput>,
    ) -> S3Result<S3Response<GetBucketTaggingOutput>> {
        let tags = self.svc.bucket_tags(&req.input.bucket).await.s3()?;
        Ok(S3Response::new(GetBucketTaggingOutput {
            tag_set: tag_set(tags),
        }))
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket))]
    async fn put_bucket_tagging(
        &self,
        req: S3Request<PutBucketTaggingInput>,
    ) -> S3Result<S3Response<PutBucketTaggingOutput>> {
        let i = req.input;
        let tags = doc_tags(i.tagging)?;
        self.svc.set_bucket_tags(&i.bucket, tags).await.s3()?;
        Ok(S3Response::new(PutBucketTaggingOutput::default()))
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket))]
    async fn delete_bucket_tagging(
        &self,
        req: S3Request<DeleteBucketTaggingInput>,
    ) -> S3Result<S3Response<DeleteBucketTaggingOutput>> {
        self.svc
            .set_bucket_tags(&req.input.bucket, vec![])
            .await
            .s3()?;
        Ok(S3Response::new(DeleteBucketTaggingOutput::default()))
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket))]
    async fn put_bucket_lifecycle_configuration(
        &self,
        req: S3Request<PutBucketLifecycleConfigurationInput>,
    ) -> S3Result<S3Response<PutBucketLifecycleConfigurationOutput>> {
        let i = req.input;
        let lc = crate::lifecycle::from_s3(
            i.lifecycle_configuration,
            i.transition_default_minimum_object_size.as_ref(),
        )?;
        let min = lc.transition_min_size.clone();
        self.svc
            .set_bucket_lifecycle(&i.bucket, Some(lc))
            .await
            .s3()?;
        Ok(S3Response::new(PutBucketLifecycleConfigurationOutput {
            transition_default_minimum_object_size: Some(TransitionDefaultMinimumObjectSize::from(
                min.unwrap_or_else(|| {
                    TransitionDefaultMinimumObjectSize::ALL_STORAGE_CLASSES_128K.to_owned()
                }),
            )),
        }))
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket))]
    async fn get_bucket_lifecycle_configuration(
        &self,
        req: S3Request<GetBucketLifecycleConfigurationInput>,
    ) -> S3Result<S3Response<GetBucketLifecycleConfigurationOutput>> {
        let Some(lc) = self.svc.bucket_lifecycle(&req.input.bucket).await.s3()? else {
            return Err(s3_error!(
                NoSuchLifecycleConfiguration,
                "The lifecycle configuration does not exist"
            ));
        };
        Ok(S3Response::new(GetBucketLifecycleConfigurationOutput {
            rules: Some(crate::lifecycle::to_s3(&lc)),
            transition_default_minimum_object_size: Some(TransitionDefaultMinimumObjectSize::from(
                lc.transition_min_size.clone().unwrap_or_else(|| {
                    TransitionDefaultMinimumObjectSize::ALL_STORAGE_CLASSES_128K.to_owned()
                }),
            )),
        }))
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket))]
    async fn delete_bucket_lifecycle(
        &self,
        req: S3Request<DeleteBucketLifecycleInput>,
    ) -> S3Result<S3Response<DeleteBucketLifecycleOutput>> {
        self.svc
            .set_bucket_lifecycle(&req.input.bucket, None)
            .await
            .s3()?;
        Ok(S3Response::new(DeleteBucketLifecycleOutput::default()))
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket))]
    async fn get_bucket_acl(
        &self,
        req: S3Request<GetBucketAclInput>,
    ) -> S3Result<S3Response<GetBucketAclOutput>> {
        let bucket = &req.input.bucket;
        let owner = self.bucket_owner_name(bucket).await?;
        let acl = self
            .svc
            .bucket_acl(bucket)
            .await
            .s3()?
            .unwrap_or_else(|| lode_objects::acl::Acl::private(&owner));
        Ok(S3Response::new(GetBucketAclOutput {
            grants: Some(crate::acl::grants(&acl)),
            owner: Some(crate::acl::owner(&owner)),
        }))
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket))]
    async fn put_bucket_acl(
        &self,
        req: S3Request<PutBucketAclInput>,
    ) -> S3Result<S3Response<PutBucketAclOutput>> {
        let i = &req.input;
        let owner = self.bucket_owner_name(&i.bucket).await?;
        let acl = self
            .asked_acl(
                &i.bucket,
                i.acl.as_ref().map(|a| a.as_str()),
                &crate::acl::header_grants(
                    i.grant_full_control.as_ref(),
                    i.grant_read.as_ref(),
                    i.grant_read_acp.as_ref(),
                    i.grant_write.as_ref(),
                    i.grant_write_acp.as_ref(),
                ),
                i.access_control_policy.as_ref(),
                &owner,
                &owner,
            )
            .await?;
        self.svc
            .set_bucket_acl(&i.bucket, Some(acl), &owner)
            .await
            .s3()?;
        Ok(S3Response::new(PutBucketAclOutput::default()))
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket, key = %req.input.key))]
    async fn get_object_acl(
        &self,
        req: S3Request<GetObjectAclInput>,
    ) -> S3Result<S3Response<GetObjectAclOutput>> {
        let i = &req.input;
        let (bucket_owner, enforced) = self.listing_owner(&i.bucket).await?;
        let (owner, acl) = self
            .svc
            .object_acl(&i.bucket, &i.key, i.version_id.as_deref())
            .await
            .s3()?;
        // ACLs disabled: every object is the bucket owner's, with full control only.
        let (owner, acl) = match !enforced {
            true => (owner.unwrap_or(bucket_owner), acl),
            false => (bucket_owner, None),
        };
        let acl = acl.unwrap_or_else(|| lode_objects::acl::Acl::private(&owner));
        Ok(S3Response::new(GetObjectAclOutput {
            grants: Some(crate::acl::grants(&acl)),
            owner: Some(crate::acl::owner(&owner)),
            request_charged: None,
        }))
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket, key = %req.input.key))]
    async fn put_object_acl(
        &self,
        req: S3Request<PutObjectAclInput>,
    ) -> S3Result<S3Response<PutObjectAclOutput>> {
        let i = &req.input;
        let bucket_owner = self.bucket_owner_name(&i.bucket).await?;
        let (owner, _) = self
            .svc
            .object_acl(&i.bucket, &i.key, i.version_id.as_deref())
            .await
            .s3()?;
        let owner = owner.unwrap_or_else(|| bucket_owner.clone());
        let acl = self
            .asked_acl(
                &i.bucket,
                i.acl.as_ref().map(|a| a.as_str()),
                &crate::acl::header_grants(
                    i.grant_full_control.as_ref(),
                    i.grant_read.as_ref(),
                    i.grant_read_acp.as_ref(),
                    i.grant_write.as_ref(),
                    i.grant_write_acp.as_ref(),
                ),
                i.access_control_policy.as_ref(),
                &owner,
                &bucket_owner,
            )
            .await?;
        let stored = (acl != lode_objects::acl::Acl::private(&owner)).then(|| acl.encode());
        self.svc
            .set_object_acl(&i.bucket, &i.key, i.version_id.as_deref(), stored)
            .await
            .s3()?;
        Ok(S3Response::new(PutObjectAclOutput::default()))
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket))]
    async fn get_bucket_ownership_controls(
        &self,
        req: S3Request<GetBucketOwnershipControlsInput>,
    ) -> S3Result<S3Response<GetBucketOwnershipControlsOutput>> {
        match self.svc.bucket_ownership(&req.input.bucket).await.s3()? {
            Some(o) => Ok(S3Response::new(GetBucketOwnershipControlsOutput {
                ownership_controls: Some(OwnershipControls {
                    rules: vec![OwnershipControlsRule {
                        object_ownership: ObjectOwnership::from(o.as_str().to_owned()),
                    }],
                }),
            })),
            None => Err(obj_s3(ObjError::NoOwnershipControls)),
        }
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket))]
    async fn put_bucket_ownership_controls(
        &self,
        req: S3Request<PutBucketOwnershipControlsInput>,
    ) -> S3Result<S3Response<PutBucketOwnershipControlsOutput>> {
        let i = &req.input;
        let rules = &i.ownership_controls.rules;
        let [rule] = rules.as_slice() else {
            return Err(s3_error!(
                MalformedXML,
                "The XML you provided was not well-formed or did not validate against our published schema: OwnershipControls holds exactly one Rule"
            ));
        };
        let o = lode_objects::acl::Ownership::parse(rule.object_ownership.as_str()).ok_or_else(
            || {
                s3_error!(
                    MalformedXML,
                    "The XML you provided was not well-formed or did not validate against our published schema: {} is not an ObjectOwnership",
                    rule.object_ownership.as_str()
                )
            },
        )?;
        self.svc
            .set_bucket_ownership(&i.bucket, Some(o))
            .await
            .s3()?;
        Ok(S3Response::new(PutBucketOwnershipControlsOutput::default()))
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket))]
    async fn delete_bucket_ownership_controls(
        &self,
        req: S3Request<DeleteBucketOwnershipControlsInput>,
    ) -> S3Result<S3Response<DeleteBucketOwnershipControlsOutput>> {
        self.svc
            .set_bucket_ownership(&req.input.bucket, None)
            .await
            .s3()?;
        Ok(S3Response::new(DeleteBucketOwnershipControlsOutput {}))
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket))]
    async fn put_bucket_policy(
        &self,
        req: S3Request<PutBucketPolicyInput>,
    ) -> S3Result<S3Response<PutBucketPolicyOutput>> {
        let i = req.input;
        self.svc.bucket(&i.bucket).await.s3()?;
        let parsed = lode_objects::policy::Policy::parse(&i.policy, &i.bucket)
            .map_err(|e| s3_error!(MalformedPolicy, "{}", e.0))?;
        if parsed.is_public()
            && self
                .svc
                .public_access_block_of(&i.bucket)
                .await
                .s3()?
                .block_public_policy
        {
            return Err(s3_error!(
                AccessDenied,
                "Access Denied: public policies are blocked by the BlockPublicPolicy block public access setting"
            ));
        }
        self.svc
            .set_bucket_policy(&i.bucket, Some(i.policy))
            .await
            .s3()?;
        Ok(S3Response::new(PutBucketPolicyOutput::default()))
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket))]
    async fn get_bucket_policy(
        &self,
        req: S3Request<GetBucketPolicyInput>,
    ) -> S3Result<S3Response<GetBucketPolicyOutput>> {
        match self.svc.bucket_policy(&req.input.bucket).await.s3()? {
            Some(policy) => Ok(S3Response::new(GetBucketPolicyOutput {
                policy: Some(policy),
            })),
            None => Err(s3_error!(
                NoSuchBucketPolicy,
                "The bucket policy does not exist"
            )),
        }
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket))]
    async fn delete_bucket_policy(
        &self,
        req: S3Request<DeleteBucketPolicyInput>,
    ) -> S3Result<S3Response<DeleteBucketPolicyOutput>> {
        self.svc
            .set_bucket_policy(&req.input.bucket, None)
            .await
            .s3()?;
        Ok(S3Response::new(DeleteBucketPolicyOutput::default()))
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket))]
    async fn get_bucket_policy_status(
        &self,
        req: S3Request<GetBucketPolicyStatusInput>,
    ) -> S3Result<S3Response<GetBucketPolicyStatusOutput>> {
        let b = &req.input.bucket;
        let text = self
            .svc
            .bucket_policy(b)
            .await
            .s3()?
            .ok_or_else(|| s3_error!(NoSuchBucketPolicy, "The bucket policy does not exist"))?;
        let public = lode_objects::policy::Policy::parse(&text, b)
            .map(|p| p.is_public())
            .unwrap_or(false);
        Ok(S3Response::new(GetBucketPolicyStatusOutput {
            policy_status: Some(PolicyStatus {
                is_public: Some(public),
            }),
        }))
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket))]
    async fn put_public_access_block(
        &self,
        req: S3Request<PutPublicAccessBlockInput>,
    ) -> S3Result<S3Response<PutPublicAccessBlockOutput>> {
        let i = req.input;
        let c = i.public_access_block_configuration;
        let block = lode_objects::policy::PublicAccessBlock {
            block_public_acls: c.block_public_acls.unwrap_or(false),
            ignore_public_acls: c.ignore_public_acls.unwrap_or(false),
            block_public_policy: c.block_public_policy.unwrap_or(false),
            restrict_public_buckets: c.restrict_public_buckets.unwrap_or(false),
        };
        self.svc
            .set_bucket_public_access_block(&i.bucket, Some(block))
            .await
            .s3()?;
        Ok(S3Response::new(PutPublicAccessBlockOutput::default()))
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket))]
    async fn get_public_access_block(
        &self,
        req: S3Request<GetPublicAccessBlockInput>,
    ) -> S3Result<S3Response<GetPublicAccessBlockOutput>> {
        let Some(b) = self
            .svc
            .bucket_public_access_block(&req.input.bucket)
            .await
            .s3()?
        else {
            let mut e = s3s::S3Error::with_message(
                s3s::S3ErrorCode::Custom("NoSuchPublicAccessBlockConfiguration".into()),
                "The public access block configuration was not found",
            );
            e.set_status_code(http::StatusCode::NOT_FOUND);
            return Err(e);
        };
        Ok(S3Response::new(GetPublicAccessBlockOutput {
            public_access_block_configuration: Some(PublicAccessBlockConfiguration {
                block_public_acls: Some(b.block_public_acls),
                ignore_public_acls: Some(b.ignore_public_acls),
                block_public_policy: Some(b.block_public_policy),
                restrict_public_buckets: Some(b.restrict_public_buckets),
            }),
        }))
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket))]
    async fn delete_public_access_block(
        &self,
        req: S3Request<DeletePublicAccessBlockInput>,
    ) -> S3Result<S3Response<DeletePublicAccessBlockOutput>> {
        self.svc
            .set_bucket_public_access_block(&req.input.bucket, None)
            .await
            .s3()?;
        Ok(S3Response::new(DeletePublicAccessBlockOutput::default()))
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket))]
    async fn put_bucket_cors(
        &self,
        req: S3Request<PutBucketCorsInput>,
    ) -> S3Result<S3Response<PutBucketCorsOutput>> {
        let i = req.input;
        self.svc.bucket(&i.bucket).await.s3()?;
        let cors = lode_objects::cors::Cors {
            rules: i
                .cors_configuration
                .cors_rules
                .into_iter()
                .map(|r| lode_objects::cors::CorsRule {
                    id: r.id,
                    allowed_methods: r.allowed_methods,
                    allowed_origins: r.allowed_origins,
                    allowed_headers: r.allowed_headers.unwrap_or_default(),
                    expose_headers: r.expose_headers.unwrap_or_default(),
                    max_age_seconds: r.max_age_seconds,
                })
                .collect(),
        };
        if let Err(e) = cors.validate() {
            let code = match e.code {
                "MalformedXML" => s3s::S3ErrorCode::MalformedXML,
                _ => s3s::S3ErrorCode::InvalidRequest,
            };
            return Err(s3s::S3Error::with_message(code, e.message));
        }
        self.svc.set_bucket_cors(&i.bucket, Some(cors)).await.s3()?;
        Ok(S3Response::new(PutBucketCorsOutput::default()))
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket))]
    async fn get_bucket_cors(
        &self,
        req: S3Request<GetBucketCorsInput>,
    ) -> S3Result<S3Response<GetBucketCorsOutput>> {
        let Some(cors) = self.svc.bucket_cors(&req.input.bucket).await.s3()? else {
            return Err(s3_error!(
                NoSuchCORSConfiguration,
                "The CORS configuration does not exist"
            ));
        };
        let rules = cors
            .rules
            .into_iter()
            .map(|r| CORSRule {
                id: r.id,
                allowed_methods: r.allowed_methods,
                allowed_origins: r.allowed_origins,
                allowed_headers: (!r.allowed_headers.is_empty()).then_some(r.allowed_headers),
                expose_headers: (!r.expose_headers.is_empty()).then_some(r.expose_headers),
                max_age_seconds: r.max_age_seconds,
            })
            .collect();
        Ok(S3Response::new(GetBucketCorsOutput {
            cors_rules: Some(rules),
        }))
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket))]
    async fn put_bucket_notification_configuration(
        &self,
        req: S3Request<PutBucketNotificationConfigurationInput>,
    ) -> S3Result<S3Response<PutBucketNotificationConfigurationOutput>> {
        let i = req.input;
        self.svc.bucket(&i.bucket).await.s3()?;
        let n = crate::events::from_dto(i.notification_configuration)?;
        let rid = lode_objects::bucket_events::Origin::current()
            .map(|o| o.request_id)
            .unwrap_or_default();
        self.svc
            .set_bucket_notifications(&i.bucket, n, &rid)
            .await
            .s3()?;
        Ok(S3Response::new(
            PutBucketNotificationConfigurationOutput::default(),
        ))
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket))]
    async fn get_bucket_notification_configuration(
        &self,
        req: S3Request<GetBucketNotificationConfigurationInput>,
    ) -> S3Result<S3Response<GetBucketNotificationConfigurationOutput>> {
        let n = self
            .svc
            .bucket_notifications(&req.input.bucket)
            .await
            .s3()?;
        let (queue_configurations, topic_configurations) = crate::events::to_dto(&n);
        Ok(S3Response::new(GetBucketNotificationConfigurationOutput {
            queue_configurations,
            topic_configurations,
            ..Default::default()
        }))
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket))]
    async fn delete_bucket_cors(
        &self,
        req: S3Request<DeleteBucketCorsInput>,
    ) -> S3Result<S3Response<DeleteBucketCorsOutput>> {
        self.svc
            .set_bucket_cors(&req.input.bucket, None)
            .await
            .s3()?;
        Ok(S3Response::new(DeleteBucketCorsOutput::default()))
    }

    /// PutBucketEncryption without `BlockedEncryptionTypes` (the custom route reads every
    /// PutBucketEncryption first: `crate::rename::Routes`).
    #[instrument(skip_all, fields(bucket = %req.input.bucket))]
    async fn put_bucket_encryption(
        &self,
        req: S3Request<PutBucketEncryptionInput>,
    ) -> S3Result<S3Response<PutBucketEncryptionOutput>> {
        let i = req.input;
        apply_bucket_encryption(
            &self.svc,
            &i.bucket,
            &i.server_side_encryption_configuration,
            None,
        )
        .await?;
        Ok(S3Response::new(PutBucketEncryptionOutput::default()))
    }

    /// GetBucketEncryption: the bucket's rule, or the server's default (SSE-S3, SSE-C
    /// blocked) for a bucket without one; `404` when neither (encryption by default off).
    #[instrument(skip_all, fields(bucket = %req.input.bucket))]
    async fn get_bucket_encryption(
        &self,
        req: S3Request<GetBucketEncryptionInput>,
    ) -> S3Result<S3Response<GetBucketEncryptionOutput>> {
        use lode_objects::encryption::{Algorithm, BucketEncryption};
        let i = req.input;
        let set = self.svc.bucket_encryption(&i.bucket).await.s3()?;
        let default_on = self.svc.encryption().is_some_and(|e| e.default_on);
        let e = match set {
            Some(e) => e,
            None if default_on => BucketEncryption::aws_default(),
            None => {
                return Err(s3_error!(
                    ServerSideEncryptionConfigurationNotFoundError,
                    "The server side encryption configuration was not found"
                ));
            }
        };
        let rule = ServerSideEncryptionRule {
            apply_server_side_encryption_by_default: Some(ServerSideEncryptionByDefault {
                sse_algorithm: ServerSideEncryption::from(e.algorithm.as_s3().to_owned()),
                kms_master_key_id: match e.algorithm {
                    Algorithm::Aes256 => None,
                    _ => e
                        .kms_key_id
                        .as_deref()
                        .map(|k| crate::sse::kms_arn(lode_objects::kms::bare_id(k), &self.region)),
                },
            }),
            bucket_key_enabled: Some(e.bucket_key),
        };
        let mut resp = S3Response::new(GetBucketEncryptionOutput {
            server_side_encryption_configuration: Some(ServerSideEncryptionConfiguration {
                rules: vec![rule],
            }),
        });
        resp.headers.insert(
            crate::wire::BLOCKED_ENCRYPTION,
            http::HeaderValue::from_static(if e.allow_sse_c { "NONE" } else { "SSE-C" }),
        );
        Ok(resp)
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket))]
    async fn delete_bucket_encryption(
        &self,
        req: S3Request<DeleteBucketEncryptionInput>,
    ) -> S3Result<S3Response<DeleteBucketEncryptionOutput>> {
        self.svc
            .set_bucket_encryption(&req.input.bucket, None)
            .await
            .s3()?;
        Ok(S3Response::new(DeleteBucketEncryptionOutput::default()))
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket))]
    async fn put_object_lock_configuration(
        &self,
        req: S3Request<PutObjectLockConfigurationInput>,
    ) -> S3Result<S3Response<PutObjectLockConfigurationOutput>> {
        let i = req.input;
        let malformed = || {
            s3_error!(
                MalformedXML,
                "The XML you provided was not well-formed or did not validate against our published schema"
            )
        };
        let c = i.object_lock_configuration.ok_or_else(malformed)?;
        if c.object_lock_enabled.as_ref().map(|e| e.as_str()) != Some(ObjectLockEnabled::ENABLED) {
            return Err(malformed());
        }
        let rule = match c.rule.and_then(|r| r.default_retention) {
            None => None,
            Some(d) => {
                let mode = lock_mode(d.mode.as_ref().map(|m| m.as_str()))?;
                if d.days.is_some() == d.years.is_some() {
                    return Err(malformed());
                }
                Some(lode_objects::objlock::DefaultRetention::new(&mode, d.days, d.years).s3()?)
            }
        };
        self.svc
            .put_object_lock_configuration(&i.bucket, rule)
            .await
            .s3()?;
        Ok(S3Response::new(PutObjectLockConfigurationOutput::default()))
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket))]
    async fn get_object_lock_configuration(
        &self,
        req: S3Request<GetObjectLockConfigurationInput>,
    ) -> S3Result<S3Response<GetObjectLockConfigurationOutput>> {
        let c = self
            .svc
            .object_lock_configuration(&req.input.bucket)
            .await
            .s3()?;
        let rule = c.rule.map(|r| ObjectLockRule {
            default_retention: Some(DefaultRetention {
                mode: Some(ObjectLockRetentionMode::from(r.mode)),
                days: r.days.map(|d| d as i32),
                years: r.years.map(|y| y as i32),
            }),
        });
        Ok(S3Response::new(GetObjectLockConfigurationOutput {
            object_lock_configuration: Some(ObjectLockConfiguration {
                object_lock_enabled: Some(ObjectLockEnabled::from_static(
                    ObjectLockEnabled::ENABLED,
                )),
                rule,
            }),
        }))
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket, key = %req.input.key))]
    async fn put_object_retention(
        &self,
        req: S3Request<PutObjectRetentionInput>,
    ) -> S3Result<S3Response<PutObjectRetentionOutput>> {
        let i = req.input;
        let r = i.retention.unwrap_or_default();
        let mode = lock_mode(r.mode.as_ref().map(|m| m.as_str()))?;
        let until = r.retain_until_date.as_ref().map(ts_ms).ok_or_else(|| {
            s3_error!(
                MalformedXML,
                "The XML you provided was not well-formed or did not validate against our published schema"
            )
        })?;
        self.svc
            .put_object_retention(
                &i.bucket,
                &i.key,
                i.version_id.as_deref(),
                mode,
                until,
                i.bypass_governance_retention == Some(true),
            )
            .await
            .s3()?;
        Ok(S3Response::new(PutObjectRetentionOutput::default()))
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket, key = %req.input.key))]
    async fn get_object_retention(
        &self,
        req: S3Request<GetObjectRetentionInput>,
    ) -> S3Result<S3Response<GetObjectRetentionOutput>> {
        let i = req.input;
        let (mode, until) = self
            .svc
            .object_retention(&i.bucket, &i.key, i.version_id.as_deref())
            .await
            .s3()?;
        Ok(S3Response::new(GetObjectRetentionOutput {
            retention: Some(ObjectLockRetention {
                mode: Some(ObjectLockRetentionMode::from(mode)),
                retain_until_date: Some(ts(until)),
            }),
        }))
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket, key = %req.input.key))]
    async fn put_object_legal_hold(
        &self,
        req: S3Request<PutObjectLegalHoldInput>,
    ) -> S3Result<S3Response<PutObjectLegalHoldOutput>> {
        let i = req.input;
        let status = i.legal_hold.and_then(|h| h.status);
        if status.is_none() {
            return Err(s3_error!(
                MalformedXML,
                "The XML you provided was not well-formed or did not validate against our published schema"
            ));
        }
        let on = legal_hold_on(status.as_ref().map(ObjectLockLegalHoldStatus::as_str))?;
        self.svc
            .put_object_legal_hold(&i.bucket, &i.key, i.version_id.as_deref(), on)
            .await
            .s3()?;
        Ok(S3Response::new(PutObjectLegalHoldOutput::default()))
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket, key = %req.input.key))]
    async fn get_object_legal_hold(
        &self,
        req: S3Request<GetObjectLegalHoldInput>,
    ) -> S3Result<S3Response<GetObjectLegalHoldOutput>> {
        let i = req.input;
        let on = self
            .svc
            .object_legal_hold(&i.bucket, &i.key, i.version_id.as_deref())
            .await
            .s3()?;
        let status = if on {
            ObjectLockLegalHoldStatus::ON
        } else {
            ObjectLockLegalHoldStatus::OFF
        };
        Ok(S3Response::new(GetObjectLegalHoldOutput {
            legal_hold: Some(ObjectLockLegalHold {
                status: Some(ObjectLockLegalHoldStatus::from_static(status)),
            }),
        }))
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket))]
    async fn put_bucket_versioning(
        &self,
        req: S3Request<PutBucketVersioningInput>,
    ) -> S3Result<S3Response<PutBucketVersioningOutput>> {
        let i = req.input;
        let c = i.versioning_configuration;
        if c.mfa_delete
            .as_ref()
            .is_some_and(|m| m.as_str() == MFADelete::ENABLED)
        {
            return Err(obj_s3(ObjError::NotImplemented("MFA delete".into())));
        }
        let v = match c.status.as_ref().map(|s| s.as_str()) {
            Some(BucketVersioningStatus::ENABLED) => lode_objects::Versioning::Enabled,
            Some(BucketVersioningStatus::SUSPENDED) => lode_objects::Versioning::Suspended,
            Some(_) => {
                return Err(s3_error!(
                    MalformedXML,
                    "The XML you provided was not well-formed or did not validate against our published schema"
                ));
            }
            // No status: nothing to change.
            None => {
                self.svc.bucket(&i.bucket).await.s3()?;
                return Ok(S3Response::new(PutBucketVersioningOutput::default()));
            }
        };
        self.svc.set_bucket_versioning(&i.bucket, v).await.s3()?;
        Ok(S3Response::new(PutBucketVersioningOutput::default()))
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket))]
    async fn get_bucket_versioning(
        &self,
        req: S3Request<GetBucketVersioningInput>,
    ) -> S3Result<S3Response<GetBucketVersioningOutput>> {
        let v = self.svc.bucket_versioning(&req.input.bucket).await.s3()?;
        let status = match v {
            lode_objects::Versioning::Off => None,
            lode_objects::Versioning::Enabled => Some(BucketVersioningStatus::ENABLED),
            lode_objects::Versioning::Suspended => Some(BucketVersioningStatus::SUSPENDED),
        };
        Ok(S3Response::new(GetBucketVersioningOutput {
            status: status.map(BucketVersioningStatus::from_static),
            mfa_delete: None,
        }))
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket))]
    async fn list_object_versions(
        &self,
        req: S3Request<ListObjectVersionsInput>,
    ) -> S3Result<S3Response<ListObjectVersionsOutput>> {
        let i = req.input;
        let max = max_keys(i.max_keys)?;
        let enc = url_encoding(i.encoding_type.as_ref())?;
        let version_marker = i.version_id_marker.clone().filter(|v| !v.is_empty());
        if let Some(v) = &version_marker {
            if i.key_marker.as_deref().is_none_or(str::is_empty) {
                return Err(s3_error!(
                    InvalidArgument,
                    "A version-id marker cannot be specified without a key marker."
                ));
            }
            if !lode_objects::is_version_id(v) {
                return Err(s3_error!(InvalidArgument, "Invalid version id specified"));
            }
        }
        let q = lode_objects::VersionQuery {
            prefix: i.prefix.clone().unwrap_or_default(),
            delimiter: i.delimiter.clone().filter(|d| !d.is_empty()),
            key_marker: i.key_marker.clone().filter(|k| !k.is_empty()),
            version_marker,
            max,
        };
        let page = self.svc.list_object_versions(&i.bucket, q).await.s3()?;
        let bucket_owner = self.listing_owner(&i.bucket).await?;
        let owner_of_version = |r: &lode_objects::ObjectRecord| {
            let enforced = bucket_owner.1;
            crate::acl::owner(match (&r.meta.owner, enforced) {
                (Some(o), false) => o,
                _ => &bucket_owner.0,
            })
        };
        let e = |s: &str| if enc { url_encode(s) } else { s.to_owned() };
        let id =
            |r: &lode_objects::ObjectRecord| r.version_id.clone().unwrap_or_else(|| "null".into());
        let mut versions = vec![];
        let mut markers = vec![];
        for v in page.entries {
            if v.record.delete_marker {
                markers.push(DeleteMarkerEntry {
                    is_latest: Some(v.is_latest),
                    key: Some(e(&v.key)),
                    last_modified: Some(ts(v.record.last_modified_ms)),
                    owner: Some(owner_of_version(&v.record)),
                    version_id: Some(id(&v.record)),
                });
            } else {
                let names = lode_objects::ChecksumNames::of(&v.record.checksums);
                versions.push(ObjectVersion {
                    e_tag: Some(etag(&v.record.etag)),
                    is_latest: Some(v.is_latest),
                    key: Some(e(&v.key)),
                    last_modified: Some(ts(v.record.last_modified_ms)),
                    owner: Some(owner_of_version(&v.record)),
                    size: Some(v.record.size as i64),
                    storage_class: Some(ObjectVersionStorageClass::from_static(
                        ObjectVersionStorageClass::STANDARD,
                    )),
                    version_id: Some(id(&v.record)),
                    checksum_algorithm: checksum_algorithms(names),
                    checksum_type: names.kind().map(ChecksumType::from_static),
                    ..Default::default()
                });
            }
        }
        let (next_key, next_version) = match page.next {
            Some((k, v)) => (Some(e(&k)), v),
            None => (None, None),
        };
        let en = |s: Option<String>| if enc { s.map(|s| url_encode(&s)) } else { s };
        Ok(S3Response::new(ListObjectVersionsOutput {
            name: Some(i.bucket),
            prefix: Some(en(i.prefix).unwrap_or_default()),
            delimiter: en(i.delimiter.filter(|d| !d.is_empty())),
            key_marker: Some(en(i.key_marker).unwrap_or_default()),
            version_id_marker: Some(i.version_id_marker.unwrap_or_default()),
            max_keys: Some(max as i32),
            is_truncated: Some(page.truncated),
            next_key_marker: next_key,
            next_version_id_marker: next_version,
            versions: Some(versions),
            delete_markers: Some(markers),
            common_prefixes: Some(
                page.prefixes
                    .iter()
                    .map(|p| CommonPrefix { prefix: Some(e(p)) })
                    .collect(),
            ),
            encoding_type: i.encoding_type,
            ..Default::default()
        }))
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket))]
    async fn list_objects_v2(
        &self,
        req: S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        let i = req.input;
        let max = max_keys(i.max_keys)?;
        let enc = url_encoding(i.encoding_type.as_ref())?;
        let after = match &i.continuation_token {
            Some(t) => Some(parse_token(t)?),
            None => i.start_after.clone(),
        };
        let prefix = i.prefix.as_deref().unwrap_or_default();
        let (page, objects) = self
            .svc
            .list_object_briefs(
                &i.bucket,
                prefix,
                i.delimiter.as_deref(),
                after.as_deref(),
                max,
            )
            .await
            .s3()?;
        let bucket_owner = if i.fetch_owner.unwrap_or(false) {
            Some(self.listing_owner(&i.bucket).await?)
        } else {
            None
        };
        let (contents, prefixes) = list_entries(
            &page,
            objects,
            bucket_owner.as_ref().map(|(o, e)| (o.as_str(), *e)),
            enc,
        );
        let e = |s: Option<String>| if enc { s.map(|s| url_encode(&s)) } else { s };
        Ok(S3Response::new(ListObjectsV2Output {
            name: Some(i.bucket),
            prefix: Some(e(i.prefix).unwrap_or_default()),
            delimiter: e(i.delimiter.filter(|d| !d.is_empty())),
            start_after: e(i.start_after),
            max_keys: Some(max as i32),
            key_count: Some((contents.len() + prefixes.len()) as i32),
            is_truncated: Some(page.truncated),
            continuation_token: i.continuation_token,
            next_continuation_token: if page.truncated {
                page.last.as_deref().map(list_token)
            } else {
                None
            },
            contents: Some(contents),
            common_prefixes: Some(prefixes),
            encoding_type: i.encoding_type,
            ..Default::default()
        }))
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket))]
    async fn list_objects(
        &self,
        req: S3Request<ListObjectsInput>,
    ) -> S3Result<S3Response<ListObjectsOutput>> {
        let i = req.input;
        let max = max_keys(i.max_keys)?;
        let enc = url_encoding(i.encoding_type.as_ref())?;
        let prefix = i.prefix.as_deref().unwrap_or_default();
        let (page, objects) = self
            .svc
            .list_object_briefs(
                &i.bucket,
                prefix,
                i.delimiter.as_deref(),
                i.marker.as_deref(),
                max,
            )
            .await
            .s3()?;
        let (bucket_owner, enforced) = self.listing_owner(&i.bucket).await?;
        let (contents, prefixes) =
            list_entries(&page, objects, Some((bucket_owner.as_str(), enforced)), enc);
        let e = |s: Option<String>| if enc { s.map(|s| url_encode(&s)) } else { s };
        Ok(S3Response::new(ListObjectsOutput {
            name: Some(i.bucket),
            // V1 returns Prefix as sent even with encoding-type=url (botocore decodes it only
            // for V2).
            prefix: Some(i.prefix.unwrap_or_default()),
            delimiter: e(i.delimiter.filter(|d| !d.is_empty())),
            marker: Some(e(i.marker).unwrap_or_default()),
            next_marker: if page.truncated {
                e(page.last.clone())
            } else {
                None
            },
            max_keys: Some(max as i32),
            is_truncated: Some(page.truncated),
            contents: Some(contents),
            common_prefixes: Some(prefixes),
            encoding_type: i.encoding_type,
            ..Default::default()
        }))
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket, key = %req.input.key))]
    async fn create_multipart_upload(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        let owner = owner_of(req.credentials.as_ref());
        let t = self.transport(&req);
        let i = req.input;
        let sse = write_sse!(i).asked(t)?;
        let (acl_owner, acl) = self
            .write_acl(
                &i.bucket,
                req.credentials.as_ref(),
                i.acl.as_ref().map(|a| a.as_str()),
                &crate::acl::header_grants(
                    i.grant_full_control.as_ref(),
                    i.grant_read.as_ref(),
                    i.grant_read_acp.as_ref(),
                    None,
                    i.grant_write_acp.as_ref(),
                ),
            )
            .await?;
        if let Some(a) = &i.checksum_algorithm
            && Algo::parse(a.as_str()).is_none()
        {
            return Err(s3_error!(InvalidArgument, "Unsupported checksum algorithm"));
        }
        if let (Some(t), Some(a)) = (&i.checksum_type, &i.checksum_algorithm)
            && t.as_str() == ChecksumType::FULL_OBJECT
            && matches!(Algo::parse(a.as_str()), Some(Algo::Sha1 | Algo::Sha256))
        {
            return Err(s3_error!(
                InvalidRequest,
                "The FULL_OBJECT checksum type cannot be used with the SHA1 or SHA256 algorithms"
            ));
        }
        let tags = header_tags(i.tagging.as_deref())?;
        let lock = asked_lock(
            i.object_lock_mode.as_ref(),
            i.object_lock_retain_until_date.as_ref(),
            i.object_lock_legal_hold_status.as_ref(),
        )?;
        let mut meta = object_meta(
            i.content_type,
            i.cache_control,
            i.content_disposition,
            i.content_encoding,
            i.content_language,
            i.expires,
            i.metadata,
        );
        meta.tags = tags;
        meta.lock = lock;
        meta.owner = acl_owner;
        meta.acl = acl;
        let rec = UploadRecord {
            initiated_ms: lode_objects::now_ms(),
            meta,
            checksum_algorithm: i.checksum_algorithm.as_ref().map(|a| a.as_str().to_owned()),
            checksum_type: i.checksum_type.as_ref().map(|t| t.as_str().to_owned()),
            owner,
        };
        let (algo, ctype) = (rec.checksum_algorithm.clone(), rec.checksum_type.clone());
        let initiated_ms = rec.initiated_ms;
        let (id, stored) = self
            .svc
            .create_upload(&i.bucket, &i.key, rec, &sse)
            .await
            .s3()?;
        let (abort_date, abort_rule_id) = self.abort_rule(&i.bucket, &i.key, initiated_ms).await;
        let shown = crate::sse::shown(
            stored.as_ref(),
            i.sse_customer_key_md5.as_ref(),
            &self.region,
        );
        Ok(S3Response::new(CreateMultipartUploadOutput {
            server_side_encryption: shown.sse,
            ssekms_key_id: shown.kms_key,
            bucket_key_enabled: shown.bucket_key,
            sse_customer_algorithm: shown.customer_algorithm,
            sse_customer_key_md5: shown.customer_md5,
            ssekms_encryption_context: shown.context,
            abort_date,
            abort_rule_id,
            bucket: Some(i.bucket),
            key: Some(i.key),
            upload_id: Some(id),
            checksum_algorithm: algo.map(ChecksumAlgorithm::from),
            checksum_type: ctype.map(ChecksumType::from),
            ..Default::default()
        }))
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket, key = %req.input.key))]
    async fn upload_part(
        &self,
        mut req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        let body = req.input.body.take();
        require_length(&req.headers, req.input.content_length)?;
        let i = &req.input;
        let expected = ChecksumSet::from_fields(
            i.checksum_crc32.clone(),
            i.checksum_crc32c.clone(),
            i.checksum_crc64nvme.clone(),
            i.checksum_sha1.clone(),
            i.checksum_sha256.clone(),
        );
        let mut integ = integrity(
            &req,
            i.content_md5.clone(),
            i.checksum_algorithm.as_ref(),
            expected,
        )?;
        if let Some(k) = crate::sse::customer_key(customer_headers!(i), self.transport(&req))? {
            integ.sse = lode_objects::encryption::Asked::Customer(k);
        }
        let i = req.input;
        let body = body.unwrap_or_else(|| StreamingBlob::from(s3s::Body::empty()));
        let p = self
            .svc
            .upload_part(
                &i.bucket,
                &i.key,
                &i.upload_id,
                i.part_number,
                body,
                i.content_length,
                integ,
            )
            .await
            .s3()?;
        let (crc32, crc32c, crc64nvme, sha1, sha256, _) = checksum_fields(&p.checksums);
        // The upload's encryption, for the response's headers.
        let up = self.svc.upload(&i.bucket, &i.key, &i.upload_id).await;
        let shown = crate::sse::shown(
            up.ok().and_then(|u| u.meta.sse).as_ref(),
            i.sse_customer_key_md5.as_ref(),
            &self.region,
        );
        Ok(S3Response::new(UploadPartOutput {
            server_side_encryption: shown.sse,
            ssekms_key_id: shown.kms_key,
            bucket_key_enabled: shown.bucket_key,
            sse_customer_algorithm: shown.customer_algorithm,
            sse_customer_key_md5: shown.customer_md5,
            e_tag: Some(etag(&p.etag)),
            checksum_crc32: crc32,
            checksum_crc32c: crc32c,
            checksum_crc64nvme: crc64nvme,
            checksum_sha1: sha1,
            checksum_sha256: sha256,
            ..Default::default()
        }))
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket, key = %req.input.key))]
    async fn upload_part_copy(
        &self,
        req: S3Request<UploadPartCopyInput>,
    ) -> S3Result<S3Response<UploadPartCopyOutput>> {
        let t = self.transport(&req);
        let i = req.input;
        let (sb, sk, src_version) = source_version(&i.copy_source, "UploadPartCopy")?;
        let up = self
            .svc
            .upload(&i.bucket, &i.key, &i.upload_id)
            .await
            .s3()?;
        let dst_key = crate::sse::customer_key(customer_headers!(i), t)?;
        let source_key = crate::sse::customer_key(source_customer_headers!(i), t)?;
        let mut h = match src_version {
            Some(v) => self.svc.open_object_version(sb, sk, v).await,
            None => self.svc.open_object(sb, sk).await,
        }
        .map_err(copy_source_error)?;
        CopySourceConds {
            if_match: i.copy_source_if_match.clone(),
            if_none_match: i.copy_source_if_none_match.clone(),
            if_modified_since: i.copy_source_if_modified_since.clone(),
            if_unmodified_since: i.copy_source_if_unmodified_since.clone(),
        }
        .check(&h.record)
        .s3()?;
        self.svc.unlock(&mut h, source_key.as_ref()).await.s3()?;
        let size = h.record.size;
        let source_version =
            version_header(h.record.version_id.as_deref(), self.versioned(sb).await);
        let range = match &i.copy_source_range {
            None => (0, size),
            Some(r) => {
                let parsed = Range::parse(r).map_err(|_| {
                    s3_error!(
                        InvalidArgument,
                        "The x-amz-copy-source-range value must be of the form bytes=first-last"
                    )
                })?;
                let Range::Int {
                    first,
                    last: Some(last),
                } = parsed
                else {
                    return Err(s3_error!(
                        InvalidArgument,
                        "The x-amz-copy-source-range value must be of the form bytes=first-last"
                    ));
                };
                if last >= size {
                    return Err(obj_s3(ObjError::InvalidRange));
                }
                (first, last + 1)
            }
        };
        let p = self
            .svc
            .upload_part_copy(
                (&i.bucket, &i.key, &i.upload_id, i.part_number),
                h,
                range,
                dst_key,
            )
            .await
            .s3()?;
        let shown = crate::sse::shown(
            up.meta.sse.as_ref(),
            i.sse_customer_key_md5.as_ref(),
            &self.region,
        );
        Ok(S3Response::new(UploadPartCopyOutput {
            server_side_encryption: shown.sse,
            ssekms_key_id: shown.kms_key,
            bucket_key_enabled: shown.bucket_key,
            sse_customer_algorithm: shown.customer_algorithm,
            sse_customer_key_md5: shown.customer_md5,
            copy_part_result: Some(CopyPartResult {
                e_tag: Some(etag(&p.etag)),
                last_modified: Some(ts(p.last_modified_ms)),
                ..Default::default()
            }),
            copy_source_version_id: source_version,
            ..Default::default()
        }))
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket, key = %req.input.key))]
    async fn list_parts(
        &self,
        req: S3Request<ListPartsInput>,
    ) -> S3Result<S3Response<ListPartsOutput>> {
        let i = req.input;
        let up = self
            .svc
            .upload(&i.bucket, &i.key, &i.upload_id)
            .await
            .s3()?;
        let max = i.max_parts.unwrap_or(1000).clamp(0, 1000) as usize;
        let marker = i.part_number_marker.unwrap_or(0).max(0) as u32;
        let (parts, truncated) = self
            .svc
            .list_parts(&i.bucket, &i.key, &i.upload_id, marker, max)
            .await
            .s3()?;
        let next = parts.last().map(|(n, _)| *n as i32);
        let parts = parts
            .into_iter()
            .map(|(n, p)| {
                let (crc32, crc32c, crc64nvme, sha1, sha256, _) = checksum_fields(&p.checksums);
                Part {
                    part_number: Some(n as i32),
                    e_tag: Some(etag(&p.etag)),
                    size: Some(p.size as i64),
                    last_modified: Some(ts(p.last_modified_ms)),
                    checksum_crc32: crc32,
                    checksum_crc32c: crc32c,
                    checksum_crc64nvme: crc64nvme,
                    checksum_sha1: sha1,
                    checksum_sha256: sha256,
                }
            })
            .collect();
        let (abort_date, abort_rule_id) = self.abort_rule(&i.bucket, &i.key, up.initiated_ms).await;
        Ok(S3Response::new(ListPartsOutput {
            abort_date,
            abort_rule_id,
            bucket: Some(i.bucket),
            key: Some(i.key),
            upload_id: Some(i.upload_id),
            max_parts: Some(max as i32),
            part_number_marker: i.part_number_marker,
            next_part_number_marker: next,
            is_truncated: Some(truncated),
            parts: Some(parts),
            owner: Some(crate::acl::owner(&self.users.owner_name(&up.owner))),
            initiator: Some(initiator(&self.users.owner_name(&up.owner))),
            storage_class: Some(StorageClass::from_static(StorageClass::STANDARD)),
            checksum_algorithm: up.checksum_algorithm.map(ChecksumAlgorithm::from),
            checksum_type: up.checksum_type.map(ChecksumType::from),
            ..Default::default()
        }))
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket))]
    async fn list_multipart_uploads(
        &self,
        req: S3Request<ListMultipartUploadsInput>,
    ) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
        let i = req.input;
        let max = i.max_uploads.unwrap_or(1000).clamp(0, 1000) as usize;
        let page = self
            .svc
            .list_uploads(
                &i.bucket,
                i.prefix.clone().unwrap_or_default(),
                i.delimiter.clone(),
                i.key_marker.clone(),
                i.upload_id_marker.clone(),
                max,
            )
            .await
            .s3()?;
        let (nk, nu) = page.last.clone().unzip();
        let nu = nu.filter(|u| !u.is_empty()); // the page ended on a common prefix
        let truncated = page.truncated;
        let prefixes: Vec<CommonPrefix> = page
            .prefixes
            .iter()
            .map(|p| CommonPrefix {
                prefix: Some(p.clone()),
            })
            .collect();
        let uploads = page
            .uploads
            .into_iter()
            .map(|(key, id, r)| MultipartUpload {
                key: Some(key),
                upload_id: Some(id),
                initiated: Some(ts(r.initiated_ms)),
                owner: Some(crate::acl::owner(&self.users.owner_name(&r.owner))),
                initiator: Some(initiator(&self.users.owner_name(&r.owner))),
                storage_class: Some(StorageClass::from_static(StorageClass::STANDARD)),
                checksum_algorithm: r.checksum_algorithm.map(ChecksumAlgorithm::from),
                checksum_type: r.checksum_type.map(ChecksumType::from),
            })
            .collect();
        Ok(S3Response::new(ListMultipartUploadsOutput {
            bucket: Some(i.bucket),
            prefix: i.prefix,
            key_marker: i.key_marker,
            upload_id_marker: i.upload_id_marker,
            next_key_marker: if truncated { nk } else { None },
            next_upload_id_marker: if truncated { nu } else { None },
            max_uploads: Some(max as i32),
            is_truncated: Some(truncated),
            uploads: Some(uploads),
            common_prefixes: Some(prefixes),
            delimiter: i.delimiter,
            ..Default::default()
        }))
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket, key = %req.input.key))]
    async fn complete_multipart_upload(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        let i = req.input;
        let parts: Vec<(i32, String, ChecksumSet)> = i
            .multipart_upload
            .and_then(|m| m.parts)
            .unwrap_or_default()
            .into_iter()
            .map(|p| {
                let n = p
                    .part_number
                    .ok_or_else(|| s3_error!(MalformedXML, "PartNumber is required"))?;
                let e = p
                    .e_tag
                    .ok_or_else(|| s3_error!(MalformedXML, "ETag is required"))?;
                let sums = ChecksumSet::from_fields(
                    p.checksum_crc32,
                    p.checksum_crc32c,
                    p.checksum_crc64nvme,
                    p.checksum_sha1,
                    p.checksum_sha256,
                );
                Ok((n, e.value().to_owned(), sums))
            })
            .collect::<S3Result<_>>()?;
        let whole = ChecksumSet::from_fields(
            i.checksum_crc32,
            i.checksum_crc32c,
            i.checksum_crc64nvme,
            i.checksum_sha1,
            i.checksum_sha256,
        );
        let cond = write_cond(i.if_match.as_ref(), i.if_none_match.as_ref());
        let rec = self
            .svc
            .complete_upload(&i.bucket, &i.key, &i.upload_id, parts, whole, cond)
            .await
            .s3()?;
        let (crc32, crc32c, crc64nvme, sha1, sha256, ctype) = checksum_fields(&rec.checksums);
        let versioned = self.versioned(&i.bucket).await;
        let expiration = self.expiration(&i.bucket, &i.key, &rec).await;
        let shown = crate::sse::record_shown(&rec, None, &self.region);
        Ok(S3Response::new(CompleteMultipartUploadOutput {
            server_side_encryption: shown.sse,
            ssekms_key_id: shown.kms_key,
            bucket_key_enabled: shown.bucket_key,
            expiration,
            version_id: version_header(rec.version_id.as_deref(), versioned),
            bucket: Some(i.bucket.clone()),
            key: Some(i.key.clone()),
            e_tag: Some(etag(&rec.etag)),
            location: Some(format!("/{}/{}", i.bucket, i.key)),
            checksum_crc32: crc32,
            checksum_crc32c: crc32c,
            checksum_crc64nvme: crc64nvme,
            checksum_sha1: sha1,
            checksum_sha256: sha256,
            checksum_type: ctype,
            ..Default::default()
        }))
    }

    #[instrument(skip_all, fields(bucket = %req.input.bucket, key = %req.input.key))]
    async fn abort_multipart_upload(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        let i = req.input;
        self.svc
            .abort_upload(&i.bucket, &i.key, &i.upload_id)
            .await
            .s3()?;
        Ok(S3Response::new(AbortMultipartUploadOutput::default()))
    }
}
