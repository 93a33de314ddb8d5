//! `lode-catalog-rados`: the [`Catalog`] on Ceph RADOS, for cluster mode: any number of
//! stateless gateways share one namespace, with every commit one atomic RADOS write op on one
//! index object, guarded so that concurrent gateways never lose or half-apply a write.
//!
//! # Layout (in the index pool, a replicated pool: omap cannot live in an EC pool)
//! * `lode.buckets`: omap `bucket name -> BucketRecord` (ListBuckets, owners).
//! * `lode.sys`: omap of the system key space (users, grants).
//! * `lode.idx.<bucket>`: the bucket's first index partition, and `lode.part.<bucket>.<id>`
//!   the others (range partitions, see [`partition`]). A partition's xattr `lode.epoch` is its
//!   epoch (zero-padded decimal, compared with `cmpxattr`); `deleted` on the first marks a
//!   bucket being deleted. Its omap holds, under order-preserving escaped keys ([`esc`]):
//!   `o<key>` the object record (format 3: inline segments as their lengths); `d<key>` its
//!   payload, the raw bytes of those inline segments (only for a record that has some), apart
//!   so that HEADs and listings, which read only `o` values, never transfer them;
//!   `u<key>␁␁<id>` an upload; `p<key>␁␁<id>␁␁<n:05>` a part (uploads and parts beside their
//!   key, so a Complete is one op); `a<key>␁␁<id>` an aborted-upload tombstone; `v<key>␁␁<id>`
//!   a noncurrent version or delete marker and `h<key>` the key's version head (versioned
//!   buckets, see [`versions`]); `l<omap key>` the log of a split in progress. Records written
//!   in format 2 keep their bytes inside the `o` value; they read as they are.
//!
//! The object's existence is the bucket's: a commit that finds no partition object answers
//! `NoSuchBucket`, so a commit never needs a second object to know its bucket exists.
//!
//! # Commits
//! Every commit reads what it needs, then writes one op guarded by the partition epoch
//! (`cmpxattr lode.epoch == e`) and either the key's current value (`omap_cmp o<key> == v`,
//! a missing key comparing as empty: single-key commits of different keys never conflict) or
//! the partition's object version (`assert_version`, for the multi-key commits: Complete,
//! Abort, renames, bucket deletion). A failed guard (`ECANCELED`/`ERANGE`) re-reads and
//! retries; after 64 losses the commit is `Contended`. An op past the cluster's op timeout is
//! `Unavailable` (the S3 door answers 503 SlowDown; the OSD deduplicates a resent op, and
//! every commit is a conditional replace, so a retry is idempotent).
//!
//! A commit that makes a key (a PUT or copy whose conditions hold for an absent key) first
//! tries without the read: guarded on the key being absent and on the partition's epoch as
//! this gateway last read it (every change of a partition's range, claim or state changes
//! its epoch, so a stale view fails the guard), and the new keys waiting for one partition
//! at once go in one op ([`batch`]: guarded write ops on one object run one after another in
//! the OSD). A guard that fails applies nothing, and the key goes the read path above.
//!
//! A key's payload `d<key>` is written and removed only in the same op as its `o<key>`, and
//! an `o` value names its content (size, ETag, last-modified), so the guard on `o<key>` covers
//! the payload too (`commit_key`). `get` reads both in one read op (one version of the
//! partition); `head` and `list` read `o` values only.
//!
//! # Chunk references
//! Copies would share chunks across buckets, which no single op can count atomically, so this
//! backend does not count references across keys ([`Catalog::counts_references`] is false):
//! the object service copies the bytes of a CopyObject, and every commit reports the chunks
//! it released. The one sharing it allows is between versions of one key (an append in a
//! versioned bucket), which it counts itself in the same op ([`versions`]).
//!
//! # Partitions
//! A bucket's index is a chain of range partitions, split as they fill, without blocking
//! writes for O(entries): see [`partition`]. Every key's entries stay in one partition, so
//! every commit above is still one op on one object. A rename (or a directory rename) whose
//! names fall in two partitions is refused with [`CatalogError::CrossPartition`] (the mount
//! answers `EXDEV`, and `mv` copies).

mod activations;
mod batch;
mod heat;
mod outbox;
mod pages;
mod partition;
mod versions;

pub use partition::{PartitionConfig, SplitStop};

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use bytes::Bytes;
use lode_catalog::events::{Change, What};
use lode_catalog::listing::{PageFold, Step};
use lode_catalog::{
    Aborted, AppendFn, BucketFn, BucketRecord, Catalog, CatalogError, ChunkLoc, Commit, CompleteFn,
    Cond, ListPage, ListQuery, ObjectRecord, PartRecord, RecordFn, Refs, RenameCheck, Result,
    Segment, SysFn, UploadPage, UploadQuery, UploadRecord, UploadState, VersionPage, VersionQuery,
    Versioning, appended_segments, check_bucket_update, join_record, split_record,
};
use lode_metadata::records::{self, AbortedUpload, Record};
use lode_rados::{Cluster, CmpOp, IoCtx, RadosError, ReadOp, WriteOp};

pub(crate) const BUCKETS: &str = "lode.buckets";
const SYS: &str = "lode.sys";
pub(crate) const EPOCH: &str = "lode.epoch";
pub(crate) const FIRST_EPOCH: &str = "0000000001";

/// The first epoch of a bucket's first partition: distinct for every creation of the name
/// (the time and a random part), so that a gateway's view of a deleted bucket's partition,
/// epoch included, never matches the partition of a bucket made again under its name.
pub(crate) fn creation_epoch() -> String {
    let r: u64 = rand::random::<u64>() % 1_000_000;
    format!("{:010}", (now_ms().max(0) as u64) * 1_000_000 + r)
}
pub(crate) const DELETED: &str = "deleted";
/// Separator inside escaped omap keys: sorts below every escaped byte.
const SEP: [u8; 2] = [1, 1];
/// Above every escaped byte (UTF-8 never has 0xFF): `e(p) + HIGH` is past every key under `p`.
const HIGH: u8 = 0xff;
pub(crate) const RETRIES: usize = 64;
/// A blind commit tries at most this many times (a partition that changed under it is read
/// again in between) before it goes the read path.
const BLIND_TRIES: usize = 3;
/// How long an aborted upload is remembered for a retried abort.
const ABORTED_MEMORY_MS: i64 = 24 * 3600 * 1000;
/// Omap entries asked per read.
const PAGE: u64 = 1000;
/// Entries per read of a delimiter listing while it walks large directories (each read finds
/// where the next one starts).
const SEEK_READ: u64 = 8;

/// Escapes bytes for an omap key without NUL (the C API takes omap paging bounds as C
/// strings), preserving order and prefixes: `0x00 -> 01 02`, `0x01 -> 01 03`, others as is.
pub fn esc(b: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(b.len() + 2);
    for &c in b {
        match c {
            0 => out.extend_from_slice(&[1, 2]),
            1 => out.extend_from_slice(&[1, 3]),
            c => out.push(c),
        }
    }
    out
}

/// The inverse of [`esc`].
pub fn unesc(b: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(b.len());
    let mut it = b.iter();
    while let Some(&c) = it.next() {
        if c == 1 {
            match it.next() {
                Some(2) => out.push(0),
                Some(3) => out.push(1),
                _ => return None,
            }
        } else {
            out.push(c);
        }
    }
    Some(out)
}

fn tagged(tag: u8, parts: &[&[u8]]) -> Vec<u8> {
    let mut k = vec![tag];
    for (i, p) in parts.iter().enumerate() {
        if i > 0 {
            k.extend_from_slice(&SEP);
        }
        k.extend_from_slice(p);
    }
    k
}

fn okey(key: &str) -> Vec<u8> {
    tagged(b'o', &[&esc(key.as_bytes())])
}

/// The key of an object's payload (its inline bytes).
fn dkey(key: &str) -> Vec<u8> {
    tagged(b'd', &[&esc(key.as_bytes())])
}

fn ukey(key: &str, id: &str) -> Vec<u8> {
    tagged(b'u', &[&esc(key.as_bytes()), &esc(id.as_bytes())])
}

fn pprefix(key: &str, id: &str) -> Vec<u8> {
    let mut k = tagged(b'p', &[&esc(key.as_bytes()), &esc(id.as_bytes())]);
    k.extend_from_slice(&SEP);
    k
}

fn pkey(key: &str, id: &str, n: u32) -> Vec<u8> {
    let mut k = pprefix(key, id);
    k.extend_from_slice(format!("{n:05}").as_bytes());
    k
}

/// An aborted-upload tombstone, beside its key (so that it moves with it).
fn akey(key: &str, id: &str) -> Vec<u8> {
    tagged(b'a', &[&esc(key.as_bytes()), &esc(id.as_bytes())])
}

/// The escaped position of an object key, for routing to its partition.
fn pos(key: &str) -> Vec<u8> {
    esc(key.as_bytes())
}

pub(crate) fn index_oid(bucket: &str) -> String {
    format!("lode.idx.{bucket}")
}

pub(crate) fn err(e: RadosError) -> CatalogError {
    if e.is_timeout() {
        CatalogError::Unavailable(e.to_string())
    } else if e.is_full() {
        CatalogError::NoSpace(e.to_string())
    } else if let Some(why) = fenced(&e) {
        CatalogError::Unavailable(why)
    } else {
        CatalogError::Backend(Box::new(e))
    }
}

/// Why the cluster refuses this gateway, when it does: a blocklisted client (fenced by an
/// operator, `ceph osd blocklist add`), or cephx caps that no longer allow the operation.
pub(crate) fn fenced(e: &RadosError) -> Option<String> {
    if e.is_blocklisted() {
        Some(format!(
            "{e}: this gateway's RADOS client is blocklisted (`ceph osd blocklist ls`); \
             restart the gateway once it may connect again"
        ))
    } else if e.is_refused() {
        Some(format!(
            "{e}: cephx refused the operation (this gateway's caps were revoked?)"
        ))
    } else {
        None
    }
}

pub(crate) fn decode<T: Record>(v: &[u8]) -> Result<T> {
    Ok(records::decode(v)?)
}

pub(crate) fn chunks_of(segments: &[Segment]) -> impl Iterator<Item = ChunkLoc> + '_ {
    segments.iter().filter_map(|s| match s {
        Segment::Chunk(c) => Some(*c),
        Segment::Inline(_) | Segment::Detached(_) => None,
    })
}

/// Whether a record as stored has a payload beside it (`d<key>`).
fn has_payload(rec: Option<&ObjectRecord>) -> bool {
    rec.is_some_and(ObjectRecord::has_detached)
}

/// The value at `k` in what a read found.
fn find(vals: &[(Vec<u8>, Bytes)], k: &[u8]) -> Option<Bytes> {
    vals.iter().find(|(x, _)| x == k).map(|(_, v)| v.clone())
}

/// A guarded write lost its race (or the partition changed): read again.
pub(crate) fn lost_race(e: &RadosError) -> bool {
    e.is_canceled() || e.is_version_mismatch()
}

/// What a read of a partition found.
struct Snapshot {
    /// The bucket, and the escaped key whose partition this is (what a commit notes for
    /// [`heat`]).
    bucket: String,
    pos: Vec<u8>,
    oid: String,
    part: partition::Part,
    version: u64,
    epoch: Bytes,
    vals: Vec<(Vec<u8>, Bytes)>,
}

/// One partition of a bucket's index, as [`RadosCatalog::partitions`] reports it.
#[derive(Debug, Clone)]
pub struct PartitionInfo {
    pub oid: String,
    /// Escaped bounds ([`esc`]); `hi` absent for the last partition.
    pub lo: Vec<u8>,
    pub hi: Option<Vec<u8>>,
    /// Object keys in its range.
    pub keys: usize,
    /// A split of it is in progress (or was cut short and not yet taken over).
    pub splitting: bool,
}

/// The catalog on RADOS. Cheap to share: the state is behind an `Arc`.
pub struct RadosCatalog {
    inner: Arc<Inner>,
}

impl std::ops::Deref for RadosCatalog {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.inner
    }
}

#[doc(hidden)]
pub struct Inner {
    io: IoCtx,
    cfg: PartitionConfig,
    routes: partition::Routes,
    /// Blind commits waiting per partition (group commit).
    batches: batch::Batches,
    /// Splits' activations heard of from every gateway (waiters of a moved range wait on it).
    activations: activations::Activations,
    /// Event entries of armed commits, and this run's registry of where they are.
    outbox: outbox::Outbox,
    /// Delimiter listings remembered with the partition version they were read at.
    pages: pages::Pages,
    /// Each partition's reads and writes lately, for splits by load.
    heat: heat::Heat,
    /// Itself, for the background splits it starts.
    me: std::sync::Weak<Inner>,
}

impl RadosCatalog {
    /// How many listings answered from a remembered page ([`pages`]), for tests.
    #[doc(hidden)]
    pub fn remembered_page_hits(&self) -> u64 {
        self.pages.hits()
    }

    /// How many seeks of delimiter listings were taken from reads made ahead ([`pages`]), for
    /// tests.
    #[doc(hidden)]
    pub fn seeks_taken_ahead(&self) -> u64 {
        self.pages.taken_ahead()
    }

    /// How many seeks of delimiter listings were made ahead of their walk ([`pages`]), for
    /// tests.
    #[doc(hidden)]
    pub fn seeks_made_ahead(&self) -> u64 {
        self.pages.made_ahead()
    }

    /// Opens the catalog in `pool` (which must exist, be replicated and hold omap) of `cluster`,
    /// in RADOS namespace `namespace` (empty: the default).
    pub async fn open(cluster: &Arc<Cluster>, pool: &str, namespace: &str) -> Result<Self> {
        Self::open_with(cluster, pool, namespace, PartitionConfig::default()).await
    }

    /// [`RadosCatalog::open`] with partitions split as `cfg` says.
    pub async fn open_with(
        cluster: &Arc<Cluster>,
        pool: &str,
        namespace: &str,
        cfg: PartitionConfig,
    ) -> Result<Self> {
        match cluster.pool_info(pool).await.map_err(err)? {
            None => {
                return Err(CatalogError::Backend(
                    format!("the index pool {pool:?} does not exist").into(),
                ));
            }
            Some(info) if info.is_erasure() => {
                return Err(CatalogError::Backend(
                    format!(
                        "the index pool {pool:?} is erasure-coded; an index needs omap, which only a replicated pool holds"
                    )
                    .into(),
                ));
            }
            Some(_) => {}
        }
        let io = cluster
            .ioctx(pool)
            .await
            .map_err(err)?
            .with_namespace(namespace)
            .await
            .map_err(err)?;
        for oid in [BUCKETS, SYS, activations::SPLITS] {
            io.operate_write(oid, WriteOp::new().create(false))
                .await
                .map_err(err)?;
        }
        let outbox = outbox::Outbox::new(io.clone());
        let inner = Arc::new_cyclic(|me| Inner {
            io,
            cfg,
            routes: partition::Routes::default(),
            batches: batch::Batches::default(),
            activations: Default::default(),
            outbox,
            pages: pages::Pages::default(),
            heat: Default::default(),
            me: me.clone(),
        });
        activations::Activations::watch(inner.io.clone(), Arc::downgrade(&inner));
        Ok(Self { inner })
    }

    /// How many background split checks this catalog is running (for tests: once writes have
    /// returned and this is 0, no split can begin any more).
    pub fn background_splits(&self) -> usize {
        self.inner.splits_running()
    }

    /// The partitions of `bucket`'s index, in key order (for tests and tools).
    pub async fn partitions(&self, bucket: &str) -> Result<Vec<PartitionInfo>> {
        Ok(self
            .walk(bucket)
            .await?
            .into_iter()
            .map(|(oid, part, _, vals)| PartitionInfo {
                keys: vals
                    .iter()
                    .filter(|(k, _)| k.first() == Some(&b'o'))
                    .count(),
                splitting: part.claim.is_some(),
                lo: part.lo,
                hi: part.hi,
                oid,
            })
            .collect())
    }

    /// Splits the partition of `bucket` that holds `key` at `key` now (tests and tools);
    /// `Ok(false)` if it is being split already or `key` is its lower bound.
    pub async fn split_at(&self, bucket: &str, key: &str) -> Result<bool> {
        self.split_until(bucket, key, SplitStop::Done).await
    }

    /// [`RadosCatalog::split_at`] that stops after `stop`, as a gateway that died there would.
    #[doc(hidden)]
    pub async fn split_until(&self, bucket: &str, key: &str, stop: SplitStop) -> Result<bool> {
        let l = self.locate(bucket, &pos(key), ReadOp::new).await?;
        self.inner
            .split_until(bucket, &l.oid, &pos(key), stop)
            .await
    }

    /// Counts the partition of `bucket` that holds `key` and splits it if it is full, as the
    /// background check does (tests and tools).
    pub async fn check_partition(&self, bucket: &str, key: &str) -> Result<bool> {
        let l = self.locate(bucket, &pos(key), ReadOp::new).await?;
        self.maybe_split(bucket, &l.oid, None).await
    }
}

impl RadosCatalog {
    async fn create_bucket_now(&self, name: &str, rec: BucketRecord) -> Result<()> {
        let oid = index_oid(name);
        // The partition first (its existence is the bucket's), then the directory entry; a
        // create cut between the two is completed by the next create of the name.
        let r = self
            .io
            .operate_write(
                &oid,
                WriteOp::new()
                    .create(true)
                    .setxattr(EPOCH, creation_epoch())
                    .setxattr("lode.owner", rec.owner.as_bytes()),
            )
            .await;
        match r {
            Ok(_) => {}
            Err(e) if e.is_exists() => {
                let r = self.io.operate_read(&oid, ReadOp::new().getxattrs()).await;
                let x = r.map_err(err)?;
                if x.xattr(EPOCH).map(|e| e.as_ref()) == Some(DELETED.as_bytes()) {
                    // A deletion was cut short: finish it, then create anew.
                    let chain = self.chain_of(name).await?;
                    self.remove_chain(name, chain).await?;
                    return Box::pin(self.create_bucket_now(name, rec)).await;
                }
                let owner = x
                    .xattr("lode.owner")
                    .map(|o| String::from_utf8_lossy(o).into_owned())
                    .unwrap_or_default();
                let listed = self
                    .io
                    .operate_read(BUCKETS, ReadOp::new().omap_get_vals_by_keys(&[name]))
                    .await
                    .map_err(err)?;
                if listed.omap_vals_by_keys.unwrap_or_default().is_empty() && owner == rec.owner {
                    // Complete an earlier, interrupted create by the same owner.
                    self.io
                        .operate_write(
                            BUCKETS,
                            WriteOp::new().omap_set(&[(name.as_bytes(), records::encode(&rec))]),
                        )
                        .await
                        .map_err(err)?;
                    return Ok(());
                }
                return Err(CatalogError::BucketExists { owner });
            }
            Err(e) => return Err(err(e)),
        }
        self.io
            .operate_write(
                BUCKETS,
                WriteOp::new()
                    .omap_cmp(name, CmpOp::Eq, b"")
                    .omap_set(&[(name.as_bytes(), records::encode(&rec))]),
            )
            .await
            .map_err(err)?;
        Ok(())
    }
}

/// A change of `key`, for the event draft.
pub(crate) fn change<'a>(bucket: &'a str, key: &'a str, what: What<'a>) -> Change<'a> {
    Change { bucket, key, what }
}

pub(crate) fn written<'a>(bucket: &'a str, key: &'a str, record: &'a ObjectRecord) -> Change<'a> {
    change(bucket, key, What::Written { record })
}

pub(crate) const REMOVED: What<'static> = What::Removed { version_id: None };

impl Inner {
    /// The outbox entries of `changes` for a commit to partition `oid` (none unless the
    /// current task is armed), to add to its op ([`outbox::Entries::stamp`]).
    pub(crate) async fn events(
        &self,
        oid: &str,
        changes: &[Change<'_>],
    ) -> Result<outbox::Entries> {
        self.outbox.entries(&self.me, oid, changes).await
    }

    /// Reads `keys` of the partition holding `key` with its version and epoch. `NoSuchBucket`
    /// if the bucket is missing or being deleted.
    async fn read_keys(&self, bucket: &str, key: &[u8], keys: &[Vec<u8>]) -> Result<Snapshot> {
        let l = self
            .locate(bucket, key, || ReadOp::new().omap_get_vals_by_keys(keys))
            .await?;
        Ok(Snapshot {
            bucket: bucket.to_owned(),
            pos: key.to_vec(),
            version: l.r.version,
            epoch: l.part.epoch.clone(),
            vals: l.r.omap_vals_by_keys.unwrap_or_default(),
            oid: l.oid,
            part: l.part,
        })
    }

    /// Reads every entry under omap `prefix` of the partition holding escaped `key` (paging),
    /// with version and epoch.
    async fn read_prefix(&self, bucket: &str, key: &[u8], prefix: &[u8]) -> Result<Snapshot> {
        // One op for the first page keeps version, epoch and entries consistent; larger sets
        // re-check the version after paging.
        'again: loop {
            let l = self
                .locate(bucket, key, || {
                    ReadOp::new().omap_get_vals(b"", prefix, PAGE)
                })
                .await?;
            let page = l.r.omap_vals.unwrap_or_default();
            let mut more = page.more && !page.entries.is_empty();
            let mut vals = page.entries;
            while more {
                let after = vals.last().expect("nonempty").0.clone();
                let op = ReadOp::new()
                    .assert_version(l.r.version)
                    .omap_get_vals(&after, prefix, PAGE);
                let page = match self.io.operate_read(&l.oid, op).await {
                    Err(e) if e.is_version_mismatch() || e.is_not_found() => continue 'again,
                    r => r.map_err(err)?.omap_vals.unwrap_or_default(),
                };
                more = page.more && !page.entries.is_empty();
                vals.extend(page.entries);
            }
            return Ok(Snapshot {
                bucket: bucket.to_owned(),
                pos: key.to_vec(),
                version: l.r.version,
                epoch: l.part.epoch.clone(),
                vals,
                oid: l.oid,
                part: l.part,
            });
        }
    }

    /// Runs a guarded write on the snapshot's partition; `Ok(false)` when a guard failed
    /// (re-read and retry).
    async fn try_write(&self, s: &Snapshot, op: WriteOp) -> Result<bool> {
        let done = self.try_write_at(&s.oid, op).await?;
        if done {
            self.note_load(&s.bucket, &s.oid, &s.pos, true);
        }
        Ok(done)
    }

    /// An upload's parts (under `parts_prefix`) and `keys`, read at one partition version;
    /// `None` if the partition changed between the two reads (read again).
    async fn read_upload(
        &self,
        bucket: &str,
        key: &str,
        parts_prefix: &[u8],
        keys: &[Vec<u8>],
    ) -> Result<Option<(Snapshot, Snapshot)>> {
        let parts = self.read_prefix(bucket, &pos(key), parts_prefix).await?;
        let k = self.read_keys(bucket, &pos(key), keys).await?;
        Ok((k.version == parts.version && k.oid == parts.oid).then_some((parts, k)))
    }

    /// Forgets up to 32 aborted-upload tombstones of partition `oid` that are over a day old
    /// (guarded by its epoch; not while a split copies it).
    async fn prune_aborted(&self, oid: &str) -> Result<()> {
        let r = self
            .io
            .operate_read(oid, ReadOp::new().getxattrs().omap_get_vals(b"", b"a", 32))
            .await
            .map_err(err)?;
        let part = partition::Part::of(&r);
        if part.claim.is_some() {
            return Ok(());
        }
        let mut page = r.omap_vals.unwrap_or_default();
        page.entries.retain(|(k, _)| part.holds(&k[1..]));
        let old = now_ms() - ABORTED_MEMORY_MS;
        let stale: Vec<&Vec<u8>> = page
            .entries
            .iter()
            .filter(|(_, v)| decode::<AbortedUpload>(v).is_ok_and(|a| a.aborted_ms < old))
            .map(|(k, _)| k)
            .collect();
        if !stale.is_empty() {
            let op = WriteOp::new()
                .cmpxattr(EPOCH, CmpOp::Eq, &part.epoch)
                .omap_rm_keys(&stale);
            self.try_write_at(oid, op).await?;
        }
        Ok(())
    }

    /// A write guarded by the snapshot's epoch that sets `set` and removes `rm` (plus, while a
    /// split copies, the log entries of those keys).
    fn guarded<K: AsRef<[u8]>, V: AsRef<[u8]>, R: AsRef<[u8]>>(
        s: &Snapshot,
        set: &[(K, V)],
        rm: &[R],
    ) -> WriteOp {
        let log = Self::log_entries(
            &s.part,
            set.iter()
                .map(|(k, _)| k.as_ref())
                .chain(rm.iter().map(|k| k.as_ref())),
        );
        let mut op = WriteOp::new().cmpxattr(EPOCH, CmpOp::Eq, &s.epoch);
        if !set.is_empty() {
            op = op.omap_set(set);
        }
        if !rm.is_empty() {
            op = op.omap_rm_keys(rm);
        }
        if !log.is_empty() {
            op = op.omap_set(&log);
        }
        op
    }

    /// [`Inner::guarded`], also guarded by the partition's version (multi-key commits).
    fn whole<K: AsRef<[u8]>, V: AsRef<[u8]>, R: AsRef<[u8]>>(
        s: &Snapshot,
        set: &[(K, V)],
        rm: &[R],
    ) -> WriteOp {
        // The op is one transaction: a guard anywhere in it fails it whole.
        Self::guarded(s, set, rm).assert_version(s.version)
    }

    /// Single-key commit of `bucket/key`: `f` maps the current record to the new one (`None`:
    /// delete), guarded on the key's current value. `f` sees the full record when `full` (the
    /// payload read in the same op as the record), else the head form. Returns the record
    /// replaced (head form) and the new one.
    async fn commit_key(
        &self,
        bucket: &str,
        key: &str,
        full: bool,
        f: impl Fn(Option<&ObjectRecord>) -> Result<Option<ObjectRecord>>,
    ) -> Result<(Option<ObjectRecord>, Option<ObjectRecord>)> {
        let (k, d) = (okey(key), dkey(key));
        let read = if full {
            vec![k.clone(), d.clone()]
        } else {
            vec![k.clone()]
        };
        if !full && let Some(prev) = self.commit_blind(bucket, key, &f).await? {
            return Ok(prev);
        }
        for _ in 0..RETRIES {
            let s = self.read_keys(bucket, &pos(key), &read).await?;
            let cur_raw = find(&s.vals, &k);
            let stored: Option<ObjectRecord> = cur_raw.as_deref().map(decode).transpose()?;
            let had_payload = has_payload(stored.as_ref());
            let cur = match stored {
                Some(r) if full => Some(join_record(r, find(&s.vals, &d).as_deref())?),
                r => r,
            };
            let new = f(cur.as_ref())?;
            // The guard compares the `o` value only, and that covers the payload too: `d<key>`
            // is written and removed only in the same op as `o<key>`, and an `o` value names
            // its content (size, ETag, the MD5 of the bytes or of the parts', last-modified), so
            // the payload cannot change while `o<key>` compares equal.
            let none: [&[u8]; 0] = [];
            let op = match &new {
                Some(r) => {
                    let (value, payload) = split_record(r)?;
                    match payload {
                        Some(p) => Self::guarded(&s, &[(&k, &value), (&d, &p)], &none),
                        None if had_payload => Self::guarded(&s, &[(&k, value)], &[&d]),
                        None => Self::guarded(&s, &[(&k, value)], &none),
                    }
                }
                None if cur.is_some() && had_payload => {
                    Self::guarded(&s, &[] as &[(&[u8], &[u8])], &[&k, &d])
                }
                None if cur.is_some() => Self::guarded(&s, &[] as &[(&[u8], &[u8])], &[&k]),
                None => return Ok((None, None)),
            };
            let op = op.omap_cmp(&k, CmpOp::Eq, cur_raw.as_deref().unwrap_or(b""));
            let ev = match &new {
                Some(r) => self.events(&s.oid, &[written(bucket, key, r)]).await?,
                None => self.events(&s.oid, &[change(bucket, key, REMOVED)]).await?,
            };
            if self.try_write(&s, ev.stamp(op)).await? {
                self.outbox.stored(&s.oid, &ev);
                if cur.is_none() {
                    self.note_insert(bucket, &s.oid, &pos(key));
                }
                return Ok((cur.map(ObjectRecord::into_head), new));
            }
        }
        Err(CatalogError::Contended)
    }
}

impl Inner {
    /// A commit of a key that is probably new, without reading first: one write op guarded
    /// on the key being absent and on the epoch of its partition as this gateway last read it
    /// (which changes with the partition's range, claim or state). `None` when it was not
    /// tried or did not apply (the key exists, the cache was stale): read, then commit.
    ///
    /// New keys (the ingest of a dataset) cost one write and no read, and the new keys that
    /// wait for one partition at once go in one op ([`batch`]).
    async fn commit_blind(
        &self,
        bucket: &str,
        key: &str,
        f: &impl Fn(Option<&ObjectRecord>) -> Result<Option<ObjectRecord>>,
    ) -> Result<Option<(Option<ObjectRecord>, Option<ObjectRecord>)>> {
        let p = pos(key);
        if !self.routes.knows_bucket(bucket) {
            return Ok(None);
        }
        // Conditions that need a current record (If-Match) go the read path.
        let Ok(Some(new)) = f(None) else {
            return Ok(None);
        };
        if !self.routes.blind_worth_it(bucket) {
            return Ok(None);
        }
        let (k, d) = (okey(key), dkey(key));
        let (value, payload) = split_record(&new)?;
        let mut entries = vec![(k.clone(), value)];
        if let Some(pl) = payload {
            entries.push((d, pl));
        }
        for attempt in 0..BLIND_TRIES {
            // Not cached as open (a split's new partition not read since it was activated,
            // or a partition that changed under the last attempt): read where the key goes
            // (waiting while a split hands its range over), which caches it, then try again.
            let Some((oid, part)) = self.routes.cached(bucket, &p) else {
                if attempt + 1 == BLIND_TRIES {
                    return Ok(None);
                }
                self.locate(bucket, &p, ReadOp::new).await?;
                continue;
            };
            // While a split copies the partition, what changes above the split key is logged
            // in the same op, as `guarded` does (the epoch compared is the claim's, so a seal
            // or an abandon in between fails the op). Without this, every new key of a
            // partition being split went the read path, one op per key: 400-700 PUT/s against
            // 1,500-2,500.
            let mut set = entries.clone();
            set.extend(Self::log_entries(
                &part,
                entries.iter().map(|(key, _)| key.as_slice()),
            ));
            let ev = self.events(&oid, &[written(bucket, key, &new)]).await?;
            set.extend(ev.omap());
            let blind = batch::Blind {
                key: k.clone(),
                set,
                epoch: part.epoch.clone(),
            };
            match self.batches.commit(&self.io, &oid, blind).await? {
                batch::Outcome::Applied => {
                    self.routes.blind_result(bucket, true);
                    self.outbox.stored(&oid, &ev);
                    self.note_insert(bucket, &oid, &p);
                    self.note_load(bucket, &oid, &p, true);
                    return Ok(Some((None, Some(new))));
                }
                batch::Outcome::Exists => {
                    self.routes.blind_result(bucket, false);
                    return Ok(None);
                }
                // The partition changed (not a miss of the key): unless another commit has
                // cached it since, read it again (once for all the commits that found the
                // same); the next attempt finds where the key goes now.
                batch::Outcome::Stale => {
                    if attempt + 1 < BLIND_TRIES
                        && self
                            .routes
                            .cached(bucket, &p)
                            .is_some_and(|(o, c)| o == oid && c.epoch == part.epoch)
                    {
                        self.refresh_stale(bucket, &oid, &part.epoch).await?;
                    }
                }
            }
        }
        Ok(None)
    }
}

fn versioned(cond: &Cond) -> bool {
    cond.versioning != lode_catalog::Versioning::Off
}

fn commit(previous: Option<ObjectRecord>) -> Commit {
    let released = previous
        .as_ref()
        .map(|p| chunks_of(&p.segments).collect())
        .unwrap_or_default();
    Commit {
        previous,
        released,
        ..Default::default()
    }
}

fn key_of(k: &[u8]) -> Result<String> {
    let raw = unesc(&k[1..]).ok_or_else(|| CatalogError::Corrupt("bad index key".into()))?;
    String::from_utf8(raw).map_err(|e| CatalogError::Corrupt(e.to_string()))
}

#[async_trait::async_trait]
impl Catalog for RadosCatalog {
    fn backend_name(&self) -> &'static str {
        "rados"
    }

    fn counts_references(&self) -> bool {
        false
    }

    fn bucket_known(&self, name: &str) -> bool {
        self.routes.knows_bucket(name)
    }

    async fn create_bucket(&self, name: &str, rec: BucketRecord) -> Result<()> {
        self.create_bucket_now(name, rec).await?;
        Ok(())
    }

    async fn bucket(&self, name: &str) -> Result<Option<BucketRecord>> {
        let r = self
            .io
            .operate_read(BUCKETS, ReadOp::new().omap_get_vals_by_keys(&[name]))
            .await
            .map_err(err)?;
        r.omap_vals_by_keys
            .unwrap_or_default()
            .first()
            .map(|(_, v)| decode(v))
            .transpose()
    }

    async fn list_buckets(&self) -> Result<Vec<(String, BucketRecord)>> {
        self.io
            .omap_get_all(BUCKETS)
            .await
            .map_err(err)?
            .into_iter()
            .map(|(k, v)| Ok((String::from_utf8_lossy(&k).into_owned(), decode(&v)?)))
            .collect()
    }

    async fn update_bucket(&self, name: &str, f: BucketFn) -> Result<BucketRecord> {
        // The directory entry is the record: replaced only if it is still what was read (a
        // deletion that removed it in between fails the guard, and the retry finds none).
        for _ in 0..RETRIES {
            let r = self
                .io
                .operate_read(BUCKETS, ReadOp::new().omap_get_vals_by_keys(&[name]))
                .await
                .map_err(err)?;
            let Some((_, cur)) = r.omap_vals_by_keys.unwrap_or_default().into_iter().next() else {
                return Err(CatalogError::NoSuchBucket);
            };
            let old: BucketRecord = decode(&cur)?;
            let new = f(&old)?;
            check_bucket_update(&old, &new)?;
            let op = WriteOp::new()
                .omap_cmp(name.as_bytes(), CmpOp::Eq, &cur)
                .omap_set(&[(name.as_bytes(), records::encode(&new))]);
            match self.io.operate_write(BUCKETS, op).await {
                Ok(_) => return Ok(new),
                Err(e) if lost_race(&e) => continue,
                Err(e) => return Err(err(e)),
            }
        }
        Err(CatalogError::Contended)
    }

    async fn delete_bucket(&self, name: &str) -> Result<Vec<ChunkLoc>> {
        let released = self.delete_partitions(name, RETRIES).await?;
        Ok(released)
    }

    async fn get(&self, bucket: &str, key: &str) -> Result<Option<ObjectRecord>> {
        // Record and payload in one read op: one version of the partition.
        let (k, d) = (okey(key), dkey(key));
        let s = self
            .read_keys(bucket, &pos(key), &[k.clone(), d.clone()])
            .await?;
        self.note_load(bucket, &s.oid, &s.pos, false);
        let Some(v) = find(&s.vals, &k) else {
            return Ok(None);
        };
        join_record(decode(&v)?, find(&s.vals, &d).as_deref()).map(Some)
    }

    async fn head(&self, bucket: &str, key: &str) -> Result<Option<ObjectRecord>> {
        let s = self.read_keys(bucket, &pos(key), &[okey(key)]).await?;
        self.note_load(bucket, &s.oid, &s.pos, false);
        s.vals
            .first()
            .map(|(_, v)| Ok(records::decode_head(v)?))
            .transpose()
    }

    async fn put(
        &self,
        bucket: &str,
        key: &str,
        rec: ObjectRecord,
        cond: &Cond,
        _refs: Refs,
    ) -> Result<Commit> {
        if versioned(cond) {
            let (done, _) = self
                .commit_versioned(bucket, key, cond, versions::NewVersion::Put(&rec))
                .await?;
            return Ok(done);
        }
        let (prev, _) = self
            .commit_key(bucket, key, false, |cur| {
                cond.check(cur)?;
                Ok(Some(rec.clone()))
            })
            .await?;
        Ok(commit(prev))
    }

    async fn delete(&self, bucket: &str, key: &str, cond: &Cond) -> Result<Commit> {
        if versioned(cond) {
            let (done, _) = self
                .commit_versioned(bucket, key, cond, versions::NewVersion::Marker)
                .await?;
            return Ok(done);
        }
        let (prev, _) = self
            .commit_key(bucket, key, false, |cur| {
                cond.check(cur)?;
                Ok(None)
            })
            .await?;
        Ok(commit(prev))
    }

    async fn copy(
        &self,
        src: (&str, &str),
        dst: (&str, &str),
        make: RecordFn,
    ) -> Result<(ObjectRecord, Commit)> {
        // The source (with its payload) is read once (a snapshot); the destination commit is
        // guarded.
        let Some(source) = self.get(src.0, src.1).await? else {
            return Err(CatalogError::NoSuchKey);
        };
        let rec = make(&source)?;
        let (prev, _) = self
            .commit_key(dst.0, dst.1, false, |_| Ok(Some(rec.clone())))
            .await?;
        Ok((rec, commit(prev)))
    }

    async fn append(
        &self,
        bucket: &str,
        key: &str,
        f: AppendFn,
        v: Versioning,
    ) -> Result<(ObjectRecord, Commit)> {
        if v != Versioning::Off {
            let cond = Cond {
                versioning: v,
                ..Default::default()
            };
            let (done, new) = self
                .commit_versioned(bucket, key, &cond, versions::NewVersion::Append(&f))
                .await?;
            return Ok((new.ok_or(CatalogError::NoSuchKey)?, done));
        }
        let (prev, new) = self
            .commit_key(bucket, key, true, |cur| {
                let n = f(cur)?;
                appended_segments(cur, &n)?;
                Ok(Some(n))
            })
            .await?;
        Ok((new.ok_or(CatalogError::NoSuchKey)?, commit(prev)))
    }

    async fn update(&self, bucket: &str, key: &str, f: RecordFn) -> Result<ObjectRecord> {
        let (_, new) = self
            .commit_key(bucket, key, true, |cur| match cur {
                None => Err(CatalogError::NoSuchKey),
                Some(r) => {
                    let n = f(r)?;
                    if n.segments != r.segments {
                        return Err(CatalogError::Corrupt(
                            "update may not change an object's content".into(),
                        ));
                    }
                    Ok(Some(n))
                }
            })
            .await?;
        new.ok_or(CatalogError::NoSuchKey)
    }

    fn supports_versions(&self) -> bool {
        true
    }

    async fn get_version(
        &self,
        bucket: &str,
        key: &str,
        version_id: &str,
    ) -> Result<Option<ObjectRecord>> {
        self.inner.get_version(bucket, key, version_id).await
    }

    async fn newest_version(&self, bucket: &str, key: &str) -> Result<Option<ObjectRecord>> {
        self.inner.newest_version(bucket, key).await
    }

    async fn delete_version(
        &self,
        bucket: &str,
        key: &str,
        version_id: &str,
        check: Option<lode_catalog::RecordCheck>,
    ) -> Result<Commit> {
        self.inner
            .delete_version(bucket, key, version_id, check)
            .await
    }

    async fn update_version(
        &self,
        bucket: &str,
        key: &str,
        version_id: &str,
        f: RecordFn,
    ) -> Result<ObjectRecord> {
        self.inner.update_version(bucket, key, version_id, f).await
    }

    async fn list_versions(&self, bucket: &str, q: &VersionQuery) -> Result<VersionPage> {
        self.inner.list_versions(bucket, q).await
    }

    async fn list(&self, bucket: &str, q: &ListQuery<'_>) -> Result<ListPage> {
        let mut page = ListPage::default();
        if q.max == 0 {
            // Nothing to read but whether the bucket exists.
            self.read_keys(bucket, &pos(q.prefix), &[]).await?;
            return Ok(page);
        }
        // Every read also says whether the bucket exists (one op for a page).
        let filter = okey(q.prefix);
        // A marker equal to the prefix excludes the key equal to it.
        let mut after: Vec<u8> = match q.after {
            Some(a) if a >= q.prefix => okey(a),
            _ => vec![],
        };
        let mut fold = PageFold::of(q);
        // Entries per read. A read that ends inside a common prefix seeks past it; when most
        // of a read was that prefix's keys (large directories), the next reads are small, so
        // that finding each next directory does not carry a page of keys that are skipped.
        let mut read_max = PAGE;
        // Which partition, at which version, each read met, and where the walk sought
        // ([`pages`]).
        let (mut reads, mut sought) = (vec![], vec![]);
        let query = pages::Query::of(bucket, q);
        // The seeks the last listing of this query made, made again ahead of the walk: beside
        // the first read, or once it found the partition changed ([`pages`]).
        let hints = query
            .as_ref()
            .map(|k| self.pages.seeks(k))
            .unwrap_or_default();
        let seek_all = |from: Vec<Vec<u8>>| {
            self.pages.making_ahead(from.len());
            futures::future::join_all(from.into_iter().map(|from| async {
                let mut r = vec![];
                let got = self
                    .scan_noting(bucket, &from, &filter, SEEK_READ, &mut r)
                    .await;
                (from, got, r)
            }))
        };
        let (beside, later) = if hints.beside_first {
            (hints.from, vec![])
        } else {
            (vec![], hints.from)
        };
        let (first, made_ahead) = futures::future::join(
            self.scan_noting(
                bucket,
                &after,
                &filter,
                (fold.wanted() as u64).min(PAGE),
                &mut reads,
            ),
            seek_all(beside),
        )
        .await;
        let first = first?;
        if let Some(k) = &query
            && let [r] = &reads[..]
            && let Some(page) = self.pages.hit(k, r)
        {
            return Ok(page);
        }
        let made_later = seek_all(later).await;
        let mut ahead: HashMap<Vec<u8>, _> = made_ahead
            .into_iter()
            .chain(made_later)
            .filter_map(|(from, got, r)| Some((from, (got.ok()?, r))))
            .collect();
        let mut first = Some(first);
        'reads: loop {
            let n = (fold.wanted() as u64).min(read_max);
            let (entries, more) = match first.take() {
                Some(got) => got,
                None => {
                    if n == SEEK_READ {
                        sought.push(after.clone());
                    }
                    match ahead.remove(&after) {
                        Some((got, r)) if n == SEEK_READ => {
                            self.pages.took_ahead();
                            reads.extend(r);
                            got
                        }
                        _ => {
                            self.scan_noting(bucket, &after, &filter, n, &mut reads)
                                .await?
                        }
                    }
                }
            };
            // Entries of the read skipped under the common prefix it ended in (read already:
            // small directories cost no read of their own).
            let mut tail = 0u64;
            for (k, v) in &entries {
                let key = key_of(k)?;
                match fold.offer(&key) {
                    Step::Take => {
                        tail = 0;
                        page.last = Some(key.clone());
                        page.objects.push((key, records::decode_head(v)?));
                        after = k.clone();
                    }
                    Step::Skip => tail += 1,
                    Step::Prefix { listed } => {
                        tail = 0;
                        if listed {
                            page.last = fold.skipping().map(str::to_owned);
                        }
                    }
                    Step::Full => break 'reads,
                }
            }
            match fold.skipping() {
                // Seek past everything under the common prefix the read ended in.
                // (An entry not under it would have ended the skipping.)
                Some(cp) if more && !entries.is_empty() => {
                    after = okey(cp);
                    after.push(HIGH);
                    read_max = if 2 * tail >= entries.len() as u64 {
                        SEEK_READ
                    } else {
                        (n * 8).min(PAGE)
                    };
                }
                _ if !more || entries.is_empty() => break 'reads,
                _ => read_max = (n * 8).min(PAGE),
            }
        }
        (page.common_prefixes, page.truncated) = fold.finish();
        if let Some(k) = query {
            self.pages.remember(k, &reads, sought, &page);
        }
        Ok(page)
    }

    async fn rename(
        &self,
        bucket: &str,
        from: &str,
        to: &str,
        check: RenameCheck,
        v: Versioning,
    ) -> Result<Commit> {
        if v != Versioning::Off && from != to {
            return self.rename_versioned(bucket, from, to, check, v).await;
        }
        let (fk, tk, fd, td) = (okey(from), okey(to), dkey(from), dkey(to));
        for _ in 0..RETRIES {
            let s = self
                .read_keys(bucket, &pos(from), &[fk.clone(), tk.clone(), fd.clone()])
                .await?;
            let (Some(src), dst) = (find(&s.vals, &fk), find(&s.vals, &tk)) else {
                if !s.part.holds(&pos(to)) && find(&s.vals, &fk).is_some() {
                    return Err(CatalogError::CrossPartition);
                }
                return Err(CatalogError::NoSuchKey);
            };
            if !s.part.holds(&pos(to)) {
                return Err(CatalogError::CrossPartition);
            }
            let source = decode(&src)?;
            if from == to {
                // Onto itself: nothing moves (POSIX), once the check passes.
                check(&source, Some(&source))?;
                return Ok(Commit::default());
            }
            let old: Option<ObjectRecord> = dst.as_deref().map(decode).transpose()?;
            // Both values are guarded below: the check holds for what the op replaces.
            check(&source, old.as_ref())?;
            // The value moves as stored, and its payload (read in the same op) with it; the
            // guards on both `o` values cover the payloads (see `commit_key`).
            let mut set = vec![(&tk, src.clone())];
            let mut rm = vec![&fk];
            match find(&s.vals, &fd) {
                Some(p) => {
                    set.push((&td, p));
                    rm.push(&fd);
                }
                None if has_payload(old.as_ref()) => rm.push(&td),
                None => {}
            }
            let op = Inner::guarded(&s, &set, &rm)
                .omap_cmp(&fk, CmpOp::Eq, &src)
                .omap_cmp(&tk, CmpOp::Eq, dst.as_deref().unwrap_or(b""));
            let changes = [change(bucket, from, REMOVED), written(bucket, to, &source)];
            let ev = self.events(&s.oid, &changes).await?;
            if self.try_write(&s, ev.stamp(op)).await? {
                self.outbox.stored(&s.oid, &ev);
                if dst.is_none() {
                    self.note_insert(bucket, &s.oid, &pos(to));
                }
                return Ok(commit(old.map(ObjectRecord::into_head)));
            }
        }
        Err(CatalogError::Contended)
    }

    async fn rename_prefix(
        &self,
        bucket: &str,
        from: &str,
        to: &str,
        max_key_len: usize,
    ) -> Result<(usize, Vec<ChunkLoc>)> {
        let (fp, tp) = (okey(from), okey(to));
        let (fdp, tdp) = (dkey(from), dkey(to));
        for _ in 0..RETRIES {
            // The records under `from` and under `to`, and the payloads under `from`, all at
            // one version of the partition: O(directory), not O(bucket).
            let s = self.read_prefix(bucket, &pos(from), &fp).await?;
            if !s.part.holds_prefix(&pos(from)) || !s.part.holds_prefix(&pos(to)) {
                return Err(CatalogError::CrossPartition);
            }
            let targets = self.read_prefix(bucket, &pos(from), &tp).await?;
            let payloads = self.read_prefix(bucket, &pos(from), &fdp).await?;
            if payloads.version != s.version
                || targets.version != s.version
                || payloads.oid != s.oid
                || targets.oid != s.oid
            {
                continue;
            }
            let mut released = vec![];
            let mut rm: Vec<Vec<u8>> = vec![];
            for (k, v) in &targets.vals {
                if *k != tp {
                    return Err(CatalogError::DirectoryNotEmpty);
                }
                let old: ObjectRecord = decode(v)?;
                released.extend(chunks_of(&old.segments));
                rm.push(k.clone());
                if old.has_detached() {
                    rm.push(tdp.clone());
                }
            }
            let moved: Vec<&(Vec<u8>, Bytes)> = s.vals.iter().collect();
            if moved.is_empty() {
                return Err(CatalogError::NoSuchKey);
            }
            let mut set: Vec<(Vec<u8>, Bytes)> = vec![];
            for (k, v) in &moved {
                let suffix = &k[fp.len()..];
                if to.len() + unesc(suffix).map_or(0, |s| s.len()) > max_key_len {
                    return Err(CatalogError::KeyTooLong);
                }
                let mut nk = tp.clone();
                nk.extend_from_slice(suffix);
                set.push((nk, v.clone()));
                rm.push(k.clone());
            }
            for (k, p) in &payloads.vals {
                let mut nk = tdp.clone();
                nk.extend_from_slice(&k[fdp.len()..]);
                set.push((nk, p.clone()));
                rm.push(k.clone());
            }
            rm.retain(|k| !set.iter().any(|(n, _)| n == k));
            let ev = if lode_catalog::events::current().is_some() {
                let mut names = vec![];
                for (k, v) in &moved {
                    let old = key_of(k)?;
                    let new = format!("{to}{}", &old[from.len()..]);
                    names.push((old, new, decode::<ObjectRecord>(v)?));
                }
                let changes: Vec<Change<'_>> = names
                    .iter()
                    .flat_map(|(o, n, r)| [change(bucket, o, REMOVED), written(bucket, n, r)])
                    .collect();
                self.events(&s.oid, &changes).await?
            } else {
                Default::default()
            };
            // Removals first, then the new keys (one transaction).
            let op = ev.stamp(Inner::whole(&s, &set, &rm));
            if self.try_write(&s, op).await? {
                self.outbox.stored(&s.oid, &ev);
                return Ok((moved.len(), released));
            }
        }
        Err(CatalogError::Contended)
    }

    async fn remove_dir(&self, bucket: &str, prefix: &str) -> Result<Vec<ChunkLoc>> {
        let (p, h) = (okey(prefix), Inner::head_key(prefix));
        for _ in 0..RETRIES {
            let l = self
                .locate(bucket, &pos(prefix), || {
                    ReadOp::new()
                        .omap_get_vals(b"", &p, 2)
                        .omap_get_vals_by_keys(std::slice::from_ref(&h))
                })
                .await?;
            let h_raw = find(&l.r.omap_vals_by_keys.clone().unwrap_or_default(), &h);
            let mut vals = l.r.omap_vals.clone().unwrap_or_default().entries;
            // A split's leftovers past the partition's end are not its keys.
            vals.retain(|(k, _)| l.part.holds(&k[1..]));
            let s = Snapshot {
                bucket: bucket.to_owned(),
                pos: pos(prefix),
                version: l.r.version,
                epoch: l.part.epoch.clone(),
                vals,
                oid: l.oid,
                part: l.part,
            };
            if s.vals.is_empty() {
                return Err(CatalogError::NoSuchKey);
            }
            if s.vals.iter().any(|(k, _)| *k != p) {
                return Err(CatalogError::DirectoryNotEmpty);
            }
            if !s.part.holds_prefix(&pos(prefix)) {
                // Keys under the directory may live in the next partitions: checked apart
                // (a key created there meanwhile outlives its directory marker; S3 keys need
                // no marker).
                let (rest, _) = self.scan(bucket, &p, &p, 1).await?;
                if !rest.is_empty() {
                    return Err(CatalogError::DirectoryNotEmpty);
                }
            }
            let old: ObjectRecord = decode(&s.vals[0].1)?;
            let mut released = chunks_of(&old.segments).collect();
            // In a versioned bucket the marker's older versions may share its chunks.
            let cur = s.vals[0].1.clone();
            if !self
                .keep_held_by_versions(bucket, prefix, h_raw.as_deref(), &s, &cur, &mut released)
                .await?
            {
                continue;
            }
            let rm = if old.has_detached() {
                vec![p.clone(), dkey(prefix)]
            } else {
                vec![p.clone()]
            };
            let ev = self
                .events(&s.oid, &[change(bucket, prefix, REMOVED)])
                .await?;
            let op = ev.stamp(Inner::whole(&s, &[] as &[(&[u8], &[u8])], &rm));
            if self.try_write(&s, op).await? {
                self.outbox.stored(&s.oid, &ev);
                return Ok(released);
            }
        }
        Err(CatalogError::Contended)
    }

    async fn create_upload(
        &self,
        bucket: &str,
        key: &str,
        id: &str,
        rec: UploadRecord,
    ) -> Result<()> {
        let value = records::encode(&rec);
        for _ in 0..RETRIES {
            let s = self.read_keys(bucket, &pos(key), &[]).await?;
            let none: [&[u8]; 0] = [];
            let op = Inner::guarded(&s, &[(ukey(key, id), &value)], &none);
            if self.try_write(&s, op).await? {
                return Ok(());
            }
        }
        Err(CatalogError::Contended)
    }

    async fn upload(&self, bucket: &str, key: &str, id: &str) -> Result<UploadRecord> {
        let s = self.read_keys(bucket, &pos(key), &[ukey(key, id)]).await?;
        match s.vals.first() {
            Some((_, v)) => decode(v),
            None => Err(CatalogError::NoSuchUpload),
        }
    }

    async fn put_part(
        &self,
        bucket: &str,
        key: &str,
        id: &str,
        n: u32,
        part: PartRecord,
    ) -> Result<Vec<ChunkLoc>> {
        let (uk, pk) = (ukey(key, id), pkey(key, id, n));
        let value = records::encode(&part);
        for _ in 0..RETRIES {
            let s = self
                .read_keys(bucket, &pos(key), &[uk.clone(), pk.clone()])
                .await?;
            let find = |k: &[u8]| s.vals.iter().find(|(x, _)| x == k).map(|(_, v)| v.clone());
            let Some(up) = find(&uk) else {
                return Err(CatalogError::NoSuchUpload);
            };
            let old = find(&pk);
            // The upload must still be there (Complete and Abort remove it in one op).
            let none: [&[u8]; 0] = [];
            let op = Inner::guarded(&s, &[(&pk, &value)], &none)
                .omap_cmp(&uk, CmpOp::Eq, &up)
                .omap_cmp(&pk, CmpOp::Eq, old.as_deref().unwrap_or(b""));
            if self.try_write(&s, op).await? {
                return Ok(match old {
                    Some(o) => chunks_of(&decode::<PartRecord>(&o)?.segments).collect(),
                    None => vec![],
                });
            }
        }
        Err(CatalogError::Contended)
    }

    async fn list_parts(
        &self,
        bucket: &str,
        key: &str,
        id: &str,
        after: u32,
        max: usize,
    ) -> Result<(Vec<(u32, PartRecord)>, bool)> {
        let prefix = pprefix(key, id);
        let start = if after == 0 {
            vec![]
        } else {
            pkey(key, id, after)
        };
        let l = self
            .locate(bucket, &pos(key), || {
                ReadOp::new().omap_get_vals(&start, &prefix, (max as u64 + 1).min(PAGE))
            })
            .await?;
        let page = l.r.omap_vals.unwrap_or_default();
        let truncated = page.entries.len() > max || (page.more && page.entries.len() >= max);
        let parts = page
            .entries
            .iter()
            .take(max)
            .map(|(k, v)| {
                let n = std::str::from_utf8(&k[prefix.len()..])
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .ok_or_else(|| CatalogError::Corrupt("bad part key".into()))?;
                Ok((n, decode(v)?))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok((parts, truncated))
    }

    async fn list_uploads(&self, bucket: &str, q: &UploadQuery) -> Result<UploadPage> {
        // O(page): seek to the markers, and past each common prefix. Every read also says
        // whether the bucket exists.
        let filter = tagged(b'u', &[&esc(q.prefix.as_bytes())]);
        let past = |key: &str| {
            let mut k = tagged(b'u', &[&esc(key.as_bytes())]);
            k.push(HIGH);
            k
        };
        let mut after: Vec<u8> = match (&q.key_marker, &q.id_marker) {
            (Some(km), Some(im)) if km.as_str() >= q.prefix.as_str() => ukey(km, im),
            (Some(km), None) if km.as_str() >= q.prefix.as_str() => past(km),
            _ => vec![],
        };
        let mut page = UploadPage::default();
        let mut fold = PageFold::new(
            &q.prefix,
            q.delimiter.as_deref(),
            q.key_marker.as_deref(),
            q.max,
        );
        loop {
            let want = fold.wanted() as u64;
            let (entries, more) = self.scan(bucket, &after, &filter, want.min(PAGE)).await?;
            let mut sought = false;
            for (k, v) in &entries {
                let rest = &k[1..];
                let Some(i) = rest.windows(2).position(|w| w == SEP) else {
                    after = k.clone();
                    continue;
                };
                let text = |b: &[u8]| {
                    String::from_utf8(unesc(b).unwrap_or_default())
                        .map_err(|e| CatalogError::Corrupt(e.to_string()))
                };
                let (key, id) = (text(&rest[..i])?, text(&rest[i + 2..])?);
                match fold.offer(&key) {
                    Step::Take => {
                        page.last = Some((key.clone(), id.clone()));
                        page.uploads.push((key, id, decode(v)?));
                        after = k.clone();
                    }
                    // A read that reaches a common prefix stops there and seeks past it.
                    step @ (Step::Skip | Step::Prefix { .. }) => {
                        let cp = fold.skipping().expect("a prefix is being skipped");
                        if step == (Step::Prefix { listed: true }) {
                            page.last = Some((cp.to_owned(), String::new()));
                        }
                        after = past(cp);
                        sought = true;
                        break;
                    }
                    Step::Full => {
                        (page.prefixes, page.truncated) = fold.finish();
                        return Ok(page);
                    }
                }
            }
            if !sought && (!more || entries.is_empty()) {
                (page.prefixes, page.truncated) = fold.finish();
                return Ok(page);
            }
        }
    }

    async fn abort(&self, bucket: &str, key: &str, id: &str) -> Result<Aborted> {
        let (uk, ak, pp) = (ukey(key, id), akey(key, id), pprefix(key, id));
        for _ in 0..RETRIES {
            let Some((s, keys)) = self
                .read_upload(bucket, key, &pp, &[uk.clone(), ak.clone()])
                .await?
            else {
                continue;
            };
            let find = |k: &[u8]| {
                keys.vals
                    .iter()
                    .find(|(x, _)| x == k)
                    .map(|(_, v)| v.clone())
            };
            if find(&uk).is_none() {
                return match find(&ak).map(|v| decode::<AbortedUpload>(&v)).transpose()? {
                    Some(a) if a.bucket == bucket && a.key == key => Ok(Aborted::Before),
                    _ => Err(CatalogError::NoSuchUpload),
                };
            }
            let mut released = vec![];
            let mut rm: Vec<Vec<u8>> = vec![uk.clone()];
            for (k, v) in &s.vals {
                released.extend(chunks_of(&decode::<PartRecord>(v)?.segments));
                rm.push(k.clone());
            }
            let tomb = records::encode(&AbortedUpload {
                bucket: bucket.to_owned(),
                key: key.to_owned(),
                aborted_ms: now_ms(),
            });
            let op = Inner::whole(&s, &[(ak.clone(), tomb)], &rm);
            if self.try_write(&s, op).await? {
                if let Err(e) = self.prune_aborted(&s.oid).await {
                    tracing::warn!(error = %e, "pruning aborted-upload tombstones failed");
                }
                return Ok(Aborted::Now(released));
            }
        }
        Err(CatalogError::Contended)
    }

    async fn complete(
        &self,
        bucket: &str,
        key: &str,
        id: &str,
        cond: &Cond,
        f: CompleteFn,
    ) -> Result<(ObjectRecord, Commit)> {
        let (uk, ok, dk, pp) = (ukey(key, id), okey(key), dkey(key), pprefix(key, id));
        let mut reads = vec![uk.clone(), ok.clone()];
        if versioned(cond) {
            reads.extend(Inner::complete_reads(key));
        }
        for _ in 0..RETRIES {
            let Some((s, keys)) = self.read_upload(bucket, key, &pp, &reads).await? else {
                continue;
            };
            let find = |k: &[u8]| {
                keys.vals
                    .iter()
                    .find(|(x, _)| x == k)
                    .map(|(_, v)| v.clone())
            };
            let Some(up) = find(&uk) else {
                return Err(CatalogError::NoSuchUpload);
            };
            let up: UploadRecord = decode(&up)?;
            let current: Option<ObjectRecord> = find(&ok).as_deref().map(decode).transpose()?;
            let had_payload = has_payload(current.as_ref());
            let current = current.map(ObjectRecord::into_head);
            cond.check(current.as_ref())?;
            let mut parts: BTreeMap<u32, PartRecord> = BTreeMap::new();
            for (k, v) in &s.vals {
                let n = std::str::from_utf8(&k[pp.len()..])
                    .ok()
                    .and_then(|x| x.parse().ok())
                    .ok_or_else(|| CatalogError::Corrupt("bad part key".into()))?;
                parts.insert(n, decode(v)?);
            }
            let mut done = f(UploadState {
                upload: &up,
                parts: &parts,
                current: current.as_ref(),
            })?;
            let mut released: Vec<ChunkLoc> = done
                .unused(&parts)
                .flat_map(|p| chunks_of(&p.segments))
                .collect();
            let mut rm: Vec<Vec<u8>> = s.vals.iter().map(|(k, _)| k.clone()).collect();
            rm.push(uk.clone());
            let mut set = vec![];
            let mut version_id = None;
            if versioned(cond) {
                // The current version is retired (kept or released) in the same op.
                let Some((extra, id)) = self
                    .complete_versioned(bucket, key, &keys, &keys.vals, cond.versioning)
                    .await?
                else {
                    continue;
                };
                set.extend(extra.set);
                rm.extend(extra.rm);
                released.extend(extra.released);
                done.record.version_id = id.clone();
                version_id = id;
            } else if let Some(c) = &current {
                released.extend(chunks_of(&c.segments));
            }
            let (value, payload) = split_record(&done.record)?;
            set.push((ok.clone(), value));
            match payload {
                Some(p) => set.push((dk.clone(), p)),
                None if had_payload => rm.push(dk.clone()),
                None => {}
            }
            rm.retain(|k| !set.iter().any(|(x, _)| x == k));
            let ev = self
                .events(&s.oid, &[written(bucket, key, &done.record)])
                .await?;
            let op = ev.stamp(Inner::whole(&s, &set, &rm));
            if self.try_write(&s, op).await? {
                self.outbox.stored(&s.oid, &ev);
                if current.is_none() {
                    self.note_insert(bucket, &s.oid, &pos(key));
                }
                return Ok((
                    done.record,
                    Commit {
                        previous: current,
                        released,
                        version_id,
                        delete_marker: false,
                    },
                ));
            }
        }
        Err(CatalogError::Contended)
    }

    fn supports_events(&self) -> bool {
        true
    }

    async fn outbox_add(&self, dest: &str, body: Vec<u8>) -> Result<u64> {
        self.outbox.add(&self.me, dest, body).await
    }

    async fn outbox_scan(
        &self,
        dest: &str,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<lode_catalog::events::Outboxed>> {
        self.outbox.scan(&self.me, dest, after, limit).await
    }

    async fn outbox_remove(&self, dest: &str, seqs: &[u64]) -> Result<()> {
        self.outbox.remove(dest, seqs).await
    }

    async fn hand_off(&self) -> Result<()> {
        self.outbox.hand_off().await
    }

    async fn outbox_len(&self, dest: &str) -> Result<u64> {
        self.outbox.len(&self.me, dest).await
    }

    async fn sys_get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let r = self
            .io
            .operate_read(SYS, ReadOp::new().omap_get_vals_by_keys(&[esc(key)]))
            .await
            .map_err(err)?;
        Ok(r.omap_vals_by_keys
            .unwrap_or_default()
            .first()
            .map(|(_, v)| v.to_vec()))
    }

    async fn sys_scan(&self, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.io
            .omap_get_prefix(SYS, esc(prefix))
            .await
            .map_err(err)?
            .into_iter()
            .map(|(k, v)| {
                let k = unesc(&k).ok_or_else(|| CatalogError::Corrupt("bad system key".into()))?;
                Ok((k, v.to_vec()))
            })
            .collect()
    }

    async fn sys_update(&self, key: &[u8], f: SysFn) -> Result<()> {
        let k = esc(key);
        for _ in 0..RETRIES {
            let cur = self.sys_get(key).await?;
            let next = f(cur.as_deref())?;
            let mut op = WriteOp::new().omap_cmp(&k, CmpOp::Eq, cur.as_deref().unwrap_or(b""));
            op = match next {
                Some(v) => op.omap_set(&[(&k, v)]),
                None => op.omap_rm_keys(&[&k]),
            };
            match self.io.operate_write(SYS, op).await {
                Ok(_) => return Ok(()),
                Err(e) if lost_race(&e) => continue,
                Err(e) => return Err(err(e)),
            }
        }
        Err(CatalogError::Contended)
    }
}

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_keeps_order_and_prefixes_and_has_no_nul() {
        let mut keys: Vec<Vec<u8>> = vec![
            b"a".to_vec(),
            b"a\0".to_vec(),
            b"a\x01".to_vec(),
            b"a\x01\x01".to_vec(),
            b"a\x02".to_vec(),
            b"a/b".to_vec(),
            b"ab".to_vec(),
            vec![],
            "\u{e9}".as_bytes().to_vec(),
        ];
        keys.sort();
        let escaped: Vec<Vec<u8>> = keys.iter().map(|k| esc(k)).collect();
        let mut sorted = escaped.clone();
        sorted.sort();
        assert_eq!(escaped, sorted);
        for (k, e) in keys.iter().zip(&escaped) {
            assert!(!e.contains(&0));
            assert_eq!(unesc(e).as_deref(), Some(k.as_slice()));
        }
        assert!(esc(b"a\x01b").starts_with(&esc(b"a\x01")));
        // An upload key sorts right after its object's key and before longer keys.
        assert!(ukey("a", "1") < ukey("a/b", "1"));
        assert!(pkey("k", "u", 2) < pkey("k", "u", 10));
    }
}
