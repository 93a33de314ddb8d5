//! `lode-objects`: Lode's object service, what both doors (S3 and POSIX) and the admin API call.
//! It owns chunking and inline objects, ETags and flexible checksums, the commit protocol (data
//! durable, one catalog commit, then the reply), multipart assembly, the namespace operations
//! the POSIX door needs beyond S3 (blocking lookups, reads at an offset, renames), change
//! notifications, and scrub.
//!
//! It is written against two boundaries only, and never names a backend:
//! * the catalog ([`lode_catalog::Catalog`]): buckets, objects, uploads and parts, every commit
//!   atomic for one key and what hangs off it;
//! * the blob store ([`lode_blob::BlobStore`]): chunks written, read (crc-checked) and
//!   released once readers are done.
//!
//! The binary's server module picks the backends (RocksDB + io_uring on one node, RADOS in
//! cluster mode). The doors see this crate's types (the records are re-exported here), and map
//! [`ObjError`] onto the wire in one place each. Modules depend one way (no circle:
//! `scripts/check-layers.py` checks it): `service` (the core, which applies the rules and
//! models of `objlock`, `lifecycle`, `encryption`, `acl`, `policy`, `tags`, `checksum`, `sse`)
//! <- `namespace` (the POSIX door's operations), `scrub`, `lock_ops` (Object Lock operations),
//! `encryption_ops` (bucket encryption, SSE-C checks, master-key admin), `lifecycle_run` (the
//! lifecycle worker); `kms` (the key ring) -> `masters` (master key versions) -> `sse`
//! (sealing); `notify`, `error`, `failpoint` are leaves.

pub mod acl;
pub mod bucket_events;
pub mod checksum;
pub mod cors;
pub mod early_read;
pub mod encryption;
pub mod encryption_ops;
pub mod error;
pub mod event_delivery;
pub mod failpoint;
pub mod kms;
pub mod lifecycle;
pub mod lifecycle_run;
pub mod lock_ops;
pub mod masters;
pub mod namespace;
pub mod notify;
pub mod objlock;
pub mod policy;
pub mod scrub;
pub mod service;
pub mod sse;
pub mod tags;
pub mod topics;
pub mod users;

pub use error::{ObjError, ObjResult};
pub use lode_blob::ChunkError;
pub use lode_catalog::{
    Brief, BucketRecord, ChecksumNames, Checksums, ChunkLoc, ListPage, ObjectLock, ObjectMeta,
    ObjectRecord, PartRecord, PartSummary, Segment, Sse, SseKind, UploadPage, UploadRecord,
    VersionQuery, Versioning, is_version_id,
};
pub use namespace::{RenameCondition, SegmentCache};
pub use notify::{ChangeKind, ChangeListener, ObjectChange, RemoteChanges, SettingsAnnouncer};
pub use service::{
    BucketAccess, CopyChanges, Deleted, Integrity, MAX_KEY_LEN, MAX_PARTS, MIN_PART_SIZE,
    ObjectHandle, ObjectService, PutResult, ServiceConfig, SettingsCache, TakenIn, Trailers,
    WriteCond, check_bucket_name, check_key, chunk_ref, multipart_etag,
};

/// Milliseconds since the Unix epoch, now (0 if the clock is before it).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// A service over the memory catalog and a datapath (unit tests).
#[cfg(test)]
pub(crate) fn test_service(
    dp: std::sync::Arc<lode_datapath::Datapath>,
    cfg: ServiceConfig,
) -> ObjectService {
    use std::sync::Arc;
    ObjectService::open(
        Arc::new(lode_catalog_kv::mem_catalog()),
        Arc::new(lode_datapath::LocalBlobStore::new(dp)),
        cfg,
    )
    .expect("service")
}
