//! Authorization of S3 requests (after SigV4 authentication): which user may run which
//! operation on which bucket (the rules are in `crate::users`), and the key store SigV4
//! authentication asks for secrets.

use std::sync::Arc;

use s3s::access::{S3Access, S3AccessContext};
use s3s::dto::{CopyObjectInput, UploadPartCopyInput};
use s3s::{S3Request, S3Result, s3_error};

use crate::users::{Perm, Users};
use lode_objects::ObjectService;

pub struct Authz {
    pub users: Arc<Users>,
    pub svc: Arc<ObjectService>,
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
        | "PostObject" => Perm::Write,
        // DeleteBucket and every bucket configuration call: the owner's.
        _ => Perm::Own,
    }
}

fn denied() -> s3s::S3Error {
    s3_error!(AccessDenied, "Access Denied")
}

impl Authz {
    /// Checks `perm` on `bucket` for the caller; a bucket that does not exist passes (the
    /// operation then answers NoSuchBucket).
    pub(crate) async fn require(&self, access_key: &str, bucket: &str, perm: Perm) -> S3Result<()> {
        let Some(user) = self.users.name_of(access_key) else {
            return Err(denied());
        };
        if user == crate::users::ROOT {
            return Ok(()); // root may do anything: no bucket lookup on its hot path
        }
        let rec = match self.svc.bucket(bucket).await {
            Ok(r) => r,
            Err(crate::error::ObjError::NoSuchBucket) => return Ok(()),
            Err(e) => return Err(crate::error::s3_error(e)),
        };
        if self.users.allowed(&user, bucket, &rec.owner, perm) {
            Ok(())
        } else {
            tracing::debug!(user, bucket, ?perm, "access denied");
            Err(denied())
        }
    }

    async fn copy_source(
        &self,
        access_key: Option<&str>,
        source: &s3s::dto::CopySource,
    ) -> S3Result<()> {
        let Some(ak) = access_key else {
            return Err(denied());
        };
        match source {
            s3s::dto::CopySource::Bucket { bucket, .. } => {
                self.require(ak, bucket, Perm::Read).await
            }
            _ => Err(denied()), // access points, outposts
        }
    }
}

#[async_trait::async_trait]
impl S3Access for Authz {
    async fn check(&self, cx: &mut S3AccessContext<'_>) -> S3Result<()> {
        let Some(creds) = cx.credentials() else {
            return Err(denied()); // anonymous requests
        };
        let ak = creds.access_key.clone();
        let op = cx.s3_op().name();
        let Some(bucket) = cx.s3_path().get_bucket_name().map(str::to_owned) else {
            return Ok(()); // ListBuckets: filtered to what the caller may see
        };
        if op == "CreateBucket" {
            return Ok(()); // any user; the creator owns it
        }
        self.require(&ak, &bucket, needed(op)).await
    }

    async fn copy_object(&self, req: &mut S3Request<CopyObjectInput>) -> S3Result<()> {
        let ak = req.credentials.as_ref().map(|c| c.access_key.clone());
        self.copy_source(ak.as_deref(), &req.input.copy_source)
            .await
    }

    async fn upload_part_copy(&self, req: &mut S3Request<UploadPartCopyInput>) -> S3Result<()> {
        let ak = req.credentials.as_ref().map(|c| c.access_key.clone());
        self.copy_source(ak.as_deref(), &req.input.copy_source)
            .await
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
            Some((_, secret)) => Ok(s3s::auth::SecretKey::from(secret)),
            None => Err(s3s::s3_error!(
                InvalidAccessKeyId,
                "The AWS Access Key Id you provided does not exist in our records."
            )),
        }
    }
}
