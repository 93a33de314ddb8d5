//! The one mapping of the object service's failures onto the wire: S3 error codes and HTTP
//! statuses ([`s3_error`], and `?` through [`IntoS3`]) for the S3 door, errnos ([`ToErrno`]) for
//! the POSIX door. 5xx log at `error!`, 4xx at `debug!`.

use lode_objects::ChunkError;
pub use lode_objects::{ObjError, ObjResult};
use s3s::{S3Error, S3ErrorCode};

/// `?` for the object service's results inside S3 handlers: `svc.op().await.s3()?`.
pub trait IntoS3<T> {
    fn s3(self) -> Result<T, S3Error>;
}

impl<T> IntoS3<T> for Result<T, ObjError> {
    fn s3(self) -> Result<T, S3Error> {
        self.map_err(s3_error)
    }
}

/// The errno the POSIX door answers with: the one mapping onto errno, as [`s3_error`] is the
/// one mapping onto S3.
pub trait ToErrno {
    fn errno(&self) -> i32;
}

impl ToErrno for ObjError {
    fn errno(&self) -> i32 {
        use libc::*;
        let e = self;
        match e {
            ObjError::NoSuchBucket
            | ObjError::NoSuchKey
            | ObjError::NoSuchUpload
            | ObjError::NoSuchTagSet
            | ObjError::NoSuchVersion => ENOENT,
            ObjError::BucketAlreadyOwnedByYou
            | ObjError::BucketAlreadyExists
            | ObjError::PreconditionFailed => EEXIST,
            ObjError::BucketNotEmpty | ObjError::DirectoryNotEmpty => ENOTEMPTY,
            ObjError::KeyTooLong => ENAMETOOLONG,
            // What rename(2) answers across file systems: `mv` then copies and unlinks.
            ObjError::CrossPartition | ObjError::VersionedRename => EXDEV,
            ObjError::InvalidBucketName(_)
            | ObjError::InvalidArgument(_)
            | ObjError::InvalidTag(_)
            | ObjError::BadRequest(_)
            | ObjError::InvalidRequest(_)
            | ObjError::MalformedAcl(_)
            | ObjError::UnresolvableGrantByEmail(_)
            | ObjError::AclNotSupported
            | ObjError::BucketAclWithOwnership
            | ObjError::InvalidRange => EINVAL,
            ObjError::PublicAclBlocked
            | ObjError::SseCustomerBlocked
            | ObjError::SseCustomerKeyMissing
            | ObjError::SseCustomerKeyWrong
            | ObjError::Kms(_) => EACCES,
            ObjError::NoOwnershipControls => ENOENT,
            ObjError::EntityTooLarge => EFBIG,
            ObjError::ObjectLocked(_) => EPERM,
            ObjError::NotImplemented(_) => EOPNOTSUPP,
            ObjError::Chunk(ChunkError::NoSpace) => ENOSPC,
            ObjError::Contended => EBUSY,
            ObjError::RequestTimeout => ETIMEDOUT,
            ObjError::Unavailable(_) => EAGAIN,
            ObjError::Chunk(_) | ObjError::Catalog(_) | ObjError::Internal(_) => {
                tracing::error!(error = %e, "POSIX door: internal error, answering EIO");
                EIO
            }
            _ => EIO,
        }
    }
}

fn with_status(code: S3ErrorCode, msg: String, status: http::StatusCode) -> S3Error {
    let mut e = S3Error::with_message(code, msg);
    e.set_status_code(status);
    e
}

/// The one mapping of the object service's failures onto S3 error codes and HTTP statuses.
pub fn s3_error(e: ObjError) -> S3Error {
    use S3ErrorCode as C;
    let msg = e.to_string();
    let code = match &e {
        ObjError::NoSuchBucket => C::NoSuchBucket,
        ObjError::NoSuchKey => C::NoSuchKey,
        ObjError::NoSuchUpload => C::NoSuchUpload,
        ObjError::BucketAlreadyOwnedByYou => C::BucketAlreadyOwnedByYou,
        ObjError::BucketAlreadyExists => C::BucketAlreadyExists,
        ObjError::BucketNotEmpty => C::BucketNotEmpty,
        // Only the POSIX door renames or removes directories.
        ObjError::DirectoryNotEmpty | ObjError::CrossPartition => C::InvalidRequest,
        ObjError::InvalidBucketName(_) => C::InvalidBucketName,
        ObjError::KeyTooLong => C::KeyTooLongError,
        ObjError::PreconditionFailed => C::PreconditionFailed,
        ObjError::NotModified => {
            return with_status(
                C::Custom("NotModified".into()),
                msg,
                http::StatusCode::NOT_MODIFIED,
            );
        }
        ObjError::InvalidRange => C::InvalidRange,
        ObjError::InvalidPartNumber | ObjError::InvalidPart(_) => C::InvalidPart,
        ObjError::InvalidPartOrder => C::InvalidPartOrder,
        ObjError::InvalidWriteOffset => {
            return with_status(
                C::Custom("InvalidWriteOffset".into()),
                msg,
                http::StatusCode::BAD_REQUEST,
            );
        }
        ObjError::TooManyParts => {
            return with_status(
                C::Custom("TooManyParts".into()),
                msg,
                http::StatusCode::BAD_REQUEST,
            );
        }
        ObjError::EntityTooSmall => C::EntityTooSmall,
        ObjError::EntityTooLarge => C::EntityTooLarge,
        ObjError::BadDigest(_) => C::BadDigest,
        ObjError::InvalidDigest => C::InvalidDigest,
        ObjError::InvalidArgument(_) => C::InvalidArgument,
        ObjError::InvalidTag(_) => C::InvalidTag,
        ObjError::BadRequest(_) => {
            return with_status(
                C::Custom("BadRequest".into()),
                msg,
                http::StatusCode::BAD_REQUEST,
            );
        }
        ObjError::NoSuchTagSet => C::NoSuchTagSet,
        ObjError::NoSuchVersion => C::NoSuchVersion,
        ObjError::DeleteMarker(id) => {
            let mut e = with_status(
                C::MethodNotAllowed,
                msg,
                http::StatusCode::METHOD_NOT_ALLOWED,
            );
            let mut h = http::HeaderMap::new();
            h.insert(
                "x-amz-delete-marker",
                http::HeaderValue::from_static("true"),
            );
            if let Ok(v) = http::HeaderValue::from_str(id.as_deref().unwrap_or("null")) {
                h.insert("x-amz-version-id", v);
            }
            e.set_headers(h);
            return e;
        }
        ObjError::VersionedRename => C::NotImplemented,
        ObjError::ObjectLocked(_) => C::AccessDenied,
        ObjError::InvalidBucketState(_) => C::InvalidBucketState,
        ObjError::NoObjectLockConfiguration => C::ObjectLockConfigurationNotFoundError,
        ObjError::NoSuchObjectLockConfiguration => C::NoSuchObjectLockConfiguration,
        ObjError::InvalidRetentionPeriod(_) => {
            return with_status(
                C::Custom("InvalidRetentionPeriod".into()),
                msg,
                http::StatusCode::BAD_REQUEST,
            );
        }
        ObjError::InvalidRequest(_) => C::InvalidRequest,
        ObjError::IncompleteBody => C::IncompleteBody,
        ObjError::NotImplemented(_) => C::NotImplemented,
        ObjError::MalformedAcl(_) => C::MalformedACLError,
        ObjError::UnresolvableGrantByEmail(_) => C::UnresolvableGrantByEmailAddress,
        ObjError::AclNotSupported => C::AccessControlListNotSupported,
        ObjError::PublicAclBlocked => C::AccessDenied,
        ObjError::BucketAclWithOwnership => C::InvalidBucketAclWithObjectOwnership,
        ObjError::NoOwnershipControls => C::OwnershipControlsNotFoundError,
        ObjError::ChunkSignature => C::SignatureDoesNotMatch,
        ObjError::ContentSha256Mismatch => {
            return with_status(
                C::Custom("XAmzContentSHA256Mismatch".into()),
                msg,
                http::StatusCode::BAD_REQUEST,
            );
        }
        ObjError::RequestTimeout => C::RequestTimeout,
        ObjError::Body(_) => {
            tracing::debug!(error = %msg, "request body failed");
            C::IncompleteBody
        }
        ObjError::Chunk(e) if e.is_timeout() => {
            tracing::warn!(
                "a chunk operation timed out (the cluster is unreachable or its placement \
                 groups inactive, or this gateway's cephx key or caps were revoked): answering \
                 503 SlowDown"
            );
            return with_status(
                C::SlowDown,
                "Please reduce your request rate.".into(),
                http::StatusCode::SERVICE_UNAVAILABLE,
            );
        }
        ObjError::Chunk(e) if e.is_refused() => {
            tracing::error!(
                error = %e,
                "the cluster refuses this gateway's chunk operations (blocklisted: `ceph osd \
                 blocklist ls`, restart the gateway once it may connect again; or its cephx \
                 caps were revoked): answering 503"
            );
            return with_status(
                C::ServiceUnavailable,
                "Please try again later.".into(),
                http::StatusCode::SERVICE_UNAVAILABLE,
            );
        }
        ObjError::Chunk(ChunkError::NoSpace) => {
            tracing::warn!(error = %e, "out of space (a full device, or a full Ceph pool): refusing the write");
            return with_status(
                C::Custom("InsufficientStorage".into()),
                "There is not enough storage space left for this write.".into(),
                http::StatusCode::INSUFFICIENT_STORAGE,
            );
        }
        ObjError::Chunk(ChunkError::Poisoned) => {
            tracing::error!("write refused: datapath poisoned");
            return with_status(
                C::ServiceUnavailable,
                msg,
                http::StatusCode::SERVICE_UNAVAILABLE,
            );
        }
        ObjError::SseCustomerBlocked | ObjError::SseCustomerKeyWrong => C::AccessDenied,
        ObjError::SseCustomerKeyMissing => C::InvalidRequest,
        ObjError::Kms(k) => {
            use lode_objects::kms::KmsError as K;
            let (code, status) = match k {
                K::NotFound(_) => ("KMS.NotFoundException", http::StatusCode::BAD_REQUEST),
                K::Disabled(_) => ("KMS.DisabledException", http::StatusCode::FORBIDDEN),
                K::PendingDeletion(_) => (
                    "KMS.KMSInvalidStateException",
                    http::StatusCode::BAD_REQUEST,
                ),
                K::Invalid(_) => ("InvalidArgument", http::StatusCode::BAD_REQUEST),
                K::Sse(_) | K::Catalog(_) => {
                    tracing::error!(error = %k, "key ring failure");
                    return S3Error::with_message(
                        C::InternalError,
                        "We encountered an internal error. Please try again.",
                    );
                }
            };
            return with_status(C::Custom(code.into()), msg, status);
        }
        ObjError::Contended => {
            return with_status(
                C::SlowDown,
                "Too many concurrent updates of the same key; retry.".into(),
                http::StatusCode::SERVICE_UNAVAILABLE,
            );
        }
        ObjError::Unavailable(_) => {
            tracing::warn!(
                error = %msg,
                "catalog unavailable (the cluster is unreachable or its placement groups \
                 inactive, or this gateway's cephx key or caps were revoked): answering 503 \
                 SlowDown"
            );
            return with_status(
                C::SlowDown,
                "Please reduce your request rate.".into(),
                http::StatusCode::SERVICE_UNAVAILABLE,
            );
        }
        // Chunk, Catalog, Internal, and whatever the service adds later: a 500.
        _ => {
            tracing::error!(error = ?e, "internal error");
            C::InternalError
        }
    };
    if code == C::InternalError {
        S3Error::with_message(code, "We encountered an internal error. Please try again.")
    } else {
        tracing::debug!(code = code.as_str(), error = %msg, "client error");
        S3Error::with_message(code, msg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(e: ObjError) -> (String, u16) {
        let s = s3_error(e);
        let st = s
            .status_code()
            .unwrap_or_else(|| s.code().status_code().expect("status"))
            .as_u16();
        (s.code().as_str().to_owned(), st)
    }

    #[test]
    fn mapping_codes_and_statuses() {
        let cases = [
            (ObjError::NoSuchKey, "NoSuchKey", 404),
            (ObjError::NoSuchBucket, "NoSuchBucket", 404),
            (ObjError::NoSuchUpload, "NoSuchUpload", 404),
            (ObjError::BucketNotEmpty, "BucketNotEmpty", 409),
            (
                ObjError::BucketAlreadyOwnedByYou,
                "BucketAlreadyOwnedByYou",
                409,
            ),
            (ObjError::KeyTooLong, "KeyTooLongError", 400),
            (ObjError::PreconditionFailed, "PreconditionFailed", 412),
            (ObjError::NotModified, "NotModified", 304),
            (ObjError::InvalidRange, "InvalidRange", 416),
            (ObjError::InvalidPartNumber, "InvalidPart", 400),
            (ObjError::BucketAlreadyExists, "BucketAlreadyExists", 409),
            (ObjError::EntityTooSmall, "EntityTooSmall", 400),
            (ObjError::EntityTooLarge, "EntityTooLarge", 400),
            (ObjError::BadDigest("x".into()), "BadDigest", 400),
            (ObjError::ChunkSignature, "SignatureDoesNotMatch", 403),
            (
                ObjError::ContentSha256Mismatch,
                "XAmzContentSHA256Mismatch",
                400,
            ),
            (ObjError::RequestTimeout, "RequestTimeout", 400),
            (ObjError::InvalidWriteOffset, "InvalidWriteOffset", 400),
            (ObjError::TooManyParts, "TooManyParts", 400),
            (ObjError::InvalidTag("x".into()), "InvalidTag", 400),
            (ObjError::BadRequest("x".into()), "BadRequest", 400),
            (ObjError::NoSuchTagSet, "NoSuchTagSet", 404),
            (ObjError::NoSuchVersion, "NoSuchVersion", 404),
            (ObjError::DeleteMarker(None), "MethodNotAllowed", 405),
            (ObjError::VersionedRename, "NotImplemented", 501),
            (ObjError::MalformedAcl("x".into()), "MalformedACLError", 400),
            (
                ObjError::UnresolvableGrantByEmail("x".into()),
                "UnresolvableGrantByEmailAddress",
                400,
            ),
            (
                ObjError::AclNotSupported,
                "AccessControlListNotSupported",
                400,
            ),
            (ObjError::PublicAclBlocked, "AccessDenied", 403),
            (
                ObjError::BucketAclWithOwnership,
                "InvalidBucketAclWithObjectOwnership",
                400,
            ),
            (
                ObjError::NoOwnershipControls,
                "OwnershipControlsNotFoundError",
                404,
            ),
            (ObjError::ObjectLocked("x".into()), "AccessDenied", 403),
            (
                ObjError::InvalidBucketState("x".into()),
                "InvalidBucketState",
                409,
            ),
            (
                ObjError::NoObjectLockConfiguration,
                "ObjectLockConfigurationNotFoundError",
                404,
            ),
            (
                ObjError::NoSuchObjectLockConfiguration,
                "NoSuchObjectLockConfiguration",
                404,
            ),
            (
                ObjError::InvalidRetentionPeriod("x".into()),
                "InvalidRetentionPeriod",
                400,
            ),
            (ObjError::NotImplemented("x".into()), "NotImplemented", 501),
            (
                ObjError::Chunk(ChunkError::NoSpace),
                "InsufficientStorage",
                507,
            ),
            (
                ObjError::Chunk(ChunkError::Poisoned),
                "ServiceUnavailable",
                503,
            ),
            (ObjError::Contended, "SlowDown", 503),
            (ObjError::Unavailable("pg".into()), "SlowDown", 503),
            (
                ObjError::Chunk(ChunkError::Io(std::io::Error::from_raw_os_error(
                    libc::ETIMEDOUT,
                ))),
                "SlowDown",
                503,
            ),
            (
                ObjError::Chunk(ChunkError::Io(std::io::Error::from_raw_os_error(
                    libc::ESHUTDOWN,
                ))),
                "ServiceUnavailable",
                503,
            ),
            (
                ObjError::Chunk(ChunkError::Io(std::io::Error::from_raw_os_error(libc::EIO))),
                "InternalError",
                500,
            ),
            (ObjError::Internal("boom".into()), "InternalError", 500),
        ];
        for (e, code, st) in cases {
            assert_eq!(status(e), (code.to_owned(), st));
        }
    }

    #[test]
    fn errno_mapping() {
        let cases = [
            (ObjError::NoSuchKey, libc::ENOENT),
            (ObjError::NoSuchBucket, libc::ENOENT),
            (ObjError::BucketNotEmpty, libc::ENOTEMPTY),
            (ObjError::KeyTooLong, libc::ENAMETOOLONG),
            (ObjError::PreconditionFailed, libc::EEXIST),
            (ObjError::InvalidBucketName("x".into()), libc::EINVAL),
            (ObjError::EntityTooLarge, libc::EFBIG),
            (ObjError::Chunk(ChunkError::NoSpace), libc::ENOSPC),
            (ObjError::Chunk(ChunkError::Poisoned), libc::EIO),
            (ObjError::NotImplemented("x".into()), libc::EOPNOTSUPP),
        ];
        for (e, want) in cases {
            assert_eq!(e.errno(), want, "{e}");
        }
    }

    #[test]
    fn internal_errors_do_not_leak_details() {
        let s = s3_error(ObjError::Internal("secret path /var/x".into()));
        assert!(!s.message().unwrap_or_default().contains("secret"));
    }
}
