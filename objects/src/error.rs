//! Errors of the object service. They say what went wrong in the service's own terms; the
//! doors map them onto the wire (the gateway's `error` module: S3 codes and statuses, and
//! errnos for the POSIX door), each in one place.

use lode_blob::ChunkError;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ObjError {
    #[error("The specified bucket does not exist")]
    NoSuchBucket,
    #[error("The specified key does not exist.")]
    NoSuchKey,
    #[error("The specified multipart upload does not exist.")]
    NoSuchUpload,
    #[error("Your previous request to create the named bucket succeeded and you already own it.")]
    BucketAlreadyOwnedByYou,
    #[error(
        "The requested bucket name is not available. The bucket namespace is shared by all users of the system. Please select a different name and try again."
    )]
    BucketAlreadyExists,
    #[error("The bucket you tried to delete is not empty")]
    BucketNotEmpty,
    #[error("The specified bucket is not valid: {0}")]
    InvalidBucketName(String),
    #[error("The directory is not empty")]
    DirectoryNotEmpty,
    #[error("Your key is too long")]
    KeyTooLong,
    /// A rename that the catalog cannot make atomic (its names are in two index partitions
    /// of a cluster): nothing changed; copy and delete instead (the mount: `EXDEV`).
    #[error("The rename spans index partitions; copy and delete instead")]
    CrossPartition,
    #[error("At least one of the pre-conditions you specified did not hold")]
    PreconditionFailed,
    #[error("Not Modified")]
    NotModified,
    #[error("The requested range is not satisfiable")]
    InvalidRange,
    /// GET/HEAD `partNumber` naming a part the object does not have (AWS: `400 InvalidPart`).
    #[error("The requested partnumber is not satisfiable")]
    InvalidPartNumber,
    #[error("{0}")]
    InvalidPart(String),
    #[error("The list of parts was not in ascending order.")]
    InvalidPartOrder,
    #[error("The write offset value that you specified does not match the current object size.")]
    InvalidWriteOffset,
    #[error(
        "You have attempted to add more parts than the maximum of 10000 that are allowed for this object."
    )]
    TooManyParts,
    #[error("Your proposed upload is smaller than the minimum allowed object size.")]
    EntityTooSmall,
    #[error("Your proposed upload exceeds the maximum allowed object size.")]
    EntityTooLarge,
    #[error("{0}")]
    BadDigest(String),
    #[error("The Content-MD5 you specified is not valid.")]
    InvalidDigest,
    #[error("{0}")]
    InvalidArgument(String),
    /// A tag set that breaks AWS's rules (a key or value too long or with characters outside
    /// the tag alphabet, a reserved `aws:` key, a key given twice).
    #[error("{0}")]
    InvalidTag(String),
    /// S3's generic `BadRequest` (too many tags on an object).
    #[error("{0}")]
    BadRequest(String),
    #[error("The TagSet does not exist")]
    NoSuchTagSet,
    #[error("The specified version does not exist.")]
    NoSuchVersion,
    /// The version asked for is a delete marker (S3: `405 MethodNotAllowed`); its id.
    #[error("The specified method is not allowed against this resource.")]
    DeleteMarker(Option<String>),
    /// A rename in a versioned bucket that is not built: a directory, or (in cluster mode) a
    /// key whose versions share data made by appends. S3 `501`, and `EXDEV` on the mount, so
    /// `mv` copies and deletes instead.
    #[error(
        "This rename in a versioned bucket (a directory, or in cluster mode a key whose versions share data made by appends) is not implemented by Lode; copy and delete instead"
    )]
    VersionedRename,
    #[error("{0}")]
    InvalidRequest(String),
    /// Object lock keeps the version (a retention not yet over, a legal hold): S3's `403
    /// AccessDenied`, `EPERM` on the mount.
    #[error("{0}")]
    ObjectLocked(String),
    /// The bucket's state does not allow the change (S3 `409 InvalidBucketState`).
    #[error("{0}")]
    InvalidBucketState(String),
    #[error("Object Lock configuration does not exist for this bucket")]
    NoObjectLockConfiguration,
    #[error("The specified object does not have a ObjectLock configuration")]
    NoSuchObjectLockConfiguration,
    #[error("{0}")]
    InvalidRetentionPeriod(String),
    #[error("You did not provide the number of bytes specified by the Content-Length HTTP header.")]
    IncompleteBody,
    #[error("{0} is not implemented by Lode")]
    NotImplemented(String),
    /// An ACL that is not well formed (a bad permission, too many grants).
    #[error(
        "The XML you provided was not well-formed or did not validate against our published schema: {0}"
    )]
    MalformedAcl(String),
    /// A grant to an email address no user has.
    #[error("The email address you provided does not match any account on record: {0}")]
    UnresolvableGrantByEmail(String),
    /// An ACL other than the owner's full control on a bucket whose ACLs are disabled
    /// (`BucketOwnerEnforced`).
    #[error("The bucket does not allow ACLs")]
    AclNotSupported,
    /// A public ACL while the bucket's BlockPublicAcls is on (S3's `403 AccessDenied`).
    #[error(
        "Access Denied: public ACLs are blocked by the BlockPublicAcls block public access setting"
    )]
    PublicAclBlocked,
    /// `BucketOwnerEnforced` asked of a bucket whose ACL grants others.
    #[error(
        "Bucket ACL grants other than the bucket owner's full control must be removed before disabling ACLs (BucketOwnerEnforced)"
    )]
    BucketAclWithOwnership,
    #[error("The bucket ownership controls were not found")]
    NoOwnershipControls,
    #[error(
        "Your socket connection to the server was not read from or written to within the timeout period."
    )]
    RequestTimeout,
    #[error("reading the request body failed: {0}")]
    Body(String),
    #[error(
        "The request signature we calculated does not match the signature you provided (aws-chunked chunk or trailer signature)."
    )]
    ChunkSignature,
    #[error("The provided 'x-amz-content-sha256' header does not match what was computed.")]
    ContentSha256Mismatch,
    #[error(transparent)]
    Chunk(#[from] ChunkError),
    /// Encrypted bytes or a sealed key that did not open (corrupt, moved, the wrong key), or
    /// a master key version this server does not have.
    #[error(transparent)]
    Encryption(#[from] crate::sse::SseError),
    /// The key ring refused (an unknown, disabled or deleted key).
    #[error(transparent)]
    Kms(KmsError),
    /// An SSE-C write into a bucket that blocks SSE-C (S3's `403 AccessDenied`).
    #[error(
        "Requests specifying Server Side Encryption with Customer provided keys are blocked for this bucket (BlockedEncryptionTypes)"
    )]
    SseCustomerBlocked,
    /// A read of an SSE-C object without its key (S3's `400 InvalidRequest`).
    #[error(
        "The object was stored using a form of Server Side Encryption. The correct parameters must be provided to retrieve the object."
    )]
    SseCustomerKeyMissing,
    /// A read of an SSE-C object with another key (S3's `403 AccessDenied`).
    #[error("Access Denied")]
    SseCustomerKeyWrong,
    /// The same key kept being changed under the commit; retrying later is safe.
    #[error("too many concurrent updates of the same key")]
    Contended,
    /// A catalog failure the service does not branch on (the backend's own error kept as the
    /// source).
    #[error("catalog: {0}")]
    Catalog(#[source] lode_catalog::CatalogError),
    /// The catalog could not answer in time (an inactive partition of a cluster): retry.
    #[error("The metadata service is unavailable: {0}")]
    Unavailable(String),
    #[error("internal error: {0}")]
    Internal(String),
}

pub type ObjResult<T> = Result<T, ObjError>;

/// The key ring's errors ([`crate::kms::KeyRing`]).
#[derive(Debug, thiserror::Error)]
pub enum KmsError {
    /// AWS: `KMS.NotFoundException`.
    #[error("Key '{0}' does not exist")]
    NotFound(String),
    /// AWS: `KMS.DisabledException`.
    #[error("Key '{0}' is disabled")]
    Disabled(String),
    /// AWS: `KMS.KMSInvalidStateException`.
    #[error("Key '{0}' is pending deletion")]
    PendingDeletion(String),
    #[error("invalid key ring request: {0}")]
    Invalid(String),
    #[error(transparent)]
    Sse(#[from] crate::sse::SseError),
    #[error("key ring storage: {0}")]
    Catalog(#[from] lode_catalog::CatalogError),
}

impl From<lode_catalog::CatalogError> for ObjError {
    fn from(e: lode_catalog::CatalogError) -> Self {
        use lode_catalog::CatalogError as C;
        match e {
            C::NoSuchBucket => ObjError::NoSuchBucket,
            C::NoSuchKey => ObjError::NoSuchKey,
            C::NoSuchUpload => ObjError::NoSuchUpload,
            // The service compares owners itself; one that did not is the caller's own bucket.
            C::BucketExists { .. } => ObjError::BucketAlreadyOwnedByYou,
            C::BucketNotEmpty => ObjError::BucketNotEmpty,
            C::PreconditionFailed => ObjError::PreconditionFailed,
            C::DirectoryNotEmpty => ObjError::DirectoryNotEmpty,
            C::KeyTooLong => ObjError::KeyTooLong,
            C::CrossPartition => ObjError::CrossPartition,
            C::SharedVersions => ObjError::VersionedRename,
            C::Contended => ObjError::Contended,
            C::Unavailable(m) => ObjError::Unavailable(m),
            // Out of space is one answer (507) wherever the store that ran out sits.
            C::NoSpace(_) => ObjError::Chunk(ChunkError::NoSpace),
            C::NotSupported(backend, what) => {
                ObjError::NotImplemented(format!("{what} on the {backend} catalog"))
            }
            // The service's own error, passed through a commit.
            C::Refused(b) => match b.downcast::<ObjError>() {
                Ok(e) => *e,
                Err(b) => ObjError::InvalidRequest(b.to_string()),
            },
            e => ObjError::Catalog(e),
        }
    }
}

/// The service's own error, refusing a commit from inside it (a check on the record the commit
/// sees); it comes back out of the catalog as itself (`From<CatalogError>` above).
pub(crate) fn refused(e: ObjError) -> lode_catalog::CatalogError {
    lode_catalog::CatalogError::Refused(Box::new(e))
}

impl ObjError {
    /// Classifies an error from the request body stream (hyper or s3s's aws-chunked decoder,
    /// whose error type is not exported, hence the match on its text).
    pub fn from_body(msg: String) -> Self {
        if msg.contains("SignatureMismatch") {
            ObjError::ChunkSignature
        } else if msg.contains("Sha256Mismatch") {
            ObjError::ContentSha256Mismatch
        } else if msg.contains("FormatError") || msg.contains("TooLarge") || msg.contains("TooMany")
        {
            ObjError::InvalidRequest(format!("Malformed aws-chunked request body: {msg}"))
        } else {
            ObjError::Body(msg)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_errors_are_classified() {
        assert!(matches!(
            ObjError::from_body("AwsChunkedStreamError: SignatureMismatch".into()),
            ObjError::ChunkSignature
        ));
        assert!(matches!(
            ObjError::from_body("AwsChunkedStreamError: FormatError".into()),
            ObjError::InvalidRequest(_)
        ));
        assert!(matches!(
            ObjError::from_body("UploadStreamError: Sha256Mismatch".into()),
            ObjError::ContentSha256Mismatch
        ));
        assert!(matches!(
            ObjError::from_body("connection reset".into()),
            ObjError::Body(_)
        ));
    }
}
