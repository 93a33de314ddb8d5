//! Authorization of S3 requests (after SigV4 authentication): which user may run which
//! operation on which bucket (the rules are in `lode_objects::users`), and the key store SigV4
//! authentication asks for secrets.

use std::net::IpAddr;
use std::sync::Arc;

use http::{HeaderMap, Uri};
use lode_objects::policy::{self, Context, Decision, Policy, Principal, Request};
use s3s::access::{S3Access, S3AccessContext};
use s3s::dto::{CopyObjectInput, UploadPartCopyInput};
use s3s::{S3Request, S3Result, s3_error};

use lode_objects::ObjectService;
use lode_objects::users::{Perm, ROOT, Users};

#[derive(Clone)]
pub struct Authz {
    pub users: Arc<Users>,
    pub svc: Arc<ObjectService>,
}

/// Where a request came from, put in its extensions by the server (for `aws:SourceIp` and
/// `aws:SecureTransport`).
#[derive(Debug, Clone, Copy)]
pub struct Peer {
    pub ip: IpAddr,
    pub secure: bool,
}

/// What an operation needs on its bucket.
fn needed(op: &str) -> Perm {
    match op {
        "GetObject"
        | "HeadObject"
        | "ListObjects"
        | "ListObjectsV2"
        | "HeadBucket"
        | "GetBucketLocation"
        | "ListParts"
        | "ListMultipartUploads"
        | "GetObjectAttributes"
        | "GetObjectTagging"
        | "GetObjectAcl"
        | "ListObjectVersions" => Perm::Read,
        "PutObject"
        | "DeleteObject"
        | "DeleteObjects"
        | "CopyObject"
        | "CreateMultipartUpload"
        | "UploadPart"
        | "UploadPartCopy"
        | "CompleteMultipartUpload"
        | "AbortMultipartUpload"
        | "PutObjectTagging"
        | "DeleteObjectTagging"
        | "PostObject"
        | "RenameObject" => Perm::Write,
        // DeleteBucket and every bucket configuration call: the owner's.
        _ => Perm::Own,
    }
}

/// The operations an anonymous caller may be allowed by a policy: reads, listings and
/// uploads of objects, never bucket configuration.
fn anonymous_may(op: &str) -> bool {
    matches!(
        op,
        "GetObject"
            | "HeadObject"
            | "GetObjectAttributes"
            | "ListObjects"
            | "ListObjectsV2"
            | "ListObjectVersions"
            | "HeadBucket"
            | "GetBucketLocation"
            | "PutObject"
            | "PostObject"
            | "CopyObject"
            | "CreateMultipartUpload"
            | "UploadPart"
            | "UploadPartCopy"
            | "CompleteMultipartUpload"
            | "AbortMultipartUpload"
            | "ListParts"
            | "ListMultipartUploads"
            | "DeleteObject"
            | "DeleteObjects"
    )
}

/// The policy action an S3 operation is judged as (`versioned`: it names a `versionId`).
pub fn action_of(op: &str, versioned: bool) -> String {
    let a = match (op, versioned) {
        ("GetObject" | "HeadObject", false) => "GetObject",
        ("GetObject" | "HeadObject", true) => "GetObjectVersion",
        ("GetObjectAttributes", false) => "GetObjectAttributes",
        ("GetObjectAttributes", true) => "GetObjectVersionAttributes",
        ("DeleteObject", false) => "DeleteObject",
        ("DeleteObject", true) => "DeleteObjectVersion",
        ("GetObjectTagging", false) => "GetObjectTagging",
        ("GetObjectTagging", true) => "GetObjectVersionTagging",
        ("PutObjectTagging", false) => "PutObjectTagging",
        ("PutObjectTagging", true) => "PutObjectVersionTagging",
        ("DeleteObjectTagging", false) => "DeleteObjectTagging",
        ("DeleteObjectTagging", true) => "DeleteObjectVersionTagging",
        ("GetObjectAcl", false) => "GetObjectAcl",
        ("GetObjectAcl", true) => "GetObjectVersionAcl",
        ("PutObjectAcl", false) => "PutObjectAcl",
        ("PutObjectAcl", true) => "PutObjectVersionAcl",
        ("DeleteBucketOwnershipControls", _) => "PutBucketOwnershipControls",
        (
            "PutObject"
            | "PostObject"
            | "CopyObject"
            | "CreateMultipartUpload"
            | "UploadPart"
            | "UploadPartCopy"
            | "CompleteMultipartUpload"
            | "RenameObject",
            _,
        ) => "PutObject",
        ("ListParts", _) => "ListMultipartUploadParts",
        ("ListMultipartUploads", _) => "ListBucketMultipartUploads",
        ("ListObjects" | "ListObjectsV2" | "HeadBucket", _) => "ListBucket",
        ("ListObjectVersions", _) => "ListBucketVersions",
        ("GetBucketLifecycleConfiguration", _) => "GetLifecycleConfiguration",
        ("PutBucketLifecycleConfiguration" | "DeleteBucketLifecycle", _) => {
            "PutLifecycleConfiguration"
        }
        ("DeleteBucketTagging", _) => "PutBucketTagging",
        ("GetObjectLockConfiguration", _) => "GetBucketObjectLockConfiguration",
        ("PutObjectLockConfiguration", _) => "PutBucketObjectLockConfiguration",
        ("DeleteBucketCors", _) => "PutBucketCORS",
        ("GetBucketCors", _) => "GetBucketCORS",
        ("PutBucketCors", _) => "PutBucketCORS",
        ("GetBucketNotificationConfiguration", _) => "GetBucketNotification",
        ("PutBucketNotificationConfiguration", _) => "PutBucketNotification",
        ("PutPublicAccessBlock" | "DeletePublicAccessBlock", _) => "PutBucketPublicAccessBlock",
        ("GetPublicAccessBlock", _) => "GetBucketPublicAccessBlock",
        ("GetBucketEncryption", _) => "GetEncryptionConfiguration",
        ("PutBucketEncryption" | "DeleteBucketEncryption", _) => "PutEncryptionConfiguration",
        (op, _) => return format!("s3:{op}"),
    };
    format!("s3:{a}")
}

/// The operations a bucket's owner may always run, whatever its policy says (as on AWS,
/// where the account can always change or remove a policy that locks it out).
fn owner_always(op: &str) -> bool {
    matches!(
        op,
        "PutBucketPolicy" | "GetBucketPolicy" | "DeleteBucketPolicy" | "GetBucketPolicyStatus"
    )
}

fn denied() -> s3s::S3Error {
    s3_error!(AccessDenied, "Access Denied")
}

/// What of a request authorization reads beyond its operation: headers, URL and peer.
pub struct ReqInfo<'a> {
    pub headers: &'a HeaderMap,
    pub uri: &'a Uri,
    pub peer: Option<Peer>,
}

fn query_value(uri: &Uri, name: &str) -> Option<String> {
    uri.query()?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (k == name).then(|| {
            urlencoding::decode(&v.replace('+', " "))
                .map(|c| c.into_owned())
                .unwrap_or_default()
        })
    })
}

/// The condition keys of one request that policy `p` reads (it names them in conditions and
/// variables): the work is for those keys only, so a policy that reads none costs nothing
/// here.
fn context(
    p: &Policy,
    info: &ReqInfo<'_>,
    op: &str,
    user: Option<&str>,
    existing_tags: Option<&[(String, String)]>,
) -> Context {
    let mut c = Context::default();
    let h = |name: &str| info.headers.get(name).and_then(|v| v.to_str().ok());
    let now = time::OffsetDateTime::now_utc;
    let rfc3339 = &time::format_description::well_known::Rfc3339;
    let mut request_tags: Option<Vec<(String, String)>> = None;
    for key in p.reads() {
        let one = |v: Option<String>| v.map(|v| vec![v]);
        let values: Option<Vec<String>> = match key {
            "aws:currenttime" => one(now().format(rfc3339).ok()),
            "aws:epochtime" => one(Some(now().unix_timestamp().to_string())),
            "aws:sourceip" => one(info.peer.map(|peer| {
                match peer.ip {
                    IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(peer.ip, IpAddr::V4),
                    ip => ip,
                }
                .to_string()
            })),
            "aws:securetransport" => one(info.peer.map(|peer| peer.secure.to_string())),
            "aws:username" => one(user.map(str::to_owned)),
            "aws:userid" => one(user.map(policy::canonical_id)),
            "aws:principalarn" => one(user.map(policy::user_arn)),
            "aws:principalaccount" => one(user.map(|_| policy::ACCOUNT.to_owned())),
            "aws:principaltype" => one(Some(
                if user.is_some() { "User" } else { "Anonymous" }.to_owned(),
            )),
            "s3:signatureversion" => one(user.map(|_| "AWS4-HMAC-SHA256".to_owned())),
            "s3:authtype" => one(user.map(|_| {
                if op == "PostObject" {
                    "POST"
                } else if info
                    .uri
                    .query()
                    .is_some_and(|q| q.contains("X-Amz-Signature="))
                {
                    "REST-QUERY-STRING"
                } else {
                    "REST-HEADER"
                }
                .to_owned()
            })),
            "aws:referer" => one(h("referer").map(str::to_owned)),
            "aws:useragent" => one(h("user-agent").map(str::to_owned)),
            "s3:prefix" => one(query_value(info.uri, "prefix")),
            "s3:delimiter" => one(query_value(info.uri, "delimiter")),
            "s3:max-keys" => one(query_value(info.uri, "max-keys")),
            "s3:versionid" => one(query_value(info.uri, "versionId")),
            "s3:object-lock-mode" => one(h("x-amz-object-lock-mode").map(str::to_owned)),
            "s3:object-lock-legal-hold" => {
                one(h("x-amz-object-lock-legal-hold").map(str::to_owned))
            }
            "s3:object-lock-retain-until-date" => {
                one(h("x-amz-object-lock-retain-until-date").map(str::to_owned))
            }
            "s3:object-lock-remaining-retention-days" => {
                one(h("x-amz-object-lock-retain-until-date")
                    .and_then(|v| time::OffsetDateTime::parse(v, rfc3339).ok())
                    .map(|t| (t - now()).whole_days().max(0).to_string()))
            }
            "s3:requestobjecttagkeys" => Some(
                request_tags
                    .get_or_insert_with(|| tags_of(h("x-amz-tagging")))
                    .iter()
                    .map(|(k, _)| k.clone())
                    .collect::<Vec<_>>(),
            )
            .filter(|v| !v.is_empty()),
            k => {
                if let Some(name) = k.strip_prefix("s3:x-amz-") {
                    one(h(&format!("x-amz-{name}")).map(str::to_owned))
                } else if let Some(t) = k.strip_prefix("s3:requestobjecttag/") {
                    one(request_tags
                        .get_or_insert_with(|| tags_of(h("x-amz-tagging")))
                        .iter()
                        .find(|(n, _)| n.eq_ignore_ascii_case(t))
                        .map(|(_, v)| v.clone()))
                } else if let Some(t) = k.strip_prefix("s3:existingobjecttag/") {
                    one(existing_tags
                        .unwrap_or_default()
                        .iter()
                        .find(|(n, _)| n.eq_ignore_ascii_case(t))
                        .map(|(_, v)| v.clone()))
                } else {
                    None
                }
            }
        };
        if let Some(v) = values {
            c.set_many(key, v);
        }
    }
    c
}

/// The bucket policy's decision for the mount acting as Lode user `user` (the POSIX door):
/// no headers and no address, `s3:prefix` for a listing.
pub fn mount_decision(
    p: &Policy,
    user: &str,
    bucket: &str,
    key: Option<&str>,
    action: &str,
    prefix: Option<&str>,
) -> Decision {
    let uri: Uri = prefix
        .and_then(|pf| format!("/?prefix={}", urlencoding::encode(pf)).parse().ok())
        .unwrap_or_default();
    let headers = HeaderMap::new();
    let info = ReqInfo {
        headers: &headers,
        uri: &uri,
        peer: None,
    };
    let cx = context(p, &info, "Mount", Some(user), None);
    let resource = match key {
        Some(k) => format!("arn:aws:s3:::{bucket}/{k}"),
        None => format!("arn:aws:s3:::{bucket}"),
    };
    p.evaluate(&Request {
        principal: Principal::User(user),
        action,
        resource: &resource,
        context: &cx,
    })
}

/// The tags of an `x-amz-tagging` header (none if absent or malformed: the operation refuses
/// a malformed one itself).
fn tags_of(header: Option<&str>) -> Vec<(String, String)> {
    header
        .and_then(|t| lode_objects::tags::parse_header(t).ok())
        .unwrap_or_default()
}

impl Authz {
    /// Whether the caller (`access_key`; `None`: anonymous) may run `op` on `bucket` (and
    /// `key`), judged as `action`: an explicit `Deny` of the bucket's policy refuses it (but
    /// for root, and for the owner's policy calls); an `Allow` grants it; otherwise the
    /// caller's own rights decide (owner, grants; nothing for the anonymous caller). A bucket
    /// that does not exist passes (the operation then answers NoSuchBucket).
    pub async fn authorize(
        &self,
        access_key: Option<&str>,
        info: &ReqInfo<'_>,
        op: &str,
        bucket: &str,
        key: Option<&str>,
        action: &str,
    ) -> S3Result<()> {
        let user = match access_key {
            Some(ak) => Some(self.users.name_of(ak).ok_or_else(denied)?),
            None => None,
        };
        if user.as_deref() == Some(ROOT) {
            return Ok(()); // root may do anything: no bucket lookup on its hot path
        }
        if user.is_none() && !anonymous_may(op) {
            return Err(denied());
        }
        let owner = match self.svc.bucket_owner(bucket).await {
            Ok(Some(owner)) => owner,
            Ok(None) => return Ok(()),
            Err(e) => return Err(crate::error::s3_error(e)),
        };
        let is_owner = user
            .as_deref()
            .is_some_and(|u| self.users.is_owner(u, &owner));
        if is_owner && owner_always(op) {
            return Ok(());
        }
        let decision = match self
            .svc
            .policy_of(bucket)
            .await
            .map_err(crate::error::s3_error)?
        {
            None => Decision::None,
            Some(p) => match self
                .judge(&p, user.as_deref(), info, op, bucket, key, action)
                .await
            {
                // RestrictPublicBuckets: a public policy serves the account's users only.
                Decision::Allow
                    if user.is_none()
                        && p.is_public()
                        && self
                            .svc
                            .public_access_block_of(bucket)
                            .await
                            .map_err(crate::error::s3_error)?
                            .restrict_public_buckets =>
                {
                    Decision::None
                }
                d => d,
            },
        };
        let ok = match decision {
            Decision::Deny => false,
            Decision::Allow => true,
            Decision::None => {
                user.as_deref()
                    .is_some_and(|u| self.users.allowed(u, bucket, &owner, needed(op)))
                    || self
                        .acl_allows(user.as_deref(), info, bucket, key, action, &owner)
                        .await?
            }
        };
        if ok {
            Ok(())
        } else {
            tracing::debug!(user, bucket, op, ?decision, "access denied");
            Err(denied())
        }
    }

    /// The policy's decision for one request.
    #[allow(clippy::too_many_arguments)]
    async fn judge(
        &self,
        p: &Policy,
        user: Option<&str>,
        info: &ReqInfo<'_>,
        op: &str,
        bucket: &str,
        key: Option<&str>,
        action: &str,
    ) -> Decision {
        let tags = match key {
            Some(k) if p.needs_existing_tags() => {
                let v = query_value(info.uri, "versionId");
                self.svc.object_tags(bucket, k, v.as_deref()).await.ok()
            }
            _ => None,
        };
        let cx = context(p, info, op, user, tags.as_deref());
        let resource = match key {
            Some(k) => format!("arn:aws:s3:::{bucket}/{k}"),
            None => format!("arn:aws:s3:::{bucket}"),
        };
        p.evaluate(&Request {
            principal: user.map_or(Principal::Anonymous, Principal::User),
            action,
            resource: &resource,
            context: &cx,
        })
    }

    /// Whether the bucket's ACL (or, for an object action, the addressed object version's)
    /// grants the caller what `action` needs, as S3 maps ACL permissions onto actions. Read
    /// only when nothing else allowed the request, so an ACL costs nothing on the paths that
    /// owners, grants and policies serve. ACLs are out of force under `BucketOwnerEnforced`,
    /// public grants under IgnorePublicAcls.
    async fn acl_allows(
        &self,
        user: Option<&str>,
        info: &ReqInfo<'_>,
        bucket: &str,
        key: Option<&str>,
        action: &str,
        stored_owner: &str,
    ) -> S3Result<bool> {
        use lode_objects::acl::{Acl, Caller, Permission as P};
        let (object, want) = match action.strip_prefix("s3:").unwrap_or(action) {
            "ListBucket" | "ListBucketVersions" | "ListBucketMultipartUploads" => (false, P::Read),
            "PutObject" | "DeleteObject" => (false, P::Write),
            "GetBucketAcl" => (false, P::ReadAcp),
            "PutBucketAcl" => (false, P::WriteAcp),
            "GetObject" | "GetObjectVersion" => (true, P::Read),
            "GetObjectAcl" | "GetObjectVersionAcl" => (true, P::ReadAcp),
            "PutObjectAcl" | "PutObjectVersionAcl" => (true, P::WriteAcp),
            _ => return Ok(false),
        };
        let Some(access) = self
            .svc
            .access_of(bucket)
            .await
            .map_err(crate::error::s3_error)?
        else {
            return Ok(false);
        };
        if !access.ownership.acls_enabled() {
            return Ok(false);
        }
        let (bucket_acl, ignore_public) = (access.acl, access.block.ignore_public_acls);
        let caller = user.map_or(Caller::Anonymous, Caller::User);
        if !object {
            return Ok(bucket_acl.is_some_and(|a| a.allows(caller, want, ignore_public)));
        }
        let Some(key) = key else { return Ok(false) };
        let version = query_value(info.uri, "versionId");
        // An object that is not there grants nothing (403, as S3 answers a caller that may
        // not list the bucket).
        let Ok((owner, acl)) = self.svc.object_acl(bucket, key, version.as_deref()).await else {
            return Ok(false);
        };
        let owner = owner.unwrap_or_else(|| self.users.owner_name(stored_owner));
        let acl = acl.unwrap_or_else(|| Acl::private(&owner));
        Ok(acl.allows(caller, want, ignore_public))
    }

    /// Whether the bucket has a policy (DeleteObjects then judges each key).
    pub async fn has_policy(&self, bucket: &str) -> bool {
        matches!(self.svc.policy_of(bucket).await, Ok(Some(_)))
    }

    /// CopyObject's and UploadPartCopy's source: `s3:GetObject` (or `GetObjectVersion`) on it.
    async fn copy_source<T>(
        &self,
        req: &S3Request<T>,
        source: &s3s::dto::CopySource,
    ) -> S3Result<()> {
        let ak = req.credentials.as_ref().map(|c| c.access_key.as_str());
        let info = ReqInfo {
            headers: &req.headers,
            uri: &req.uri,
            peer: req.extensions.get::<Peer>().copied(),
        };
        match source {
            s3s::dto::CopySource::Bucket {
                bucket,
                key,
                version_id,
            } => {
                let action = action_of("GetObject", version_id.is_some());
                self.authorize(ak, &info, "GetObject", bucket, Some(key), &action)
                    .await
            }
            _ => Err(denied()), // access points, outposts
        }
    }
}

#[async_trait::async_trait]
impl S3Access for Authz {
    async fn check(&self, cx: &mut S3AccessContext<'_>) -> S3Result<()> {
        let peer = cx.extensions_mut().get::<Peer>().copied();
        let ak = cx.credentials().map(|c| c.access_key.clone());
        let op = cx.s3_op().name();
        let Some(bucket) = cx.s3_path().get_bucket_name().map(str::to_owned) else {
            // ListBuckets: filtered to what the caller may see; never anonymous.
            return if ak.is_some() { Ok(()) } else { Err(denied()) };
        };
        if op == "CreateBucket" {
            // Any user; the creator owns it.
            return if ak.is_some() { Ok(()) } else { Err(denied()) };
        }
        let key = cx.s3_path().get_object_key().map(str::to_owned);
        let info = ReqInfo {
            headers: cx.headers(),
            uri: cx.uri(),
            peer,
        };
        if op == "DeleteObjects" && self.has_policy(&bucket).await {
            // Judged key by key in the handler (a policy may name some keys and not others);
            // here only that the caller may delete at all.
            if ak.is_none() || self.users.name_of(ak.as_deref().unwrap_or("")).is_some() {
                return Ok(());
            }
            return Err(denied());
        }
        let versioned = query_value(info.uri, "versionId").is_some();
        let action = action_of(op, versioned);
        self.authorize(ak.as_deref(), &info, op, &bucket, key.as_deref(), &action)
            .await
    }

    async fn copy_object(&self, req: &mut S3Request<CopyObjectInput>) -> S3Result<()> {
        let source = req.input.copy_source.clone();
        self.copy_source(req, &source).await
    }

    async fn upload_part_copy(&self, req: &mut S3Request<UploadPartCopyInput>) -> S3Result<()> {
        let source = req.input.copy_source.clone();
        self.copy_source(req, &source).await
    }
}

/// The key store s3s asks for secrets: root and the users of [`Users`]. Unknown
/// keys get `InvalidAccessKeyId`.
pub struct KeyStore {
    users: Arc<Users>,
}

impl KeyStore {
    pub fn new(users: Arc<Users>) -> Self {
        Self { users }
    }
}

#[async_trait::async_trait]
impl s3s::auth::S3Auth for KeyStore {
    async fn get_secret_key(&self, access_key: &str) -> s3s::S3Result<s3s::auth::SecretKey> {
        match self.users.lookup_fresh(access_key).await {
            Some((user, secret)) => {
                // Who caused the request's changes (their events' `principalId`).
                lode_objects::bucket_events::Origin::update(|o| {
                    o.principal = Some(user.to_string())
                });
                Ok(s3s::auth::SecretKey::from(secret))
            }
            None => Err(s3s::s3_error!(
                InvalidAccessKeyId,
                "The AWS Access Key Id you provided does not exist in our records."
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every operation the S3 door serves is judged as an action a policy can name (else a
    /// Deny written with AWS's action name would never meet it).
    #[test]
    fn every_served_operation_is_judged_as_a_real_s3_action() {
        let ops = [
            "GetObject",
            "HeadObject",
            "GetObjectAttributes",
            "DeleteObject",
            "GetObjectTagging",
            "PutObjectTagging",
            "DeleteObjectTagging",
            "PutObject",
            "PostObject",
            "CopyObject",
            "CreateMultipartUpload",
            "UploadPart",
            "UploadPartCopy",
            "CompleteMultipartUpload",
            "AbortMultipartUpload",
            "RenameObject",
            "ListParts",
            "ListMultipartUploads",
            "ListObjects",
            "ListObjectsV2",
            "HeadBucket",
            "ListObjectVersions",
            "DeleteBucket",
            "GetBucketLocation",
            "GetBucketVersioning",
            "PutBucketVersioning",
            "GetBucketLifecycleConfiguration",
            "PutBucketLifecycleConfiguration",
            "DeleteBucketLifecycle",
            "GetBucketTagging",
            "PutBucketTagging",
            "DeleteBucketTagging",
            "GetObjectLockConfiguration",
            "PutObjectLockConfiguration",
            "GetObjectRetention",
            "PutObjectRetention",
            "GetObjectLegalHold",
            "PutObjectLegalHold",
            "GetBucketPolicy",
            "PutBucketPolicy",
            "DeleteBucketPolicy",
            "GetBucketPolicyStatus",
            "GetBucketCors",
            "PutBucketCors",
            "DeleteBucketCors",
            "GetBucketNotificationConfiguration",
            "PutBucketNotificationConfiguration",
            "GetPublicAccessBlock",
            "PutPublicAccessBlock",
            "DeletePublicAccessBlock",
            "GetBucketAcl",
            "PutBucketAcl",
            "GetObjectAcl",
            "PutObjectAcl",
            "GetBucketOwnershipControls",
            "PutBucketOwnershipControls",
            "DeleteBucketOwnershipControls",
        ];
        for op in ops {
            for versioned in [false, true] {
                let a = action_of(op, versioned);
                assert!(
                    policy::is_action(&a),
                    "{op} is judged as {a}, which no policy can name"
                );
            }
        }
    }
}
