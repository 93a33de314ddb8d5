//! `lode-gateway`: the `lode` binary and its doors.
//!
//! * [`objects`]: the object service both doors share (chunking, inline objects, ETags,
//!   checksums, commit protocol), written against the `MetadataStore` and `ChunkStore` traits.
//! * [`s3`]: the S3 door (s3s over hyper).
//! * [`posix`]: the POSIX door (FUSE), over [`namespace`]'s operations of the object service.
//! * [`server`]: wiring; the only module that picks concrete backends.
//! * [`error`]: the one mapping of failures onto S3 error codes and statuses.

pub mod access;
pub mod admin;
pub mod auth;
pub mod bench;
pub mod checksum;
pub mod error;
pub mod failpoint;
pub mod fsck;
#[doc(hidden)]
pub mod fuzzing;
pub mod host;
pub mod namespace;
pub mod objects;
pub mod posix;
pub mod profile;
pub mod s3;
pub mod scrub;
pub mod server;
pub mod users;
pub mod wire;
