//! Milliseconds since the epoch (as records keep times) to and from s3s's `Timestamp` (as the
//! S3 door answers and reads them). A leaf: the S3 door and its lifecycle conversions use it.

use s3s::dto::Timestamp;

/// A record's time as an S3 timestamp (the epoch for one out of range).
pub(crate) fn ts(ms: i64) -> Timestamp {
    Timestamp::from(
        time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
            .unwrap_or(time::OffsetDateTime::UNIX_EPOCH),
    )
}

/// An S3 timestamp in milliseconds since the epoch.
pub(crate) fn ts_ms(t: &Timestamp) -> i64 {
    (time::OffsetDateTime::from(t.clone()).unix_timestamp_nanos() / 1_000_000) as i64
}
