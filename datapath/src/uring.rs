//! [`UringChunkStore`]: io_uring + `O_DIRECT` over preallocated files or raw block devices.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::PathBuf;

use crate::ring::{Op, Ring, read_here};
use crate::{AlignedBuf, ChunkError, ChunkStore, DeviceInfo, Extent, device};

/// The production backend: one io_uring thread serves every device.
pub struct UringChunkStore {
    ring: Ring,
    infos: Vec<DeviceInfo>,
    // Declared after `ring`: the ring thread is joined (on drop) before the files close.
    files: Vec<File>,
}

/// True when an error from setting up io_uring means "not available here" (old kernel, seccomp).
pub fn is_unavailable(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOSYS) | Some(libc::EPERM) | Some(libc::EACCES) | Some(libc::EOPNOTSUPP)
    )
}

impl UringChunkStore {
    pub fn open(devices: &[(PathBuf, u64)], queue_depth: u32) -> Result<Self, ChunkError> {
        let ring = Ring::new(queue_depth).map_err(ChunkError::Io)?;
        let (files, infos) = device::open_devices(devices)?;
        Ok(Self { ring, infos, files })
    }

    fn fd(&self, dev: u32) -> Result<i32, ChunkError> {
        self.files
            .get(dev as usize)
            .map(AsRawFd::as_raw_fd)
            .ok_or_else(|| crate::no_device(dev))
    }
}

fn finish(
    res: io::Result<usize>,
    buf: Option<AlignedBuf>,
    want: usize,
) -> Result<AlignedBuf, ChunkError> {
    let n = res.map_err(ChunkError::Io)?;
    if n != want {
        return Err(ChunkError::Io(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("short device IO: {n} of {want} bytes"),
        )));
    }
    buf.ok_or_else(|| ChunkError::Io(io::Error::other("io_uring returned no buffer")))
}

#[async_trait::async_trait]
impl ChunkStore for UringChunkStore {
    fn devices(&self) -> &[DeviceInfo] {
        &self.infos
    }

    fn backend_name(&self) -> &'static str {
        "io_uring"
    }

    async fn write(&self, extent: Extent, buf: AlignedBuf) -> Result<AlignedBuf, ChunkError> {
        let want = buf.io_len();
        device::check_bounds(&self.infos, extent, want)?;
        let fd = self.fd(extent.dev)?;
        let (res, buf) = self
            .ring
            .submit(Op::Write {
                fd,
                offset: extent.offset,
                buf,
            })
            .await;
        finish(res, buf, want)
    }

    async fn read(&self, extent: Extent, buf: AlignedBuf) -> Result<AlignedBuf, ChunkError> {
        let want = buf.io_len();
        device::check_bounds(&self.infos, extent, want)?;
        let fd = self.fd(extent.dev)?;
        let (res, buf) = self
            .ring
            .submit(Op::Read {
                fd,
                offset: extent.offset,
                buf,
            })
            .await;
        finish(res, buf, want)
    }

    async fn sync(&self, dev: u32) -> Result<(), ChunkError> {
        let fd = self.fd(dev)?;
        let (res, _) = self.ring.submit(Op::Sync { fd }).await;
        res.map(|_| ()).map_err(ChunkError::Io)
    }

    fn read_blocking(
        &self,
        extent: Extent,
        buf: AlignedBuf,
    ) -> Option<Result<AlignedBuf, ChunkError>> {
        let want = buf.io_len();
        Some((|| {
            device::check_bounds(&self.infos, extent, want)?;
            let (res, buf) = read_here(self.fd(extent.dev)?, extent.offset, buf);
            finish(res, buf, want)
        })())
    }
}
