//! [`FileChunkStore`]: the portable backend (pread/pwrite + `O_DIRECT` on tokio's blocking pool).
//! Used only where io_uring is unavailable; `open_store` logs loudly when it falls back to it.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;

use crate::{AlignedBuf, ChunkError, ChunkStore, DeviceInfo, Extent, device};

pub struct FileChunkStore {
    files: Vec<Arc<File>>,
    infos: Vec<DeviceInfo>,
}

impl FileChunkStore {
    pub fn open(devices: &[(PathBuf, u64)]) -> Result<Self, ChunkError> {
        let (files, infos) = device::open_devices(devices)?;
        Ok(Self {
            files: files.into_iter().map(Arc::new).collect(),
            infos,
        })
    }

    fn file(&self, dev: u32) -> Result<Arc<File>, ChunkError> {
        self.files
            .get(dev as usize)
            .cloned()
            .ok_or_else(|| crate::no_device(dev))
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ChunkError> + Send + 'static,
) -> Result<T, ChunkError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ChunkError::Io(std::io::Error::other(e)))?
}

#[async_trait::async_trait]
impl ChunkStore for FileChunkStore {
    fn devices(&self) -> &[DeviceInfo] {
        &self.infos
    }

    fn backend_name(&self) -> &'static str {
        "file (portable fallback)"
    }

    async fn write(&self, extent: Extent, buf: AlignedBuf) -> Result<AlignedBuf, ChunkError> {
        device::check_bounds(&self.infos, extent, buf.io_len())?;
        let f = self.file(extent.dev)?;
        blocking(move || {
            let mut buf = buf;
            let n = buf.io_len();
            f.write_all_at(&buf.full_mut()[..n], extent.offset)
                .map_err(ChunkError::Io)?;
            Ok(buf)
        })
        .await
    }

    async fn read(&self, extent: Extent, buf: AlignedBuf) -> Result<AlignedBuf, ChunkError> {
        device::check_bounds(&self.infos, extent, buf.io_len())?;
        let f = self.file(extent.dev)?;
        blocking(move || pread(&f, extent, buf)).await
    }

    async fn sync(&self, dev: u32) -> Result<(), ChunkError> {
        let f = self.file(dev)?;
        blocking(move || f.sync_data().map_err(ChunkError::Io)).await
    }

    fn read_blocking(
        &self,
        extent: Extent,
        buf: AlignedBuf,
    ) -> Option<Result<AlignedBuf, ChunkError>> {
        Some(
            device::check_bounds(&self.infos, extent, buf.io_len())
                .and_then(|()| self.file(extent.dev))
                .and_then(|f| pread(&f, extent, buf)),
        )
    }
}

/// Reads `buf.io_len()` bytes of the extent into `buf`, on the calling thread.
fn pread(f: &File, extent: Extent, mut buf: AlignedBuf) -> Result<AlignedBuf, ChunkError> {
    let n = buf.io_len();
    f.read_exact_at(&mut buf.full_mut()[..n], extent.offset)
        .map_err(ChunkError::Io)?;
    Ok(buf)
}
