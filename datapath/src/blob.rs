//! The local backend of the blob boundary ([`lode_blob::BlobStore`]): [`LocalBlobStore`] over
//! this crate's [`Datapath`] (extents on devices through io_uring/O_DIRECT, crc32c, deferred
//! reclaim).

use std::sync::Arc;

use bytes::Bytes;
use lode_blob::{AlignedBuf, BlobGuard, BlobStore, BlobWriter, ChunkError, ChunkRef, PendingBlobs};

use crate::{Allocation, ChunkWriter, Datapath, Extent};

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
            .free_committed(chunks.into_iter().map(|c| Extent::of(&c.id)).collect());
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
