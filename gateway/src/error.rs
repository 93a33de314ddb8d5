//! Errors of the object service, and their one mapping onto S3 error codes and HTTP statuses.
//! Every failure the doors report goes through `From<ObjError> for S3Error` here.

use lode_datapath::ChunkError;
use lode_metadata::MetaError;
use s3s::{S3Error, S3ErrorCode};

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
    #[error("{0}")]
    InvalidRequest(String),
    #[error("You did not provide the number of bytes specified by the Content-Length HTTP header.")]
    IncompleteBody,
    #[error("{0} is not implemented by Lode")]
    NotImplemented(String),
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
    #[error(transparent)]
    Meta(#[from] MetaError),
    /// The catalog could not answer in time (an inactive partition of a cluster): retry.
    #[error("The metadata service is unavailable: {0}")]
    Unavailable(String),
    #[error("internal error: {0}")]
    Internal(String),
}

pub type ObjResult<T> = Result<T, ObjError>;

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
            C::Contended => ObjError::Meta(MetaError::Conflict),
            C::Unavailable(m) => ObjError::Unavailable(m),
            // The service's own error, passed through a commit.
            C::Refused(b) => match b.downcast::<ObjError>() {
                Ok(e) => *e,
                Err(b) => ObjError::InvalidRequest(b.to_string()),
            },
            // A failure of the metadata store under a KV catalog stays what it was.
            C::Backend(b) => match b.downcast::<MetaError>() {
                Ok(m) => ObjError::Meta(*m),
                Err(b) => ObjError::Internal(format!("catalog backend: {b}")),
            },
            e => ObjError::Internal(format!("catalog: {e}")),
        }
    }
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

impl ObjError {
    /// The errno the POSIX door answers with (the one mapping onto errno, as `From<ObjError> for
    /// S3Error` is the one mapping onto S3).
    pub fn errno(&self) -> i32 {
        use libc::*;
        match self {
            ObjError::NoSuchBucket | ObjError::NoSuchKey | ObjError::NoSuchUpload => ENOENT,
            ObjError::BucketAlreadyOwnedByYou
            | ObjError::BucketAlreadyExists
            | ObjError::PreconditionFailed => EEXIST,
            ObjError::BucketNotEmpty | ObjError::DirectoryNotEmpty => ENOTEMPTY,
            ObjError::KeyTooLong => ENAMETOOLONG,
            ObjError::InvalidBucketName(_)
            | ObjError::InvalidArgument(_)
            | ObjError::InvalidRequest(_)
            | ObjError::InvalidRange => EINVAL,
            ObjError::EntityTooLarge => EFBIG,
            ObjError::NotImplemented(_) => EOPNOTSUPP,
            ObjError::Chunk(ChunkError::NoSpace) => ENOSPC,
            ObjError::Meta(MetaError::Conflict) => EBUSY,
            ObjError::RequestTimeout => ETIMEDOUT,
            ObjError::Unavailable(_) => EAGAIN,
            ObjError::Chunk(_) | ObjError::Meta(_) | ObjError::Internal(_) => {
                tracing::error!(error = %self, "POSIX door: internal error, answering EIO");
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

impl From<ObjError> for S3Error {
    fn from(e: ObjError) -> Self {
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
            ObjError::DirectoryNotEmpty => C::InvalidRequest,
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
            ObjError::EntityTooSmall => C::EntityTooSmall,
            ObjError::EntityTooLarge => C::EntityTooLarge,
            ObjError::BadDigest(_) => C::BadDigest,
            ObjError::InvalidDigest => C::InvalidDigest,
            ObjError::InvalidArgument(_) => C::InvalidArgument,
            ObjError::InvalidRequest(_) => C::InvalidRequest,
            ObjError::IncompleteBody => C::IncompleteBody,
            ObjError::NotImplemented(_) => C::NotImplemented,
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
            ObjError::Chunk(ChunkError::Io(io)) if io.raw_os_error() == Some(libc::ETIMEDOUT) => {
                tracing::warn!("a chunk operation timed out: answering 503 SlowDown");
                return with_status(
                    C::SlowDown,
                    "Please reduce your request rate.".into(),
                    http::StatusCode::SERVICE_UNAVAILABLE,
                );
            }
            ObjError::Chunk(ChunkError::NoSpace) => {
                tracing::warn!("datapath full: refusing write");
                return with_status(
                    C::Custom("InsufficientStorage".into()),
                    "The datapath has no free space left for this write.".into(),
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
            ObjError::Meta(MetaError::Conflict) => {
                return with_status(
                    C::SlowDown,
                    "Too many concurrent updates of the same key; retry.".into(),
                    http::StatusCode::SERVICE_UNAVAILABLE,
                );
            }
            ObjError::Unavailable(_) => {
                tracing::warn!(error = %msg, "catalog unavailable: answering 503 SlowDown");
                return with_status(
                    C::SlowDown,
                    "Please reduce your request rate.".into(),
                    http::StatusCode::SERVICE_UNAVAILABLE,
                );
            }
            ObjError::Chunk(_) | ObjError::Meta(_) | ObjError::Internal(_) => {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(e: ObjError) -> (String, u16) {
        let s = S3Error::from(e);
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
            (ObjError::Meta(MetaError::Conflict), "SlowDown", 503),
            (ObjError::Unavailable("pg".into()), "SlowDown", 503),
            (
                ObjError::Chunk(ChunkError::Io(std::io::Error::from_raw_os_error(
                    libc::ETIMEDOUT,
                ))),
                "SlowDown",
                503,
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
        let s = S3Error::from(ObjError::Internal("secret path /var/x".into()));
        assert!(!s.message().unwrap_or_default().contains("secret"));
    }

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
