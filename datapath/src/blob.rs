//! The blob boundary: what the object service needs from wherever chunk bytes live. Write a
//! stream of chunks (durable at `finish`, kept only once committed), read a chunk with its
//! integrity checked, release chunks whose last reference went (once in-flight readers are
//! done), and report space and health.
//!
//! Backends: [`LocalBlobStore`] (this crate's [`Datapath`]: extents on devices through
//! io_uring/O_DIRECT, crc32c, deferred reclaim) and the RADOS chunk store of cluster mode.
//! [`conformance`] is the suite every backend passes.

use std::any::Any;
use std::sync::Arc;

use bytes::Bytes;

use crate::{AlignedBuf, Allocation, ChunkError, ChunkRef, ChunkWriter, Datapath};

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

/// The local blob store: [`Datapath`] over a [`crate::ChunkStore`].
pub struct LocalBlobStore {
    dp: Arc<Datapath>,
}

impl LocalBlobStore {
    pub fn new(dp: Arc<Datapath>) -> Self {
        Self { dp }
    }

    pub fn datapath(&self) -> &Arc<Datapath> {
        &self.dp
    }
}

impl PendingBlobs for Allocation {
    fn commit(self: Box<Self>) {
        Allocation::commit(*self);
    }
}

#[async_trait::async_trait]
impl BlobWriter for ChunkWriter {
    async fn push(&mut self, buf: AlignedBuf) -> Result<(), ChunkError> {
        ChunkWriter::push(self, buf).await
    }
    async fn drain(&mut self) -> Result<(), ChunkError> {
        ChunkWriter::drain(self).await
    }
    async fn finish(self: Box<Self>) -> Result<(Vec<ChunkRef>, Box<dyn PendingBlobs>), ChunkError> {
        let (chunks, alloc) = ChunkWriter::finish(*self).await?;
        Ok((chunks, Box::new(alloc)))
    }
}

#[async_trait::async_trait]
impl BlobStore for LocalBlobStore {
    fn backend_name(&self) -> &'static str {
        self.dp.store().backend_name()
    }
    fn writer(&self, depth: usize) -> Box<dyn BlobWriter> {
        Box::new(ChunkWriter::new(&self.dp, depth))
    }
    async fn read(&self, chunk: &ChunkRef) -> Result<Bytes, ChunkError> {
        self.dp.read_chunk(chunk).await
    }
    fn read_guard(&self) -> BlobGuard {
        Box::new(self.dp.read_guard())
    }
    fn release(&self, chunks: Vec<ChunkRef>) {
        self.dp
            .free_committed(chunks.into_iter().map(|c| c.extent).collect());
    }
    fn space(&self) -> (u64, u64) {
        self.dp.space()
    }
    fn is_poisoned(&self) -> bool {
        self.dp.is_poisoned()
    }
    fn allow_blocking_reads_on_this_thread(&self) {
        crate::allow_blocking_reads_on_this_thread();
    }
}

/// The suite every [`BlobStore`] passes: written chunks read back bit-exact, a corrupt or
/// wrong crc is an error, an uncommitted write gives its space back, released chunks go.
pub mod conformance {
    use super::*;

    fn buf(fill: u8, len: usize) -> AlignedBuf {
        let mut b = AlignedBuf::with_capacity(len);
        b.extend_from_slice(&vec![fill; len]);
        b
    }

    /// Writes, reads back, commits and releases chunks.
    pub async fn round_trip(s: &dyn BlobStore) {
        let mut w = s.writer(2);
        for (i, len) in [4096usize, 1, 100_000, 1 << 20].iter().enumerate() {
            w.push(buf(i as u8 + 1, *len)).await.unwrap();
        }
        w.drain().await.unwrap();
        let (chunks, pending) = w.finish().await.unwrap();
        assert_eq!(chunks.len(), 4);
        for (i, c) in chunks.iter().enumerate() {
            let data = s.read(c).await.unwrap();
            assert_eq!(data.len(), c.data_len as usize);
            assert!(data.iter().all(|&b| b == i as u8 + 1), "chunk {i}");
        }
        // A chunk named with the wrong crc is refused, not returned.
        let mut wrong = chunks[0];
        wrong.crc32c ^= 1;
        assert!(s.read(&wrong).await.is_err());
        pending.commit();
        let guard = s.read_guard();
        s.release(chunks.clone());
        // A reader that started before the release still reads the chunks.
        assert!(s.read(&chunks[1]).await.is_ok());
        drop(guard);
    }

    /// An uncommitted write gives its space back (where the store has a notion of space).
    pub async fn uncommitted_writes_give_space_back(s: &dyn BlobStore) {
        let (free0, _) = s.space();
        let mut w = s.writer(1);
        w.push(buf(9, 1 << 20)).await.unwrap();
        let (_chunks, pending) = w.finish().await.unwrap();
        drop(pending);
        assert_eq!(s.space().0, free0);
    }
}
