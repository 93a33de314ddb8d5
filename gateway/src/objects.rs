//! The object service: everything both doors share. Chunking, inline storage, ETags, flexible
//! checksums, and the commit protocol:
//!
//! 1. stream the body into chunks (or keep it inline), hashing as it arrives;
//! 2. verify Content-MD5 and checksums; make the chunks durable (fdatasync);
//! 3. commit the object record, its extents' reference counts and the release of whatever it
//!    replaced in ONE metadata transaction (WAL synced, group commit);
//! 4. only then reply. Freed extents return to the allocator once in-flight readers are done.
//!
//! A request that fails or is dropped before step 3 leaves nothing visible, and its extents go
//! back to the allocator (see `lode_datapath::ChunkWriter`). Written against the
//! `MetadataStore` and `ChunkStore` traits only.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt};
use lode_datapath::{AlignedBuf, Allocation, ChunkRef, ChunkWriter, Datapath, Extent, ReadGuard};
use lode_metadata::records::{
    self, AbortedUpload, BucketRecord, Checksums, ChunkLoc, ExtentRecord, ObjectMeta, ObjectRecord,
    PartRecord, PartSummary, Segment, UploadRecord,
};
use lode_metadata::{MetaError, MetadataStore, Table, Transaction, keys, transact};
use md5::{Digest, Md5};

use crate::checksum::{Algo, ChecksumSet};
use crate::error::{ObjError, ObjResult};

/// Tunables of the object service (from `[datapath]` in lode.toml).
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    pub inline_threshold: usize,
    pub chunk_size: usize,
    pub max_object_size: u64,
    /// Chunk writes in flight per upload.
    pub write_depth: usize,
    /// A body that sends nothing for this long fails the request (RequestTimeout).
    pub body_idle_timeout: std::time::Duration,
    /// Crash-test failpoints (unarmed unless the binary arms them).
    pub failpoints: crate::failpoint::Failpoints,
}

impl Default for ServiceConfig {
    fn default() -> Self {
        Self {
            inline_threshold: 16 << 10,
            chunk_size: 4 << 20,
            max_object_size: 5 << 30,
            write_depth: 4,
            body_idle_timeout: std::time::Duration::from_secs(60),
            failpoints: Default::default(),
        }
    }
}

pub const MIN_PART_SIZE: u64 = 5 << 20;
pub const MAX_PARTS: i32 = 10_000;
pub const MAX_KEY_LEN: usize = 1024;

pub struct ObjectService {
    pub(crate) meta: Arc<dyn MetadataStore>,
    pub(crate) dp: Arc<Datapath>,
    cfg: ServiceConfig,
    /// Writers into a bucket hold it shared while they commit; DeleteBucket holds it exclusive,
    /// so no object can be committed into a bucket that is being deleted. (Commits therefore read
    /// the bucket record without tracking it: a tracked read would take the bucket key's
    /// optimistic-commit lock and serialize every commit into the bucket, WAL sync included,
    /// defeating RocksDB's group commit.)
    pub(crate) bucket_gate: Arc<RwLock<()>>,
    /// Told about every change made through the S3 door (see `crate::namespace`).
    pub(crate) listeners: RwLock<Vec<Arc<dyn crate::namespace::ChangeListener>>>,
    /// Totals of the background scrubber (see `crate::scrub`).
    pub scrub: crate::scrub::ScrubStats,
    /// The IO profile both doors record into (see `crate::profile`).
    pub profile: crate::profile::Profile,
}

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Validates an S3 bucket name (the AWS general-purpose bucket rules).
pub fn check_bucket_name(name: &str) -> ObjResult<()> {
    let bad = |why: &str| Err(ObjError::InvalidBucketName(format!("`{name}`: {why}")));
    if !(3..=63).contains(&name.len()) {
        return bad("must be 3 to 63 characters long");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
    {
        return bad("only lowercase letters, digits, '.' and '-' are allowed");
    }
    let first = name.as_bytes()[0];
    let last = name.as_bytes()[name.len() - 1];
    if !first.is_ascii_alphanumeric() || !last.is_ascii_alphanumeric() {
        return bad("must begin and end with a letter or digit");
    }
    if name.contains("..") || name.contains(".-") || name.contains("-.") {
        return bad("no adjacent periods or period-dash");
    }
    if name.parse::<std::net::Ipv4Addr>().is_ok() {
        return bad("must not be formatted as an IP address");
    }
    if name.starts_with("xn--")
        || name.starts_with("sthree-")
        || name.ends_with("-s3alias")
        || name.ends_with("--ol-s3")
    {
        return bad("reserved prefix or suffix");
    }
    Ok(())
}

/// Validates an object key: 1..=1024 bytes of UTF-8, no NUL.
pub fn check_key(key: &str) -> ObjResult<()> {
    if key.is_empty() {
        return Err(ObjError::InvalidArgument(
            "The object key must not be empty.".into(),
        ));
    }
    if key.len() > MAX_KEY_LEN {
        return Err(ObjError::KeyTooLong);
    }
    if key.bytes().any(|b| b == 0) {
        return Err(ObjError::InvalidArgument(
            "Object keys must not contain NUL characters.".into(),
        ));
    }
    Ok(())
}

/// What a finished upload body produced.
struct Ingested {
    size: u64,
    md5: [u8; 16],
    checksums: Checksums,
    segments: Vec<Segment>,
    alloc: Option<Allocation>,
}

/// MD5 of a body: inline for small bodies; once a body turns out large, on a blocking thread fed
/// through a bounded channel, so hashing overlaps receiving and the device writes.
enum Md5Pipe {
    Inline(Md5),
    Offloaded {
        tx: tokio::sync::mpsc::Sender<Bytes>,
        done: tokio::task::JoinHandle<[u8; 16]>,
    },
    Moving,
}

impl Md5Pipe {
    fn offload(&mut self) {
        if let Md5Pipe::Inline(h) = std::mem::replace(self, Md5Pipe::Moving) {
            let mut h = h;
            let (tx, mut rx) = tokio::sync::mpsc::channel::<Bytes>(32);
            let done = tokio::task::spawn_blocking(move || {
                while let Some(b) = rx.blocking_recv() {
                    h.update(&b);
                }
                h.finalize().into()
            });
            *self = Md5Pipe::Offloaded { tx, done };
        }
    }

    async fn update(&mut self, b: &Bytes) -> ObjResult<()> {
        match self {
            Md5Pipe::Inline(h) => h.update(b),
            Md5Pipe::Offloaded { tx, .. } => tx
                .send(b.clone())
                .await
                .map_err(|_| ObjError::Internal("the MD5 thread stopped".into()))?,
            Md5Pipe::Moving => unreachable!("offload always leaves a state"),
        }
        Ok(())
    }

    async fn finish(self) -> ObjResult<[u8; 16]> {
        match self {
            Md5Pipe::Inline(h) => Ok(h.finalize().into()),
            Md5Pipe::Offloaded { tx, done } => {
                drop(tx);
                done.await
                    .map_err(|e| ObjError::Internal(format!("the MD5 thread failed: {e}")))
            }
            Md5Pipe::Moving => unreachable!("offload always leaves a state"),
        }
    }
}

/// Expected digests and the algorithms to compute for one upload.
#[derive(Default)]
pub struct Integrity {
    /// Base64 Content-MD5, if sent.
    pub content_md5: Option<String>,
    /// Checksums sent in headers.
    pub expected: ChecksumSet,
    /// Algorithms to compute (from `x-amz-sdk-checksum-algorithm`, `x-amz-trailer`, headers).
    pub algos: Vec<Algo>,
    /// Checksums that arrive in an aws-chunked trailer, read after the body.
    pub trailers: Option<s3s::TrailingHeaders>,
}

/// Preconditions on a write (`If-Match` / `If-None-Match` of PutObject and Complete).
#[derive(Default, Clone)]
pub struct WriteCond {
    /// An ETag, or `*`.
    pub if_match: Option<String>,
    /// `If-None-Match: *`: the key must not exist.
    pub if_none_match_any: bool,
    /// `If-None-Match: "etag"`: the current object must not have this ETag (a missing key
    /// passes).
    pub if_none_match: Option<String>,
}

impl WriteCond {
    fn check(&self, old: Option<&ObjectRecord>) -> ObjResult<()> {
        if self.if_none_match_any && old.is_some() {
            return Err(ObjError::PreconditionFailed);
        }
        if let (Some(not), Some(o)) = (&self.if_none_match, old)
            && not.trim_matches('"') == o.etag
        {
            return Err(ObjError::PreconditionFailed);
        }
        if let Some(want) = &self.if_match {
            match old {
                None => return Err(ObjError::NoSuchKey),
                Some(o) if want != "*" && want.trim_matches('"') != o.etag => {
                    return Err(ObjError::PreconditionFailed);
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// A readable object: its record and the guard that keeps its extents from reuse while read.
pub struct ObjectHandle {
    pub record: ObjectRecord,
    pub(crate) guard: ReadGuard,
}

/// One page of ListMultipartUploads.
#[derive(Default)]
pub struct UploadPage {
    pub uploads: Vec<(String, String, UploadRecord)>,
    pub prefixes: Vec<String>,
    pub truncated: bool,
    /// (key marker, upload id marker) to continue after.
    pub last: Option<(String, String)>,
}

pub struct PutResult {
    pub etag: String,
    pub size: u64,
    pub checksums: Checksums,
    pub last_modified_ms: i64,
}

fn chunk_loc(c: &ChunkRef) -> ChunkLoc {
    ChunkLoc {
        dev: c.extent.dev,
        offset: c.extent.offset,
        alloc_len: c.extent.len,
        data_len: c.data_len,
        crc32c: c.crc32c,
    }
}

pub(crate) fn chunk_ref(c: &ChunkLoc) -> ChunkRef {
    ChunkRef {
        extent: Extent {
            dev: c.dev,
            offset: c.offset,
            len: c.alloc_len,
        },
        data_len: c.data_len,
        crc32c: c.crc32c,
    }
}

fn chunks(segments: &[Segment]) -> impl Iterator<Item = &ChunkLoc> {
    segments.iter().filter_map(|s| match s {
        Segment::Chunk(c) => Some(c),
        Segment::Inline(_) => None,
    })
}

/// Adds one reference to each chunk of `segments` (`fresh`: the chunks are new, refs = 1).
pub(crate) fn add_refs(
    txn: &mut dyn Transaction,
    segments: &[Segment],
    fresh: bool,
) -> Result<(), MetaError> {
    for c in chunks(segments) {
        let k = keys::extent(c.dev, c.offset);
        let rec = if fresh {
            ExtentRecord {
                len: c.alloc_len,
                refs: 1,
            }
        } else {
            let mut r: ExtentRecord = match txn.get_for_update(Table::Extents, &k)? {
                Some(v) => records::decode(&v)?,
                None => {
                    return Err(MetaError::Corrupt(format!(
                        "extent {:?} has no record",
                        (c.dev, c.offset)
                    )));
                }
            };
            r.refs += 1;
            r
        };
        txn.put(Table::Extents, &k, &records::encode(&rec))?;
    }
    Ok(())
}

/// Drops one reference from each chunk of `segments`; returns the extents that reached zero.
pub(crate) fn drop_refs(
    txn: &mut dyn Transaction,
    segments: &[Segment],
    freed: &mut Vec<Extent>,
) -> Result<(), MetaError> {
    for c in chunks(segments) {
        let k = keys::extent(c.dev, c.offset);
        let Some(v) = txn.get_for_update(Table::Extents, &k)? else {
            tracing::error!(
                dev = c.dev,
                offset = c.offset,
                "dropping a reference to an unrecorded extent"
            );
            continue;
        };
        let mut r: ExtentRecord = records::decode(&v)?;
        r.refs = r.refs.saturating_sub(1);
        if r.refs == 0 {
            txn.delete(Table::Extents, &k)?;
            freed.push(Extent {
                dev: c.dev,
                offset: c.offset,
                len: c.alloc_len,
            });
        } else {
            txn.put(Table::Extents, &k, &records::encode(&r))?;
        }
    }
    Ok(())
}

pub(crate) fn get_rec<T: records::Record>(
    txn: &mut dyn Transaction,
    t: Table,
    k: &[u8],
) -> Result<Option<T>, MetaError> {
    txn.get_for_update(t, k)?
        .map(|v| records::decode(&v))
        .transpose()
}

/// Removes an upload (read for update by the caller) and its parts in `t`, collecting the
/// extents whose last reference goes.
fn drop_upload(
    m: &dyn MetadataStore,
    t: &mut dyn Transaction,
    uk: &[u8],
    upload_id: &str,
    freed: &mut Vec<Extent>,
) -> Result<(), MetaError> {
    let prefix = keys::part_prefix(upload_id);
    let end = keys::prefix_successor(&prefix);
    for (pk, v) in m.scan(Table::Parts, &prefix, end.as_deref(), usize::MAX)? {
        let p: PartRecord = records::decode(&v)?;
        drop_refs(t, &p.segments, freed)?;
        t.delete(Table::Parts, &pk)?;
    }
    t.delete(Table::Uploads, uk)
}

/// How long an aborted upload is remembered for a retried abort.
const ABORTED_MEMORY_MS: i64 = 24 * 3600 * 1000;

/// Forgets up to 32 of the oldest aborted-upload tombstones that are over a day old (run after
/// each abort, so the tombstones stay about one day's aborts).
fn prune_aborted(m: &dyn MetadataStore) -> Result<(), MetaError> {
    let end = keys::prefix_successor(keys::ABORTED_PREFIX);
    let old = now_ms() - ABORTED_MEMORY_MS;
    let stale: Vec<Vec<u8>> = m
        .scan(Table::System, keys::ABORTED_PREFIX, end.as_deref(), 32)?
        .into_iter()
        .filter(|(_, v)| records::decode::<AbortedUpload>(v).is_ok_and(|a| a.aborted_ms < old))
        .map(|(k, _)| k)
        .collect();
    if stale.is_empty() {
        return Ok(());
    }
    let mut t = m.begin();
    for k in &stale {
        t.delete(Table::System, k)?;
    }
    t.commit()
}

fn new_upload_id() -> String {
    let r: [u8; 16] = rand::random();
    format!("{:x}{}", now_ms(), hex::encode(r))
}

/// Whether a Complete's part list names exactly the parts an object was completed from.
fn same_parts(done: &[PartSummary], asked: &[(i32, String, crate::checksum::ChecksumSet)]) -> bool {
    done.len() == asked.len()
        && done.iter().zip(asked).all(|(d, (n, e, _))| {
            i64::from(d.number) == i64::from(*n) && e.trim_matches('"') == d.etag
        })
}

/// The S3 multipart ETag: MD5 of the concatenated binary part MD5s, `-N`.
pub fn multipart_etag(part_etags: &[&str]) -> String {
    let mut h = Md5::new();
    for e in part_etags {
        if let Ok(b) = hex::decode(e) {
            h.update(&b);
        }
    }
    format!("{}-{}", hex::encode(h.finalize()), part_etags.len())
}

impl ObjectService {
    /// Builds the service and rebuilds the allocator from the extents table.
    pub fn open(
        meta: Arc<dyn MetadataStore>,
        dp: Arc<Datapath>,
        cfg: ServiceConfig,
    ) -> ObjResult<Self> {
        let mut c = meta.cursor(Table::Extents)?;
        c.seek(&[]);
        let mut n = 0u64;
        while let Some((k, v)) = c.current() {
            let (dev, offset) =
                keys::parse_extent(k).ok_or_else(|| MetaError::Corrupt("bad extent key".into()))?;
            let r: ExtentRecord = records::decode(v)?;
            dp.mark_used(Extent {
                dev,
                offset,
                len: r.len,
            })?;
            n += 1;
            c.next();
        }
        c.status()?;
        drop(c);
        let (free, total) = dp.space();
        tracing::info!(
            extents = n,
            free_bytes = free,
            total_bytes = total,
            "datapath space rebuilt from metadata"
        );
        Ok(Self {
            meta,
            dp,
            cfg,
            bucket_gate: Arc::new(RwLock::new(())),
            listeners: RwLock::new(vec![]),
            scrub: Default::default(),
            profile: Default::default(),
        })
    }

    pub fn datapath(&self) -> &Arc<Datapath> {
        &self.dp
    }

    pub fn metadata(&self) -> &Arc<dyn MetadataStore> {
        &self.meta
    }

    pub fn config(&self) -> &ServiceConfig {
        &self.cfg
    }

    /// Runs metadata work on the blocking pool (RocksDB calls may block on IO and fsync).
    pub(crate) async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&dyn MetadataStore) -> ObjResult<T> + Send + 'static,
    ) -> ObjResult<T> {
        let meta = Arc::clone(&self.meta);
        tokio::task::spawn_blocking(move || f(&*meta))
            .await
            .map_err(|e| ObjError::Internal(format!("metadata task failed: {e}")))?
    }

    // ---------------------------------------------------------------- buckets

    pub async fn create_bucket(&self, name: &str, owner: &str) -> ObjResult<()> {
        check_bucket_name(name)?;
        let (name, owner) = (name.to_owned(), owner.to_owned());
        self.blocking(move |m| {
            transact(m, |t| {
                if let Some(old) = get_rec::<BucketRecord>(t, Table::Buckets, name.as_bytes())? {
                    return Err(if old.owner == owner {
                        ObjError::BucketAlreadyOwnedByYou
                    } else {
                        ObjError::BucketAlreadyExists
                    });
                }
                let rec = BucketRecord {
                    created_ms: now_ms(),
                    owner: owner.clone(),
                };
                t.put(Table::Buckets, name.as_bytes(), &records::encode(&rec))?;
                Ok(())
            })
        })
        .await
    }

    pub async fn bucket(&self, name: &str) -> ObjResult<BucketRecord> {
        let name = name.to_owned();
        self.blocking(move |m| match m.get(Table::Buckets, name.as_bytes())? {
            Some(v) => Ok(records::decode(&v)?),
            None => Err(ObjError::NoSuchBucket),
        })
        .await
    }

    pub async fn list_buckets(&self) -> ObjResult<Vec<(String, BucketRecord)>> {
        self.blocking(|m| {
            m.scan(Table::Buckets, b"", None, usize::MAX)?
                .into_iter()
                .map(|(k, v)| {
                    Ok((
                        String::from_utf8_lossy(&k).into_owned(),
                        records::decode(&v)?,
                    ))
                })
                .collect()
        })
        .await
    }

    /// Deletes a bucket that holds no object. Multipart uploads still in progress go with it,
    /// their parts' space included, in the same transaction (as S3 does).
    pub async fn delete_bucket(&self, name: &str) -> ObjResult<()> {
        let name = name.to_owned();
        let gate = Arc::clone(&self.bucket_gate);
        let dp = Arc::clone(&self.dp);
        self.blocking(move |m| {
            let _exclusive = gate.write().expect("bucket gate");
            let prefix = keys::bucket_prefix(&name);
            let end = keys::prefix_successor(&prefix);
            let freed = transact(m, |t| {
                if t.get_for_update(Table::Buckets, name.as_bytes())?.is_none() {
                    return Err(ObjError::NoSuchBucket);
                }
                if !m
                    .scan(Table::Objects, &prefix, end.as_deref(), 1)?
                    .is_empty()
                {
                    return Err(ObjError::BucketNotEmpty);
                }
                let mut freed = vec![];
                for (uk, _) in m.scan(Table::Uploads, &prefix, end.as_deref(), usize::MAX)? {
                    let Some((_, id)) = keys::split_upload(&uk[prefix.len()..]) else {
                        continue;
                    };
                    let id = String::from_utf8_lossy(id).into_owned();
                    // Read for update: a part committing into this upload now conflicts.
                    if t.get_for_update(Table::Uploads, &uk)?.is_some() {
                        drop_upload(m, t, &uk, &id, &mut freed)?;
                    }
                }
                t.delete(Table::Buckets, name.as_bytes())?;
                Ok(freed)
            })?;
            dp.free_committed(freed);
            Ok(())
        })
        .await
    }

    // ---------------------------------------------------------------- ingest

    /// Streams a body into inline bytes or durable chunks, hashing MD5 and the requested
    /// checksums, and verifies them. Nothing is visible yet.
    async fn ingest<S, E>(
        &self,
        mut body: S,
        integrity: &Integrity,
        max: u64,
        content_length: Option<i64>,
    ) -> ObjResult<Ingested>
    where
        S: Stream<Item = Result<Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        if content_length.is_some_and(|l| l as u64 > max) {
            return Err(ObjError::EntityTooLarge);
        }
        let mut md5 = Md5Pipe::Inline(Md5::new());
        let mut sums = crate::checksum::Hasher::new(&integrity.algos);
        let mut size = 0u64;
        let mut head = BytesMut::new();
        let mut writer: Option<ChunkWriter> = None;
        let mut cur: Option<AlignedBuf> = None;
        let chunk_size = self.cfg.chunk_size;
        // Buffers are sized to what is left of a declared body: a 17 KiB object must not pay for
        // zeroing and faulting in a 4 MiB buffer.
        let cap_for = |consumed: u64| -> usize {
            match content_length {
                Some(l) if l >= 0 => {
                    ((l as u64).saturating_sub(consumed) as usize).clamp(1, chunk_size)
                }
                _ => chunk_size,
            }
        };
        let mut consumed = 0u64;
        loop {
            let piece = match tokio::time::timeout(self.cfg.body_idle_timeout, body.next()).await {
                Ok(Some(p)) => p,
                Ok(None) => break,
                Err(_) => return Err(ObjError::RequestTimeout),
            };
            let piece = piece.map_err(|e| ObjError::from_body(e.to_string()))?;
            size += piece.len() as u64;
            if size > max {
                return Err(ObjError::EntityTooLarge);
            }
            md5.update(&piece).await?;
            sums.update(&piece);
            if writer.is_none() {
                if head.len() + piece.len() <= self.cfg.inline_threshold {
                    head.extend_from_slice(&piece);
                    continue;
                }
                // Too big to inline: switch to chunks, starting with what was buffered. Bodies
                // of more than a chunk hash MD5 on their own thread from here on.
                if content_length.is_none_or(|l| l as u64 > chunk_size as u64) {
                    md5.offload();
                }
                writer = Some(ChunkWriter::new(&self.dp, self.cfg.write_depth));
                let mut b = AlignedBuf::with_capacity(cap_for(0));
                b.extend_from_slice(&head);
                head.clear();
                cur = Some(b);
            }
            let w = writer.as_mut().expect("writer");
            let mut rest: &[u8] = &piece;
            while !rest.is_empty() {
                let b = cur.get_or_insert_with(|| AlignedBuf::with_capacity(cap_for(consumed)));
                let n = b.extend_from_slice(rest);
                rest = &rest[n..];
                if b.remaining() == 0 {
                    consumed += b.len() as u64;
                    w.push(cur.take().expect("buffer")).await?;
                }
            }
        }
        if let Some(l) = content_length
            && l as u64 != size
        {
            return Err(ObjError::IncompleteBody);
        }
        let md5 = md5.finish().await?;
        // Content-MD5
        if let Some(cm) = &integrity.content_md5 {
            use base64::Engine;
            let want = base64::engine::general_purpose::STANDARD
                .decode(cm.trim())
                .map_err(|_| ObjError::InvalidDigest)?;
            if want.len() != 16 {
                return Err(ObjError::InvalidDigest);
            }
            if want != md5 {
                return Err(ObjError::BadDigest(
                    "The Content-MD5 you specified did not match what we received.".into(),
                ));
            }
        }
        // Flexible checksums: header values, then trailer values (read after the body).
        let mut expected = integrity.expected.clone();
        if let Some(t) = &integrity.trailers
            && let Some(h) = t.take()
        {
            expected.merge_headers(&h)?;
        }
        let computed = sums.finish();
        computed.verify(&expected)?;
        let checksums = computed.to_record();

        let (segments, alloc) = match writer {
            None => (vec![Segment::Inline(head.to_vec())], None),
            Some(mut w) => {
                if let Some(b) = cur.take()
                    && !b.is_empty()
                {
                    w.push(b).await?;
                }
                w.drain().await?;
                self.cfg.failpoints.hit("put.after_data_write");
                let (refs, alloc) = w.finish().await?;
                self.cfg.failpoints.hit("put.after_data_sync");
                (
                    refs.iter().map(|c| Segment::Chunk(chunk_loc(c))).collect(),
                    Some(alloc),
                )
            }
        };
        Ok(Ingested {
            size,
            md5,
            checksums,
            segments,
            alloc,
        })
    }

    // ---------------------------------------------------------------- objects

    #[allow(clippy::too_many_arguments)]
    pub async fn put_object<S, E>(
        &self,
        bucket: &str,
        key: &str,
        meta: ObjectMeta,
        body: S,
        content_length: Option<i64>,
        integrity: Integrity,
        cond: WriteCond,
    ) -> ObjResult<PutResult>
    where
        S: Stream<Item = Result<Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        check_key(key)?;
        self.bucket(bucket).await?;
        let ing = self
            .ingest(body, &integrity, self.cfg.max_object_size, content_length)
            .await?;
        let etag = hex::encode(ing.md5);
        let record = ObjectRecord {
            size: ing.size,
            etag: etag.clone(),
            last_modified_ms: now_ms(),
            meta,
            checksums: ing.checksums.clone(),
            segments: ing.segments,
            parts: vec![],
            upload_id: None,
        };
        let result = PutResult {
            etag,
            size: ing.size,
            checksums: ing.checksums,
            last_modified_ms: record.last_modified_ms,
        };
        self.commit_object(bucket, key, record, ing.alloc, cond, true)
            .await?;
        self.cfg.failpoints.hit("put.after_commit");
        Ok(result)
    }

    /// Commits `record` at `bucket/key` in one transaction: extent refs (`fresh`: its chunks are
    /// new), release of the replaced version, preconditions. Keeps `alloc` only on success.
    async fn commit_object(
        &self,
        bucket: &str,
        key: &str,
        record: ObjectRecord,
        alloc: Option<Allocation>,
        cond: WriteCond,
        fresh: bool,
    ) -> ObjResult<()> {
        let (bucket, key) = (bucket.to_owned(), key.to_owned());
        let gate = Arc::clone(&self.bucket_gate);
        let dp = Arc::clone(&self.dp);
        self.blocking(move |m| {
            let _shared = gate.read().expect("bucket gate");
            let okey = keys::object(&bucket, &key);
            let value = records::encode(&record);
            let freed = transact(m, |t| {
                if m.get(Table::Buckets, bucket.as_bytes())?.is_none() {
                    return Err(ObjError::NoSuchBucket);
                }
                let old: Option<ObjectRecord> = get_rec(t, Table::Objects, &okey)?;
                cond.check(old.as_ref())?;
                add_refs(t, &record.segments, fresh)?;
                let mut freed = vec![];
                if let Some(old) = &old {
                    drop_refs(t, &old.segments, &mut freed)?;
                }
                t.put(Table::Objects, &okey, &value)?;
                Ok(freed)
            })?;
            if let Some(a) = alloc {
                a.commit();
            }
            dp.free_committed(freed);
            Ok(())
        })
        .await
    }

    /// Looks an object up for reading. The returned handle keeps its extents from being reused.
    pub async fn open_object(&self, bucket: &str, key: &str) -> ObjResult<ObjectHandle> {
        check_key(key)?;
        let guard = self.dp.read_guard();
        // Cached metadata answers right here; only a lookup that must read from disk takes
        // the hop to a blocking thread.
        let okey = keys::object(bucket, key);
        match self.meta.get_cached(Table::Objects, &okey)? {
            Some(Some(v)) => {
                return Ok(ObjectHandle {
                    record: records::decode::<ObjectRecord>(&v)?,
                    guard,
                });
            }
            Some(None) => match self.meta.get_cached(Table::Buckets, bucket.as_bytes())? {
                Some(None) => return Err(ObjError::NoSuchBucket),
                Some(Some(_)) => return Err(ObjError::NoSuchKey),
                None => {}
            },
            None => {}
        }
        let (b, k) = (bucket.to_owned(), key.to_owned());
        let record = self
            .blocking(
                move |m| match m.get(Table::Objects, &keys::object(&b, &k))? {
                    Some(v) => Ok(records::decode::<ObjectRecord>(&v)?),
                    None => {
                        if m.get(Table::Buckets, b.as_bytes())?.is_none() {
                            Err(ObjError::NoSuchBucket)
                        } else {
                            Err(ObjError::NoSuchKey)
                        }
                    }
                },
            )
            .await?;
        Ok(ObjectHandle { record, guard })
    }

    /// Streams bytes `[start, end)` of an opened object. Chunks are read (and crc-checked) with
    /// one read ahead.
    pub fn read_range(
        &self,
        h: ObjectHandle,
        start: u64,
        end: u64,
    ) -> impl Stream<Item = Result<Bytes, ObjError>> + Send + 'static {
        let mut pieces: Vec<(Segment, u64, u64)> = vec![];
        let mut pos = 0u64;
        for s in &h.record.segments {
            let len = s.len();
            let (s0, s1) = (pos, pos + len);
            if s1 > start && s0 < end {
                let from = start.max(s0) - s0;
                let to = end.min(s1) - s0;
                pieces.push((s.clone(), from, to));
            }
            pos = s1;
        }
        let dp = Arc::clone(&self.dp);
        let guard = h.guard;
        futures::stream::iter(pieces)
            .map(move |(seg, from, to)| {
                let dp = Arc::clone(&dp);
                async move {
                    match seg {
                        Segment::Inline(b) => Ok(Bytes::from(b).slice(from as usize..to as usize)),
                        Segment::Chunk(c) => {
                            let data = dp.read_chunk(&chunk_ref(&c)).await?;
                            Ok(data.slice(from as usize..to as usize))
                        }
                    }
                }
            })
            .buffered(2)
            .chain(futures::stream::once(async move {
                drop(guard);
                Ok(Bytes::new())
            }))
            .filter(|r| futures::future::ready(!matches!(r, Ok(b) if b.is_empty())))
    }

    pub async fn delete_object(&self, bucket: &str, key: &str) -> ObjResult<()> {
        check_key(key)?;
        let (b, k) = (bucket.to_owned(), key.to_owned());
        let dp = Arc::clone(&self.dp);
        self.blocking(move |m| {
            let okey = keys::object(&b, &k);
            let freed = transact(m, |t| {
                if m.get(Table::Buckets, b.as_bytes())?.is_none() {
                    return Err(ObjError::NoSuchBucket);
                }
                let mut freed = vec![];
                if let Some(old) = get_rec::<ObjectRecord>(t, Table::Objects, &okey)? {
                    drop_refs(t, &old.segments, &mut freed)?;
                    t.delete(Table::Objects, &okey)?;
                }
                Ok(freed)
            })?;
            dp.free_committed(freed);
            Ok(())
        })
        .await
    }

    /// CopyObject: a metadata operation; the destination shares the source's extents.
    pub async fn copy_object(
        &self,
        src: (&str, &str),
        dst: (&str, &str),
        new_meta: Option<ObjectMeta>,
        src_check: impl FnOnce(&ObjectRecord) -> ObjResult<()> + Send + 'static,
    ) -> ObjResult<ObjectRecord> {
        check_key(src.1)?;
        check_key(dst.1)?;
        if src == dst && new_meta.is_none() {
            return Err(ObjError::InvalidRequest(
                "This copy request is illegal because it is trying to copy an object to itself without changing the object's metadata, storage class, website redirect location or encryption attributes.".into(),
            ));
        }
        self.bucket(dst.0).await?;
        let (sb, sk, db, dk) = (
            src.0.to_owned(),
            src.1.to_owned(),
            dst.0.to_owned(),
            dst.1.to_owned(),
        );
        let gate = Arc::clone(&self.bucket_gate);
        let dp = Arc::clone(&self.dp);
        let mut src_check = Some(src_check);
        self.blocking(move |m| {
            let _shared = gate.read().expect("bucket gate");
            let (skey, dkey) = (keys::object(&sb, &sk), keys::object(&db, &dk));
            let (rec, freed) = transact(m, |t| {
                if m.get(Table::Buckets, db.as_bytes())?.is_none() {
                    return Err(ObjError::NoSuchBucket);
                }
                let Some(src) = get_rec::<ObjectRecord>(t, Table::Objects, &skey)? else {
                    if m.get(Table::Buckets, sb.as_bytes())?.is_none() {
                        return Err(ObjError::NoSuchBucket);
                    }
                    return Err(ObjError::NoSuchKey);
                };
                if let Some(check) = src_check.take() {
                    check(&src)?;
                }
                let mut rec = src.clone();
                rec.last_modified_ms = now_ms();
                rec.upload_id = None;
                if let Some(meta) = &new_meta {
                    rec.meta = meta.clone();
                }
                add_refs(t, &rec.segments, false)?;
                let mut freed = vec![];
                if let Some(old) = get_rec::<ObjectRecord>(t, Table::Objects, &dkey)? {
                    drop_refs(t, &old.segments, &mut freed)?;
                }
                t.put(Table::Objects, &dkey, &records::encode(&rec))?;
                Ok((rec, freed))
            })?;
            dp.free_committed(freed);
            Ok(rec)
        })
        .await
    }

    pub async fn list_objects(
        &self,
        bucket: &str,
        prefix: String,
        delimiter: Option<String>,
        after: Option<String>,
        max: usize,
    ) -> ObjResult<lode_metadata::list::ListPage> {
        let b = bucket.to_owned();
        self.blocking(move |m| {
            if m.get(Table::Buckets, b.as_bytes())?.is_none() {
                return Err(ObjError::NoSuchBucket);
            }
            if max == 0 {
                // S3: `max-keys=0` is an empty page that is not truncated.
                return Ok(lode_metadata::list::ListPage::default());
            }
            let q = lode_metadata::list::ListQuery {
                prefix: &prefix,
                delimiter: delimiter.as_deref(),
                after: after.as_deref(),
                max,
            };
            Ok(lode_metadata::list::list_objects(m, &b, &q)?)
        })
        .await
    }

    // ---------------------------------------------------------------- multipart

    pub async fn create_upload(
        &self,
        bucket: &str,
        key: &str,
        rec: UploadRecord,
    ) -> ObjResult<String> {
        check_key(key)?;
        let id = new_upload_id();
        let (b, k, i) = (bucket.to_owned(), key.to_owned(), id.clone());
        let gate = Arc::clone(&self.bucket_gate);
        self.blocking(move |m| {
            let _shared = gate.read().expect("bucket gate");
            transact(m, |t| {
                if m.get(Table::Buckets, b.as_bytes())?.is_none() {
                    return Err(ObjError::NoSuchBucket);
                }
                t.put(
                    Table::Uploads,
                    &keys::upload(&b, &k, &i),
                    &records::encode(&rec),
                )?;
                Ok(())
            })
        })
        .await?;
        Ok(id)
    }

    pub async fn upload(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
    ) -> ObjResult<UploadRecord> {
        let uk = keys::upload(bucket, key, upload_id);
        let b = bucket.to_owned();
        self.blocking(move |m| match m.get(Table::Uploads, &uk)? {
            Some(v) => Ok(records::decode(&v)?),
            None if m.get(Table::Buckets, b.as_bytes())?.is_none() => Err(ObjError::NoSuchBucket),
            None => Err(ObjError::NoSuchUpload),
        })
        .await
    }

    #[allow(clippy::too_many_arguments)]
    pub async fn upload_part<S, E>(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        part_number: i32,
        body: S,
        content_length: Option<i64>,
        mut integrity: Integrity,
    ) -> ObjResult<PartRecord>
    where
        S: Stream<Item = Result<Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        check_key(key)?;
        if !(1..=MAX_PARTS).contains(&part_number) {
            return Err(ObjError::InvalidArgument(format!(
                "Part number must be an integer between 1 and {MAX_PARTS}, inclusive"
            )));
        }
        let up = self.upload(bucket, key, upload_id).await?;
        if let Some(a) = up.checksum_algorithm.as_deref().and_then(Algo::parse)
            && !integrity.algos.contains(&a)
        {
            integrity.algos.push(a);
        }
        let ing = self
            .ingest(body, &integrity, self.cfg.max_object_size, content_length)
            .await?;
        let part = PartRecord {
            size: ing.size,
            etag: hex::encode(ing.md5),
            last_modified_ms: now_ms(),
            checksums: ing.checksums,
            segments: ing.segments,
        };
        self.commit_part(bucket, key, upload_id, part_number, part, ing.alloc)
            .await
    }

    async fn commit_part(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        part_number: i32,
        part: PartRecord,
        alloc: Option<Allocation>,
    ) -> ObjResult<PartRecord> {
        let uk = keys::upload(bucket, key, upload_id);
        let pk = keys::part(upload_id, part_number as u32);
        let dp = Arc::clone(&self.dp);
        self.blocking(move |m| {
            let value = records::encode(&part);
            let freed = transact(m, |t| {
                let Some(up) = t.get_for_update(Table::Uploads, &uk)? else {
                    return Err(ObjError::NoSuchUpload);
                };
                // Rewrite the upload record: Complete and Abort read it for update, so a part
                // committed after their scan of the parts makes them retry and see it (otherwise
                // the part would be orphaned, its extents leaked).
                t.put(Table::Uploads, &uk, &up)?;
                add_refs(t, &part.segments, true)?;
                let mut freed = vec![];
                if let Some(old) = get_rec::<PartRecord>(t, Table::Parts, &pk)? {
                    drop_refs(t, &old.segments, &mut freed)?;
                }
                t.put(Table::Parts, &pk, &value)?;
                Ok(freed)
            })?;
            if let Some(a) = alloc {
                a.commit();
            }
            dp.free_committed(freed);
            Ok(part)
        })
        .await
    }

    /// UploadPartCopy: copies a byte range of an object into a part (the bytes are written anew).
    pub async fn upload_part_copy(
        &self,
        dst: (&str, &str, &str, i32),
        src: ObjectHandle,
        range: (u64, u64),
    ) -> ObjResult<PartRecord> {
        let (bucket, key, upload_id, part_number) = dst;
        let stream = Box::pin(self.read_range(src, range.0, range.1));
        self.upload_part(
            bucket,
            key,
            upload_id,
            part_number,
            stream,
            Some((range.1 - range.0) as i64),
            Integrity::default(),
        )
        .await
    }

    pub async fn list_parts(
        &self,
        upload_id: &str,
        after: u32,
        max: usize,
    ) -> ObjResult<(Vec<(u32, PartRecord)>, bool)> {
        let start = keys::part(upload_id, after.saturating_add(1));
        let end = keys::prefix_successor(&keys::part_prefix(upload_id));
        let rows = self
            .blocking(move |m| {
                Ok(m.scan(Table::Parts, &start, end.as_deref(), max.saturating_add(1))?)
            })
            .await?;
        let truncated = rows.len() > max;
        let parts = rows
            .into_iter()
            .take(max)
            .map(|(k, v)| {
                let n = u32::from_be_bytes(k[k.len() - 4..].try_into().expect("4 bytes"));
                Ok((n, records::decode(&v)?))
            })
            .collect::<ObjResult<Vec<_>>>()?;
        Ok((parts, truncated))
    }

    /// Uploads in a bucket: (key, upload id, record) and common prefixes, from after
    /// `(key_marker, id_marker)`. With a delimiter, each common prefix costs one seek.
    pub async fn list_uploads(
        &self,
        bucket: &str,
        prefix: String,
        delimiter: Option<String>,
        key_marker: Option<String>,
        id_marker: Option<String>,
        max: usize,
    ) -> ObjResult<UploadPage> {
        let b = bucket.to_owned();
        self.blocking(move |m| {
            if m.get(Table::Buckets, b.as_bytes())?.is_none() {
                return Err(ObjError::NoSuchBucket);
            }
            let base = keys::bucket_prefix(&b);
            let mut full = base.clone();
            full.extend_from_slice(prefix.as_bytes());
            let mut c = m.cursor(Table::Uploads)?;
            let start = match &key_marker {
                Some(km) if km.as_str() >= prefix.as_str() => keys::object(&b, km),
                _ => full.clone(),
            };
            c.seek(&start);
            let mut page = UploadPage::default();
            let delim = delimiter.filter(|d| !d.is_empty());
            while let Some((k, v)) = c.current() {
                if !k.starts_with(&full) {
                    break;
                }
                let Some((key, id)) = keys::split_upload(&k[base.len()..]) else {
                    c.next();
                    continue;
                };
                let key = String::from_utf8_lossy(key).into_owned();
                let id = String::from_utf8_lossy(id).into_owned();
                let cp = delim.as_deref().and_then(|d| {
                    key[prefix.len()..]
                        .find(d)
                        .map(|i| key[..prefix.len() + i + d.len()].to_owned())
                });
                if let Some(cp) = cp {
                    if key_marker.as_deref().is_none_or(|km| cp.as_str() > km) {
                        if page.uploads.len() + page.prefixes.len() >= max {
                            page.truncated = true;
                            break;
                        }
                        page.prefixes.push(cp.clone());
                        page.last = Some((cp.clone(), String::new()));
                    }
                    match keys::prefix_successor(cp.as_bytes()) {
                        Some(next) => {
                            let mut k = base.clone();
                            k.extend_from_slice(&next);
                            c.seek(&k);
                            continue;
                        }
                        None => break,
                    }
                }
                let skip = match (&key_marker, &id_marker) {
                    (Some(km), Some(im)) => key < *km || (key == *km && id <= *im),
                    (Some(km), None) => key <= *km,
                    _ => false,
                };
                if !skip {
                    if page.uploads.len() + page.prefixes.len() >= max {
                        page.truncated = true;
                        break;
                    }
                    page.last = Some((key.clone(), id.clone()));
                    page.uploads.push((key, id, records::decode(v)?));
                }
                c.next();
            }
            c.status()?;
            Ok(page)
        })
        .await
    }

    /// AbortMultipartUpload. Retry-safe: aborting an upload that this key already aborted (within
    /// a day) succeeds again; an upload that completed or never existed is `NoSuchUpload`.
    pub async fn abort_upload(&self, bucket: &str, key: &str, upload_id: &str) -> ObjResult<()> {
        let uk = keys::upload(bucket, key, upload_id);
        let tomb_key = keys::aborted(upload_id);
        let tomb = records::encode(&AbortedUpload {
            bucket: bucket.to_owned(),
            key: key.to_owned(),
            aborted_ms: now_ms(),
        });
        let (b, k, id) = (bucket.to_owned(), key.to_owned(), upload_id.to_owned());
        let dp = Arc::clone(&self.dp);
        self.blocking(move |m| {
            let freed = transact(m, |t| {
                if t.get_for_update(Table::Uploads, &uk)?.is_none() {
                    if m.get(Table::Buckets, b.as_bytes())?.is_none() {
                        return Err(ObjError::NoSuchBucket);
                    }
                    return match get_rec::<AbortedUpload>(t, Table::System, &tomb_key)? {
                        Some(a) if a.bucket == b && a.key == k => Ok(None),
                        _ => Err(ObjError::NoSuchUpload),
                    };
                }
                let mut freed = vec![];
                drop_upload(m, t, &uk, &id, &mut freed)?;
                t.put(Table::System, &tomb_key, &tomb)?;
                Ok(Some(freed))
            })?;
            if let Some(freed) = freed {
                dp.free_committed(freed);
                if let Err(e) = prune_aborted(m) {
                    tracing::warn!(error = %e, "pruning aborted-upload tombstones failed");
                }
            }
            Ok(())
        })
        .await
    }

    /// CompleteMultipartUpload: the object references the parts' extents (nothing is copied).
    /// `parts`: (part number, etag, checksums the client listed).
    pub async fn complete_upload(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        parts: Vec<(i32, String, crate::checksum::ChecksumSet)>,
        whole: crate::checksum::ChecksumSet,
        cond: WriteCond,
    ) -> ObjResult<ObjectRecord> {
        if parts.is_empty() {
            return Err(ObjError::InvalidRequest(
                "You must specify at least one part".into(),
            ));
        }
        for w in parts.windows(2) {
            if w[0].0 >= w[1].0 {
                return Err(ObjError::InvalidPartOrder);
            }
        }
        let (b, k, id) = (bucket.to_owned(), key.to_owned(), upload_id.to_owned());
        let gate = Arc::clone(&self.bucket_gate);
        let dp = Arc::clone(&self.dp);
        self.blocking(move |m| {
            let _shared = gate.read().expect("bucket gate");
            let uk = keys::upload(&b, &k, &id);
            let okey = keys::object(&b, &k);
            let prefix = keys::part_prefix(&id);
            let end = keys::prefix_successor(&prefix);
            let (rec, freed) = transact(m, |t| {
                if m.get(Table::Buckets, b.as_bytes())?.is_none() {
                    return Err(ObjError::NoSuchBucket);
                }
                let Some(up) = get_rec::<UploadRecord>(t, Table::Uploads, &uk)? else {
                    // A retry whose first reply was lost: while the key still holds the object
                    // this upload made, with the same parts, answer with it again.
                    return match get_rec::<ObjectRecord>(t, Table::Objects, &okey)? {
                        Some(rec)
                            if rec.upload_id.as_deref() == Some(id.as_str())
                                && same_parts(&rec.parts, &parts) =>
                        {
                            Ok((rec, vec![]))
                        }
                        _ => Err(ObjError::NoSuchUpload),
                    };
                };
                let mut stored: BTreeMap<u32, PartRecord> = BTreeMap::new();
                for (pk, v) in m.scan(Table::Parts, &prefix, end.as_deref(), usize::MAX)? {
                    let n = u32::from_be_bytes(pk[pk.len() - 4..].try_into().expect("4 bytes"));
                    // Registers the part for conflict detection (a concurrent re-upload of it).
                    let p: PartRecord = get_rec(t, Table::Parts, &pk)?.unwrap_or(records::decode(&v)?);
                    stored.insert(n, p);
                }
                let mut chosen: Vec<(u32, PartRecord)> = vec![];
                for (i, (n, etag, sums)) in parts.iter().enumerate() {
                    let p = stored.remove(&(*n as u32)).ok_or_else(|| {
                        ObjError::InvalidPart(format!(
                            "One or more of the specified parts could not be found. Part {n} was not uploaded."
                        ))
                    })?;
                    if etag.trim_matches('"') != p.etag {
                        return Err(ObjError::InvalidPart(format!("The ETag of part {n} does not match.")));
                    }
                    sums.verify_against(&p.checksums, *n)?;
                    if i + 1 < parts.len() && p.size < MIN_PART_SIZE {
                        return Err(ObjError::EntityTooSmall);
                    }
                    chosen.push((*n as u32, p));
                }
                let old: Option<ObjectRecord> = get_rec(t, Table::Objects, &okey)?;
                cond.check(old.as_ref())?;
                let etags: Vec<&str> = chosen.iter().map(|(_, p)| p.etag.as_str()).collect();
                let etag = multipart_etag(&etags);
                let checksums = crate::checksum::combine_parts(&up, &chosen, &whole)?;
                let rec = ObjectRecord {
                    size: chosen.iter().map(|(_, p)| p.size).sum(),
                    etag,
                    last_modified_ms: now_ms(),
                    meta: up.meta.clone(),
                    checksums,
                    segments: chosen.iter().flat_map(|(_, p)| p.segments.iter().cloned()).collect(),
                    upload_id: Some(id.clone()),
                    parts: chosen
                        .iter()
                        .map(|(n, p)| PartSummary {
                            number: *n,
                            size: p.size,
                            etag: p.etag.clone(),
                            checksums: p.checksums.clone(),
                        })
                        .collect(),
                };
                // The chosen parts' references move to the object; unused parts are released.
                let mut freed = vec![];
                for p in stored.values() {
                    drop_refs(t, &p.segments, &mut freed)?;
                }
                if let Some(old) = &old {
                    drop_refs(t, &old.segments, &mut freed)?;
                }
                let mut pk_all: Vec<u32> = chosen.iter().map(|(n, _)| *n).collect();
                pk_all.extend(stored.keys());
                for n in pk_all {
                    t.delete(Table::Parts, &keys::part(&id, n))?;
                }
                t.delete(Table::Uploads, &uk)?;
                t.put(Table::Objects, &okey, &records::encode(&rec))?;
                Ok((rec, freed))
            })?;
            dp.free_committed(freed);
            Ok(rec)
        })
        .await
    }
}
