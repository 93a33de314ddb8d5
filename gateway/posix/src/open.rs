//! Files open on the mount: their staging copy and what a close or fsync commits.
//!
//! A file written through the mount is staged (random writes, overwrites and truncation work
//! as on any file system), and committed as one new object version, MD5 ETag and all, by the
//! same commit protocol as a PUT when it is closed or fsynced. Until then S3 readers see the
//! previous version, never part of the new one.
//!
//! Small content is staged in memory (up to [`IN_MEMORY`] bytes a file, within a budget of
//! [`MEMORY_BUDGET`] bytes for all open files); past that it moves to an anonymous local file.
//! A dataset written as many small files thus costs no local file per file.
//!
//! A file written front to back (a checkpoint, a `cp`, a shard) does not stage at all once it
//! outgrows memory: its bytes stream into the object service as they are written ([`Streaming`]:
//! MD5, checksums and chunk writes overlap the writes), and its close waits only for the tail and
//! the commit. A write anywhere but the end, a read, or a truncate turns it back into a staged
//! file, its content read back from the chunks it went to (which are then freed).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use bytes::Bytes;
use futures::Stream;
use lode_objects::{Integrity, ObjResult, ObjectMeta, ObjectService, TakenIn, WriteCond};

use super::names::Attrs;
use crate::error::ToErrno;
use crate::slots::{Slot, Slots};

/// What `stat` shows of an open file without waiting for its data lock.
#[derive(Debug, Clone, Copy)]
pub struct Snapshot {
    pub size: u64,
    pub mtime: SystemTime,
    pub attrs: Attrs,
}

/// Staged content up to this size stays in memory.
pub const IN_MEMORY: u64 = 256 << 10;
/// At most this many bytes of all open files are staged in memory at once.
pub const MEMORY_BUDGET: u64 = 256 << 20;

/// At most this many files stream into chunks at once (past that, a file stages locally): each
/// holds up to [`STREAM_DEPTH`] pieces of at most 1 MiB (the mount's `max_write`) on their way,
/// and the take-in's chunk buffers (a chunk filling, and up to four in flight to the device):
/// about 30 MiB of memory a stream at most, 0.5 GiB for all.
pub const MAX_STREAMS: usize = 16;
/// Pieces of a streaming file in flight between the FUSE thread and the object service.
const STREAM_DEPTH: usize = 8;

/// The places of the files streaming, each held while its file streams.
static STREAMS: Slots = Slots::new(MAX_STREAMS);

/// Bytes of [`MEMORY_BUDGET`] not taken.
static BUDGET_LEFT: AtomicU64 = AtomicU64::new(MEMORY_BUDGET);

/// Takes `n` bytes of the memory budget, if that many are left.
fn take_budget(n: u64) -> bool {
    BUDGET_LEFT
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |left| {
            left.checked_sub(n)
        })
        .is_ok()
}

fn give_budget(n: u64) {
    BUDGET_LEFT.fetch_add(n, Ordering::AcqRel);
}

/// The staged content of an open file: its bytes (the length is the file's size) in memory,
/// or an anonymous local file. Made empty ([`Staging::new`]), so the memory it holds is
/// always what it took of the budget.
pub struct Staging(Store);

enum Store {
    Mem(Vec<u8>),
    File(Arc<File>),
}

impl Staging {
    /// Empty, in memory.
    pub fn new() -> Self {
        Staging(Store::Mem(Vec::new()))
    }

    /// Moves the content to an anonymous file in `dir` unless it stays in memory at `len`
    /// bytes.
    fn fit(&mut self, dir: &Path, len: u64) -> std::io::Result<()> {
        let Store::Mem(v) = &self.0 else {
            return Ok(());
        };
        let have = v.len() as u64;
        if len <= have || (len <= IN_MEMORY && take_budget(len - have)) {
            return Ok(());
        }
        let f = staging_file(dir)?;
        f.write_all_at(v, 0)?;
        // The old content's budget goes back as it is dropped (`Drop for Staging` is not
        // involved: only the inner value is replaced).
        give_budget(have);
        self.0 = Store::File(Arc::new(f));
        Ok(())
    }

    /// Writes `data` at `off` (a hole before it reads as zeros).
    pub fn write_at(&mut self, dir: &Path, data: &[u8], off: u64) -> std::io::Result<()> {
        let end = off + data.len() as u64;
        self.fit(dir, end)?;
        match &mut self.0 {
            Store::Mem(v) => {
                if (v.len() as u64) < end {
                    // Exactly what the budget counts: no doubling of the allocation.
                    v.reserve_exact(end as usize - v.len());
                    v.resize(end as usize, 0);
                }
                v[off as usize..end as usize].copy_from_slice(data);
                Ok(())
            }
            Store::File(f) => f.write_all_at(data, off),
        }
    }

    /// Reads exactly `buf.len()` bytes at `off` (none: always fine, as on a file).
    pub fn read_at(&self, buf: &mut [u8], off: u64) -> std::io::Result<()> {
        match &self.0 {
            Store::Mem(_) if buf.is_empty() => Ok(()),
            Store::Mem(v) => {
                let src = usize::try_from(off)
                    .ok()
                    .and_then(|o| v.get(o..o.checked_add(buf.len())?))
                    .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::UnexpectedEof))?;
                buf.copy_from_slice(src);
                Ok(())
            }
            Store::File(f) => f.read_exact_at(buf, off),
        }
    }

    /// Sets the size to `len` (truncating, or extending with zeros).
    pub fn set_len(&mut self, dir: &Path, len: u64) -> std::io::Result<()> {
        self.fit(dir, len)?;
        match &mut self.0 {
            Store::Mem(v) => {
                let have = v.len() as u64;
                if len > have {
                    v.reserve_exact((len - have) as usize);
                }
                v.resize(len as usize, 0);
                v.shrink_to_fit();
                if len < have {
                    give_budget(have - len);
                }
                Ok(())
            }
            Store::File(f) => f.set_len(len),
        }
    }

    /// The first `size` bytes as a body stream: one piece from memory, or read from the file
    /// in 4 MiB pieces on the blocking pool.
    fn body(&self, size: u64) -> Body {
        match &self.0 {
            Store::Mem(v) => {
                let b = Bytes::copy_from_slice(&v[..(size as usize).min(v.len())]);
                Box::pin(futures::stream::iter([Ok(b)]))
            }
            Store::File(f) => Box::pin(staged_body(Arc::clone(f), size)),
        }
    }

    /// A sink that writes the pieces it gets one after another from the start (a copy in from
    /// the store).
    fn filler<'a>(&'a mut self, dir: &'a Path) -> impl FnMut(&[u8]) -> std::io::Result<()> + 'a {
        let mut off = 0u64;
        move |piece| {
            self.write_at(dir, piece, off)
                .inspect_err(|e| staging_error(dir, e))?;
            off += piece.len() as u64;
            Ok(())
        }
    }

    /// The content, when it is in memory (its budget goes back); otherwise `self` again.
    fn into_mem(mut self) -> Result<Vec<u8>, Self> {
        match &mut self.0 {
            Store::Mem(v) => {
                let v = std::mem::take(v);
                give_budget(v.len() as u64);
                Ok(v)
            }
            Store::File(_) => Err(self),
        }
    }

    #[cfg(test)]
    fn in_memory(&self) -> bool {
        matches!(self.0, Store::Mem(_))
    }
}

type Body = std::pin::Pin<Box<dyn Stream<Item = Result<Bytes, std::io::Error>> + Send>>;

impl Default for Staging {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if let Store::Mem(v) = &self.0 {
            give_budget(v.len() as u64);
        }
    }
}

/// A file being written front to back, its bytes going to the object service as they come
/// ([`ObjectService::take_in`]). Dropped unfinished, the take-in is cancelled and its chunks
/// freed.
pub struct Streaming {
    tx: Option<tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>>,
    task: tokio::task::JoinHandle<ObjResult<TakenIn>>,
    _slot: Slot,
}

impl Streaming {
    /// Starts taking in a file of `bucket` whose first bytes are `first`.
    fn start(
        svc: &Arc<ObjectService>,
        rt: &tokio::runtime::Handle,
        bucket: &str,
        first: Vec<u8>,
        slot: Slot,
    ) -> Self {
        let (tx, mut rx) = tokio::sync::mpsc::channel(STREAM_DEPTH);
        let body = futures::stream::poll_fn(move |cx| rx.poll_recv(cx));
        let svc = Arc::clone(svc);
        let bucket = bucket.to_owned();
        let task = rt.spawn(async move { svc.take_in(&bucket, body).await });
        let mut s = Streaming {
            tx: Some(tx),
            task,
            _slot: slot,
        };
        if !first.is_empty() {
            // A fresh channel has room: this neither waits nor fails (a failed take-in
            // shows at the next push).
            s.push(Bytes::from(first));
        }
        s
    }

    /// Sends the next bytes, waiting (on this FUSE thread) while the pipeline is full.
    /// `false`: the take-in failed ([`Streaming::finish`] says why).
    fn push(&mut self, data: Bytes) -> bool {
        self.tx
            .as_ref()
            .is_some_and(|tx| tx.blocking_send(Ok(data)).is_ok())
    }

    /// Ends the content and waits for the take-in: the tail's chunks written and durable.
    async fn finish(mut self) -> ObjResult<TakenIn> {
        self.tx = None;
        match (&mut self.task).await {
            Ok(r) => r,
            Err(e) => Err(lode_objects::ObjError::Internal(format!("take-in: {e}"))),
        }
    }
}

impl Drop for Streaming {
    fn drop(&mut self) {
        // Unfinished: the take-in's future is dropped, and its writer with its chunks. (After
        // `finish` the task is done and this does nothing.)
        self.task.abort();
    }
}

pub struct FileData {
    /// The staged content; `None` while the file reads through to its object (or streams).
    pub staging: Option<Staging>,
    /// The content streaming into chunks (then `staging` is `None`).
    stream: Option<Streaming>,
    /// The stream failed with this errno: the content is lost, the file is not committed, and
    /// every later write, flush and fsync of this open file answers it.
    failed: Option<i32>,
    pub size: u64,
    /// Removed from the namespace while open: never committed again.
    pub unlinked: bool,
    /// Standard and user metadata to commit with (the previous version's, when there was one).
    pub meta: ObjectMeta,
    /// POSIX attributes set on the mount, stored over `meta` at commit.
    pub attrs: Attrs,
}

pub struct OpenFile {
    pub data: tokio::sync::Mutex<FileData>,
    snap: Mutex<Snapshot>,
    /// Kernel file handles open on it.
    pub handles: AtomicUsize,
    /// Created on the mount and not committed yet: exists only here.
    pending: AtomicBool,
    /// Changed since the last commit (written under the data lock; read without it by stat).
    dirty: AtomicBool,
}

impl OpenFile {
    pub fn new(pending: bool, snap: Snapshot) -> Self {
        OpenFile {
            data: tokio::sync::Mutex::new(FileData {
                staging: None,
                stream: None,
                failed: None,
                size: snap.size,
                unlinked: false,
                meta: ObjectMeta::default(),
                attrs: snap.attrs,
            }),
            snap: Mutex::new(snap),
            handles: AtomicUsize::new(0),
            pending: AtomicBool::new(pending),
            dirty: AtomicBool::new(pending),
        }
    }

    pub fn is_dirty(&self) -> bool {
        self.dirty.load(Ordering::Acquire)
    }

    /// Marks the content changed (call with the data lock held).
    pub fn set_dirty(&self, dirty: bool) {
        self.dirty.store(dirty, Ordering::Release);
    }

    pub fn is_pending(&self) -> bool {
        self.pending.load(Ordering::Acquire)
    }

    pub fn snapshot(&self) -> Snapshot {
        *self.snap.lock().expect("snapshot")
    }

    /// Records what `stat` should show after a change to `d`.
    pub fn touch(&self, d: &FileData, mtime: Option<SystemTime>) {
        let mut s = self.snap.lock().expect("snapshot");
        s.size = d.size;
        s.attrs = d.attrs;
        if let Some(t) = mtime {
            s.mtime = t;
        }
    }

    /// Whether `stat` must come from here rather than from the stored object.
    pub fn shadows_object(&self) -> bool {
        self.is_dirty() || self.is_pending()
    }
}

/// A new anonymous staging file in `dir`.
pub fn staging_file(dir: &Path) -> std::io::Result<File> {
    tempfile::tempfile_in(dir)
}

/// Makes sure `d` has a staging copy, copying (up to `limit` bytes of) the stored object into it
/// first when `copy_from` names one (its metadata becomes the base of the next commit).
pub async fn stage(
    svc: &ObjectService,
    staging_dir: &Path,
    d: &mut FileData,
    copy_from: Option<(&str, &str)>,
    limit: u64,
) -> Result<(), i32> {
    unstream(svc, staging_dir, d, limit).await?;
    if d.staging.is_some() {
        return Ok(());
    }
    let mut st = Staging::new();
    let mut size = 0u64;
    if let Some((bucket, key)) = copy_from {
        match svc.stat_blocking(bucket, key) {
            Ok(Some(rec)) => {
                d.meta = rec.meta.clone();
                // A new version: the old one's object lock stays with it.
                d.meta.lock = Default::default();
                size = svc
                    .read_prefix(bucket, key, limit, st.filler(staging_dir))
                    .await
                    .map_err(|e| e.errno())?;
            }
            Ok(None) => {}
            Err(e) => return Err(e.errno()),
        }
    }
    d.staging = Some(st);
    d.size = size;
    Ok(())
}

impl FileData {
    /// Drops what is not committed (the last holder's close): the staging copy, and a stream
    /// that did not commit (its chunks freed).
    pub fn let_go(&mut self) {
        self.staging = None;
        self.stream = None;
    }

    /// Whether the content is streaming (a read must turn it back into a staged copy first).
    pub fn is_streaming(&self) -> bool {
        self.stream.is_some()
    }
}

/// Writes `data` at `off` of the file `path` (bucket, key): into its staged copy (made first by
/// [`stage`], copying the stored object in unless the file is `new`), or, while it streams and
/// `off` is its end, into the stream. Content written front to back starts streaming once it
/// outgrows [`IN_MEMORY`]. Runs on a FUSE thread (it blocks on `rt`).
#[allow(clippy::too_many_arguments)]
pub fn write(
    svc: &Arc<ObjectService>,
    rt: &tokio::runtime::Handle,
    staging_dir: &Path,
    d: &mut FileData,
    path: (&str, &str),
    new: bool,
    data: &[u8],
    off: u64,
) -> Result<(), i32> {
    if let Some(e) = d.failed {
        return Err(e);
    }
    let end = off + data.len() as u64;
    let appends = off == d.size;
    if !(appends && d.stream.is_some()) {
        let copy = (!new).then_some(path);
        rt.block_on(stage(svc, staging_dir, d, copy, u64::MAX))?;
        if appends && end > IN_MEMORY {
            start_stream(svc, rt, d, path.0);
        }
    }
    if let Some(s) = d.stream.as_mut() {
        if !s.push(Bytes::copy_from_slice(data)) {
            return Err(rt.block_on(fail(d)));
        }
        d.size = end;
        return Ok(());
    }
    let st = d.staging.as_mut().expect("staged");
    st.write_at(staging_dir, data, off).map_err(|e| {
        staging_error(staging_dir, &e);
        e.raw_os_error().unwrap_or(libc::EIO)
    })?;
    d.size = d.size.max(end);
    Ok(())
}

/// Turns a file staged in memory into a streaming one (its content the first bytes), when a
/// place is free; a file staged on local disk stays so.
fn start_stream(
    svc: &Arc<ObjectService>,
    rt: &tokio::runtime::Handle,
    d: &mut FileData,
    bucket: &str,
) {
    let Some(slot) = STREAMS.take() else {
        return;
    };
    let Some(st) = d.staging.take() else {
        return;
    };
    match st.into_mem() {
        Ok(first) => {
            debug_assert_eq!(first.len() as u64, d.size);
            d.stream = Some(Streaming::start(svc, rt, bucket, first, slot));
        }
        Err(st) => d.staging = Some(st),
    }
}

const STREAM_FAILED: &str = "a file streaming into chunks failed";

/// The content of `d` is lost to `e`: logged, and its errno is what every later write, flush
/// and fsync of the file answers.
fn lose(d: &mut FileData, e: &lode_objects::ObjError, what: &str) -> i32 {
    tracing::warn!(error = %e, "{what}");
    let n = e.errno();
    d.failed = Some(n);
    n
}

/// The stream refused a piece: the take-in failed, and why is its errno.
async fn fail(d: &mut FileData) -> i32 {
    let Some(s) = d.stream.take() else {
        return libc::EIO;
    };
    match s.finish().await {
        Err(e) => lose(d, &e, STREAM_FAILED),
        Ok(_) => {
            d.failed = Some(libc::EIO);
            libc::EIO
        }
    }
}

/// Turns a streaming file back into a staged copy (a write not at its end, a read, a
/// truncate), its content read back from the chunks it went to, which are then freed (with
/// `keep` 0, a truncate to nothing, no byte is read back).
async fn unstream(
    svc: &ObjectService,
    staging_dir: &Path,
    d: &mut FileData,
    keep: u64,
) -> Result<(), i32> {
    if let Some(e) = d.failed {
        return Err(e);
    }
    let Some(s) = d.stream.take() else {
        return Ok(());
    };
    if keep == 0 {
        drop(s);
        d.staging = Some(Staging::new());
        d.size = 0;
        return Ok(());
    }
    let taken = match s.finish().await {
        Ok(t) => t,
        Err(e) => return Err(lose(d, &e, STREAM_FAILED)),
    };
    let mut st = Staging::new();
    let read = svc.read_taken(&taken, st.filler(staging_dir)).await;
    if let Err(e) = read {
        return Err(lose(
            d,
            &e,
            "cannot read back a file that was streaming into chunks",
        ));
    }
    d.staging = Some(st);
    Ok(())
}

/// Logs a failed write to the staging area (a full or broken local disk); the caller answers
/// with its errno.
pub fn staging_error(dir: &Path, e: &std::io::Error) {
    tracing::error!(error = %e, dir = %dir.display(), "cannot stage a file's content");
}

/// The staged bytes as a body stream, read in 4 MiB pieces on the blocking pool.
fn staged_body(
    f: Arc<File>,
    size: u64,
) -> impl Stream<Item = Result<Bytes, std::io::Error>> + Unpin + Send {
    const PIECE: u64 = 4 << 20;
    Box::pin(futures::stream::unfold(0u64, move |off| {
        let f = Arc::clone(&f);
        async move {
            if off >= size {
                return None;
            }
            let n = PIECE.min(size - off) as usize;
            let r = tokio::task::spawn_blocking(move || {
                let mut buf = vec![0u8; n];
                f.read_exact_at(&mut buf, off).map(|()| Bytes::from(buf))
            })
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e)));
            Some((r, off + n as u64))
        }
    }))
}

/// Commits the staged content of `d` as a new version of `bucket/key` (when it changed).
pub async fn commit(
    svc: &ObjectService,
    of: &OpenFile,
    d: &mut FileData,
    bucket: &str,
    key: &str,
) -> Result<(), i32> {
    if !of.is_dirty() {
        return Ok(());
    }
    if let Some(e) = d.failed {
        // The content is lost: the stored object stays what it was.
        of.set_dirty(false);
        return Err(e);
    }
    if d.unlinked {
        d.stream = None;
        of.set_dirty(false);
        return Ok(());
    }
    let mut meta = d.meta.clone();
    d.attrs.store(&mut meta, libc::S_IFREG);
    if let Some(s) = d.stream.take() {
        let r = match s.finish().await {
            Ok(taken) => {
                svc.put_taken(bucket, key, meta, taken, WriteCond::default())
                    .await
            }
            Err(e) => Err(e),
        };
        return match r {
            Ok(_) => {
                // Committed: the file reads through to its object from here, and a later
                // write copies it in again.
                of.set_dirty(false);
                of.pending.store(false, Ordering::Release);
                Ok(())
            }
            Err(e) => {
                of.set_dirty(false);
                Err(lose(
                    d,
                    &e,
                    &format!("POSIX commit of {bucket}/{key} failed"),
                ))
            }
        };
    }
    let body: Body = match &d.staging {
        Some(st) => st.body(d.size),
        None => Box::pin(futures::stream::empty()),
    };
    let size = if d.staging.is_some() { d.size } else { 0 };
    svc.put_object(
        bucket,
        key,
        meta,
        body,
        Some(size as i64),
        Integrity::default(),
        WriteCond::default(),
    )
    .await
    .map_err(|e| {
        tracing::warn!(bucket, key, error = %e, "POSIX commit failed");
        e.errno()
    })?;
    of.set_dirty(false);
    of.pending.store(false, Ordering::Release);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(st: &Staging, len: usize) -> Vec<u8> {
        let mut buf = vec![0u8; len];
        st.read_at(&mut buf, 0).unwrap();
        buf
    }

    #[test]
    fn small_content_stays_in_memory_and_large_moves_to_a_file_intact() {
        let dir = std::env::temp_dir();
        let mut st = Staging::new();
        let mut want = vec![0u8; 10];
        // A write past the end leaves a hole of zeros.
        st.write_at(&dir, b"abc", 7).unwrap();
        want[7..].copy_from_slice(b"abc");
        assert!(st.in_memory());
        assert_eq!(read_all(&st, 10), want);
        // Past the in-memory limit: the content moves to a file, the bytes stay.
        let big: Vec<u8> = (0..IN_MEMORY as usize + 100)
            .map(|i| (i % 251) as u8)
            .collect();
        st.write_at(&dir, &big, 5).unwrap();
        assert!(!st.in_memory());
        want.truncate(5);
        want.extend_from_slice(&big);
        assert_eq!(read_all(&st, want.len()), want);
        st.set_len(&dir, 8).unwrap();
        assert_eq!(read_all(&st, 8), want[..8]);
        // Truncation in memory, then growth with zeros.
        let mut m = Staging::new();
        m.write_at(&dir, b"hello world", 0).unwrap();
        m.set_len(&dir, 5).unwrap();
        m.set_len(&dir, 7).unwrap();
        assert_eq!(read_all(&m, 7), b"hello\0\0");
        let mut past = [0u8; 1];
        assert!(m.read_at(&mut past, 7).is_err(), "no byte past the end");
        assert!(
            m.read_at(&mut [], 9).is_ok(),
            "an empty read past the end, as on a file"
        );
    }
}
