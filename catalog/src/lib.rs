//! `lode-catalog`: the catalog boundary of Lode's object service, the part of the metadata
//! that S3 and POSIX operations commit to: buckets, objects, multipart uploads and their parts,
//! and a small system key space (users, grants).
//!
//! The boundary is shaped for a backend that is atomic per **partition of the key space**,
//! not per multi-key transaction (Ceph RADOS is atomic per object): every commit changes **one
//! key and what hangs off it** (its record, its multipart uploads and their parts, the chunks it
//! releases) under the conditions S3 needs (if-absent, if-ETag-matches). A backend that keeps a
//! key, its uploads and its parts in one partition object implements each commit as one guarded
//! write op on that object. Bucket operations touch the bucket's own record (delete takes the
//! bucket's uploads with it); POSIX directory renames are the one multi-key operation and say
//! so on their method.
//!
//! Chunk reference counts are part of a commit: a record names its chunks ([`ChunkLoc`]),
//! [`Refs`] says whether the chunks are new or shared, and every commit returns the chunks
//! whose last reference went ([`Commit::released`]); the caller hands those to its blob store,
//! which frees them once in-flight readers are done.
//!
//! # Records and their payloads: `get` and `head`
//! Small objects keep their bytes in their record ([`Segment::Inline`]). A backend stores those
//! bytes, the record's **payload**, apart from the record (format 3 of
//! [`lode_metadata::records`]), so that what most operations need stays small:
//! * [`Catalog::get`] (and `get_cached`, `get_blocking`) returns the **full** record: every
//!   inline segment is `Inline` with its bytes. Use it to read content.
//! * [`Catalog::head`] (and `head_cached`, `head_blocking`) and the pages of
//!   [`Catalog::list`] (and `list_blocking`) return the **head form**: inline segments are
//!   [`Segment::Detached`] with their lengths, and the payload is never read. Sizes, ETags, metadata, chunks and part
//!   summaries are the same as `get`'s. Use it for stat, HEAD, listings and readdir.
//! * Commits take full records (a record with `Detached` segments is refused) and keep a
//!   record and its payload together: both are written, moved or removed in the same commit.
//!   The records they hand back about what was there ([`Commit::previous`],
//!   [`UploadState::current`]) are in head form.
//!
//! Backends live in crates of their own: `lode-catalog-kv` (over any
//! [`lode_metadata::MetadataStore`]: RocksDB on one node, its memory store in tests) and
//! `lode-catalog-rados` (cluster mode). Here: [`FaultyCatalog`], a fault-injecting wrapper
//! of any backend. `conformance` (behind the `conformance` feature, for the backends' tests) is the
//! suite every backend passes. This crate never depends on
//! the gateway, a datapath or a concrete store.

use std::collections::BTreeMap;
use std::sync::Arc;

pub use listing::{ListPage, ListQuery};
pub use lode_metadata::records::{
    BucketRecord, ChecksumNames, Checksums, ChunkLoc, MetaSummary, ObjectLock, ObjectMeta,
    ObjectRecord, ObjectSummary, PartRecord, PartSummary, Segment, Sse, SseKind, UploadRecord,
};
/// The record encoding and key layout of the catalog model (the user store keeps its records
/// in the system key space with them).
pub use lode_metadata::{MetaError, keys, records};

/// One object of a listing as S3 ListObjects shows it ([`Catalog::list_briefs`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Brief {
    pub key: String,
    pub size: u64,
    /// As in [`ObjectRecord::etag`].
    pub etag: String,
    pub last_modified_ms: i64,
    /// Which checksums it has (`ChecksumAlgorithm`, `ChecksumType`).
    pub checksums: ChecksumNames,
    /// Its owner, as in [`ObjectMeta::owner`] (`None`: the bucket's).
    pub owner: Option<String>,
}

impl Brief {
    pub fn new(
        key: &str,
        s: &ObjectSummary<'_>,
        checksums: ChecksumNames,
        owner: Option<&str>,
    ) -> Self {
        Brief {
            key: key.to_owned(),
            size: s.size,
            etag: s.etag.to_owned(),
            last_modified_ms: s.last_modified_ms,
            checksums,
            owner: owner.map(str::to_owned),
        }
    }

    /// The brief of a decoded record.
    pub fn of(key: &str, r: &ObjectRecord) -> Self {
        Brief::new(
            key,
            &ObjectSummary::of(r),
            ChecksumNames::of(&r.checksums),
            r.meta.owner.as_deref(),
        )
    }
}

#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
pub mod events;
mod faulty;
pub mod listing;

pub use faulty::{Fault, FaultyCatalog};

/// Errors of the catalog. Variants exist where callers branch on them.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CatalogError {
    #[error("no such bucket")]
    NoSuchBucket,
    #[error("no such key")]
    NoSuchKey,
    #[error("no such upload")]
    NoSuchUpload,
    /// The bucket exists; `owner` created it.
    #[error("bucket exists (owner {owner:?})")]
    BucketExists { owner: String },
    #[error("bucket not empty")]
    BucketNotEmpty,
    /// A write condition did not hold.
    #[error("precondition failed")]
    PreconditionFailed,
    /// A directory rename or removal found other keys under the target.
    #[error("directory not empty")]
    DirectoryNotEmpty,
    /// A rename would make a key longer than allowed.
    #[error("key too long")]
    KeyTooLong,
    /// A rename whose source and target are kept apart by the backend (index partitions of a
    /// cluster), so that it cannot be one atomic commit: refused, nothing changed.
    #[error("the rename spans index partitions")]
    CrossPartition,
    /// A rename in a versioned bucket of a key whose versions share chunks (made by appends),
    /// which this backend counts per key and so cannot move apart: refused, nothing changed.
    #[error("the rename's keys have versions that share data")]
    SharedVersions,
    /// The commit kept losing races with concurrent commits of the same key; retry later.
    #[error("too many concurrent updates of the same key")]
    Contended,
    /// The backend could not answer in time (a cluster with an inactive partition); the
    /// operation may or may not have been applied, and retrying it is safe.
    #[error("catalog unavailable: {0}")]
    Unavailable(String),
    /// The caller's own check (a closure given to the commit) refused: its error, passed back.
    #[error(transparent)]
    Refused(Box<dyn std::error::Error + Send + Sync>),
    /// The store holding the index is full (a cluster's pool at its quota, or past its full
    /// ratio): the write was not applied. Removals still go through.
    #[error("catalog store full: {0}")]
    NoSpace(String),
    #[error("corrupt catalog record: {0}")]
    Corrupt(String),
    #[error("catalog backend error: {0}")]
    Backend(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The backend does not carry this yet (versioned buckets on a cluster).
    #[error("not supported by the {0} catalog: {1}")]
    NotSupported(&'static str, &'static str),
}

pub type Result<T> = std::result::Result<T, CatalogError>;

impl From<lode_metadata::MetaError> for CatalogError {
    fn from(e: lode_metadata::MetaError) -> Self {
        use lode_metadata::MetaError as M;
        match e {
            M::Conflict => CatalogError::Contended,
            M::Corrupt(s) => CatalogError::Corrupt(s),
            M::UnknownFormat(v) => CatalogError::Corrupt(format!("unknown record format {v}")),
            e => CatalogError::Backend(Box::new(e)),
        }
    }
}

/// For backends: splits a full record to commit into its stored value and its payload
/// ([`lode_metadata::records::split_inline`]; `None`: no inline segment). A record in head form
/// is refused (`Corrupt`): it lacks the bytes to store.
pub fn split_record(rec: &ObjectRecord) -> Result<(Vec<u8>, Option<Vec<u8>>)> {
    if rec.has_detached() {
        return Err(CatalogError::Corrupt(
            "a record to commit must carry its inline bytes (head form given)".into(),
        ));
    }
    Ok(lode_metadata::records::split_inline(rec))
}

/// For backends: a record as stored made whole with the payload read beside it (`None`: none
/// found). A record without `Detached` segments (none, or an older format's, bytes inside)
/// comes back as it is; one with them and no payload, or a payload of the wrong length, is
/// `Corrupt`.
pub fn join_record(rec: ObjectRecord, payload: Option<&[u8]>) -> Result<ObjectRecord> {
    if !rec.has_detached() {
        return Ok(rec);
    }
    let Some(p) = payload else {
        return Err(CatalogError::Corrupt(
            "an object record's inline payload is missing".into(),
        ));
    };
    Ok(lode_metadata::records::join_inline(rec, p)?)
}

/// Preconditions of a write: `If-Match` / `If-None-Match` of PutObject and Complete, and the
/// conditions of a conditional DeleteObject.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Cond {
    /// An ETag (quotes allowed), or `*`: the key must exist (else `NoSuchKey`) and match.
    pub if_match: Option<String>,
    /// `If-None-Match: *`: the key must not exist.
    pub if_none_match_any: bool,
    /// `If-None-Match: "etag"`: the current object must not have this ETag.
    pub if_none_match: Option<String>,
    /// `x-amz-if-match-size`: a current object must have this size (an absent key passes,
    /// unless `if_match` asks for one).
    pub if_match_size: Option<u64>,
    /// `x-amz-if-match-last-modified-time`, in whole seconds since the epoch: a current
    /// object must have been modified in this second (HTTP dates carry seconds; an absent key
    /// passes, unless `if_match` asks for one).
    pub if_match_modified_s: Option<i64>,
    /// The current object must have this last-modified time, to the millisecond (an absent key
    /// passes, unless `if_match` asks for one). Not an S3 header: the service's own exact
    /// check (lifecycle expiry removes only the object it judged).
    pub if_match_modified_ms: Option<i64>,
    /// How the bucket keeps what the write replaces or the delete removes (not a condition:
    /// the bucket's versioning state, carried with the write's conditions into its commit).
    pub versioning: Versioning,
}

/// How a bucket keeps what a write replaces ([`Cond::versioning`]). Versions other than the
/// current one are noncurrent versions and delete markers, kept beside the key and read with
/// the `*_version` methods; listings, `get` and `head` see current records only.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum Versioning {
    /// Never versioned: a write replaces, a delete removes.
    #[default]
    Off,
    /// A write makes a new version with an id of its own and keeps what it replaces as a
    /// noncurrent version; a delete keeps the current version and adds a delete marker.
    Enabled,
    /// A write makes the `null` version: the current version is kept unless it is the `null`
    /// one, and an older `null` version goes; a delete adds a `null` delete marker likewise.
    Suspended,
}

/// For backends: a version's place among its key's versions (larger: newer).
pub fn version_seq(rec: &ObjectRecord, suffix: Option<&str>) -> u64 {
    suffix
        .or(rec.version_id.as_deref())
        .and_then(seq_of_suffix)
        .unwrap_or_else(|| {
            u64::try_from(rec.last_modified_ms)
                .unwrap_or(0)
                .saturating_mul(1000)
        })
}

/// For backends: the order encoded at the front of a version suffix or id (16 hex digits of
/// the inverted sequence number).
pub fn seq_of_suffix(s: &str) -> Option<u64> {
    let inv = u64::from_str_radix(s.get(..16)?, 16).ok()?;
    Some(u64::MAX - inv)
}

/// For backends: the suffix a noncurrent version is kept under: its key's versions sort
/// newest first. A version's id is its suffix; the `null` version's suffix ends in `null`.
pub fn version_suffix(seq: u64, version_id: Option<&str>) -> String {
    match version_id {
        Some(id) => id.to_owned(),
        None => format!("{:016x}null", u64::MAX - seq),
    }
}

/// For backends: a new version id, newer than `floor` (the newest version of the key) and
/// than now: 16 hex digits of the inverted sequence number (microseconds), 6 random ones.
pub fn new_version_id(floor: u64) -> (u64, String) {
    let now_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64);
    let seq = now_us.max(floor.saturating_add(1));
    let tail = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
        ^ (seq as u32).rotate_left(13))
        & 0xff_ffff;
    (seq, format!("{:016x}{tail:06x}", u64::MAX - seq))
}

/// Whether `id` has the form of a version id this catalog makes (or is `null`).
pub fn is_version_id(id: &str) -> bool {
    id == "null"
        || (id.len() == 22
            && id
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()))
}

/// For backends: whether `rec` is version `id` (`null`: the one without an id).
pub fn is_version(rec: &ObjectRecord, id: &str) -> bool {
    match &rec.version_id {
        Some(v) => v == id,
        None => id == "null",
    }
}

/// What retiring a key's current version does before a new version or a delete marker takes
/// its place: S3's rule, once for every backend ([`retirement`]); the backend applies it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Retirement {
    /// Keep the old current version whole, as a noncurrent version under this suffix.
    pub keep_as: Option<String>,
    /// Release the old current version's chunks: it is not kept.
    pub release_old: bool,
    /// Remove the key's noncurrent `null` version and release its chunks (a key has one
    /// `null` version, and a `Suspended` write makes a new one).
    pub drop_null: bool,
    /// The new version's sequence number (the key's newest from now on) and id (`None`: the
    /// `null` version).
    pub seq: u64,
    pub version_id: Option<String>,
}

/// For backends: the [`Retirement`] of `old` (the key's current version, if any) under `v`,
/// for a key whose newest version is `floor` ([`version_seq`]; 0: none) and which has a
/// noncurrent `null` version if `has_null`. `Off`: the old version is released and nothing
/// else happens (sequence 0). Otherwise the old version is kept, unless the bucket is
/// `Suspended` and it is the `null` version, which is released; in `Suspended` the noncurrent
/// `null` version goes too.
pub fn retirement(
    old: Option<&ObjectRecord>,
    floor: u64,
    has_null: bool,
    v: Versioning,
) -> Retirement {
    if v == Versioning::Off {
        return Retirement {
            release_old: old.is_some(),
            ..Default::default()
        };
    }
    let mut r = Retirement::default();
    let mut floor = floor;
    if let Some(old) = old {
        let seq = version_seq(old, None).max(floor.saturating_add(1));
        floor = floor.max(seq);
        if v == Versioning::Enabled || old.version_id.is_some() {
            r.keep_as = Some(version_suffix(seq, old.version_id.as_deref()));
        } else {
            r.release_old = true;
        }
    }
    r.drop_null = v == Versioning::Suspended && has_null;
    let (seq, id) = new_version_id(floor);
    r.seq = seq;
    r.version_id = (v == Versioning::Enabled).then_some(id);
    r
}

/// For backends: a delete marker made now with this version id (`None`: the `null` one).
pub fn delete_marker(version_id: Option<String>) -> ObjectRecord {
    ObjectRecord {
        size: 0,
        etag: String::new(),
        last_modified_ms: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64),
        meta: ObjectMeta::default(),
        checksums: Checksums::default(),
        segments: vec![],
        parts: vec![],
        upload_id: None,
        version_id,
        delete_marker: true,
    }
}

/// What ListObjectVersions asks.
#[derive(Debug, Default, Clone)]
pub struct VersionQuery {
    pub prefix: String,
    pub delimiter: Option<String>,
    /// Start after this key (all its versions), or, with `version_marker`, after that version
    /// of it.
    pub key_marker: Option<String>,
    pub version_marker: Option<String>,
    pub max: usize,
}

/// One entry of a version listing.
#[derive(Debug, Clone)]
pub struct VersionEntry {
    pub key: String,
    /// Head form; `version_id` `None` is the `null` version; `delete_marker` says which kind.
    pub record: ObjectRecord,
    /// The newest version of its key (the current one, or the newest delete marker of a key
    /// with no current version).
    pub is_latest: bool,
}

/// One page of ListObjectVersions: versions in key order, each key's newest first.
#[derive(Debug, Default)]
pub struct VersionPage {
    pub entries: Vec<VersionEntry>,
    pub prefixes: Vec<String>,
    pub truncated: bool,
    /// The key marker and version id marker to continue after (the version marker is `None`
    /// after a common prefix).
    pub next: Option<(String, Option<String>)>,
}

impl Cond {
    /// Only if nothing is stored at the key.
    pub fn absent() -> Self {
        Cond {
            if_none_match_any: true,
            ..Default::default()
        }
    }

    /// Checks the condition against the current record.
    pub fn check(&self, current: Option<&ObjectRecord>) -> Result<()> {
        if self.if_none_match_any && current.is_some() {
            return Err(CatalogError::PreconditionFailed);
        }
        if let (Some(not), Some(o)) = (&self.if_none_match, current)
            && not.trim_matches('"') == o.etag
        {
            return Err(CatalogError::PreconditionFailed);
        }
        if let Some(want) = &self.if_match {
            match current {
                None => return Err(CatalogError::NoSuchKey),
                Some(o) if want != "*" && want.trim_matches('"') != o.etag => {
                    return Err(CatalogError::PreconditionFailed);
                }
                _ => {}
            }
        }
        if let Some(o) = current {
            if self.if_match_size.is_some_and(|n| n != o.size) {
                return Err(CatalogError::PreconditionFailed);
            }
            if self
                .if_match_modified_s
                .is_some_and(|t| t != o.last_modified_ms.div_euclid(1000))
                || self
                    .if_match_modified_ms
                    .is_some_and(|t| t != o.last_modified_ms)
            {
                return Err(CatalogError::PreconditionFailed);
            }
        }
        Ok(())
    }
}

/// How a committed record's chunks are counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refs {
    /// The chunks were just written for this record: each starts with one reference.
    Fresh,
    /// The chunks already belong to other records (a copy): each gains one reference.
    Shared,
}

/// What a commit did.
#[derive(Debug, Default)]
pub struct Commit {
    /// The record the commit replaced or removed, in head form (inline segments `Detached`:
    /// the commit does not read the payload it replaces).
    pub previous: Option<ObjectRecord>,
    /// Chunks whose last reference went with this commit.
    pub released: Vec<ChunkLoc>,
    /// In a versioned bucket: the id of the version the commit made (the new record's, or the
    /// delete marker's; `None`: the `null` version).
    pub version_id: Option<String>,
    /// The commit made a delete marker (a delete in a versioned bucket), or removed one.
    pub delete_marker: bool,
}

/// A multipart upload as a Complete sees it, inside the commit.
pub struct UploadState<'a> {
    pub upload: &'a UploadRecord,
    pub parts: &'a BTreeMap<u32, PartRecord>,
    /// The record at the key now, in head form.
    pub current: Option<&'a ObjectRecord>,
}

/// What a Complete commits: the object and which of the upload's parts it is made of (the
/// chunks of those parts move to the object; the other parts are released).
pub struct Completion {
    pub record: ObjectRecord,
    pub used_parts: Vec<u32>,
}

impl Completion {
    /// For backends: the parts of `parts` (the upload's) that the object is not made of;
    /// their chunks are released in the Complete's commit, and every part record goes.
    pub fn unused<'p>(
        &'p self,
        parts: &'p BTreeMap<u32, PartRecord>,
    ) -> impl Iterator<Item = &'p PartRecord> + 'p {
        parts
            .iter()
            .filter(|(n, _)| !self.used_parts.contains(n))
            .map(|(_, p)| p)
    }
}

/// The outcome of an abort.
#[derive(Debug, PartialEq, Eq)]
pub enum Aborted {
    /// The upload and its parts were removed.
    Now(Vec<ChunkLoc>),
    /// It had been aborted already (recently): a retry.
    Before,
}

/// One page of ListMultipartUploads.
#[derive(Debug, Default)]
pub struct UploadPage {
    /// (key, upload id, record), in key then id order.
    pub uploads: Vec<(String, String, UploadRecord)>,
    pub prefixes: Vec<String>,
    pub truncated: bool,
    /// (key marker, upload id marker) to continue after.
    pub last: Option<(String, String)>,
}

/// What ListMultipartUploads asks.
#[derive(Debug, Default, Clone)]
pub struct UploadQuery {
    pub prefix: String,
    pub delimiter: Option<String>,
    pub key_marker: Option<String>,
    pub id_marker: Option<String>,
    pub max: usize,
}

/// A check or transformation the caller runs inside a commit, on the current record (it may
/// run more than once: a commit that loses a race runs again). It sees the full record (inline
/// bytes included) and returns a full record.
pub type RecordFn = Arc<dyn Fn(&ObjectRecord) -> Result<ObjectRecord> + Send + Sync>;
/// A check of a record inside the commit that removes it ([`Catalog::delete_version`]).
pub type RecordCheck = Arc<dyn Fn(&ObjectRecord) -> Result<()> + Send + Sync>;
/// What a Complete runs inside its commit.
pub type CompleteFn = Arc<dyn Fn(UploadState<'_>) -> Result<Completion> + Send + Sync>;
/// The conditions of a rename, checked inside its commit on the source record and on what
/// the target holds (`None`: nothing); an error refuses the rename with nothing changed.
pub type RenameCheck =
    Arc<dyn Fn(&ObjectRecord, Option<&ObjectRecord>) -> Result<()> + Send + Sync>;

/// The POSIX door's rename check: with `no_replace` (RENAME_NOREPLACE), an existing target
/// refuses the rename (`PreconditionFailed`); without, anything may be replaced.
pub fn replace_check(no_replace: bool) -> RenameCheck {
    Arc::new(move |_, target| {
        if no_replace && target.is_some() {
            Err(CatalogError::PreconditionFailed)
        } else {
            Ok(())
        }
    })
}

/// What an append runs inside its commit: the current full record (`None`: absent) in, the
/// new record out.
pub type AppendFn = Arc<dyn Fn(Option<&ObjectRecord>) -> Result<ObjectRecord> + Send + Sync>;

/// For backends: the segments an append adds, after checking that `new` keeps all of the
/// current record's segments first (else `Corrupt`: an append never rewrites the object).
pub fn appended_segments<'a>(
    current: Option<&ObjectRecord>,
    new: &'a ObjectRecord,
) -> Result<&'a [Segment]> {
    let kept = current.map_or(&[][..], |c| &c.segments);
    if !new.segments.starts_with(kept) {
        return Err(CatalogError::Corrupt(
            "an append must keep the object's segments".into(),
        ));
    }
    Ok(&new.segments[kept.len()..])
}

/// A read-modify-write of a bucket's record (its tags and settings): the current record in,
/// the new one out (it may refuse).
pub type BucketFn = Arc<dyn Fn(&BucketRecord) -> Result<BucketRecord> + Send + Sync>;

/// For backends: checks that a bucket update keeps what identifies the bucket (its owner and
/// creation time; else `Corrupt`).
pub fn check_bucket_update(old: &BucketRecord, new: &BucketRecord) -> Result<()> {
    if old.owner != new.owner || old.created_ms != new.created_ms {
        return Err(CatalogError::Corrupt(
            "a bucket update may not change its owner or creation time".into(),
        ));
    }
    Ok(())
}

/// A read-modify-write of one system key (`None` in or out: absent).
pub type SysFn = Arc<dyn Fn(Option<&[u8]>) -> Result<Option<Vec<u8>>> + Send + Sync>;

/// The catalog boundary. Every method is one commit or one consistent read.
#[async_trait::async_trait]
pub trait Catalog: Send + Sync + 'static {
    /// The backend's name, for logs and the banner.
    fn backend_name(&self) -> &'static str;

    /// Marks the calling thread (a FUSE worker driving a commit with `block_on`; never an
    /// async worker) as one that may block in the backend's own work, sparing the hop to a
    /// blocking pool and back where the backend has one. Default: nothing.
    fn allow_blocking_on_this_thread(&self) {}

    /// Whether commits count chunk references themselves. If so, [`Commit::released`] (and the
    /// other released lists) hold only chunks whose last reference went; if not, they hold
    /// every reference the commit dropped, and the blob store counts holders (a backend that
    /// cannot update the counts of shared chunks in the same atomic op as the record: RADOS).
    fn counts_references(&self) -> bool {
        true
    }

    // ------------------------------------------------------------------ buckets

    /// Creates a bucket; `BucketExists` (with its owner) if the name is taken.
    async fn create_bucket(&self, name: &str, rec: BucketRecord) -> Result<()>;
    async fn bucket(&self, name: &str) -> Result<Option<BucketRecord>>;
    async fn list_buckets(&self) -> Result<Vec<(String, BucketRecord)>>;
    /// Rewrites a bucket's record in one atomic step (bucket tagging and settings): `f` gets
    /// the current record and returns the new one, with the same owner and creation time
    /// (else `Corrupt`); `NoSuchBucket` when absent. Returns the new record.
    async fn update_bucket(&self, name: &str, f: BucketFn) -> Result<BucketRecord>;
    /// Deletes a bucket that holds no object (`BucketNotEmpty` otherwise); its multipart
    /// uploads and their parts go with it.
    async fn delete_bucket(&self, name: &str) -> Result<Vec<ChunkLoc>>;

    // ------------------------------------------------------------------ objects

    /// The full record at `bucket/key` (inline segments with their bytes, read together with
    /// the record): `Ok(None)` if the key is absent, `NoSuchBucket` if the bucket is.
    async fn get(&self, bucket: &str, key: &str) -> Result<Option<ObjectRecord>>;

    /// The record at `bucket/key` in head form: inline segments are [`Segment::Detached`], and
    /// the payload is not read. Otherwise as [`Catalog::get`] (same errors, same record). The
    /// default calls `get`; a backend that stores payloads apart reads only the record.
    async fn head(&self, bucket: &str, key: &str) -> Result<Option<ObjectRecord>> {
        Ok(self.get(bucket, key).await?.map(ObjectRecord::into_head))
    }

    /// Whether `name` is known to exist without IO: it did a moment ago, and may be gone
    /// since (the commit that follows then answers `NoSuchBucket`). A hint for checks that
    /// only save wasted work, never for access decisions. Default: not known.
    fn bucket_known(&self, name: &str) -> bool {
        let _ = name;
        false
    }

    /// Like [`Catalog::get`] (the full record) when the answer is at hand without IO; `None`
    /// otherwise (the caller then awaits `get`). Default: never at hand.
    fn get_cached(&self, bucket: &str, key: &str) -> Option<Result<Option<ObjectRecord>>> {
        let _ = (bucket, key);
        None
    }

    /// Like [`Catalog::head`] (head form) when the answer is at hand without IO (the small
    /// record is in a cache); `None` otherwise (the caller then awaits `head`). Default: never
    /// at hand.
    fn head_cached(&self, bucket: &str, key: &str) -> Option<Result<Option<ObjectRecord>>> {
        let _ = (bucket, key);
        None
    }

    /// Commits `rec` (a full record) at `bucket/key` if `cond` holds, releasing what it
    /// replaces; its payload is written with it, and a payload of the replaced record goes.
    async fn put(
        &self,
        bucket: &str,
        key: &str,
        rec: ObjectRecord,
        cond: &Cond,
        refs: Refs,
    ) -> Result<Commit>;

    /// Removes `bucket/key` and its payload if `cond` holds, in the same atomic step as the
    /// check (absent and `cond` holds: nothing happens, `previous` is `None`).
    async fn delete(&self, bucket: &str, key: &str, cond: &Cond) -> Result<Commit>;

    /// Copies `src` to `dst`: `make` builds the new record from the source's full record (and
    /// may refuse); the chunks become shared, the payload is written at `dst`. Returns the new
    /// record and what it replaced.
    async fn copy(
        &self,
        src: (&str, &str),
        dst: (&str, &str),
        make: RecordFn,
    ) -> Result<(ObjectRecord, Commit)>;

    /// Appends to `bucket/key` (PutObject with `x-amz-write-offset-bytes`) in one commit: `f`
    /// gets the current full record (`None`: absent; it may refuse) and returns the new one,
    /// whose segments start with the current record's (else `Corrupt`); the ones after them
    /// are fresh. Unversioned (`v` is `Off`): the current record's chunks pass to the new one
    /// and nothing is released. In a versioned bucket the new record is a new version (its id
    /// in the returned record and in `Commit::version_id`) that shares the current one's
    /// chunks, which is kept as a noncurrent version as a put keeps it (Suspended: released
    /// as a put releases it, but never a chunk that a remaining version still holds).
    async fn append(
        &self,
        bucket: &str,
        key: &str,
        f: AppendFn,
        v: Versioning,
    ) -> Result<(ObjectRecord, Commit)>;

    /// Rewrites a record in place: `f` gets the full record and returns the new one, with the
    /// same content (the same segments: chunks and inline bytes; else `Corrupt`).
    async fn update(&self, bucket: &str, key: &str, f: RecordFn) -> Result<ObjectRecord>;

    /// One page of a bucket's keys in S3 order, O(page). Records are in head form: no payload
    /// is read.
    async fn list(&self, bucket: &str, q: &ListQuery<'_>) -> Result<ListPage>;

    /// [`Catalog::list`] for an S3 ListObjects page, which shows of each object only its key,
    /// size, ETag, time and checksum names: the page (without `objects`) and those, in order.
    /// A backend that keeps encoded records overrides it to decode only that much of each.
    async fn list_briefs(&self, bucket: &str, q: &ListQuery<'_>) -> Result<(ListPage, Vec<Brief>)> {
        let mut page = self.list(bucket, q).await?;
        let briefs = std::mem::take(&mut page.objects)
            .iter()
            .map(|(k, r)| Brief::of(k, r))
            .collect();
        Ok((page, briefs))
    }

    /// Moves `from` to `to` within a bucket (the POSIX door's rename, S3 RenameObject), its
    /// payload with it, if `check` passes on the source and the current target, in the same
    /// atomic step. Onto itself: nothing moves (after `check` on the record as both). A
    /// backend atomic per partition makes this atomic when both keys share one.
    ///
    /// In a versioned bucket (`v` not `Off`) the source's current version moves: it becomes
    /// `to`'s new version (a new id, in `Commit::version_id`, and the time of the rename as
    /// its last-modified; its content and ETag unchanged), `to`'s current version is retired
    /// as a put retires it, and `from` gets a delete marker. `from`'s other versions stay. No
    /// chunk is shared: the moved version keeps its own. `previous` is what `to` held.
    async fn rename(
        &self,
        bucket: &str,
        from: &str,
        to: &str,
        check: RenameCheck,
        v: Versioning,
    ) -> Result<Commit>;

    /// Moves every key under the prefix `from` to the same key under `to` (a directory
    /// rename). `to` may hold nothing but its own marker. Returns how many keys moved.
    async fn rename_prefix(
        &self,
        bucket: &str,
        from: &str,
        to: &str,
        max_key_len: usize,
    ) -> Result<(usize, Vec<ChunkLoc>)>;

    /// Removes the marker `prefix` of an empty directory: `DirectoryNotEmpty` if another key
    /// lies under it, `NoSuchKey` if nothing does.
    async fn remove_dir(&self, bucket: &str, prefix: &str) -> Result<Vec<ChunkLoc>>;

    // ------------------------------------------------------------------ versions

    /// One version of `bucket/key` by id (`"null"`: the `null` version), current or not, whole
    /// (delete markers too); `Ok(None)`: no such version.
    async fn get_version(
        &self,
        bucket: &str,
        key: &str,
        version_id: &str,
    ) -> Result<Option<ObjectRecord>> {
        let _ = (bucket, key, version_id);
        Err(CatalogError::NotSupported(self.backend_name(), "versions"))
    }

    /// The newest version of `bucket/key`, in head form: the current record, or the newest
    /// noncurrent entry (a delete marker, when the key reads as deleted).
    async fn newest_version(&self, bucket: &str, key: &str) -> Result<Option<ObjectRecord>> {
        let _ = (bucket, key);
        Err(CatalogError::NotSupported(self.backend_name(), "versions"))
    }

    /// Removes one version for good (a delete marker too), releasing what only it held. When
    /// the key then has no current version and its newest remaining one is not a delete
    /// marker, that one becomes current (S3: deleting the current version makes the previous
    /// one current). An absent version changes nothing. The removed record (head form) is
    /// [`Commit::previous`]. `check` sees the version in the commit that removes it: its error
    /// refuses the removal, and nothing changes (object lock).
    async fn delete_version(
        &self,
        bucket: &str,
        key: &str,
        version_id: &str,
        check: Option<RecordCheck>,
    ) -> Result<Commit> {
        let _ = (bucket, key, version_id, check);
        Err(CatalogError::NotSupported(self.backend_name(), "versions"))
    }

    /// [`Catalog::update`] of one version (its tags), current or not; `NoSuchKey` if absent.
    async fn update_version(
        &self,
        bucket: &str,
        key: &str,
        version_id: &str,
        f: RecordFn,
    ) -> Result<ObjectRecord> {
        let _ = (bucket, key, version_id, f);
        Err(CatalogError::NotSupported(self.backend_name(), "versions"))
    }

    /// One page of ListObjectVersions, O(page) plus the versions of the marker's key.
    async fn list_versions(&self, bucket: &str, q: &VersionQuery) -> Result<VersionPage> {
        let _ = (bucket, q);
        Err(CatalogError::NotSupported(self.backend_name(), "versions"))
    }

    /// Whether the backend keeps versions ([`Versioning`] other than `Off`).
    fn supports_versions(&self) -> bool {
        false
    }

    // ------------------------------------------------------------------ multipart

    async fn create_upload(
        &self,
        bucket: &str,
        key: &str,
        id: &str,
        rec: UploadRecord,
    ) -> Result<()>;
    /// The upload: `NoSuchBucket` / `NoSuchUpload` when absent.
    async fn upload(&self, bucket: &str, key: &str, id: &str) -> Result<UploadRecord>;
    /// Commits part `n` of an upload (its chunks are fresh), releasing the part it replaces.
    async fn put_part(
        &self,
        bucket: &str,
        key: &str,
        id: &str,
        n: u32,
        part: PartRecord,
    ) -> Result<Vec<ChunkLoc>>;
    /// Parts numbered above `after`, at most `max`, and whether more follow.
    async fn list_parts(
        &self,
        bucket: &str,
        key: &str,
        id: &str,
        after: u32,
        max: usize,
    ) -> Result<(Vec<(u32, PartRecord)>, bool)>;
    async fn list_uploads(&self, bucket: &str, q: &UploadQuery) -> Result<UploadPage>;
    /// Removes an upload and its parts. A retried abort (within a day) is `Aborted::Before`;
    /// an unknown or completed upload is `NoSuchUpload`.
    async fn abort(&self, bucket: &str, key: &str, id: &str) -> Result<Aborted>;
    /// Completes an upload in one commit: `f` sees the upload, its parts and the current
    /// record (head form), and returns the object, a full record (or refuses). The upload and
    /// every part go; the used parts' chunks move to the object (inline bytes become its
    /// payload); the rest, and what the object replaces, are released.
    async fn complete(
        &self,
        bucket: &str,
        key: &str,
        id: &str,
        cond: &Cond,
        f: CompleteFn,
    ) -> Result<(ObjectRecord, Commit)>;

    // ------------------------------------------------------------------ blocking reads

    /// [`Catalog::bucket`] from a thread that may block (a FUSE thread; never an async task).
    fn bucket_blocking(&self, name: &str) -> Result<Option<BucketRecord>> {
        futures::executor::block_on(self.bucket(name))
    }

    /// The full record at `bucket/key` if present (a missing bucket reads as absent). Blocks.
    fn get_blocking(&self, bucket: &str, key: &str) -> Result<Option<ObjectRecord>> {
        match futures::executor::block_on(self.get(bucket, key)) {
            Err(CatalogError::NoSuchBucket) => Ok(None),
            r => r,
        }
    }

    /// [`Catalog::get_blocking`] in head form ([`Catalog::head`]: the payload is not read).
    /// Blocks.
    fn head_blocking(&self, bucket: &str, key: &str) -> Result<Option<ObjectRecord>> {
        match futures::executor::block_on(self.head(bucket, key)) {
            Err(CatalogError::NoSuchBucket) => Ok(None),
            r => r,
        }
    }

    /// Up to `limit` keys under `prefix`, in order. Blocks.
    fn keys_under_blocking(&self, bucket: &str, prefix: &str, limit: usize) -> Result<Vec<String>> {
        let q = ListQuery {
            prefix,
            delimiter: None,
            after: None,
            max: limit,
        };
        let page = futures::executor::block_on(self.list(bucket, &q))?;
        Ok(page.objects.into_iter().map(|(k, _)| k).collect())
    }

    /// [`Catalog::list`] (head form), blocking.
    fn list_blocking(&self, bucket: &str, q: &ListQuery<'_>) -> Result<ListPage> {
        futures::executor::block_on(self.list(bucket, q))
    }

    /// [`Catalog::list_blocking`] for a directory listing: `f` gets each object's key and
    /// [`ObjectSummary`] in order, and the page returned has no `objects`. A backend that
    /// keeps encoded records overrides it to decode only the summary, borrowed from the value.
    fn list_summaries_blocking(
        &self,
        bucket: &str,
        q: &ListQuery<'_>,
        f: &mut dyn FnMut(&str, &ObjectSummary<'_>),
    ) -> Result<ListPage> {
        let mut page = self.list_blocking(bucket, q)?;
        for (k, r) in std::mem::take(&mut page.objects) {
            f(&k, &ObjectSummary::of(&r));
        }
        Ok(page)
    }

    // ------------------------------------------------------------------ system key space

    async fn sys_get(&self, key: &[u8]) -> Result<Option<Vec<u8>>>;
    /// Entries whose key starts with `prefix`, in key order.
    async fn sys_scan(&self, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>>;
    /// Atomically replaces the value at `key` with `f(current)` (`None`: delete). `f` may
    /// refuse.
    async fn sys_update(&self, key: &[u8], f: SysFn) -> Result<()>;

    // ------------------------------------------------------------------ event outbox

    /// Whether this backend stores the entries an armed commit renders ([`events`]) in the
    /// same commit. Without, an armed commit stores none, and the service refuses event
    /// notification configurations.
    fn supports_events(&self) -> bool {
        false
    }

    /// Adds an entry to `dest`'s outbox on its own, in a commit of its own (a test event);
    /// returns its sequence number.
    async fn outbox_add(&self, dest: &str, body: Vec<u8>) -> Result<u64> {
        let _ = (dest, body);
        Err(CatalogError::NotSupported(
            self.backend_name(),
            "event notifications",
        ))
    }

    /// Up to `limit` entries of `dest`'s outbox, oldest first, after sequence `after`.
    async fn outbox_scan(
        &self,
        dest: &str,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<events::Outboxed>> {
        let _ = (dest, after, limit);
        Ok(vec![])
    }

    /// Removes entries of `dest`'s outbox (delivered, or dropped); absent ones are no error.
    async fn outbox_remove(&self, dest: &str, seqs: &[u64]) -> Result<()> {
        let _ = (dest, seqs);
        Ok(())
    }

    /// How many entries `dest`'s outbox holds.
    async fn outbox_len(&self, dest: &str) -> Result<u64> {
        let _ = dest;
        Ok(0)
    }

    /// A graceful stop of this gateway, after its event deliveries stopped: what it answers
    /// for in a shared backend (its event outbox) goes to the other gateways at once, not
    /// after a lease. A backend of one process has nothing to hand off.
    async fn hand_off(&self) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(version_id: Option<&str>) -> ObjectRecord {
        let mut r = delete_marker(version_id.map(str::to_owned));
        r.delete_marker = false;
        r
    }

    #[test]
    fn retirement_keeps_what_s3_keeps() {
        let (_, id) = new_version_id(0);
        let with_id = rec(Some(&id));
        let null = rec(None);
        // Off: the old version goes, nothing is kept, no version is made.
        let r = retirement(Some(&with_id), 7, true, Versioning::Off);
        assert_eq!(
            r,
            Retirement {
                release_old: true,
                ..Default::default()
            }
        );
        assert_eq!(
            retirement(None, 7, true, Versioning::Off),
            Retirement::default()
        );
        // Enabled: the old version is kept under its id (the null one under a null suffix),
        // a new id is made, newer than the floor and the old version.
        let r = retirement(Some(&with_id), 0, true, Versioning::Enabled);
        assert_eq!(r.keep_as.as_deref(), Some(id.as_str()));
        assert!(!r.release_old && !r.drop_null);
        assert!(r.seq > version_seq(&with_id, None));
        assert_eq!(
            r.version_id.as_deref().map(seq_of_suffix),
            Some(Some(r.seq))
        );
        let r = retirement(Some(&null), u64::MAX / 2, false, Versioning::Enabled);
        assert!(r.keep_as.as_deref().is_some_and(|s| s.ends_with("null")));
        assert!(r.seq > u64::MAX / 2);
        // Suspended: a null current version is released, not kept; an older noncurrent null
        // version goes; the new version is the null one.
        let r = retirement(Some(&null), 0, true, Versioning::Suspended);
        assert_eq!(
            (r.keep_as.is_none(), r.release_old, r.drop_null),
            (true, true, true)
        );
        assert_eq!(r.version_id, None);
        let r = retirement(Some(&with_id), 0, false, Versioning::Suspended);
        assert_eq!(r.keep_as.as_deref(), Some(id.as_str()));
        assert_eq!(
            (r.release_old, r.drop_null, r.version_id),
            (false, false, None)
        );
    }
}
