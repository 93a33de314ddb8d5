//! [`FaultyChunkStore`]: wraps any store and fails chosen operations, for fault tests.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::{AlignedBuf, ChunkError, ChunkStore, DeviceInfo, Extent};

pub struct FaultyChunkStore {
    inner: Arc<dyn ChunkStore>,
    pub fail_writes: AtomicBool,
    pub fail_syncs: AtomicBool,
    pub fail_reads: AtomicBool,
}

impl FaultyChunkStore {
    pub fn new(inner: Arc<dyn ChunkStore>) -> Self {
        Self {
            inner,
            fail_writes: AtomicBool::new(false),
            fail_syncs: AtomicBool::new(false),
            fail_reads: AtomicBool::new(false),
        }
    }
}

fn injected() -> ChunkError {
    ChunkError::Io(std::io::Error::from_raw_os_error(libc::EIO))
}

#[async_trait::async_trait]
impl ChunkStore for FaultyChunkStore {
    fn devices(&self) -> &[DeviceInfo] {
        self.inner.devices()
    }

    fn backend_name(&self) -> &'static str {
        "faulty"
    }

    async fn write(&self, extent: Extent, buf: AlignedBuf) -> Result<AlignedBuf, ChunkError> {
        if self.fail_writes.load(Ordering::SeqCst) {
            return Err(injected());
        }
        self.inner.write(extent, buf).await
    }

    async fn read(&self, extent: Extent, buf: AlignedBuf) -> Result<AlignedBuf, ChunkError> {
        if self.fail_reads.load(Ordering::SeqCst) {
            return Err(injected());
        }
        self.inner.read(extent, buf).await
    }

    async fn sync(&self, dev: u32) -> Result<(), ChunkError> {
        if self.fail_syncs.load(Ordering::SeqCst) {
            return Err(injected());
        }
        self.inner.sync(dev).await
    }
}
