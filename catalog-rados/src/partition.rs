//! Range partitions of a bucket's index, and their splits.
//!
//! # Partitions
//! A bucket's index is a chain of partition objects, each holding the object keys of one range
//! `[lo, hi)` (escaped keys, see [`crate::esc`]) with everything stored beside them (payloads,
//! uploads, parts, abort tombstones). The first partition, `lode.idx.<bucket>`, starts at the
//! empty key and never moves: its existence is the bucket's. The others are
//! `lode.part.<bucket>.<random>`, names never reused. Each partition's own xattrs are the truth
//! about it:
//! * `lode.epoch`: bumped by every change of the rules writers follow (a split starting, a
//!   seal); every commit is guarded by `cmpxattr lode.epoch == the epoch it read`;
//! * `lode.lo`, `lode.hi` (absent: no upper bound), `lode.next` (the partition that starts at
//!   `hi`);
//! * `lode.state = building` on a partition that a split is still filling, `lode.parent` its
//!   parent, `lode.builder` the token of the split filling it;
//! * `lode.split` on a partition being split: the split key, the new partition, the builder
//!   token and the claim's deadline.
//!
//! Every read that a commit or a listing uses reads these xattrs in the same op, so a reader
//! checks in its own snapshot that its key is in range; a gateway's map of partitions is only a
//! cache, corrected by following `lode.next` (lo never changes; partitions are never merged).
//!
//! # A split, without blocking writes for O(entries)
//! 1. **Claim**: set `lode.split` on the partition P and bump its epoch (one op guarded by the
//!    epoch read). From then on every commit to P that touches a key at or above the split key
//!    also writes a log entry `l<omap key>` with a fresh token, in the same op.
//! 2. **Copy**: create Q (`building`), copy P's entries of `[split, hi)` into it page by page.
//!    Writers go on meanwhile. Every write to Q is guarded by `cmpxattr lode.builder`, so a
//!    split whose claim was taken over cannot write into Q any more.
//! 3. **Catch up**: read the log and the keys it names in one op, apply them to Q, remember the
//!    token applied per log entry; again while a pass applied more than 256 entries and
//!    fewer than the pass before (at most 12 passes), so that what the last step applies,
//!    with writers waiting, is short.
//! 4. **Seal**: one op on P sets `hi = split`, `next = Q` and bumps the epoch. Commits of keys
//!    at or above the split key now fail their guard, re-read, and follow `next` to Q, where
//!    they wait while Q is `building`: on this gateway's own split, for its activation
//!    (woken by it, [`Handover`]); on another's, for the activation's announcement
//!    ([`crate::activations`]), reading Q again at least every 500 ms meanwhile (every 5-50
//!    ms while the announcements' watch is down). (Every gateway polling Q every 5-50 ms put
//!    hundreds of reads a second on the object whose ops the activation waits for, and the
//!    wait grew to seconds.) The same op shortens the
//!    claim to the sealed lease (5 s): what is left is a few ops, and a split whose gateway
//!    died here must not hold writes of the moved range for the whole lease. Waiting readers
//!    and writers ask every second whether the claim ran out, and then finish the split
//!    themselves.
//! 5. **Final catch-up**: the log is frozen now (no key at or above the split key can be
//!    written in P); apply every entry whose token changed since it was applied.
//! 6. **Activate** Q (remove `building`), then **clean** P: `omap_rm_range` of the moved ranges
//!    and the log, and remove `lode.split` (one op); beside it, announce the activation
//!    (waiting up to a second for the watchers' acks, which holds neither the clean nor the
//!    waiters).
//!
//! A split whose claim ran out (its gateway died) is finished by whichever gateway finds it: a
//! sealed one is taken over (new builder token on P's claim, then on Q), caught up from the
//! whole log and activated; an unsealed one is abandoned (Q removed, P's log and claim removed,
//! epoch bumped) and started again later.
//!
//! # When to split
//! Each gateway counts the new keys it commits per partition; every `split_keys / 8` of them it
//! counts the partition's keys (a page of keys per 1,000), and again sooner as the partition
//! nears its split size (every `split_keys / 32` at the closest). At a size between 3/4 of
//! `split_keys` and `split_keys`, fixed per partition (so that evenly filled partitions do not
//! all split at once), it splits at the median key; or, at `split_keys` and when the
//! partition is the last one and this gateway's recent keys are all in its top quarter
//! (monotonic names, `shard-000123`), at the 15/16 key: the new last partition starts nearly
//! empty and takes the new keys, the old one stays nearly full and is not written any more.
//!
//! A partition of any size is also split for load ([`crate::heat`]) when one key range of it
//! is written while another is read: between the two, so the reads stop waiting for the writes.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use lode_catalog::{CatalogError, Result};
use lode_rados::{CmpOp, IoCtx, ReadOp, ReadResult, WriteOp};
use tokio::sync::watch;

use crate::{DELETED, EPOCH, Inner, err, index_oid, lost_race, now_ms};

pub(crate) const LO: &str = "lode.lo";
pub(crate) const HI: &str = "lode.hi";
pub(crate) const NEXT: &str = "lode.next";
const STATE: &str = "lode.state";
const BUILDING: &str = "building";
const PARENT: &str = "lode.parent";
const BUILDER: &str = "lode.builder";
/// Changed on the first partition to fence a bucket deletion that a reopen overtakes.
const FENCE: &str = "lode.fence";
pub(crate) const SPLIT: &str = "lode.split";
/// A bucket deletion in progress closes the partitions after the first with this epoch prefix.
const CLOSING: &str = "closing.";
/// The tags of entries that live beside their object key (moved by a split), in order.
const MOVED_TAGS: [u8; 7] = [b'a', b'd', b'h', b'o', b'p', b'u', b'v'];
/// Log entries of a split in progress.
const LOG: u8 = b'l';
/// Entries per copy write.
const COPY_BATCH: usize = 1024;
/// Log entries per read of a catch-up pass (each pass reads the whole log, the last one
/// while writers of the moved range wait).
const LOG_PAGE: u64 = 4096;
/// A split seals once a catch-up pass applied at most this many log entries...
const SEAL_WHEN_LEFT: usize = 256;
/// ...or once a pass applied no fewer than the one before (the writers log as fast as a pass
/// applies), or after this many passes. (At 4 passes, with a thousand writers, the final
/// pass still applied 1,000-5,500 entries: 0.7-1.5 s of writers waiting.)
const PRE_SEAL_PASSES: usize = 12;
/// Bytes per copy write (values included).
const COPY_BYTES: usize = 4 << 20;
/// A read or write of a partition that is being activated pauses this long times the waits
/// so far (at most 50 ms) before it looks again; whether the claim ran out, so that it
/// finishes the split itself, it asks every [`TAKEOVER_CHECK`].
const WAIT_STEP_MS: u64 = 5;
/// A sealed split's claim runs this long at most ([`PartitionConfig::sealed_lease`]).
const SEALED_LEASE: Duration = Duration::from_secs(5);
/// A read waiting for a new partition to be activated asks this often whether the split's
/// claim ran out (its gateway died), and then finishes the split itself.
const TAKEOVER_CHECK: Duration = Duration::from_secs(1);
/// A blind commit that found its partition changed waits at most this long for another
/// commit's read of it ([`Inner::refresh_stale`]) before it goes on by itself.
const REFRESH_WAIT: Duration = Duration::from_secs(2);

/// How a bucket's index is partitioned.
#[derive(Debug, Clone)]
pub struct PartitionConfig {
    /// A partition with this many object keys is split (RGW keeps index shards under about
    /// 100,000 keys; deep scrub warns at 200,000).
    pub split_keys: u64,
    /// A split claims its partition for this long, renewed while it copies; a claim that ran
    /// out is finished or abandoned by whichever gateway finds it.
    pub split_lease: Duration,
    /// Split a partition between a key range being written and one being read at once
    /// ([`crate::heat`]).
    pub load_splits: bool,
}

impl Default for PartitionConfig {
    fn default() -> Self {
        Self {
            split_keys: 50_000,
            split_lease: Duration::from_secs(30),
            load_splits: true,
        }
    }
}

impl PartitionConfig {
    /// How long a sealed split's claim runs: writes of the moved range wait while the new
    /// partition builds, and what is left after the seal is two ops, so a split whose gateway
    /// died there is taken over this soon (not after the whole copy's lease).
    pub(crate) fn sealed_lease(&self) -> Duration {
        self.split_lease.min(SEALED_LEASE)
    }

    fn check_every(&self) -> u64 {
        (self.split_keys / 8).max(1)
    }

    /// The size at which partition `oid` splits at its median: between 3/4 of `split_keys`
    /// and `split_keys`, fixed per partition by a hash of its name. Keys spread evenly (hashed
    /// names) fill every partition at the same rate; with one size for all they would all
    /// split at once, in waves that stall ingest (1 -> 2 -> 4 -> ... partitions together).
    fn median_split_at(&self, oid: &str) -> u64 {
        // FNV-1a: stable across builds, so every gateway picks the same size.
        let h = oid.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
        self.split_keys - h % (self.split_keys / 4).max(1)
    }

    /// After a count of `n` keys in a partition that splits at `at`: how many new keys this
    /// gateway commits there before it counts again (half the keys still missing, as other
    /// gateways insert there too).
    fn next_check(&self, n: u64, at: u64) -> u64 {
        (at.saturating_sub(n) / 2).clamp((self.split_keys / 32).max(1), self.check_every())
    }
}

/// Where a split stops ([`crate::RadosCatalog::split_until`], tests of a split cut short).
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SplitStop {
    /// Copied and caught up, not sealed.
    Copied,
    /// Sealed, the new partition still building.
    Sealed,
    /// The new partition active, the old one not cleaned.
    Activated,
    Done,
    /// Done, but the moved range held sealed this long first (a slow final catch-up).
    HoldSealed(Duration),
}

/// A split in progress, as its claim on the partition (`lode.split`) says.
#[derive(Debug, Clone)]
pub(crate) struct Claim {
    /// The xattr's value, for `cmpxattr`.
    pub raw: Bytes,
    /// The escaped split key.
    pub split: Vec<u8>,
    /// The new partition.
    pub to: String,
    pub builder: String,
    pub deadline_ms: i64,
}

impl Claim {
    fn encode(split: &[u8], to: &str, builder: &str, deadline_ms: i64) -> Bytes {
        Bytes::from(format!("{}|{to}|{builder}|{deadline_ms}", hex(split)))
    }

    fn decode(raw: &Bytes) -> Option<Self> {
        let s = std::str::from_utf8(raw).ok()?;
        let mut it = s.split('|');
        let split = unhex(it.next()?)?;
        let to = it.next()?.to_owned();
        let builder = it.next()?.to_owned();
        let deadline_ms = it.next()?.parse().ok()?;
        Some(Self {
            raw: raw.clone(),
            split,
            to,
            builder,
            deadline_ms,
        })
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|c| format!("{c:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// What a partition's xattrs say about it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Part {
    pub epoch: Bytes,
    pub lo: Vec<u8>,
    pub hi: Option<Vec<u8>>,
    pub next: Option<String>,
    pub building: bool,
    pub parent: Option<String>,
    pub claim: Option<Claim>,
}

impl Part {
    pub fn of(r: &ReadResult) -> Self {
        let x = |n: &str| r.xattr(n).cloned();
        Self {
            epoch: x(EPOCH).unwrap_or_default(),
            lo: x(LO).map(|b| b.to_vec()).unwrap_or_default(),
            hi: x(HI).map(|b| b.to_vec()),
            next: x(NEXT).map(|b| String::from_utf8_lossy(&b).into_owned()),
            building: x(STATE).is_some_and(|s| s.as_ref() == BUILDING.as_bytes()),
            parent: x(PARENT).map(|b| String::from_utf8_lossy(&b).into_owned()),
            claim: x(SPLIT).as_ref().and_then(Claim::decode),
        }
    }

    /// Whether escaped position `pos` is in this partition's range.
    pub fn holds(&self, pos: &[u8]) -> bool {
        pos >= self.lo.as_slice() && self.hi.as_deref().is_none_or(|h| pos < h)
    }

    /// Whether every key that starts with escaped `prefix` is in this partition's range.
    pub fn holds_prefix(&self, prefix: &[u8]) -> bool {
        prefix >= self.lo.as_slice() && self.hi.as_deref().is_none_or(|h| prefix_below(prefix, h))
    }

    /// The claim of a split that has not sealed yet (writers log what they change).
    pub fn logging(&self) -> Option<&Claim> {
        self.claim
            .as_ref()
            .filter(|c| self.next.as_deref() != Some(c.to.as_str()))
    }
}

/// Whether every byte string that starts with `prefix` sorts below `hi`.
pub(crate) fn prefix_below(prefix: &[u8], hi: &[u8]) -> bool {
    prefix < hi && !hi.starts_with(prefix)
}

/// The escaped object-key position of an omap key (its tag dropped): sorts against escaped
/// bounds exactly as its object key does (the separator sorts below every escaped byte).
pub(crate) fn pos_of(omap_key: &[u8]) -> &[u8] {
    omap_key.get(1..).unwrap_or_default()
}

/// A partition read: where, what it said about itself, and the op's results.
pub(crate) struct Located {
    pub oid: String,
    pub part: Part,
    pub r: ReadResult,
}

/// A fresh token: unique per gateway process and call.
pub(crate) fn token() -> String {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    static PROCESS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let p = *PROCESS.get_or_init(rand::random::<u64>);
    format!("{p:016x}{:08x}", SEQ.fetch_add(1, Ordering::Relaxed))
}

/// Waits `ms`: a timer under tokio, a thread sleep on a thread outside it (blocking reads).
pub(crate) async fn pause(ms: u64) {
    if tokio::runtime::Handle::try_current().is_ok() {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    } else {
        std::thread::sleep(Duration::from_millis(ms));
    }
}

fn next_epoch(e: &[u8]) -> String {
    let n: u64 = std::str::from_utf8(e)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    format!("{:010}", n + 1)
}

/// The gateway's view of partitions: cached routes and insert counts.
#[derive(Default)]
pub(crate) struct Routes {
    /// Per bucket: escaped lower bound -> partition object (the first partition is implied).
    map: Mutex<HashMap<String, BTreeMap<Vec<u8>, String>>>,
    /// Per partition object: new keys since its last count.
    inserts: Mutex<HashMap<String, Inserts>>,
    /// Per bucket: what each partition said about itself when last read, while it was open
    /// (not building, not closing; a split claim allowed): what a blind commit is guarded on.
    parts: Mutex<HashMap<String, HashMap<String, Part>>>,
    /// Per bucket: how blind commits fared lately.
    blind: Mutex<HashMap<String, BlindScore>>,
    /// The new partitions of this gateway's sealed splits, until active: its own readers and
    /// writers of a moved range wait on these instead of reading the partition again and
    /// again (which would slow the very ops they wait for, on the same object).
    handovers: Mutex<HashMap<String, watch::Receiver<()>>>,
    /// Reads of partitions that blind commits found changed, in flight, per partition and
    /// epoch found stale: the other commits that found the same wait for that read.
    refreshes: Mutex<HashMap<(String, Bytes), watch::Receiver<()>>>,
}

/// A read of a changed partition in flight ([`Inner::refresh_stale`]): dropping it (done,
/// failed or cancelled) wakes the commits waiting for it.
struct Refresh<'a> {
    routes: &'a Routes,
    key: (String, Bytes),
    _tx: watch::Sender<()>,
}

impl Drop for Refresh<'_> {
    fn drop(&mut self) {
        self.routes.refreshes.lock().unwrap().remove(&self.key);
    }
}

/// A sealed split of this gateway, until its new partition is active or the split ends
/// otherwise: dropping it wakes this gateway's readers and writers waiting for it.
pub(crate) struct Handover<'a> {
    routes: &'a Routes,
    to: String,
    _tx: watch::Sender<()>,
}

impl Drop for Handover<'_> {
    fn drop(&mut self) {
        // The map's receiver goes first; the sender, dropped after this, wakes every clone.
        self.routes.handovers.lock().unwrap().remove(&self.to);
    }
}

/// The last 8 blind commits of one bucket (a bit set per miss: the key was there, or the
/// cached partition was stale), and how many were skipped since.
#[derive(Default)]
struct BlindScore {
    misses: u8,
    skipped: u32,
}

#[derive(Default)]
struct Inserts {
    /// The bucket whose partition this is (what [`Routes::forget`] drops).
    bucket: String,
    since_check: u64,
    /// The count of new keys at which to count the partition again (0: `check_every`).
    due: u64,
    /// The lowest key inserted since the last check (monotonic names stay in the top).
    min_key: Option<Vec<u8>>,
    running: bool,
}

/// At most this many buckets' routes, partition states and blind-commit scores are cached; a
/// further bucket empties a full cache, which refills from reads (so hours of bucket churn
/// cannot grow a gateway's memory without bound).
const CACHED_BUCKETS: usize = 10_000;
/// At most this many partitions' insert counts are kept (the running split checks always).
const COUNTED_PARTITIONS: usize = 100_000;

/// Makes room for `key` in a cache bounded to `max` entries: a full one is emptied.
fn room_for<V>(m: &mut HashMap<String, V>, key: &str, max: usize) {
    if m.len() >= max && !m.contains_key(key) {
        m.clear();
    }
}

impl Routes {
    /// Marks `to` (a sealed split's new partition) as handed over by this gateway.
    fn hand_over(&self, to: &str) -> Handover<'_> {
        let (tx, rx) = watch::channel(());
        self.handovers.lock().unwrap().insert(to.to_owned(), rx);
        Handover {
            routes: self,
            to: to.to_owned(),
            _tx: tx,
        }
    }

    /// Waits, at most `max`, for this gateway's own handover of partition `oid` to end; false
    /// at once if this gateway is not handing it over (or no runtime can time the wait).
    async fn await_handover(&self, oid: &str, max: Duration) -> bool {
        let rx = self.handovers.lock().unwrap().get(oid).cloned();
        let Some(mut rx) = rx else {
            return false;
        };
        if tokio::runtime::Handle::try_current().is_err() {
            return false;
        }
        // Nothing is ever sent: `changed` returns when the sender is dropped.
        let _ = tokio::time::timeout(max, rx.changed()).await;
        true
    }

    fn route(&self, bucket: &str, pos: &[u8]) -> Option<String> {
        let map = self.map.lock().unwrap();
        map.get(bucket)?
            .range(..=pos.to_vec())
            .next_back()
            .map(|(_, o)| o.clone())
    }

    fn learn(&self, bucket: &str, lo: Vec<u8>, oid: String) {
        let mut map = self.map.lock().unwrap();
        room_for(&mut map, bucket, CACHED_BUCKETS);
        map.entry(bucket.to_owned()).or_default().insert(lo, oid);
    }

    /// Drops what is cached of `bucket` (deleted, or a route went stale); the insert counts of
    /// its partitions go too, but for split checks still running.
    pub fn forget(&self, bucket: &str) {
        self.map.lock().unwrap().remove(bucket);
        self.parts.lock().unwrap().remove(bucket);
        self.blind.lock().unwrap().remove(bucket);
        self.inserts
            .lock()
            .unwrap()
            .retain(|_, s| s.bucket != bucket || s.running);
    }

    /// Remembers what partition `oid` said about itself, if a blind commit may rely on it:
    /// every change of its range, claim or state changes its epoch, and that epoch is what the
    /// blind commit compares. A partition being split counts (the blind commit then logs what
    /// it changes above the split key, as every commit does there); one still building, closed
    /// by a bucket deletion or deleted does not.
    fn note_part(&self, bucket: &str, oid: &str, part: &Part) {
        let open = !part.building
            && part.epoch.as_ref() != DELETED.as_bytes()
            && !part.epoch.starts_with(CLOSING.as_bytes());
        let mut parts = self.parts.lock().unwrap();
        if open {
            room_for(&mut parts, bucket, CACHED_BUCKETS);
            parts
                .entry(bucket.to_owned())
                .or_default()
                .insert(oid.to_owned(), part.clone());
        } else if let Some(b) = parts.get_mut(bucket) {
            b.remove(oid);
        }
    }

    /// Whether the bucket's first partition was read lately and was open (the bucket existed
    /// then).
    pub fn knows_bucket(&self, bucket: &str) -> bool {
        let parts = self.parts.lock().unwrap();
        parts
            .get(bucket)
            .is_some_and(|p| p.contains_key(&index_oid(bucket)))
    }

    /// The partition that the cache says holds escaped position `pos`, if its last read
    /// showed it open ([`Routes::note_part`]) and holding `pos`.
    pub fn cached(&self, bucket: &str, pos: &[u8]) -> Option<(String, Part)> {
        let oid = self.route(bucket, pos).unwrap_or_else(|| index_oid(bucket));
        let parts = self.parts.lock().unwrap();
        let part = parts.get(bucket)?.get(&oid)?;
        part.holds(pos).then(|| (oid, part.clone()))
    }

    /// Whether a blind commit is worth trying in `bucket`: not while more than 2 of the last
    /// 8 missed (overwrites: a miss costs a failed write), except for one probe in 16.
    pub fn blind_worth_it(&self, bucket: &str) -> bool {
        let mut all = self.blind.lock().unwrap();
        room_for(&mut all, bucket, CACHED_BUCKETS);
        let s = all.entry(bucket.to_owned()).or_default();
        if s.misses.count_ones() <= 2 {
            return true;
        }
        s.skipped += 1;
        s.skipped.is_multiple_of(16)
    }

    pub fn blind_result(&self, bucket: &str, hit: bool) {
        let mut all = self.blind.lock().unwrap();
        room_for(&mut all, bucket, CACHED_BUCKETS);
        let s = all.entry(bucket.to_owned()).or_default();
        s.misses = (s.misses << 1) | u8::from(!hit);
    }
}

impl Inner {
    /// Reads the partition of `bucket` holding escaped position `pos` with `op` (plus its
    /// xattrs), following `next` from wherever the cache points. `NoSuchBucket` if the bucket
    /// is missing or deleted. Waits while that range is being handed over by a split or a
    /// bucket deletion is closing it.
    pub(crate) async fn locate(
        &self,
        bucket: &str,
        pos: &[u8],
        op: impl Fn() -> ReadOp,
    ) -> Result<Located> {
        let first = index_oid(bucket);
        let mut oid = self
            .routes
            .route(bucket, pos)
            .unwrap_or_else(|| first.clone());
        let start = Instant::now();
        let mut waited = 0u64;
        let mut checked = start;
        loop {
            // Before the read: an activation announced after it ends a wait at once.
            let seen = self.activations.seen();
            let r = match self.io.operate_read(&oid, op().getxattrs()).await {
                Err(e) if e.is_not_found() => {
                    if oid == first {
                        self.routes.forget(bucket);
                        return Err(CatalogError::NoSuchBucket);
                    }
                    // A stale route, or a `next` whose partition is gone (a bucket being
                    // deleted): start again from the first, pausing if it keeps happening.
                    self.routes.forget(bucket);
                    oid = first.clone();
                    waited += 1;
                    if waited > 2 {
                        self.pause_or_give_up(bucket, &oid, start, waited).await?;
                    }
                    continue;
                }
                r => r.map_err(err)?,
            };
            let part = Part::of(&r);
            if part.epoch.as_ref() == DELETED.as_bytes() {
                self.routes.forget(bucket);
                return Err(CatalogError::NoSuchBucket);
            }
            let wait = if part.epoch.starts_with(CLOSING.as_bytes()) {
                self.resolve_closing(bucket, &oid, &part).await?
            } else if part.building {
                if let Some(parent) = &part.parent
                    && checked.elapsed() >= TAKEOVER_CHECK
                {
                    // Its split may have died: finish it (a no-op while its claim holds).
                    checked = Instant::now();
                    if let Err(e) = self.finish_split(bucket, parent).await {
                        tracing::warn!(
                            bucket,
                            partition = parent,
                            error = %e,
                            "finishing a split failed"
                        );
                    }
                }
                // This gateway's own split: wait for its activation; another's: for an
                // activation announced ([`crate::activations`]). Then read again.
                if self.routes.await_handover(&oid, TAKEOVER_CHECK).await
                    || self.activations.wait_past(seen).await
                {
                    self.give_up_after(bucket, &oid, start)?;
                    false
                } else {
                    true
                }
            } else if !part.holds(pos) {
                match (&part.hi, &part.next) {
                    (Some(hi), Some(next)) if pos >= hi.as_slice() => {
                        self.routes.learn(bucket, hi.clone(), next.clone());
                        oid = next.clone();
                    }
                    _ => {
                        // Below this partition: a stale route.
                        self.routes.forget(bucket);
                        oid = first.clone();
                    }
                }
                continue;
            } else {
                self.routes.note_part(bucket, &oid, &part);
                return Ok(Located { oid, part, r });
            };
            if wait {
                waited += 1;
                self.pause_or_give_up(bucket, &oid, start, waited).await?;
            }
        }
    }

    /// After a blind commit found partition `oid` changed since epoch `stale` (a split's claim
    /// or seal): reads it once for every commit that found the same, and caches what it says
    /// of itself and of its successor. The first such commit reads; the others wait for its
    /// read (at most [`REFRESH_WAIT`]). Then each finds its key's partition in the cache, or,
    /// a key whose range moved to a partition still building, reads that one. (Each reading
    /// for itself put a burst of reads on the partition at every epoch change, as many as the
    /// commits queued for it: hundreds with a thousand clients.)
    pub(crate) async fn refresh_stale(&self, bucket: &str, oid: &str, stale: &Bytes) -> Result<()> {
        let key = (oid.to_owned(), stale.clone());
        let role = {
            let mut m = self.routes.refreshes.lock().unwrap();
            match m.get(&key) {
                Some(rx) => Err(rx.clone()),
                None => {
                    let (tx, rx) = watch::channel(());
                    m.insert(key.clone(), rx);
                    Ok(Refresh {
                        routes: &self.routes,
                        key,
                        _tx: tx,
                    })
                }
            }
        };
        match role {
            Ok(_lead) => self.refresh_part(bucket, oid).await,
            Err(mut rx) => {
                if tokio::runtime::Handle::try_current().is_ok() {
                    // Nothing is ever sent: `changed` returns when the reader's guard drops.
                    let _ = tokio::time::timeout(REFRESH_WAIT, rx.changed()).await;
                }
                Ok(())
            }
        }
    }

    /// Reads partition `oid` and caches what it says of itself and of its successor.
    async fn refresh_part(&self, bucket: &str, oid: &str) -> Result<()> {
        match self.io.operate_read(oid, ReadOp::new().getxattrs()).await {
            Err(e) if e.is_not_found() => {
                self.routes.forget(bucket);
                Ok(())
            }
            Err(e) => Err(err(e)),
            Ok(r) => {
                let part = Part::of(&r);
                if let (Some(hi), Some(next)) = (&part.hi, &part.next) {
                    self.routes.learn(bucket, hi.clone(), next.clone());
                }
                self.routes.note_part(bucket, oid, &part);
                Ok(())
            }
        }
    }

    /// Pauses a little longer each time; `Unavailable` once a range stayed unavailable for
    /// four claims' time.
    async fn pause_or_give_up(
        &self,
        bucket: &str,
        oid: &str,
        start: Instant,
        waited: u64,
    ) -> Result<()> {
        self.give_up_after(bucket, oid, start)?;
        pause((WAIT_STEP_MS * waited).min(50)).await;
        Ok(())
    }

    /// `Unavailable` once a range waited for since `start` stayed unavailable for four
    /// claims' time.
    fn give_up_after(&self, bucket: &str, oid: &str, start: Instant) -> Result<()> {
        if start.elapsed() > self.cfg.split_lease * 4 {
            return Err(CatalogError::Unavailable(format!(
                "index partition {oid} of bucket {bucket} stayed unavailable"
            )));
        }
        Ok(())
    }

    /// A write to partition `oid` (guarded by the caller); `Ok(false)` when a guard failed.
    pub(crate) async fn try_write_at(&self, oid: &str, op: WriteOp) -> Result<bool> {
        match self.io.operate_write(oid, op).await {
            Ok(_) => Ok(true),
            Err(e) if lost_race(&e) => Ok(false),
            Err(e) if e.is_not_found() => Err(CatalogError::NoSuchBucket),
            Err(e) => Err(err(e)),
        }
    }

    /// Entries after omap key `after` whose keys start with `filter` (a tag and an escaped
    /// prefix), in key order across the bucket's partitions, at most `max` (at least one
    /// unless the end is reached); `more` when more may follow the last entry returned.
    pub(crate) async fn scan(
        &self,
        bucket: &str,
        after: &[u8],
        filter: &[u8],
        max: u64,
    ) -> Result<(Vec<(Vec<u8>, Bytes)>, bool)> {
        self.scan_noting(bucket, after, filter, max, &mut vec![])
            .await
    }

    /// [`scan`](Self::scan), adding to `reads` the partition object and version each of its
    /// reads met.
    pub(crate) async fn scan_noting(
        &self,
        bucket: &str,
        after: &[u8],
        filter: &[u8],
        max: u64,
        reads: &mut Vec<crate::pages::Read>,
    ) -> Result<(Vec<(Vec<u8>, Bytes)>, bool)> {
        let mut pos = if after > filter {
            pos_of(after).to_vec()
        } else {
            pos_of(filter).to_vec()
        };
        loop {
            let l = self
                .locate(bucket, &pos, || {
                    ReadOp::new().omap_get_vals(after, filter, max)
                })
                .await?;
            reads.push((l.oid.clone(), l.r.version));
            let page = l.r.omap_vals.unwrap_or_default();
            let n = page.entries.len();
            let mut entries = page.entries;
            // Entries past the partition's end are a split's leftovers, not yet cleaned.
            if let Some(hi) = &l.part.hi {
                entries.retain(|(k, _)| pos_of(k) < hi.as_slice());
            }
            let exhausted = entries.len() < n || !page.more || n == 0;
            let beyond = l
                .part
                .hi
                .as_deref()
                .is_some_and(|h| !prefix_below(pos_of(filter), h));
            if !entries.is_empty() {
                return Ok((entries, !exhausted || beyond));
            }
            match l.part.hi {
                Some(hi) if beyond => pos = hi,
                _ => return Ok((vec![], false)),
            }
        }
    }

    /// Every partition of a bucket in key order, each read whole (paged, at one version):
    /// (oid, part, version, entries in its range).
    #[allow(clippy::type_complexity)]
    pub(crate) async fn walk(
        &self,
        bucket: &str,
    ) -> Result<Vec<(String, Part, u64, Vec<(Vec<u8>, Bytes)>)>> {
        let mut out = vec![];
        let mut oid = index_oid(bucket);
        'parts: loop {
            let mut after: Vec<u8> = vec![];
            let mut vals = vec![];
            let mut first: Option<(u64, Part)> = None;
            loop {
                let op = ReadOp::new().getxattrs().omap_get_vals(&after, b"", 1000);
                let r = match self.io.operate_read(&oid, op).await {
                    Err(e) if e.is_not_found() && out.is_empty() => {
                        return Err(CatalogError::NoSuchBucket);
                    }
                    Err(e) if e.is_not_found() => return Err(CatalogError::Contended),
                    r => r.map_err(err)?,
                };
                let part = Part::of(&r);
                if part.epoch.as_ref() == DELETED.as_bytes() {
                    return Err(CatalogError::NoSuchBucket);
                }
                match &first {
                    Some((v, _)) if *v != r.version => {
                        after.clear();
                        vals.clear();
                        first = None;
                        continue;
                    }
                    Some(_) => {}
                    None => first = Some((r.version, part)),
                }
                let page = r.omap_vals.unwrap_or_default();
                if let Some((k, _)) = page.entries.last() {
                    after = k.clone();
                }
                let more = page.more && !page.entries.is_empty();
                vals.extend(page.entries);
                if !more {
                    break;
                }
            }
            let (version, part) = first.expect("read at least once");
            vals.retain(|(k, _)| k.first() == Some(&LOG) || part.holds(pos_of(k)));
            let next = part.next.clone().filter(|_| part.hi.is_some());
            out.push((oid.clone(), part, version, vals));
            match next {
                Some(n) => oid = n,
                None => break 'parts,
            }
        }
        Ok(out)
    }

    /// The log entries a commit to `part` adds for the omap keys it sets or removes: one per
    /// key at or above the split key while a split copies.
    pub(crate) fn log_entries<'a>(
        part: &Part,
        touched: impl IntoIterator<Item = &'a [u8]>,
    ) -> Vec<(Vec<u8>, Vec<u8>)> {
        let Some(c) = part.logging() else {
            return vec![];
        };
        let t = token();
        touched
            .into_iter()
            .filter(|k| pos_of(k) >= c.split.as_slice())
            .map(|k| {
                let mut l = vec![LOG];
                l.extend_from_slice(k);
                (l, t.clone().into_bytes())
            })
            .collect()
    }

    // ------------------------------------------------------------------ bucket deletion

    /// A partition closed by a bucket deletion: `NoSuchBucket` if the deletion committed;
    /// reopens it if the deletion's deadline passed (its gateway died or gave up); else
    /// `Ok(true)`: wait and read again.
    async fn resolve_closing(&self, bucket: &str, oid: &str, part: &Part) -> Result<bool> {
        let first = index_oid(bucket);
        let e0 = match self
            .io
            .operate_read(&first, ReadOp::new().getxattr(EPOCH))
            .await
        {
            Err(e) if e.is_not_found() => return Err(CatalogError::NoSuchBucket),
            r => r.map_err(err)?.xattr(EPOCH).cloned().unwrap_or_default(),
        };
        if e0.as_ref() == DELETED.as_bytes() {
            return Err(CatalogError::NoSuchBucket);
        }
        let (deadline, old) = closing_fields(&part.epoch);
        if now_ms() < deadline {
            return Ok(true);
        }
        // Fence the deletion first: a change of the first partition's version (guarded by its
        // epoch not being `deleted`) makes the deleter's version-guarded commit fail, so the
        // deletion cannot commit after this partition reopens.
        let fence = WriteOp::new()
            .cmpxattr(EPOCH, CmpOp::Eq, &e0)
            .setxattr(FENCE, token().as_bytes());
        if !self.try_write_at(&first, fence).await? {
            return Ok(true);
        }
        self.reopen(oid, &part.epoch, &old).await?;
        Ok(false)
    }

    async fn reopen(&self, oid: &str, closing: &[u8], old: &[u8]) -> Result<()> {
        let op = WriteOp::new()
            .cmpxattr(EPOCH, CmpOp::Eq, closing)
            .setxattr(EPOCH, next_epoch(old));
        self.try_write_at(oid, op).await.map(|_| ())
    }

    /// Deletes an empty bucket whose index may span several partitions: closes the partitions
    /// after the first (each guarded by its version, so each was empty when closed; commits to
    /// a closed partition wait), then marks the first deleted, guarded by its version: that op
    /// is the deletion. Then the partitions are removed, the last first. Returns the chunks
    /// of leftover parts.
    pub(crate) async fn delete_partitions(
        &self,
        bucket: &str,
        retries: usize,
    ) -> Result<Vec<lode_catalog::ChunkLoc>> {
        for _ in 0..retries {
            let parts = self.walk(bucket).await?;
            if let Some((oid, _, _, _)) = parts.iter().find(|(_, p, _, _)| p.claim.is_some()) {
                // A split in progress: let it finish (or finish it) first.
                self.finish_split_when_due(bucket, oid).await?;
                continue;
            }
            let mut released = vec![];
            for (_, _, _, vals) in &parts {
                for (k, v) in vals {
                    match k.first() {
                        Some(b'o' | b'v') => return Err(CatalogError::BucketNotEmpty),
                        Some(b'p') => released.extend(crate::chunks_of(
                            &crate::decode::<lode_catalog::PartRecord>(v)?.segments,
                        )),
                        _ => {}
                    }
                }
            }
            let deadline = now_ms() + self.cfg.split_lease.as_millis() as i64;
            let mut closed: Vec<(&str, Bytes, Bytes)> = vec![];
            let mut ok = true;
            for (oid, part, version, _) in parts.iter().skip(1).rev() {
                let closing = Bytes::from(format!(
                    "{CLOSING}{deadline}.{}",
                    String::from_utf8_lossy(&part.epoch)
                ));
                let op = WriteOp::new()
                    .assert_version(*version)
                    .setxattr(EPOCH, &closing);
                if !self.try_write_at(oid, op).await? {
                    ok = false;
                    break;
                }
                closed.push((oid, closing, part.epoch.clone()));
            }
            if ok {
                let (oid, _, version, _) = &parts[0];
                let op = WriteOp::new()
                    .assert_version(*version)
                    .setxattr(EPOCH, DELETED);
                ok = self.try_write_at(oid, op).await?;
            }
            if !ok {
                for (oid, closing, old) in closed {
                    self.reopen(oid, &closing, &old).await?;
                }
                continue;
            }
            // Event entries of the bucket's last changes outlive it, in this run's registry.
            let left: Vec<(Vec<u8>, Bytes)> = parts
                .iter()
                .flat_map(|(_, _, _, vals)| vals.iter().cloned())
                .collect();
            self.outbox.rescue(&self.me, &left).await?;
            self.io
                .operate_write(
                    crate::BUCKETS,
                    WriteOp::new().omap_rm_keys(&[bucket.as_bytes()]),
                )
                .await
                .map_err(err)?;
            let oids: Vec<String> = parts.into_iter().map(|(o, ..)| o).collect();
            self.remove_chain(bucket, oids).await?;
            return Ok(released);
        }
        Err(CatalogError::Contended)
    }

    /// Removes a deleted bucket's partition objects, the last first (a removal cut short
    /// leaves a chain that still starts at the first partition and is finished by the next
    /// create of the name).
    pub(crate) async fn remove_chain(&self, bucket: &str, oids: Vec<String>) -> Result<()> {
        for oid in oids.iter().rev() {
            match self.io.remove(oid).await {
                Err(e) if !e.is_not_found() => return Err(err(e)),
                _ => {}
            }
        }
        self.routes.forget(bucket);
        self.heat.forget(bucket);
        Ok(())
    }

    /// The partition objects of a bucket marked deleted, following `next` from the first.
    pub(crate) async fn chain_of(&self, bucket: &str) -> Result<Vec<String>> {
        let mut out = vec![];
        let mut unchained = vec![];
        let mut cur = index_oid(bucket);
        loop {
            out.push(cur.clone());
            let r = match self.io.operate_read(&cur, ReadOp::new().getxattrs()).await {
                Err(e) if e.is_not_found() => break,
                r => r.map_err(err)?,
            };
            let part = Part::of(&r);
            // A split's new partition not chained yet goes with its parent.
            if let Some(c) = part.logging() {
                unchained.push(c.to.clone());
            }
            match part.next.filter(|_| part.hi.is_some()) {
                Some(n) if !out.contains(&n) => cur = n,
                _ => break,
            }
        }
        out.extend(unchained);
        Ok(out)
    }

    // ------------------------------------------------------------------ splits

    /// How many partitions have a background split check running (begun by a commit's
    /// [`Inner::note_insert`], which marks it before the commit returns), or a split for load
    /// ([`Inner::note_load`]).
    pub(crate) fn splits_running(&self) -> usize {
        let checks = self
            .routes
            .inserts
            .lock()
            .unwrap()
            .values()
            .filter(|s| s.running)
            .count();
        checks + self.heat.running()
    }

    /// Notes a new key committed in partition `oid`; every `split_keys / 8` of them, counts
    /// the partition in the background and splits it if it is full.
    pub(crate) fn note_insert(&self, bucket: &str, oid: &str, pos: &[u8]) {
        let due = {
            let mut all = self.routes.inserts.lock().unwrap();
            if all.len() >= COUNTED_PARTITIONS && !all.contains_key(oid) {
                all.retain(|_, s| s.running);
            }
            let s = all.entry(oid.to_owned()).or_insert_with(|| Inserts {
                bucket: bucket.to_owned(),
                ..Default::default()
            });
            s.since_check += 1;
            if s.min_key.as_deref().is_none_or(|m| pos < m) {
                s.min_key = Some(pos.to_vec());
            }
            let due = if s.due == 0 {
                self.cfg.check_every()
            } else {
                s.due
            };
            if s.since_check >= due && !s.running {
                s.running = true;
                s.since_check = 0;
                Some(s.min_key.take())
            } else {
                None
            }
        };
        let Some(min_key) = due else { return };
        let (Some(me), Ok(rt)) = (self.me.upgrade(), tokio::runtime::Handle::try_current()) else {
            self.routes.inserts.lock().unwrap().remove(oid);
            return;
        };
        let (bucket, oid) = (bucket.to_owned(), oid.to_owned());
        rt.spawn(async move {
            if let Err(e) = me.maybe_split(&bucket, &oid, min_key.as_deref()).await {
                tracing::warn!(bucket, partition = oid, error = %e, "index partition split failed");
            }
            if let Some(s) = me.routes.inserts.lock().unwrap().get_mut(&oid) {
                s.running = false;
            }
        });
    }

    /// Notes a commit (`write`) or a point read of escaped key `pos` in partition `oid`, and
    /// splits the partition for load in the background when [`crate::heat`] says so.
    pub(crate) fn note_load(&self, bucket: &str, oid: &str, pos: &[u8], write: bool) {
        if !self.cfg.load_splits {
            return;
        }
        let Some((bucket, at)) = self.heat.note(bucket, oid, pos, write) else {
            return;
        };
        let (Some(me), Ok(rt)) = (self.me.upgrade(), tokio::runtime::Handle::try_current()) else {
            self.heat.done(oid);
            return;
        };
        let oid = oid.to_owned();
        rt.spawn(async move {
            if let Err(e) = me.split_for_load(&bucket, &oid, at).await {
                tracing::warn!(bucket, partition = oid, error = %e, "index partition split for load failed");
            }
            me.heat.done(&oid);
        });
    }

    /// Splits partition `oid` at `at`, between the keys written and the keys read
    /// ([`crate::heat`]). `Ok(false)` if another split holds it or `at` is not inside it.
    pub(crate) async fn split_for_load(
        &self,
        bucket: &str,
        oid: &str,
        at: Vec<u8>,
    ) -> Result<bool> {
        tracing::info!(
            bucket,
            partition = oid,
            at = %String::from_utf8_lossy(&at),
            "splitting an index partition for load, between the keys written and the keys read"
        );
        self.split(bucket, oid, &at).await
    }

    /// The escaped object keys in a partition's range, in order (pages of keys only), each
    /// once per entry it has there: its current record, and each of its versions (so that a
    /// partition full of versions of few keys splits too, between keys).
    async fn keys_in(&self, oid: &str, part: &Part) -> Result<Vec<Vec<u8>>> {
        let mut keys = self.positions_in(oid, part, b'o').await?;
        keys.extend(self.positions_in(oid, part, b'v').await?);
        keys.sort();
        Ok(keys)
    }

    /// The object-key positions of the `tag` entries in a partition's range, in order.
    async fn positions_in(&self, oid: &str, part: &Part, tag: u8) -> Result<Vec<Vec<u8>>> {
        let mut keys = vec![];
        let mut after = vec![tag];
        loop {
            let r = self
                .io
                .operate_read(oid, ReadOp::new().omap_get_keys(&after, 1000))
                .await
                .map_err(err)?;
            let page = r.omap_keys.unwrap_or_default();
            let mut done = !page.more || page.keys.is_empty();
            for k in &page.keys {
                if k.first() != Some(&tag) || !part.holds(pos_of(k)) {
                    done = true;
                    break;
                }
                // A version's position is its key's: the part before the separator.
                let p = pos_of(k);
                let end = p.windows(2).position(|w| w == [1, 1]).unwrap_or(p.len());
                keys.push(p[..end].to_vec());
            }
            if done {
                return Ok(keys);
            }
            after = page.keys.last().expect("nonempty").clone();
        }
    }

    /// Counts partition `oid` and splits it if it holds `split_keys` keys or more. `min_key`:
    /// the lowest key this gateway inserted there since the last count.
    pub(crate) async fn maybe_split(
        &self,
        bucket: &str,
        oid: &str,
        min_key: Option<&[u8]>,
    ) -> Result<bool> {
        let r = match self.io.operate_read(oid, ReadOp::new().getxattrs()).await {
            Err(e) if e.is_not_found() => return Ok(false),
            r => r.map_err(err)?,
        };
        let part = Part::of(&r);
        if part.claim.is_some() {
            self.finish_split_when_due(bucket, oid).await?;
            return Ok(false);
        }
        if part.building || part.epoch.as_ref() == DELETED.as_bytes() {
            return Ok(false);
        }
        let keys = self.keys_in(oid, &part).await?;
        let n = keys.len();
        let monotonic =
            n >= 2 && part.hi.is_none() && min_key.is_some_and(|m| m >= keys[n * 3 / 4].as_slice());
        let size = if monotonic {
            self.cfg.split_keys
        } else {
            self.cfg.median_split_at(oid)
        };
        if let Some(s) = self.routes.inserts.lock().unwrap().get_mut(oid) {
            s.due = self.cfg.next_check(n as u64, size);
        }
        if (n as u64) < size || n < 2 {
            return Ok(false);
        }
        let at = if monotonic {
            n - (n / 16).max(1)
        } else {
            n / 2
        };
        tracing::info!(
            bucket,
            partition = oid,
            keys = n,
            monotonic,
            "splitting an index partition"
        );
        // Between keys: a key's entries (its versions) stay together, so a split point equal
        // to the partition's first key moves up to the next key (none: no split).
        let Some(at) = (at.max(1)..n).find(|&i| keys[i] != keys[0]) else {
            return Ok(false);
        };
        self.split(bucket, oid, &keys[at]).await
    }

    /// Splits partition `oid` of `bucket` at escaped key `at` (see the module docs).
    /// `Ok(false)` if another split holds the partition or `at` is not inside it.
    pub(crate) async fn split(&self, bucket: &str, oid: &str, at: &[u8]) -> Result<bool> {
        self.split_until(bucket, oid, at, SplitStop::Done).await
    }

    /// [`Inner::split`] that stops after step `stop`, as a gateway that died there would
    /// (tests of the takeover).
    pub(crate) async fn split_until(
        &self,
        bucket: &str,
        oid: &str,
        at: &[u8],
        stop: SplitStop,
    ) -> Result<bool> {
        let Some((claim, part)) = self.claim(bucket, oid, at).await? else {
            return Ok(false);
        };
        let mut b = Builder::new(self, bucket, oid, claim, part);
        b.create().await?;
        let copied = async {
            b.copy().await?;
            b.copied = Some(b.started.elapsed());
            // Catch up until what is left is short: what the writers log during the last
            // pass is what the final pass applies while they wait, sealed out of P.
            let mut before = usize::MAX;
            for _ in 0..PRE_SEAL_PASSES {
                let applied = b.catch_up(false).await?;
                if applied <= SEAL_WHEN_LEFT || applied >= before {
                    break;
                }
                before = applied;
            }
            if stop == SplitStop::Copied {
                return Ok(false);
            }
            b.seal().await?;
            Ok(true)
        }
        .await;
        match copied {
            Ok(true) => {}
            Ok(false) => return Ok(true),
            Err(e) => {
                // Not sealed (its claim was taken over, or an error): Q is nobody's. Unless
                // the cluster did not answer: the seal may have applied (P naming Q), so Q
                // stays, and whoever finds the claim run out takes the split over from P's
                // state (the state `SplitStop::Sealed` leaves, tested as such).
                if !matches!(e, CatalogError::Unavailable(_)) {
                    b.drop_q().await;
                }
                return Err(e);
            }
        }
        if stop == SplitStop::Sealed {
            return Ok(true);
        }
        if let SplitStop::HoldSealed(d) = stop {
            pause(d.as_millis() as u64).await;
        }
        let sealed_at = Instant::now();
        b.final_left = b.catch_up(true).await?;
        b.sealed_for = Some(sealed_at.elapsed());
        if stop == SplitStop::Activated {
            return Ok(true);
        }
        b.clean_and_announce().await?;
        Ok(true)
    }

    /// Claims partition `oid` for a split at `at` (bumps its epoch, so every later commit
    /// logs what it changes above `at`).
    async fn claim(&self, bucket: &str, oid: &str, at: &[u8]) -> Result<Option<(Claim, Part)>> {
        let r = self
            .io
            .operate_read(oid, ReadOp::new().getxattrs())
            .await
            .map_err(err)?;
        let part = Part::of(&r);
        if part.claim.is_some()
            || part.building
            || !part.holds(at)
            || at <= part.lo.as_slice()
            || part.epoch.as_ref() == DELETED.as_bytes()
            || part.epoch.starts_with(CLOSING.as_bytes())
        {
            return Ok(None);
        }
        let to = format!("lode.part.{bucket}.{}", token());
        let builder = token();
        let deadline = now_ms() + self.cfg.split_lease.as_millis() as i64;
        let raw = Claim::encode(at, &to, &builder, deadline);
        let op = WriteOp::new()
            .cmpxattr(EPOCH, CmpOp::Eq, &part.epoch)
            .setxattr(EPOCH, next_epoch(&part.epoch))
            .setxattr(SPLIT, &raw);
        if !self.try_write_at(oid, op).await? {
            return Ok(None);
        }
        let claim = Claim::decode(&raw).expect("encoded above");
        Ok(Some((claim, part)))
    }

    /// Finishes a split of `oid` whose claim ran out; waits for one still running.
    pub(crate) async fn finish_split_when_due(&self, bucket: &str, oid: &str) -> Result<()> {
        let start = Instant::now();
        loop {
            let r = match self.io.operate_read(oid, ReadOp::new().getxattrs()).await {
                Err(e) if e.is_not_found() => return Ok(()),
                r => r.map_err(err)?,
            };
            let Some(c) = Part::of(&r).claim else {
                return Ok(());
            };
            if now_ms() > c.deadline_ms {
                return self.finish_split(bucket, oid).await;
            }
            if start.elapsed() > self.cfg.split_lease * 4 {
                return Err(CatalogError::Contended);
            }
            pause(20).await;
        }
    }

    /// Takes over the split of partition `oid` if its claim ran out: a sealed split is caught
    /// up from its whole log and activated; an unsealed one is abandoned.
    pub(crate) async fn finish_split(&self, bucket: &str, oid: &str) -> Result<()> {
        let r = match self.io.operate_read(oid, ReadOp::new().getxattrs()).await {
            Err(e) if e.is_not_found() => return Ok(()),
            r => r.map_err(err)?,
        };
        let part = Part::of(&r);
        let Some(old) = part.claim.clone() else {
            return Ok(());
        };
        if now_ms() <= old.deadline_ms {
            return Ok(());
        }
        let sealed = part.next.as_deref() == Some(old.to.as_str());
        if !sealed {
            // Abandon: Q goes, and P's log and claim (P is still the truth for its range).
            tracing::warn!(
                bucket,
                partition = oid,
                "abandoning a split whose claim ran out"
            );
            // Guarded by the epoch too: a seal that lands meanwhile bumps it (and then the split
            // is finished, not abandoned). Q goes only once P no longer names it.
            let op = WriteOp::new()
                .cmpxattr(SPLIT, CmpOp::Eq, &old.raw)
                .cmpxattr(EPOCH, CmpOp::Eq, &part.epoch)
                .setxattr(EPOCH, next_epoch(&part.epoch))
                .omap_rm_range([LOG], [LOG + 1])
                .rmxattr(SPLIT);
            if self.try_write_at(oid, op).await? {
                match self.io.remove(&old.to).await {
                    Err(e) if !e.is_not_found() => return Err(err(e)),
                    _ => {}
                }
            }
            return Ok(());
        }
        tracing::warn!(
            bucket,
            partition = oid,
            "finishing a split whose claim ran out"
        );
        let builder = token();
        let deadline = now_ms() + self.cfg.sealed_lease().as_millis() as i64;
        let raw = Claim::encode(&old.split, &old.to, &builder, deadline);
        let op = WriteOp::new()
            .cmpxattr(SPLIT, CmpOp::Eq, &old.raw)
            .setxattr(SPLIT, &raw);
        if !self.try_write_at(oid, op).await? {
            return Ok(()); // someone else took it over
        }
        let claim = Claim::decode(&raw).expect("encoded above");
        let q = self
            .io
            .operate_read(&old.to, ReadOp::new().getxattrs())
            .await
            .map_err(err)?;
        let qpart = Part::of(&q);
        let mut b = Builder::new(self, bucket, oid, claim, part);
        b.sealed = true;
        if qpart.building {
            // Q's builder as read (a takeover cut short may have left an older one there);
            // P's claim, swapped above, already fences out any other takeover.
            let current = q.xattr(BUILDER).cloned().unwrap_or_default();
            let op = WriteOp::new()
                .cmpxattr(BUILDER, CmpOp::Eq, &current)
                .setxattr(BUILDER, b.claim.builder.as_bytes());
            if !self.try_write_at(&old.to, op).await? {
                return Ok(());
            }
            b.catch_up(true).await?;
        }
        b.clean_and_announce().await
    }
}

/// One split's work, by the gateway that holds its claim.
struct Builder<'a> {
    inner: &'a Inner,
    bucket: &'a str,
    /// The partition being split.
    oid: &'a str,
    claim: Claim,
    /// P as it was claimed (its range before the split).
    part: Part,
    /// The token applied per log key.
    applied: HashMap<Vec<u8>, Bytes>,
    renewed: Instant,
    /// P is sealed (its claim runs for the sealed lease).
    sealed: bool,
    /// For the log line at the end: when the split began, how long its copy took, the
    /// catch-up passes and entries applied, what the final pass applied, and how long
    /// writes of the moved range waited (seal to activation).
    started: Instant,
    copied: Option<Duration>,
    passes: u32,
    applied_entries: usize,
    final_left: usize,
    sealed_for: Option<Duration>,
    /// From the seal until Q is active: this gateway's waiters for Q wait on it.
    handover: Option<Handover<'a>>,
    /// Q is active and the other gateways are not told yet ([`Builder::clean_and_announce`]).
    unannounced: bool,
}

impl<'a> Builder<'a> {
    fn new(inner: &'a Inner, bucket: &'a str, oid: &'a str, claim: Claim, part: Part) -> Self {
        Self {
            inner,
            bucket,
            oid,
            claim,
            part,
            applied: HashMap::new(),
            renewed: Instant::now(),
            sealed: false,
            started: Instant::now(),
            copied: None,
            passes: 0,
            applied_entries: 0,
            final_left: 0,
            sealed_for: None,
            handover: None,
            unannounced: false,
        }
    }

    fn io(&self) -> &IoCtx {
        &self.inner.io
    }

    /// A write to Q, fenced by this split's builder token.
    async fn write_q(&self, op: WriteOp) -> Result<()> {
        let op = op.cmpxattr(BUILDER, CmpOp::Eq, self.claim.builder.as_bytes());
        if self.inner.try_write_at(&self.claim.to, op).await? {
            Ok(())
        } else {
            Err(CatalogError::Contended)
        }
    }

    /// This split's claim, running for `lease` from now.
    fn claim_for(&self, lease: Duration) -> Bytes {
        let deadline = now_ms() + lease.as_millis() as i64;
        Claim::encode(
            &self.claim.split,
            &self.claim.to,
            &self.claim.builder,
            deadline,
        )
    }

    /// Renews the claim when a third of the lease has passed (the sealed lease once sealed).
    async fn renew(&mut self) -> Result<()> {
        let lease = if self.sealed {
            self.inner.cfg.sealed_lease()
        } else {
            self.inner.cfg.split_lease
        };
        if self.renewed.elapsed() < lease / 3 {
            return Ok(());
        }
        let raw = self.claim_for(lease);
        let op = WriteOp::new()
            .cmpxattr(SPLIT, CmpOp::Eq, &self.claim.raw)
            .setxattr(SPLIT, &raw);
        if !self.inner.try_write_at(self.oid, op).await? {
            return Err(CatalogError::Contended);
        }
        self.claim = Claim::decode(&raw).expect("encoded above");
        self.renewed = Instant::now();
        Ok(())
    }

    async fn create(&self) -> Result<()> {
        let mut op = WriteOp::new()
            .create(true)
            .setxattr(EPOCH, crate::FIRST_EPOCH)
            .setxattr(STATE, BUILDING)
            .setxattr(PARENT, self.oid.as_bytes())
            .setxattr(BUILDER, self.claim.builder.as_bytes())
            .setxattr(LO, &self.claim.split);
        if let (Some(hi), Some(next)) = (&self.part.hi, &self.part.next) {
            op = op.setxattr(HI, hi).setxattr(NEXT, next.as_bytes());
        }
        self.io()
            .operate_write(&self.claim.to, op)
            .await
            .map_err(err)?;
        Ok(())
    }

    /// The omap range `[start, end)` of tag `tag` that moves.
    fn range(&self, tag: u8) -> (Vec<u8>, Vec<u8>) {
        let start = [&[tag][..], &self.claim.split].concat();
        let end = match &self.part.hi {
            Some(h) => [&[tag][..], h].concat(),
            None => vec![tag + 1],
        };
        (start, end)
    }

    /// Copies P's moved ranges into Q, page by page, while writers go on (they log).
    async fn copy(&mut self) -> Result<()> {
        for tag in MOVED_TAGS {
            let (start, end) = self.range(tag);
            // `start` itself first (reads below are after a key), then pages after it.
            let r = self
                .io()
                .operate_read(self.oid, ReadOp::new().omap_get_vals_by_keys(&[&start]))
                .await
                .map_err(err)?;
            let head = r.omap_vals_by_keys.unwrap_or_default();
            if !head.is_empty() {
                self.write_q(WriteOp::new().omap_set(&head)).await?;
            }
            let mut after = start;
            loop {
                let r = self
                    .io()
                    .operate_read(
                        self.oid,
                        ReadOp::new().omap_get_vals(&after, [tag], COPY_BATCH as u64),
                    )
                    .await
                    .map_err(err)?;
                let page = r.omap_vals.unwrap_or_default();
                let more = page.more && !page.entries.is_empty();
                let mut batch: Vec<(Vec<u8>, Bytes)> = vec![];
                let mut bytes = 0;
                let mut past_end = false;
                for (k, v) in page.entries {
                    if k >= end {
                        past_end = true;
                        break;
                    }
                    bytes += k.len() + v.len();
                    after = k.clone();
                    batch.push((k, v));
                    if bytes >= COPY_BYTES {
                        self.write_q(WriteOp::new().omap_set(&batch)).await?;
                        batch.clear();
                        bytes = 0;
                    }
                }
                if !batch.is_empty() {
                    self.write_q(WriteOp::new().omap_set(&batch)).await?;
                }
                self.renew().await?;
                if past_end || !more {
                    break;
                }
            }
        }
        Ok(())
    }

    /// Applies the log entries whose token changed since they were applied: reads each batch
    /// of log entries with the keys they name in one op, and sets or removes those keys in Q.
    /// Returns how many it applied. With `activate` (the final pass), activates Q too, in the
    /// same op as the last page's entries when it has any (one op less while writers wait).
    async fn catch_up(&mut self, activate: bool) -> Result<usize> {
        let mut after = vec![LOG];
        let mut applied = 0;
        let mut activated = false;
        self.passes += 1;
        loop {
            let r = self
                .io()
                .operate_read(
                    self.oid,
                    ReadOp::new().omap_get_vals(&after, [LOG], LOG_PAGE),
                )
                .await
                .map_err(err)?;
            let page = r.omap_vals.unwrap_or_default();
            let more = page.more && !page.entries.is_empty();
            let pending: Vec<Vec<u8>> = page
                .entries
                .iter()
                .filter(|(k, v)| self.applied.get(k) != Some(v))
                .map(|(k, _)| k.clone())
                .collect();
            if let Some((k, _)) = page.entries.last() {
                after = k.clone();
            }
            if !pending.is_empty() {
                applied += pending.len();
                let named: Vec<Vec<u8>> = pending.iter().map(|k| k[1..].to_vec()).collect();
                let both: Vec<Vec<u8>> = pending.iter().chain(&named).cloned().collect();
                let r = self
                    .io()
                    .operate_read(self.oid, ReadOp::new().omap_get_vals_by_keys(&both))
                    .await
                    .map_err(err)?;
                let vals: HashMap<Vec<u8>, Bytes> = r
                    .omap_vals_by_keys
                    .unwrap_or_default()
                    .into_iter()
                    .collect();
                let mut set: Vec<(&[u8], &Bytes)> = vec![];
                let mut rm: Vec<&[u8]> = vec![];
                for k in &named {
                    match vals.get(k) {
                        Some(v) => set.push((k, v)),
                        None => rm.push(k),
                    }
                }
                let mut op = WriteOp::new().omap_set(&set).omap_rm_keys(&rm);
                if activate && !more {
                    op = op.rmxattr(STATE).rmxattr(BUILDER);
                    activated = true;
                }
                self.write_q(op).await?;
                for l in &pending {
                    if let Some(t) = vals.get(l) {
                        self.applied.insert(l.clone(), t.clone());
                    }
                }
            }
            self.renew().await?;
            if !more {
                if activate && !activated {
                    self.activate().await?;
                }
                if activate {
                    // This gateway's waiters of the moved range read Q again now, and the
                    // other gateways' once they hear of it (told beside the clean).
                    self.handover = None;
                    self.unannounced = true;
                }
                self.applied_entries += applied;
                return Ok(applied);
            }
        }
    }

    /// Seals P: its range ends at the split key and `next` names Q; the epoch bump makes
    /// every commit that read the old range read again. The same op shortens the claim to
    /// [`PartitionConfig::sealed_lease`]: from now on writes of the moved range wait for Q.
    async fn seal(&mut self) -> Result<()> {
        for _ in 0..crate::RETRIES {
            let r = self
                .io()
                .operate_read(self.oid, ReadOp::new().getxattrs())
                .await
                .map_err(err)?;
            let p = Part::of(&r);
            let raw = self.claim_for(self.inner.cfg.sealed_lease());
            let op = WriteOp::new()
                .cmpxattr(SPLIT, CmpOp::Eq, &self.claim.raw)
                .cmpxattr(EPOCH, CmpOp::Eq, &p.epoch)
                .setxattr(EPOCH, next_epoch(&p.epoch))
                .setxattr(HI, &self.claim.split)
                .setxattr(NEXT, self.claim.to.as_bytes())
                .setxattr(SPLIT, &raw);
            if self.inner.try_write_at(self.oid, op).await? {
                self.claim = Claim::decode(&raw).expect("encoded above");
                self.renewed = Instant::now();
                self.sealed = true;
                let inner: &'a Inner = self.inner;
                self.handover = Some(inner.routes.hand_over(&self.claim.to));
                self.inner.routes.learn(
                    self.bucket,
                    self.claim.split.clone(),
                    self.claim.to.clone(),
                );
                return Ok(());
            }
            if Part::of(&r).claim.map(|c| c.raw) != Some(self.claim.raw.clone()) {
                return Err(CatalogError::Contended);
            }
        }
        Err(CatalogError::Contended)
    }

    /// Removes Q if it is still this split's (fenced by the builder token).
    async fn drop_q(&self) {
        let op = WriteOp::new()
            .cmpxattr(BUILDER, CmpOp::Eq, self.claim.builder.as_bytes())
            .remove();
        if let Err(e) = self.inner.try_write_at(&self.claim.to, op).await {
            tracing::debug!(error = %e, "removing an unsealed split's partition");
        }
    }

    async fn activate(&self) -> Result<()> {
        self.write_q(WriteOp::new().rmxattr(STATE).rmxattr(BUILDER))
            .await
    }

    /// Cleans P and meanwhile tells the other gateways' waiters that Q is active, if it is
    /// and they were not told. Side by side: the announcement waits up to a second for the
    /// watchers' acks (a dead gateway's watch lingers), which should hold neither the clean
    /// nor the waiters.
    async fn clean_and_announce(&mut self) -> Result<()> {
        let tell = std::mem::take(&mut self.unannounced);
        let me = &*self;
        let (cleaned, ()) = tokio::join!(me.clean(), async {
            if tell {
                crate::activations::Activations::announce(me.io(), &me.claim.to).await;
            }
        });
        cleaned
    }

    /// Removes everything of P at or above the split key (its range ends there now: what
    /// is above is moved, or an earlier split's leftovers), its log and its claim, in one op.
    async fn clean(&self) -> Result<()> {
        let mut op = WriteOp::new().cmpxattr(SPLIT, CmpOp::Eq, &self.claim.raw);
        for tag in MOVED_TAGS {
            let start = [&[tag][..], &self.claim.split].concat();
            op = op.omap_rm_range(start, [tag + 1]);
        }
        op = op.omap_rm_range([LOG], [LOG + 1]).rmxattr(SPLIT);
        self.inner.try_write_at(self.oid, op).await?;
        self.inner.routes.inserts.lock().unwrap().remove(self.oid);
        tracing::info!(
            bucket = self.bucket,
            partition = self.oid,
            new = self.claim.to,
            ms = self.started.elapsed().as_millis() as u64,
            copy_ms = self.copied.map(|d| d.as_millis() as u64),
            catch_up_passes = self.passes,
            logged = self.applied_entries,
            final_pass = self.final_left,
            sealed_ms = self.sealed_for.map(|d| d.as_millis() as u64),
            "index partition split"
        );
        Ok(())
    }
}

fn closing_fields(epoch: &[u8]) -> (i64, Vec<u8>) {
    let s = String::from_utf8_lossy(epoch);
    let rest = s.strip_prefix(CLOSING).unwrap_or_default();
    let (d, old) = rest.split_once('.').unwrap_or((rest, ""));
    (d.parse().unwrap_or(0), old.as_bytes().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_round_trip() {
        let raw = Claim::encode(b"a\x01\x02b", "lode.part.x.1", "tok", 42);
        let c = Claim::decode(&raw).unwrap();
        assert_eq!(c.split, b"a\x01\x02b");
        assert_eq!(
            (c.to.as_str(), c.builder.as_str(), c.deadline_ms),
            ("lode.part.x.1", "tok", 42)
        );
    }

    #[test]
    fn ranges_and_prefixes() {
        let p = Part {
            lo: b"b".to_vec(),
            hi: Some(b"d".to_vec()),
            ..Default::default()
        };
        assert!(p.holds(b"b") && p.holds(b"c\xff") && !p.holds(b"d") && !p.holds(b"a"));
        assert!(p.holds_prefix(b"c") && !p.holds_prefix(b"d") && !p.holds_prefix(b"a"));
        // Every key under "d" is at or above hi "d"; under "c" all are below "d".
        assert!(prefix_below(b"c", b"d") && !prefix_below(b"d", b"da"));
        assert_eq!(next_epoch(b"0000000009"), "0000000010");
    }

    /// Bucket churn cannot grow the caches without bound; forgetting a bucket drops its
    /// scores and counts, but not a running split check's.
    #[test]
    fn route_caches_are_bounded_and_forgotten() {
        let r = Routes::default();
        for i in 0..CACHED_BUCKETS + 10 {
            let b = format!("b{i}");
            r.learn(&b, b"k".to_vec(), format!("lode.part.{b}.1"));
            r.blind_result(&b, true);
        }
        assert!(r.map.lock().unwrap().len() <= CACHED_BUCKETS);
        assert!(r.blind.lock().unwrap().len() <= CACHED_BUCKETS);
        // The newest bucket is always cached.
        let last = format!("b{}", CACHED_BUCKETS + 9);
        assert!(r.route(&last, b"z").is_some());
        {
            let mut ins = r.inserts.lock().unwrap();
            for (oid, running) in [("p1", false), ("p2", true)] {
                ins.insert(
                    oid.into(),
                    Inserts {
                        bucket: last.clone(),
                        running,
                        ..Default::default()
                    },
                );
            }
            ins.insert(
                "other".into(),
                Inserts {
                    bucket: "b0".into(),
                    ..Default::default()
                },
            );
        }
        r.forget(&last);
        assert!(r.route(&last, b"z").is_none());
        assert!(!r.blind.lock().unwrap().contains_key(&last));
        let mut left: Vec<String> = r.inserts.lock().unwrap().keys().cloned().collect();
        left.sort();
        assert_eq!(left, ["other", "p2"]);
    }

    /// A waiter for this gateway's own sealed split wakes when the handover ends, not by a
    /// timer; with no handover of that partition it does not wait at all.
    #[tokio::test]
    async fn waiters_for_an_own_split_wake_when_it_is_handed_over() {
        let r = std::sync::Arc::new(Routes::default());
        assert!(!r.await_handover("q", Duration::from_secs(5)).await);
        let h = r.hand_over("q");
        let r2 = r.clone();
        let t0 = Instant::now();
        let waiter = tokio::spawn(async move {
            let waited = r2.await_handover("q", Duration::from_secs(30)).await;
            (waited, Instant::now())
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!waiter.is_finished(), "woke before the handover ended");
        let dropped = Instant::now();
        drop(h);
        let (waited, woke) = waiter.await.unwrap();
        assert!(waited && woke >= dropped, "woke {:?}", woke - t0);
        assert!(
            woke - dropped < Duration::from_secs(5),
            "{:?}",
            woke - dropped
        );
        assert!(r.handovers.lock().unwrap().is_empty());
        // Another partition's handover does not hold a waiter either.
        let _other = r.hand_over("p");
        assert!(!r.await_handover("q", Duration::from_secs(5)).await);
    }

    #[test]
    fn evenly_filled_partitions_split_at_sizes_spread_over_a_quarter() {
        let cfg = PartitionConfig::default();
        let sizes: Vec<u64> = (0..200)
            .map(|i| cfg.median_split_at(&format!("lode.part.b.{i}")))
            .collect();
        let (lo, hi) = (*sizes.iter().min().unwrap(), *sizes.iter().max().unwrap());
        assert!(
            lo >= cfg.split_keys * 3 / 4 && hi <= cfg.split_keys,
            "{lo}..{hi}"
        );
        // Spread over the quarter, not bunched: every eighth of it is someone's size.
        let eighths: std::collections::BTreeSet<u64> = sizes
            .iter()
            .map(|s| (cfg.split_keys - s) * 8 / (cfg.split_keys / 4))
            .collect();
        assert_eq!(eighths.len(), 8, "{eighths:?}");
        // The same name, the same size (every gateway agrees).
        assert_eq!(cfg.median_split_at("lode.part.b.7"), sizes[7]);
        // Far from the size: the usual interval; close: sooner, never more often than 1/32.
        assert_eq!(cfg.next_check(0, 50_000), cfg.check_every());
        assert_eq!(cfg.next_check(44_000, 50_000), 3_000);
        assert_eq!(cfg.next_check(49_990, 50_000), 50_000 / 32);
        assert_eq!(cfg.next_check(60_000, 50_000), 50_000 / 32);
    }
}
