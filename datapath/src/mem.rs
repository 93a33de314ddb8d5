//! [`MemChunkStore`]: devices in memory, for unit tests of the code around the boundary.

use std::sync::Mutex;

use crate::{AlignedBuf, ChunkError, ChunkStore, DeviceInfo, Extent, device};

pub struct MemChunkStore {
    devs: Vec<Mutex<Vec<u8>>>,
    infos: Vec<DeviceInfo>,
}

impl MemChunkStore {
    pub fn new(sizes: &[u64]) -> Self {
        Self {
            devs: sizes
                .iter()
                .map(|&s| Mutex::new(vec![0; s as usize]))
                .collect(),
            infos: sizes
                .iter()
                .enumerate()
                .map(|(i, &s)| DeviceInfo {
                    path: format!("mem{i}"),
                    size: s,
                })
                .collect(),
        }
    }

    /// Flips a byte (corruption tests).
    pub fn corrupt(&self, dev: u32, offset: u64) {
        self.devs[dev as usize].lock().unwrap()[offset as usize] ^= 0xff;
    }
}

#[async_trait::async_trait]
impl ChunkStore for MemChunkStore {
    fn devices(&self) -> &[DeviceInfo] {
        &self.infos
    }

    fn backend_name(&self) -> &'static str {
        "memory"
    }

    async fn write(&self, extent: Extent, mut buf: AlignedBuf) -> Result<AlignedBuf, ChunkError> {
        let n = buf.io_len();
        device::check_bounds(&self.infos, extent, n)?;
        let o = extent.offset as usize;
        self.devs[extent.dev as usize].lock().unwrap()[o..o + n]
            .copy_from_slice(&buf.full_mut()[..n]);
        Ok(buf)
    }

    async fn read(&self, extent: Extent, mut buf: AlignedBuf) -> Result<AlignedBuf, ChunkError> {
        let n = buf.io_len();
        device::check_bounds(&self.infos, extent, n)?;
        let o = extent.offset as usize;
        buf.full_mut()[..n]
            .copy_from_slice(&self.devs[extent.dev as usize].lock().unwrap()[o..o + n]);
        Ok(buf)
    }

    async fn sync(&self, _dev: u32) -> Result<(), ChunkError> {
        Ok(())
    }
}
