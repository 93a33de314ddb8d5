//! `lode-blob`: the blob boundary, what the object service needs from wherever chunk bytes live.
//! Write a stream of chunks (durable at `finish`, kept only once committed), read a chunk with
//! its integrity checked, release chunks whose last reference went (once in-flight readers are
//! done), and report space and health.
//!
//! It owns the trait ([`BlobStore`], [`BlobWriter`], [`PendingBlobs`]), the chunk id a record
//! stores ([`ChunkId`], [`ChunkRef`]), the errors ([`ChunkError`]), the integrity rule
//! ([`crc32c`]) and the 4 KiB-aligned buffer writers take ([`AlignedBuf`], so the local store
//! writes it with `O_DIRECT` as it is).
//!
//! Backends, each a crate of its own that depends on this one and never on another backend:
//! `lode-datapath` (extents on devices through io_uring/O_DIRECT, deferred reclaim) and
//! `lode-blob-rados` (one RADOS object per chunk, a GC log per gateway). With the
//! `conformance` feature, [`conformance`] is the suite every backend passes.
//!
//! This crate depends on no storage engine.

pub mod buffer;
#[cfg(feature = "conformance")]
pub mod conformance;

use std::any::Any;

use bytes::Bytes;

pub use buffer::{ALIGN, AlignedBuf, align_up};

/// Where a chunk is, in the terms of the store that wrote it (a record stores it as is and
/// hands it back): the local store's (device, byte offset, allocated length), the RADOS store's
/// (writer incarnation, sequence number, 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChunkId {
    pub space: u32,
    pub index: u64,
    pub len: u32,
}

impl std::fmt::Display for ChunkId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{:#x}", self.space, self.index)
    }
}

/// One stored chunk: where it is, how many bytes of it are data, and their crc32c.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkRef {
    pub id: ChunkId,
    pub data_len: u32,
    pub crc32c: u32,
}

/// Errors of a blob store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChunkError {
    /// No room for the chunk (a full device; a pool at its quota or an OSD past full).
    #[error("the datapath is full")]
    NoSpace,
    /// A write or fsync failed earlier; writes are refused until restart.
    #[error(
        "the datapath refuses writes after an earlier write/fsync error (restart after fixing the device)"
    )]
    Poisoned,
    /// The crc32c of a chunk read back does not match the one recorded at write.
    #[error("chunk {chunk} is corrupt: crc32c {actual:#010x}, expected {expected:#010x}")]
    Corrupt {
        chunk: ChunkId,
        expected: u32,
        actual: u32,
    },
    /// A chunk id outside the store, or an allocator double use/free.
    #[error("bad chunk id {0:?}")]
    BadChunk(ChunkId),
    #[error("device IO error: {0}")]
    Io(#[source] std::io::Error),
}

impl ChunkError {
    /// The store did not answer in time (a cluster unreachable, its placement groups
    /// inactive): the request may be retried, the chunk is not known to be bad.
    pub fn is_timeout(&self) -> bool {
        matches!(self, ChunkError::Io(io) if io.kind() == std::io::ErrorKind::TimedOut)
    }

    /// The store refuses this client (RADOS: blocklisted, `ESHUTDOWN`; cephx caps revoked,
    /// `EACCES`/`EPERM`).
    pub fn is_refused(&self) -> bool {
        matches!(self, ChunkError::Io(io)
            if matches!(io.raw_os_error(), Some(libc::ESHUTDOWN | libc::EACCES | libc::EPERM)))
    }

    /// The store did not serve the operation ([`Self::is_timeout`], [`Self::is_refused`], or
    /// told to come back): nothing is known about the chunk itself.
    pub fn is_unavailable(&self) -> bool {
        self.is_timeout()
            || self.is_refused()
            || matches!(self, ChunkError::Io(io) if io.kind() == std::io::ErrorKind::WouldBlock)
    }
}

/// crc32c (Castagnoli), as stored with every chunk.
pub fn crc32c(data: &[u8]) -> u32 {
    crc_fast::crc32_iscsi(data)
}

/// Held by an in-flight reader: chunks released after it was taken are not destroyed or
/// reused until it drops.
pub type BlobGuard = Box<dyn Any + Send>;

/// Chunks that are written and durable but not yet named by any committed record. Dropped
/// without [`PendingBlobs::commit`], they are given back (the request failed).
pub trait PendingBlobs: Send + Sync {
    /// A committed record names the chunks now: keep them.
    fn commit(self: Box<Self>);
}

/// Writes the chunks of one object (or part), a few in flight.
#[async_trait::async_trait]
pub trait BlobWriter: Send {
    /// Queues one chunk (its logical bytes).
    async fn push(&mut self, buf: AlignedBuf) -> Result<(), ChunkError>;
    /// Waits until every queued chunk is written (not necessarily durable).
    async fn drain(&mut self) -> Result<(), ChunkError>;
    /// Makes every chunk durable; returns them in order, pending until committed.
    async fn finish(self: Box<Self>) -> Result<(Vec<ChunkRef>, Box<dyn PendingBlobs>), ChunkError>;
}

/// The blob boundary.
#[async_trait::async_trait]
pub trait BlobStore: Send + Sync + 'static {
    fn backend_name(&self) -> &'static str;
    /// A writer with up to `depth` chunk writes in flight.
    fn writer(&self, depth: usize) -> Box<dyn BlobWriter>;
    /// Reads a chunk whole and checks its crc32c (a mismatch is an error, never bad bytes).
    /// Hold a [`BlobStore::read_guard`] taken before the lookup that named the chunk.
    async fn read(&self, chunk: &ChunkRef) -> Result<Bytes, ChunkError>;
    fn read_guard(&self) -> BlobGuard;
    /// Whether a chunk id names the same bytes for as long as it can be read: never rewritten,
    /// never given to other bytes after a release (RADOS: chunk objects written once under
    /// unique names; not the local store, which reuses freed extents). A reader may then read a
    /// chunk it expects before the lookup that names it, and keep the bytes if the lookup
    /// names the same [`ChunkRef`]. Default: no.
    fn ids_are_never_reused(&self) -> bool {
        false
    }
    /// Chunks whose last reference a committed change dropped: gone once readers are done.
    fn release(&self, chunks: Vec<ChunkRef>);
    /// (free, total) bytes.
    fn space(&self) -> (u64, u64);
    /// Whether a write or sync failed (writes are refused until restart).
    fn is_poisoned(&self) -> bool;
    /// Lets reads issued on the calling thread block it on the device instead of hopping to
    /// an IO thread and back (a FUSE worker, which waits for each reply anyway; never an async
    /// worker). Default: nothing (the backend has no faster blocking path).
    fn allow_blocking_reads_on_this_thread(&self) {}
}
