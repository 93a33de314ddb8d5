//! `lode-datapath`: the NVMe chunk store, the local backend of the blob boundary (`lode-blob`).
//!
//! Owns raw space: preallocated device files or raw block devices, opened with `O_DIRECT` and
//! driven through io_uring ([`UringChunkStore`]); a portable pread/pwrite backend
//! ([`FileChunkStore`]) is used only where io_uring is unavailable, and says so. It also owns the
//! extent allocator and the rule that freed space is reused only after in-flight readers are
//! done ([`Datapath`]); [`LocalBlobStore`] serves the blob boundary from it, an [`Extent`] being
//! the chunk id it hands out. The boundary's types (chunk refs, errors, crc32c, the aligned
//! buffer) come from `lode-blob`.
//!
//! It depends on the blob boundary only: never on the metadata store, a catalog, RADOS or the
//! gateway; the object service records which extents are used, in the same metadata batch as
//! the object.

pub mod alloc;
pub mod blob;
mod device;
pub mod fault;
pub mod file;
pub mod mem;
mod reclaim;
mod ring;
pub mod uring;

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use lode_blob::{AlignedBuf, ChunkError, ChunkId, ChunkRef, crc32c};

pub use alloc::ExtentAllocator;
pub use blob::LocalBlobStore;
pub use fault::FaultyChunkStore;
pub use file::FileChunkStore;
pub use mem::MemChunkStore;
pub use reclaim::ReadGuard;
pub use uring::UringChunkStore;

/// A 4 KiB-aligned piece of one device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Extent {
    pub dev: u32,
    pub offset: u64,
    /// Allocated length, a multiple of 4 KiB.
    pub len: u32,
}

impl Extent {
    /// The extent a chunk id of this store names.
    pub fn of(id: &ChunkId) -> Extent {
        Extent {
            dev: id.space,
            offset: id.index,
            len: id.len,
        }
    }

    /// The chunk id the blob boundary carries for this extent.
    pub fn id(&self) -> ChunkId {
        ChunkId {
            space: self.dev,
            index: self.offset,
            len: self.len,
        }
    }
}

/// The error for a device index the store does not have.
fn no_device(dev: u32) -> ChunkError {
    ChunkError::BadChunk(
        Extent {
            dev,
            offset: 0,
            len: 0,
        }
        .id(),
    )
}

/// One device as the store sees it.
#[derive(Debug, Clone)]
pub struct DeviceInfo {
    pub path: String,
    pub size: u64,
}

/// The storage boundary of the datapath: aligned reads and writes of extents, and durability.
#[async_trait::async_trait]
pub trait ChunkStore: Send + Sync + 'static {
    /// The devices, indexed by `Extent::dev`.
    fn devices(&self) -> &[DeviceInfo];
    /// A short name of the backend, for logs and `/healthz`.
    fn backend_name(&self) -> &'static str;
    /// Writes `buf.io_len()` bytes at the extent (`io_len <= extent.len`). Returns the buffer.
    async fn write(&self, extent: Extent, buf: AlignedBuf) -> Result<AlignedBuf, ChunkError>;
    /// Reads `buf.io_len()` bytes from the extent into `buf` (whose `len` is preset).
    async fn read(&self, extent: Extent, buf: AlignedBuf) -> Result<AlignedBuf, ChunkError>;
    /// Makes every completed write on device `dev` durable.
    async fn sync(&self, dev: u32) -> Result<(), ChunkError>;
    /// Reads like [`ChunkStore::read`] but on the calling thread, which it blocks until the
    /// data is in. `None` when the backend has no such path (the caller then uses `read`).
    fn read_blocking(
        &self,
        extent: Extent,
        buf: AlignedBuf,
    ) -> Option<Result<AlignedBuf, ChunkError>> {
        let _ = (extent, buf);
        None
    }
}

thread_local! {
    static BLOCKING_READS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks the calling thread as one that may block on device reads (a FUSE worker, which waits
/// for each reply anyway). [`Datapath::read_chunk`] called on it, also from inside
/// `Runtime::block_on`, then reads on this thread through [`ChunkStore::read_blocking`] instead
/// of handing the IO to the ring thread and waiting for a wakeup: two thread hops fewer per read.
/// Never call it on an async runtime's worker thread.
pub fn allow_blocking_reads_on_this_thread() {
    BLOCKING_READS.with(|b| b.set(true));
}

/// The datapath as the object service uses it: allocation, crc, poisoning and reclaim on top of
/// any [`ChunkStore`].
pub struct Datapath {
    store: Arc<dyn ChunkStore>,
    alloc: Mutex<ExtentAllocator>,
    poisoned: AtomicBool,
    reclaim: reclaim::Reclaim,
    sync_writes: bool,
    group_sync: Vec<GroupSync>,
}

/// Group fdatasync for one device: concurrent uploads share one sync. A caller takes a ticket
/// after its writes completed; a sync that started after the ticket was taken covers it.
#[derive(Default)]
struct GroupSync {
    tickets: std::sync::atomic::AtomicU64,
    /// The highest ticket covered by a completed sync. Held across the sync itself, so one
    /// sync runs at a time per device and later callers wait for it and may be covered by it.
    covered: tokio::sync::Mutex<u64>,
    syncs: std::sync::atomic::AtomicU64,
}

impl Datapath {
    /// `sync_writes`: make data durable (fdatasync) before `write_chunks` returns.
    pub fn new(store: Arc<dyn ChunkStore>, sync_writes: bool) -> Self {
        let sizes: Vec<u64> = store.devices().iter().map(|d| d.size).collect();
        Self {
            store,
            alloc: Mutex::new(ExtentAllocator::new(&sizes)),
            poisoned: AtomicBool::new(false),
            reclaim: reclaim::Reclaim::default(),
            sync_writes,
            group_sync: sizes.iter().map(|_| GroupSync::default()).collect(),
        }
    }

    /// How many device syncs were issued (group sync makes it fewer than the callers).
    pub fn syncs_issued(&self) -> u64 {
        self.group_sync
            .iter()
            .map(|g| g.syncs.load(Ordering::Relaxed))
            .sum()
    }

    async fn sync_device(&self, dev: u32) -> Result<(), ChunkError> {
        let Some(g) = self.group_sync.get(dev as usize) else {
            return Err(no_device(dev));
        };
        let ticket = g.tickets.fetch_add(1, Ordering::AcqRel) + 1;
        let mut covered = g.covered.lock().await;
        if self.is_poisoned() {
            return Err(ChunkError::Poisoned);
        }
        if *covered >= ticket {
            return Ok(()); // a sync that started after our writes finished has completed
        }
        // Every ticket taken so far belongs to writes that completed before it was taken.
        let upto = g.tickets.load(Ordering::Acquire);
        g.syncs.fetch_add(1, Ordering::Relaxed);
        match self.store.sync(dev).await {
            Ok(()) => {
                *covered = upto;
                Ok(())
            }
            Err(e) => {
                self.poison(&e);
                Err(e)
            }
        }
    }

    pub fn store(&self) -> &Arc<dyn ChunkStore> {
        &self.store
    }

    /// Marks an extent as used (rebuild at start from the metadata's extent table).
    pub fn mark_used(&self, e: Extent) -> Result<(), ChunkError> {
        self.alloc.lock().expect("allocator").mark_used(e)
    }

    /// (free bytes, total bytes).
    pub fn space(&self) -> (u64, u64) {
        let a = self.alloc.lock().expect("allocator");
        (a.free_bytes(), a.total_bytes())
    }

    pub fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::Acquire)
    }

    fn poison(&self, err: &ChunkError) {
        if !self.poisoned.swap(true, Ordering::AcqRel) {
            tracing::error!(error = %err, "datapath write/fsync failed: refusing further writes until restart");
        }
    }

    /// Allocates an extent for `len` bytes of data. The returned [`Allocation`] gives the space
    /// back on drop unless it is `commit`ted (the caller has recorded it in metadata).
    pub fn allocate(self: &Arc<Self>, len: usize) -> Result<Allocation, ChunkError> {
        if self.is_poisoned() {
            return Err(ChunkError::Poisoned);
        }
        let extent = self.alloc.lock().expect("allocator").allocate(len as u64)?;
        Ok(Allocation {
            dp: Arc::clone(self),
            extents: vec![extent],
        })
    }

    /// Writes one chunk (`buf`'s logical bytes) into `alloc`'s newest extent and returns its ref.
    /// Durability comes from [`Datapath::sync`].
    pub async fn write_chunk(
        &self,
        extent: Extent,
        mut buf: AlignedBuf,
    ) -> Result<(ChunkRef, AlignedBuf), ChunkError> {
        if self.is_poisoned() {
            return Err(ChunkError::Poisoned);
        }
        let data_len = buf.len() as u32;
        let crc = crc32c(&buf);
        buf.zero_tail();
        match self.store.write(extent, buf).await {
            Ok(buf) => Ok((
                ChunkRef {
                    id: extent.id(),
                    data_len,
                    crc32c: crc,
                },
                buf,
            )),
            Err(e) => {
                self.poison(&e);
                Err(e)
            }
        }
    }

    /// Makes the given devices' writes durable (when the store was built with `sync_writes`).
    pub async fn sync(&self, devs: impl IntoIterator<Item = u32>) -> Result<(), ChunkError> {
        if !self.sync_writes {
            return Ok(());
        }
        let mut seen = std::collections::BTreeSet::new();
        for d in devs {
            if seen.insert(d) {
                self.sync_device(d).await?;
            }
        }
        Ok(())
    }

    /// Reads a chunk and checks its crc32c. Hold a [`ReadGuard`] from [`Datapath::read_guard`]
    /// taken *before* the metadata lookup that produced `chunk`.
    pub async fn read_chunk(&self, chunk: &ChunkRef) -> Result<Bytes, ChunkError> {
        let new_buf = || {
            let mut buf = AlignedBuf::with_capacity(chunk.data_len as usize);
            buf.set_len(chunk.data_len as usize);
            buf
        };
        let extent = Extent::of(&chunk.id);
        let here = if BLOCKING_READS.with(std::cell::Cell::get) {
            self.store.read_blocking(extent, new_buf())
        } else {
            None
        };
        let buf = match here {
            Some(r) => r?,
            None => self.store.read(extent, new_buf()).await?,
        };
        let actual = crc32c(&buf);
        if actual != chunk.crc32c {
            tracing::error!(
                dev = extent.dev,
                offset = extent.offset,
                "chunk crc32c mismatch"
            );
            return Err(ChunkError::Corrupt {
                chunk: chunk.id,
                expected: chunk.crc32c,
                actual,
            });
        }
        Ok(Bytes::from_owner(buf))
    }

    /// Registers an in-flight reader: extents freed after this call are not reused until the
    /// guard drops.
    pub fn read_guard(self: &Arc<Self>) -> ReadGuard {
        let dp = Arc::clone(self);
        self.reclaim
            .enter(Box::new(move |extents| dp.release(extents)))
    }

    /// Frees extents whose last reference was dropped by a committed metadata change. They
    /// return to the allocator once every reader that might still read them is done.
    pub fn free_committed(self: &Arc<Self>, extents: Vec<Extent>) {
        if extents.is_empty() {
            return;
        }
        let dp = Arc::clone(self);
        self.reclaim
            .defer(extents, Box::new(move |ex| dp.release(ex)));
    }

    fn release(&self, extents: Vec<Extent>) {
        let mut a = self.alloc.lock().expect("allocator");
        for e in extents {
            if let Err(err) = a.free(e) {
                tracing::error!(error = %err, "freeing an extent that is not in use");
            }
        }
    }
}

/// Extents handed out for a write in progress. Dropped without [`Allocation::commit`], they go
/// straight back to the allocator (the request failed or the client went away).
pub struct Allocation {
    dp: Arc<Datapath>,
    extents: Vec<Extent>,
}

impl Allocation {
    /// An empty allocation to which chunks are added with [`Allocation::grow`].
    pub fn empty(dp: &Arc<Datapath>) -> Self {
        Self {
            dp: Arc::clone(dp),
            extents: vec![],
        }
    }

    /// Allocates one more extent of `len` bytes and returns it.
    pub fn grow(&mut self, len: usize) -> Result<Extent, ChunkError> {
        if self.dp.is_poisoned() {
            return Err(ChunkError::Poisoned);
        }
        let e = self
            .dp
            .alloc
            .lock()
            .expect("allocator")
            .allocate(len as u64)?;
        self.extents.push(e);
        Ok(e)
    }

    pub fn extents(&self) -> &[Extent] {
        &self.extents
    }

    /// The extents are now recorded as used in metadata: keep them.
    pub fn commit(mut self) {
        self.extents.clear();
    }
}

impl Drop for Allocation {
    fn drop(&mut self) {
        if !self.extents.is_empty() {
            // Never published, so no reader can hold them: give back at once.
            self.dp.release(std::mem::take(&mut self.extents));
        }
    }
}

/// Opens the configured devices with the chosen backend.
pub fn open_store(
    devices: &[(std::path::PathBuf, u64)],
    backend: Backend,
    queue_depth: u32,
) -> Result<Arc<dyn ChunkStore>, ChunkError> {
    match backend {
        Backend::File => Ok(Arc::new(FileChunkStore::open(devices)?)),
        Backend::Uring => Ok(Arc::new(UringChunkStore::open(devices, queue_depth)?)),
        Backend::Auto => match UringChunkStore::open(devices, queue_depth) {
            Ok(s) => Ok(Arc::new(s)),
            Err(ChunkError::Io(e)) if uring::is_unavailable(&e) => {
                tracing::warn!(
                    error = %e,
                    "io_uring is unavailable on this kernel/sandbox: using the PORTABLE FILE BACKEND \
                     (pread/pwrite + O_DIRECT on a thread pool); performance will be lower"
                );
                Ok(Arc::new(FileChunkStore::open(devices)?))
            }
            Err(e) => Err(e),
        },
    }
}

/// Which IO engine to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Auto,
    Uring,
    File,
}

/// Writes a stream of chunks with a few IOs in flight, and makes them durable at `finish`.
///
/// Writes run as their own tasks, so a write already handed to the device always completes. If
/// the writer is dropped early (the client went away), its extents return to the allocator only
/// after those writes have finished, so a late write can never land in reused space.
pub struct ChunkWriter {
    dp: Arc<Datapath>,
    alloc: Option<Allocation>,
    inflight: std::collections::VecDeque<
        tokio::task::JoinHandle<Result<(ChunkRef, AlignedBuf), ChunkError>>,
    >,
    done: Vec<ChunkRef>,
    max_inflight: usize,
}

impl ChunkWriter {
    pub fn new(dp: &Arc<Datapath>, max_inflight: usize) -> Self {
        Self {
            dp: Arc::clone(dp),
            alloc: Some(Allocation::empty(dp)),
            inflight: Default::default(),
            done: vec![],
            max_inflight: max_inflight.max(1),
        }
    }

    /// Queues one chunk (its logical bytes) for writing.
    pub async fn push(&mut self, buf: AlignedBuf) -> Result<(), ChunkError> {
        while self.inflight.len() >= self.max_inflight {
            self.reap_one().await?;
        }
        let extent = self.alloc.as_mut().expect("allocation").grow(buf.len())?;
        let dp = Arc::clone(&self.dp);
        self.inflight.push_back(tokio::spawn(
            async move { dp.write_chunk(extent, buf).await },
        ));
        Ok(())
    }

    async fn reap_one(&mut self) -> Result<(), ChunkError> {
        if let Some(h) = self.inflight.pop_front() {
            let (chunk, _buf) = h
                .await
                .map_err(|e| ChunkError::Io(std::io::Error::other(e)))??;
            self.done.push(chunk);
        }
        Ok(())
    }

    /// Waits until every queued chunk is written (not yet durable).
    pub async fn drain(&mut self) -> Result<(), ChunkError> {
        while !self.inflight.is_empty() {
            self.reap_one().await?;
        }
        Ok(())
    }

    /// Waits for every write, makes them durable, and returns the chunks in order with the
    /// allocation (commit it once metadata names the chunks).
    pub async fn finish(mut self) -> Result<(Vec<ChunkRef>, Allocation), ChunkError> {
        self.drain().await?;
        let devs: Vec<u32> = self.done.iter().map(|c| c.id.space).collect();
        self.dp.sync(devs).await?;
        let alloc = self.alloc.take().expect("allocation");
        Ok((std::mem::take(&mut self.done), alloc))
    }
}

impl Drop for ChunkWriter {
    fn drop(&mut self) {
        let pending = std::mem::take(&mut self.inflight);
        let alloc = self.alloc.take();
        if pending.is_empty() {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(h) => {
                h.spawn(async move {
                    for p in pending {
                        let _ = p.await;
                    }
                    drop(alloc);
                });
            }
            Err(_) => {
                // No runtime to wait on: leak the space rather than risk a late write into it.
                // It is not recorded in metadata, so a restart reclaims it.
                std::mem::forget(alloc);
            }
        }
    }
}
