//! `lode-blob-rados`: the blob store of cluster mode. Every chunk (up to the chunk size, 4 MiB
//! by default) is one RADOS object in the data pool (replicated or erasure-coded: chunks are
//! written once, whole), named `lode.c.<gateway incarnation:8 hex>.<ms:11 hex><seq:5 hex>`: unique,
//! never reused, and telling which gateway run wrote it and when (what a reconciliation of the
//! index against the pool needs to judge an orphan).
//!
//! A write is durable when RADOS acknowledges it (every replica in the acting set has it). A
//! chunk that no committed record names is removed when its writer is dropped.
//!
//! # Writes cut off by a gateway's death: the intent journal
//! A gateway killed in the middle of a write cannot remove that write's chunks, so every
//! gateway run journals what it is about to write, in append logs of the index pool,
//! `lode.intent.<incarnation:08x>.<generation:08x>`, 20-byte records:
//! * an **intent** (before the first chunk of a block is written): a block of up to
//!   [`BLOCK`] chunk names (one millisecond, consecutive sequence numbers) a writer reserves.
//!   Intents are journaled ahead of need, [`AHEAD`] blocks in one append, so a write takes a
//!   block whose intent is already durable and sends its first chunk at once; a block left
//!   unused for 30 s (or a quarter of `dead_after`) is dropped, never used;
//! * a **mark** (in `finish`, sent with the write's last chunks, durable before the catalog
//!   commit that names them): the block's chunks may be committed, so they are never swept.
//!
//! Every run keeps `lode.alive.<incarnation>` fresh (its collector writes the time there every
//! pass). Any gateway's collector that finds a run silent for [`RadosBlobConfig::dead_after`]
//! sweeps its journal: it first **claims** each log (`lode.state`: `live` -> `swept`), then
//! removes the chunks of every block that has an intent and no mark (the names of a block
//! journaled ahead and never used are not there: nothing to remove), then the log. Every
//! append of a run is guarded by `cmpxattr lode.state == live`, so a run that was only paused
//! (SIGSTOP, a network partition) and comes back fails its next mark (or intent: its blocks
//! journaled ahead are stale by then), and its write fails instead of committing chunks that
//! were swept. A gateway killed after a mark and before its commit (the last chunk's write
//! and the commit: milliseconds) leaves that write's chunks as orphans for `lode fsck
//! --cluster --repair`. A live run removes a generation of its journal once it is no longer
//! current and no writer (or block journaled ahead) that journaled in it is still open.
//! Cost: one journal append at a write's end, sent beside its last chunk (none for inline
//! objects); the intents' appends are off the write's path while blocks are ready (one append
//! per [`AHEAD`] writes).
//!
//! # Released chunks: the GC queue
//! Released chunks are removed after a grace period, so that readers on any gateway (which
//! this process cannot see) finish first. They wait in a durable queue, not in this process's
//! memory, so a gateway that dies leaves nothing behind: each gateway run appends to its own
//! log object in the index pool (replicated; appends of a few bytes suit it, not an EC pool),
//! `lode.gc.<incarnation:08x>.<generation:08x>`, one 20-byte record per chunk (release time
//! in ms, the chunk's two name parts; little endian), one append per release, a new
//! generation every MiB. A log is a queue: its xattr `lode.gc.done` (zero-padded decimal) is
//! the offset collected so far. Every gateway runs a collector that walks every log of the
//! namespace, its own and those of gateways that are gone: it removes the chunks whose grace
//! has passed (removing one twice is harmless), moves `done` forward with a guarded write
//! (`cmpxattr done < new`: concurrent collectors never move it back), and removes a log that
//! is fully collected and idle (guarded by its version, so an append racing the removal
//! aborts it). Queue objects, not a growing omap: collection leaves no omap tombstones for
//! RocksDB to skip. The append runs right after the commit that released the chunks; a
//! gateway killed within those milliseconds leaves orphans for fsck.
//!
//! This store does not count references: the RADOS catalog reports a chunk as released only
//! once no record holds it (in cluster mode the object service shares chunks only between
//! versions of one key, which that catalog counts; CopyObject copies the bytes).

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use lode_blob::{
    AlignedBuf, BlobGuard, BlobStore, BlobWriter, ChunkError, ChunkId, ChunkRef, PendingBlobs,
    crc32c,
};
use lode_rados::{CmpOp, IoCtx, RadosError, ReadOp, WriteOp};

/// Tunables of the RADOS blob store.
#[derive(Debug, Clone)]
pub struct RadosBlobConfig {
    /// How long a released chunk stays readable before it is removed.
    pub release_grace: Duration,
    /// A gateway run whose liveness record is older than this is dead: its unfinished writes'
    /// chunks are swept. Must be well above [`RadosBlobConfig::collect_every`] (the liveness
    /// record is refreshed every pass).
    pub dead_after: Duration,
}

impl Default for RadosBlobConfig {
    fn default() -> Self {
        Self {
            release_grace: Duration::from_secs(300),
            dead_after: Duration::from_secs(180),
        }
    }
}

impl RadosBlobConfig {
    /// How often the collector walks the GC logs: a quarter of the grace, 1 to 30 s.
    pub fn collect_every(&self) -> Duration {
        (self.release_grace / 4).clamp(Duration::from_secs(1), Duration::from_secs(30))
    }
}

const GC_PREFIX: &str = "lode.gc.";
const INTENT_PREFIX: &str = "lode.intent.";
const ALIVE_PREFIX: &str = "lode.alive.";
/// The liveness record's xattr (ms, zero-padded) and a journal log's state xattr.
const ALIVE_MS: &str = "lode.alive";
const STATE: &str = "lode.state";
/// Chunk names one journal intent reserves.
pub const BLOCK: u32 = 16;
/// Blocks of chunk names journaled ahead of need (a write's first chunk then waits for no
/// journal append).
const AHEAD: usize = 32;
/// A block journaled ahead is used within this long of its journaling (or a quarter of
/// `dead_after`, if less), else dropped.
const AHEAD_FRESH: Duration = Duration::from_secs(30);
/// Journal record kinds.
const INTENT: u32 = 1;
const MARK: u32 = 2;
/// A run's journal rolls over to a new generation after this many bytes.
const JOURNAL_ROLL: u64 = 1 << 20;
const GC_DONE: &str = "lode.gc.done";
/// Bytes per queued chunk: release ms (u64), incarnation (u32), name offset (u64).
const GC_REC: usize = 20;
/// A gateway's log rolls over to a new generation after this many bytes.
const GC_ROLL: u64 = 1 << 20;
/// At most this much of a log is read per collector pass.
const GC_READ: usize = GC_REC * 8192;

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The `lode.gc.done` value of offset `n` (zero-padded: string order is number order).
fn done_value(n: u64) -> String {
    format!("{n:020}")
}

/// A GC log's size, its collected offset, and the read that found them.
struct LogState {
    read: lode_rados::ReadResult,
    size: u64,
    done: u64,
}

async fn log_state(gc_io: &IoCtx, oid: &str) -> Result<Option<LogState>, RadosError> {
    let read = match gc_io
        .operate_read(oid, ReadOp::new().getxattrs().stat())
        .await
    {
        Err(e) if e.is_not_found() => return Ok(None),
        r => r?,
    };
    let size = read.stat.as_ref().map_or(0, |s| s.size);
    let done = read
        .xattr(GC_DONE)
        .and_then(|v| std::str::from_utf8(v).ok()?.parse().ok())
        .unwrap_or(0);
    Ok(Some(LogState { read, size, done }))
}

/// One GC record: (release ms, the chunk's name parts).
fn parse_record(rec: &[u8]) -> (u64, ChunkId) {
    let t = u64::from_le_bytes(rec[0..8].try_into().expect("8 bytes"));
    let chunk = ChunkId {
        space: u32::from_le_bytes(rec[8..12].try_into().expect("4 bytes")),
        index: u64::from_le_bytes(rec[12..20].try_into().expect("8 bytes")),
        len: 0,
    };
    (t, chunk)
}

/// The chunk objects queued in the GC logs of `gc_io` and not collected yet: released, to be
/// removed after their grace (what `lode fsck --cluster` must not call orphans).
pub async fn queued_chunks(
    gc_io: &IoCtx,
) -> Result<std::collections::BTreeSet<String>, RadosError> {
    let mut out = std::collections::BTreeSet::new();
    for oid in gc_io.list_objects(Some(GC_PREFIX)).await? {
        let Some(st) = log_state(gc_io, &oid).await? else {
            continue;
        };
        if st.done >= st.size {
            continue;
        }
        let data = gc_io
            .read(&oid, st.done, (st.size - st.done) as usize)
            .await?;
        for rec in data.chunks_exact(GC_REC) {
            out.insert(chunk_oid(&parse_record(rec).1));
        }
    }
    Ok(out)
}

/// What one collector pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct GcPass {
    /// Logs walked.
    pub logs: u64,
    /// Chunks removed (or found gone already).
    pub removed: u64,
    /// Logs removed, fully collected and idle.
    pub logs_removed: u64,
    /// Queued chunks still in their grace period.
    pub waiting: u64,
    /// Chunks of writes cut off by a gateway run's death, swept from its journal.
    pub swept: u64,
}

struct Inner {
    io: IoCtx,
    /// Where the GC logs live (the index pool's namespace).
    gc_io: IoCtx,
    incarnation: u32,
    seq: AtomicU64,
    journal: std::sync::Mutex<Journal>,
    /// Held by the task writing the journal's queued appends.
    flush_lock: tokio::sync::Mutex<()>,
    /// Blocks journaled ahead of need, with when.
    ahead: std::sync::Mutex<VecDeque<(Block, Instant)>>,
    /// A task (or a waiting writer) is journaling blocks ahead.
    refilling: std::sync::atomic::AtomicBool,
    /// Writes that found no block ready and waited for a journal append.
    journal_waits: AtomicU64,
    /// The liveness record exists (written before the first intent).
    alive: tokio::sync::OnceCell<()>,
    /// Bytes appended to this run's GC logs (the generation is `gc_bytes / GC_ROLL`).
    gc_bytes: AtomicU64,
    collector: std::sync::Once,
    cfg: RadosBlobConfig,
    /// The data pool's free and total bytes (`ceph df`, refreshed by the collector's task;
    /// 0, 0 while unknown).
    space: (AtomicU64, AtomicU64),
}

pub struct RadosBlobStore {
    inner: Arc<Inner>,
}

/// How often the data pool's capacity is read from the cluster (`ceph df`; the mgr refreshes
/// its figures every few seconds).
const SPACE_EVERY: Duration = Duration::from_secs(10);

/// The RADOS object name of a chunk: its writer's incarnation (the id's `space`) and its
/// number within that incarnation (`index`).
pub fn chunk_oid(c: &ChunkId) -> String {
    format!("lode.c.{:08x}.{:016x}", c.space, c.index)
}

fn io_err(e: RadosError) -> ChunkError {
    match e.errno() {
        // A pool at its quota, or an OSD past the full ratio for a FULL_TRY op: out of space
        // (507 InsufficientStorage), as a full device is in single-node mode.
        libc::ENOSPC | libc::EDQUOT => ChunkError::NoSpace,
        errno => ChunkError::Io(std::io::Error::from_raw_os_error(errno)),
    }
}

/// A journal append that failed (its errno): a claimed journal (this run was taken for dead
/// while paused) fails the write like an unreachable cluster.
fn journal_err(errno: i32) -> ChunkError {
    if errno == libc::ECANCELED || errno == libc::ENOENT {
        tracing::error!(
            "this gateway run's intent journal was swept (it was taken for dead): refusing the write"
        );
        ChunkError::Io(std::io::Error::from_raw_os_error(libc::ETIMEDOUT))
    } else {
        ChunkError::Io(std::io::Error::from_raw_os_error(errno))
    }
}

impl RadosBlobStore {
    /// A store writing chunks into `io`'s pool and namespace, queueing released chunks in
    /// `gc_io` (a replicated pool: the index pool's namespace).
    pub fn new(io: IoCtx, gc_io: IoCtx, cfg: RadosBlobConfig) -> Self {
        Self {
            inner: Arc::new(Inner {
                io,
                gc_io,
                incarnation: rand::random(),
                seq: AtomicU64::new(0),
                journal: Default::default(),
                flush_lock: tokio::sync::Mutex::new(()),
                ahead: Default::default(),
                refilling: Default::default(),
                journal_waits: AtomicU64::new(0),
                alive: tokio::sync::OnceCell::new(),
                gc_bytes: AtomicU64::new(0),
                collector: std::sync::Once::new(),
                cfg,
                space: Default::default(),
            }),
        }
    }

    /// Starts this gateway's collector (once; the first release starts it too): a pass over
    /// every GC log of the namespace every [`RadosBlobConfig::collect_every`]. Needs a tokio
    /// runtime.
    pub fn start_collector(&self) {
        self.inner.start_collector();
    }

    /// One collector pass over every GC log of the namespace, now.
    pub async fn collect_once(&self) -> Result<GcPass, RadosError> {
        self.inner.collect_once().await
    }

    /// How many writes found no block of chunk names journaled ahead and waited for the
    /// journal append before their first chunk.
    pub fn journal_waits(&self) -> u64 {
        self.inner.journal_waits.load(Ordering::Relaxed)
    }
}

/// This run's intent journal: the current generation, its size, and the open writers that
/// journaled in each generation.
#[derive(Default)]
struct Journal {
    /// Appends waiting for the next group write (in order).
    queue: Vec<Queued>,
    bytes: u64,
    /// Generations created (their logs exist, state `live`).
    created: std::collections::BTreeSet<u32>,
    open: std::collections::BTreeMap<u32, usize>,
}

/// A journal append waiting for the next group write.
struct Queued {
    generation: u32,
    /// The first append of its generation: creates the log.
    create: bool,
    rec: Vec<u8>,
    done: tokio::sync::oneshot::Sender<Result<(), i32>>,
}

/// A block of chunk names a writer reserved: the first name's offset, how many it used, and
/// the journal generation that holds its intent.
#[derive(Debug, Clone, Copy)]
struct Block {
    base: u64,
    used: u32,
    generation: u32,
}

fn journal_oid(incarnation: u32, generation: u32) -> String {
    format!("{INTENT_PREFIX}{incarnation:08x}.{generation:08x}")
}

fn record(kind: u32, base: u64, count: u32) -> Vec<u8> {
    let mut r = Vec::with_capacity(GC_REC);
    r.extend_from_slice(&kind.to_le_bytes());
    r.extend_from_slice(&base.to_le_bytes());
    r.extend_from_slice(&count.to_le_bytes());
    r.extend_from_slice(&0u32.to_le_bytes());
    r
}

impl Inner {
    /// A block of [`BLOCK`] chunk names whose intent is durable, for a writer counted in the
    /// journal generations `counted`. Blocks are journaled ahead of need ([`AHEAD`] at a
    /// time, in one append): a write takes one that is ready and its first chunk goes out at
    /// once; only when none is ready does it wait for the append, which journals the next
    /// blocks with its own.
    async fn reserve(self: &Arc<Self>, counted: &mut Vec<u32>) -> Result<Block, ChunkError> {
        let b = match self.take_ahead() {
            Some(b) => {
                self.refill();
                b
            }
            None => {
                self.journal_waits.fetch_add(1, Ordering::Relaxed);
                let lead = !self.refilling.swap(true, Ordering::AcqRel);
                let r = self.journal_blocks(if lead { 1 + AHEAD } else { 1 }).await;
                if lead {
                    self.refilling.store(false, Ordering::Release);
                }
                let mut blocks = r?.into_iter();
                let b = blocks.next().expect("one block at least");
                let now = Instant::now();
                self.ahead
                    .lock()
                    .expect("ahead")
                    .extend(blocks.map(|b| (b, now)));
                b
            }
        };
        // The block's hold on its generation passes to the writer (one per writer).
        if counted.contains(&b.generation) {
            self.writer_done(&[b.generation]);
        } else {
            counted.push(b.generation);
        }
        Ok(b)
    }

    /// A block journaled ahead, if one is fresh (its names carry the time it was reserved,
    /// which `lode fsck --cluster` reads as the chunk's age; and a run paused past
    /// `dead_after` must journal anew, so that its swept journal fails the write before any
    /// chunk is written). Stale ones are dropped.
    fn take_ahead(self: &Arc<Self>) -> Option<Block> {
        let fresh = self.cfg.dead_after.min(AHEAD_FRESH * 4) / 4;
        let mut stale = vec![];
        let b = {
            let mut ahead = self.ahead.lock().expect("ahead");
            loop {
                match ahead.pop_front() {
                    Some((b, at)) if at.elapsed() < fresh => break Some(b),
                    Some((b, _)) => stale.push(b.generation),
                    None => break None,
                }
            }
        };
        self.writer_done(&stale);
        b
    }

    /// Tops the blocks journaled ahead up to [`AHEAD`], in the background.
    fn refill(self: &Arc<Self>) {
        if self.ahead.lock().expect("ahead").len() * 2 > AHEAD
            || self.refilling.swap(true, Ordering::AcqRel)
        {
            return;
        }
        let Ok(h) = tokio::runtime::Handle::try_current() else {
            self.refilling.store(false, Ordering::Release);
            return;
        };
        let me = Arc::clone(self);
        h.spawn(async move {
            let n = AHEAD.saturating_sub(me.ahead.lock().expect("ahead").len());
            match me.journal_blocks(n.max(1)).await {
                Ok(blocks) => {
                    let now = Instant::now();
                    me.ahead
                        .lock()
                        .expect("ahead")
                        .extend(blocks.into_iter().map(|b| (b, now)));
                }
                Err(e) => tracing::debug!(error = %e, "journaling chunk names ahead failed"),
            }
            me.refilling.store(false, Ordering::Release);
        });
    }

    /// Reserves `n` blocks of [`BLOCK`] chunk names (one millisecond, consecutive sequence
    /// numbers each) and journals their intents, durably, in one append. Each block holds its
    /// journal generation (counted open) until a writer takes that hold over or it is dropped;
    /// on error the holds are let go here.
    async fn journal_blocks(self: &Arc<Self>, n: usize) -> Result<Vec<Block>, ChunkError> {
        self.alive
            .get_or_try_init(|| async {
                self.heartbeat().await.map_err(io_err)?;
                Ok::<(), ChunkError>(())
            })
            .await?;
        let ms = now_ms();
        let mut blocks = Vec::with_capacity(n);
        let mut waits = Vec::with_capacity(n);
        {
            // The generation, whether this append creates its log, and the queue position are
            // decided together: a log's creating append is queued before any other of it.
            let mut j = self.journal.lock().expect("journal");
            for _ in 0..n {
                let seq = loop {
                    let s = self.seq.fetch_add(u64::from(BLOCK), Ordering::Relaxed) & 0xf_ffff;
                    // A block never wraps the 20-bit sequence inside one name's millisecond.
                    if s + u64::from(BLOCK) <= 0x10_0000 {
                        break s;
                    }
                };
                let base = (ms << 20) | seq;
                let g = (j.bytes / JOURNAL_ROLL) as u32;
                j.bytes += GC_REC as u64;
                *j.open.entry(g).or_default() += 1;
                let create = j.created.insert(g);
                waits.push(Self::enqueue(
                    &mut j,
                    g,
                    create,
                    record(INTENT, base, BLOCK),
                ));
                blocks.push(Block {
                    base,
                    used: 0,
                    generation: g,
                });
            }
        }
        let mut failed = None;
        for w in waits {
            if let Err(e) = self.append(w).await {
                failed.get_or_insert(e);
            }
        }
        match failed {
            None => Ok(blocks),
            Some(e) => {
                let held: Vec<u32> = blocks.iter().map(|b| b.generation).collect();
                self.writer_done(&held);
                Err(e)
            }
        }
    }

    /// Marks `blocks` as written (their chunks may be committed now: never swept).
    async fn mark(&self, blocks: &[Block]) -> Result<(), ChunkError> {
        let waits: Vec<_> = {
            let mut j = self.journal.lock().expect("journal");
            blocks
                .iter()
                .filter(|b| b.used > 0)
                .map(|b| Self::enqueue(&mut j, b.generation, false, record(MARK, b.base, b.used)))
                .collect()
        };
        for w in waits {
            self.append(w).await?;
        }
        Ok(())
    }

    fn enqueue(
        j: &mut Journal,
        generation: u32,
        create: bool,
        rec: Vec<u8>,
    ) -> tokio::sync::oneshot::Receiver<Result<(), i32>> {
        let (done, rx) = tokio::sync::oneshot::channel();
        j.queue.push(Queued {
            generation,
            create,
            rec,
            done,
        });
        rx
    }

    /// Waits until a queued append is written. Group commit: whoever holds the flush lock
    /// writes everything queued so far, one append per log (concurrent writers share ops on
    /// their run's one journal object instead of queueing behind each other there). A writer
    /// whose append another leader wrote returns at once instead of waiting for the lock and
    /// leading a flush of later appends (with a cluster that does not answer, every flush
    /// takes the op timeout, and a queue of such waits would hold a request for many).
    async fn append(
        &self,
        mut done: tokio::sync::oneshot::Receiver<Result<(), i32>>,
    ) -> Result<(), ChunkError> {
        let r = tokio::select! {
            biased;
            r = &mut done => r,
            leader = self.flush_lock.lock() => {
                let batch = std::mem::take(&mut self.journal.lock().expect("journal").queue);
                if !batch.is_empty() {
                    self.flush(batch).await;
                }
                drop(leader);
                // Queued before the lock was taken: in this batch, or in an earlier one whose
                // leader let go of the lock only once it was written.
                done.await
            }
        };
        match r {
            Ok(Ok(())) => Ok(()),
            Ok(Err(errno)) => Err(journal_err(errno)),
            Err(_) => Err(ChunkError::Io(std::io::Error::other("journal append lost"))),
        }
    }

    async fn flush(&self, batch: Vec<Queued>) {
        let mut groups: std::collections::BTreeMap<u32, (bool, Vec<u8>, Vec<_>)> =
            Default::default();
        for q in batch {
            let g = groups.entry(q.generation).or_default();
            g.0 |= q.create;
            g.1.extend(q.rec);
            g.2.push(q.done);
        }
        for (generation, (create, data, waiting)) in groups {
            let op = if create {
                WriteOp::new()
                    .create(true)
                    .setxattr(STATE, "live")
                    .append(data)
            } else {
                WriteOp::new()
                    .cmpxattr(STATE, CmpOp::Eq, "live")
                    .append(data)
            };
            let r = self
                .gc_io
                .operate_write(&journal_oid(self.incarnation, generation), op)
                .await
                .map(|_| ())
                .map_err(|e| e.errno());
            for w in waiting {
                let _ = w.send(r);
            }
        }
    }

    /// A writer that journaled in `generations` is done: a generation that is no longer
    /// current and has no open writer left goes.
    fn writer_done(self: &Arc<Self>, generations: &[u32]) {
        // Every write takes a block (and lets go of none stale, mostly): no lock for nothing.
        if generations.is_empty() {
            return;
        }
        let mut gone = vec![];
        {
            let mut j = self.journal.lock().expect("journal");
            let current = (j.bytes / JOURNAL_ROLL) as u32;
            for g in generations {
                let n = j.open.entry(*g).or_default();
                *n = n.saturating_sub(1);
                if *n == 0 {
                    j.open.remove(g);
                    if *g < current {
                        gone.push(*g);
                    }
                }
            }
        }
        if gone.is_empty() {
            return;
        }
        let me = Arc::clone(self);
        if let Ok(h) = tokio::runtime::Handle::try_current() {
            h.spawn(async move {
                for g in gone {
                    let op = WriteOp::new().cmpxattr(STATE, CmpOp::Eq, "live").remove();
                    if let Err(e) = me
                        .gc_io
                        .operate_write(&journal_oid(me.incarnation, g), op)
                        .await
                    {
                        tracing::debug!(error = %e, "removing an old journal generation");
                    }
                }
            });
        }
    }

    /// Refreshes this run's liveness record.
    async fn heartbeat(&self) -> Result<(), RadosError> {
        let oid = format!("{ALIVE_PREFIX}{:08x}", self.incarnation);
        let op = WriteOp::new()
            .create(false)
            .setxattr(ALIVE_MS, format!("{:020}", now_ms()));
        self.gc_io.operate_write(&oid, op).await.map(|_| ())
    }

    /// Sweeps the journals of runs silent for `dead_after`: claims each log, removes the
    /// chunks of blocks with an intent and no mark, removes the log, then the liveness record.
    async fn sweep_dead(&self, pass: &mut GcPass) -> Result<(), RadosError> {
        // Never less than three of the passes that refresh a live run's record.
        let dead_after = self.cfg.dead_after.max(self.cfg.collect_every() * 3);
        let dead_ms = now_ms().saturating_sub(dead_after.as_millis() as u64);
        let alive = self.gc_io.list_objects(Some(ALIVE_PREFIX)).await?;
        let journals = self.gc_io.list_objects(Some(INTENT_PREFIX)).await?;
        for a in alive {
            let Some(inc) = a.strip_prefix(ALIVE_PREFIX) else {
                continue;
            };
            if inc == format!("{:08x}", self.incarnation) {
                continue;
            }
            let seen = match self.gc_io.getxattr(&a, ALIVE_MS).await {
                Ok(v) => v
                    .and_then(|v| std::str::from_utf8(&v).ok()?.parse::<u64>().ok())
                    .unwrap_or(0),
                Err(e) if e.is_not_found() => continue,
                Err(e) => return Err(e),
            };
            if seen > dead_ms {
                continue;
            }
            let Ok(incarnation) = u32::from_str_radix(inc, 16) else {
                continue;
            };
            let prefix = format!("{INTENT_PREFIX}{inc}.");
            for log in journals.iter().filter(|j| j.starts_with(&prefix)) {
                self.sweep_log(incarnation, log, pass).await?;
            }
            // Guarded by the time seen: a run that came back keeps its record.
            let op = WriteOp::new()
                .cmpxattr(ALIVE_MS, CmpOp::Eq, format!("{seen:020}"))
                .remove();
            match self.gc_io.operate_write(&a, op).await {
                Ok(_) => {
                    tracing::info!(run = inc, "swept the journal of a gateway run that is gone")
                }
                Err(e) if e.is_canceled() || e.is_not_found() => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    async fn sweep_log(
        &self,
        incarnation: u32,
        log: &str,
        pass: &mut GcPass,
    ) -> Result<(), RadosError> {
        // Claim it first: the run's later appends (it was only paused) now fail.
        let claim = WriteOp::new()
            .cmpxattr(STATE, CmpOp::Eq, "live")
            .setxattr(STATE, "swept");
        match self.gc_io.operate_write(log, claim).await {
            Ok(_) => {}
            // Claimed by another sweeper already (that may have died): go on, it is idempotent.
            Err(e) if e.is_canceled() => {}
            Err(e) if e.is_not_found() => return Ok(()),
            Err(e) => return Err(e),
        }
        let data = self.gc_io.read_full(log).await?;
        let mut intents: std::collections::BTreeMap<u64, u32> = Default::default();
        let mut marked: std::collections::BTreeSet<u64> = Default::default();
        for r in data.chunks_exact(GC_REC) {
            let kind = u32::from_le_bytes(r[0..4].try_into().expect("4 bytes"));
            let base = u64::from_le_bytes(r[4..12].try_into().expect("8 bytes"));
            let count = u32::from_le_bytes(r[12..16].try_into().expect("4 bytes"));
            match kind {
                INTENT => {
                    intents.insert(base, count);
                }
                MARK => {
                    marked.insert(base);
                }
                _ => {}
            }
        }
        for (base, count) in intents {
            if marked.contains(&base) {
                continue;
            }
            for i in 0..u64::from(count) {
                let c = ChunkId {
                    space: incarnation,
                    index: base + i,
                    len: 0,
                };
                match self.io.remove(&chunk_oid(&c)).await {
                    Ok(()) => pass.swept += 1,
                    Err(e) if e.is_not_found() => {}
                    Err(e) => return Err(e),
                }
            }
        }
        match self.gc_io.remove(log).await {
            Err(e) if !e.is_not_found() => Err(e),
            _ => Ok(()),
        }
    }

    fn start_collector(self: &Arc<Self>) {
        let Ok(h) = tokio::runtime::Handle::try_current() else {
            return;
        };
        self.collector.call_once(|| {
            let me = Arc::downgrade(self);
            let every = self.cfg.collect_every();
            h.spawn(async move {
                loop {
                    tokio::time::sleep(every).await;
                    let Some(me) = me.upgrade() else { return };
                    match me.collect_once().await {
                        Ok(p) if p.removed > 0 || p.logs_removed > 0 || p.swept > 0 => {
                            tracing::debug!(
                                removed = p.removed,
                                swept = p.swept,
                                logs_removed = p.logs_removed,
                                waiting = p.waiting,
                                "released chunks collected"
                            )
                        }
                        Ok(_) => {}
                        Err(e) => tracing::warn!(error = %e, "a GC pass failed (retried)"),
                    }
                }
            });
            let me = Arc::downgrade(self);
            h.spawn(async move {
                loop {
                    let Some(inner) = me.upgrade() else { return };
                    inner.refresh_space().await;
                    drop(inner);
                    tokio::time::sleep(SPACE_EVERY).await;
                }
            });
        });
    }

    /// The data pool's capacity from `ceph df` (user bytes: `stored` + `max_avail`, what
    /// CephFS reports for a one-pool file system). Unknown (0, 0) without figures.
    async fn refresh_space(&self) {
        match self.io.cluster().pool_space(self.io.pool_name()).await {
            Ok(Some(p)) => {
                self.space.0.store(p.max_avail, Ordering::Relaxed);
                self.space
                    .1
                    .store(p.stored.saturating_add(p.max_avail), Ordering::Relaxed);
            }
            Ok(None) => {
                self.space.0.store(0, Ordering::Relaxed);
                self.space.1.store(0, Ordering::Relaxed);
            }
            Err(e) => {
                tracing::debug!(error = %e, "ceph df failed (capacity unknown until it answers)")
            }
        }
    }

    /// The log this run appends `n` more bytes to.
    fn gc_log(&self, n: u64) -> String {
        let at = self.gc_bytes.fetch_add(n, Ordering::Relaxed);
        format!("{GC_PREFIX}{:08x}.{:08x}", self.incarnation, at / GC_ROLL)
    }

    /// Queues released chunks in this run's GC log (one append).
    fn queue(self: &Arc<Self>, chunks: Vec<ChunkRef>) {
        if chunks.is_empty() {
            return;
        }
        self.start_collector();
        let t = now_ms();
        let mut rec = Vec::with_capacity(chunks.len() * GC_REC);
        for c in &chunks {
            rec.extend_from_slice(&t.to_le_bytes());
            rec.extend_from_slice(&c.id.space.to_le_bytes());
            rec.extend_from_slice(&c.id.index.to_le_bytes());
        }
        let oid = self.gc_log(rec.len() as u64);
        let me = Arc::clone(self);
        let run = async move {
            if let Err(e) = me
                .gc_io
                .operate_write(&oid, WriteOp::new().append(rec))
                .await
            {
                tracing::warn!(error = %e, log = %oid, chunks = chunks.len(), "queueing released chunks failed: they stay as orphans for fsck");
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(h) => {
                h.spawn(run);
            }
            Err(_) => tracing::warn!("no runtime to queue released chunks: left as orphans"),
        }
    }

    async fn collect_once(&self) -> Result<GcPass, RadosError> {
        let mut pass = GcPass::default();
        if self.alive.initialized() {
            self.heartbeat().await?;
        }
        for oid in self.gc_io.list_objects(Some(GC_PREFIX)).await? {
            pass.logs += 1;
            self.collect_log(&oid, &mut pass).await?;
        }
        self.sweep_dead(&mut pass).await?;
        Ok(pass)
    }

    /// Collects what is due in one log, and removes the log once it is done and idle.
    async fn collect_log(&self, oid: &str, pass: &mut GcPass) -> Result<(), RadosError> {
        let Some(LogState {
            read: r,
            size,
            done,
        }) = log_state(&self.gc_io, oid).await?
        else {
            return Ok(());
        };
        if done >= size {
            let idle = r
                .stat
                .as_ref()
                .and_then(|s| s.mtime.elapsed().ok())
                .is_some_and(|d| d >= self.cfg.release_grace * 2);
            if idle {
                let op = WriteOp::new().assert_version(r.version).remove();
                match self.gc_io.operate_write(oid, op).await {
                    Ok(_) => pass.logs_removed += 1,
                    Err(e) if e.is_not_found() || e.is_version_mismatch() || e.is_canceled() => {}
                    Err(e) => return Err(e),
                }
            }
            return Ok(());
        }
        let want = ((size - done) as usize).min(GC_READ) / GC_REC * GC_REC;
        let data = self.gc_io.read(oid, done, want).await?;
        let due = now_ms().saturating_sub(self.cfg.release_grace.as_millis() as u64);
        let mut upto = done;
        for rec in data.chunks_exact(GC_REC) {
            let (t, chunk) = parse_record(rec);
            if t > due {
                pass.waiting += ((data.len() as u64 + done) - upto) / GC_REC as u64;
                break;
            }
            match self.io.remove(&chunk_oid(&chunk)).await {
                Ok(()) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => {
                    tracing::warn!(error = %e, chunk = %chunk_oid(&chunk), "removing a released chunk failed (retried next pass)");
                    break;
                }
            }
            pass.removed += 1;
            upto += GC_REC as u64;
        }
        if upto > done {
            let next = done_value(upto);
            let op = WriteOp::new()
                .cmpxattr(GC_DONE, CmpOp::Lt, &next)
                .setxattr(GC_DONE, &next);
            match self.gc_io.operate_write(oid, op).await {
                Ok(_) => {}
                // Another collector got further first, or the log went: nothing lost.
                Err(e) if e.is_canceled() || e.is_not_found() => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Removes chunks that no committed record names (an unfinished write), once their writes
    /// are done.
    fn remove_now(self: &Arc<Self>, chunks: Vec<ChunkRef>) {
        if chunks.is_empty() {
            return;
        }
        let me = Arc::clone(self);
        let run = async move {
            for c in chunks {
                match me.io.remove(&chunk_oid(&c.id)).await {
                    Ok(()) => {}
                    Err(e) if e.is_not_found() => {}
                    Err(e) => {
                        tracing::warn!(error = %e, chunk = %chunk_oid(&c.id), "removing a released chunk failed (an orphan for fsck)")
                    }
                }
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(h) => {
                h.spawn(run);
            }
            Err(_) => tracing::warn!("no runtime to remove released chunks: left as orphans"),
        }
    }
}

struct Writer {
    inner: Arc<Inner>,
    depth: usize,
    inflight: VecDeque<tokio::task::JoinHandle<Result<ChunkRef, ChunkError>>>,
    done: Vec<ChunkRef>,
    /// The journaled blocks of chunk names, the last one being filled.
    blocks: Vec<Block>,
    /// The journal generations this writer is counted in.
    generations: Vec<u32>,
}

impl Writer {
    async fn reap_one(&mut self) -> Result<(), ChunkError> {
        if let Some(h) = self.inflight.pop_front() {
            let c = h
                .await
                .map_err(|e| ChunkError::Io(std::io::Error::other(e)))??;
            self.done.push(c);
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl BlobWriter for Writer {
    async fn push(&mut self, buf: AlignedBuf) -> Result<(), ChunkError> {
        while self.inflight.len() >= self.depth {
            self.reap_one().await?;
        }
        let data = Bytes::copy_from_slice(&buf);
        if self.blocks.last().is_none_or(|b| b.used >= BLOCK) {
            let b = self.inner.reserve(&mut self.generations).await?;
            self.blocks.push(b);
        }
        let b = self.blocks.last_mut().expect("reserved");
        let id = ChunkId {
            space: self.inner.incarnation,
            index: b.base + u64::from(b.used),
            len: data.len() as u32,
        };
        b.used += 1;
        let inner = Arc::clone(&self.inner);
        self.inflight.push_back(tokio::spawn(async move {
            let crc = crc32c(&data);
            let len = data.len() as u32;
            inner
                .io
                .write_full(&chunk_oid(&id), data)
                .await
                .map_err(io_err)?;
            Ok(ChunkRef {
                id,
                data_len: len,
                crc32c: crc,
            })
        }));
        Ok(())
    }

    async fn drain(&mut self) -> Result<(), ChunkError> {
        while !self.inflight.is_empty() {
            self.reap_one().await?;
        }
        Ok(())
    }

    async fn finish(
        mut self: Box<Self>,
    ) -> Result<(Vec<ChunkRef>, Box<dyn PendingBlobs>), ChunkError> {
        // Journaled as written before the catalog commit names them (never swept after), sent
        // with the last chunks' writes rather than after them: the commit waits for both.
        let (inner, blocks) = (Arc::clone(&self.inner), self.blocks.clone());
        let (written, marked) = tokio::join!(self.drain(), inner.mark(&blocks));
        written?;
        marked?;
        let chunks = std::mem::take(&mut self.done);
        Ok((
            chunks.clone(),
            Box::new(Pending {
                inner: Arc::clone(&self.inner),
                chunks,
            }),
        ))
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.inner.writer_done(&self.generations);
        // Chunks of a write that never finished: remove them once their writes are done.
        let pending = std::mem::take(&mut self.inflight);
        let done = std::mem::take(&mut self.done);
        if pending.is_empty() && done.is_empty() {
            return;
        }
        let inner = Arc::clone(&self.inner);
        if let Ok(h) = tokio::runtime::Handle::try_current() {
            h.spawn(async move {
                let mut all = done;
                for p in pending {
                    if let Ok(Ok(c)) = p.await {
                        all.push(c);
                    }
                }
                inner.remove_now(all);
            });
        }
    }
}

struct Pending {
    inner: Arc<Inner>,
    chunks: Vec<ChunkRef>,
}

impl PendingBlobs for Pending {
    fn commit(mut self: Box<Self>) {
        self.chunks.clear();
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        let chunks = std::mem::take(&mut self.chunks);
        self.inner.remove_now(chunks);
    }
}

#[async_trait::async_trait]
impl BlobStore for RadosBlobStore {
    fn backend_name(&self) -> &'static str {
        "rados"
    }

    fn writer(&self, depth: usize) -> Box<dyn BlobWriter> {
        Box::new(Writer {
            inner: Arc::clone(&self.inner),
            depth: depth.max(1),
            inflight: VecDeque::new(),
            done: vec![],
            blocks: vec![],
            generations: vec![],
        })
    }

    async fn read(&self, chunk: &ChunkRef) -> Result<Bytes, ChunkError> {
        let data = self
            .inner
            .io
            .read(&chunk_oid(&chunk.id), 0, chunk.data_len as usize)
            .await
            .map_err(io_err)?;
        let actual = crc32c(&data);
        if data.len() != chunk.data_len as usize || actual != chunk.crc32c {
            tracing::error!(chunk = %chunk_oid(&chunk.id), "chunk crc32c or length mismatch");
            return Err(ChunkError::Corrupt {
                chunk: chunk.id,
                expected: chunk.crc32c,
                actual,
            });
        }
        Ok(data)
    }

    fn read_guard(&self) -> BlobGuard {
        // Readers anywhere in the cluster are covered by the release grace period.
        Box::new(())
    }

    fn ids_are_never_reused(&self) -> bool {
        // A chunk object's name carries its writer's incarnation and a sequence number; it is
        // written once, whole, and removed (never rewritten) after its release grace.
        true
    }

    fn release(&self, chunks: Vec<ChunkRef>) {
        self.inner.queue(chunks);
    }

    fn space(&self) -> (u64, u64) {
        (
            self.inner.space.0.load(Ordering::Relaxed),
            self.inner.space.1.load(Ordering::Relaxed),
        )
    }

    fn is_poisoned(&self) -> bool {
        false
    }
}
