//! Opening device files and raw block devices for `O_DIRECT` IO.

use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::PathBuf;

use crate::{ChunkError, DeviceInfo};

/// Opens (creating and preallocating where it is a file) each device with `O_DIRECT`.
/// `direct = false` is only for filesystems that refuse `O_DIRECT` (e.g. tmpfs), and is logged.
pub(crate) fn open_devices(
    devices: &[(PathBuf, u64)],
) -> Result<(Vec<File>, Vec<DeviceInfo>), ChunkError> {
    let mut files = vec![];
    let mut infos = vec![];
    for (path, want) in devices {
        let is_block = std::fs::metadata(path)
            .map(|m| m.file_type().is_block_device())
            .unwrap_or(false);
        if !is_block && let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(ChunkError::Io)?;
        }
        let open = |direct: bool| {
            let mut o = OpenOptions::new();
            o.read(true).write(true);
            if !is_block {
                o.create(true).truncate(false);
            }
            if direct {
                o.custom_flags(libc::O_DIRECT);
            }
            o.open(path)
        };
        let mut file = match open(true) {
            Ok(f) => f,
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                tracing::warn!(path = %path.display(), "O_DIRECT refused by this filesystem: using buffered IO for this device");
                open(false).map_err(ChunkError::Io)?
            }
            Err(e) => {
                return Err(ChunkError::Io(std::io::Error::new(
                    e.kind(),
                    format!("{}: {e}", path.display()),
                )));
            }
        };
        let size = if is_block {
            file.seek(SeekFrom::End(0)).map_err(ChunkError::Io)?
        } else {
            let cur = file.metadata().map_err(ChunkError::Io)?.len();
            if cur < *want {
                // Preallocate so O_DIRECT writes never allocate filesystem blocks on the hot path.
                match rustix::fs::fallocate(&file, rustix::fs::FallocateFlags::empty(), 0, *want) {
                    Ok(()) => {}
                    Err(e) if e == rustix::io::Errno::NOSPC => {
                        // Never start on a device that cannot hold its configured size: writes
                        // would fail later, on the hot path, instead.
                        let _ = file.set_len(cur);
                        return Err(ChunkError::Io(std::io::Error::new(
                            std::io::ErrorKind::StorageFull,
                            format!(
                                "not enough free disk space to preallocate {want} bytes for device {} \
                                 (lower its size in [[datapath.devices]])",
                                path.display()
                            ),
                        )));
                    }
                    Err(e) => {
                        tracing::warn!(path = %path.display(), error = %e, "fallocate unsupported here; extending sparsely");
                        file.set_len(*want).map_err(ChunkError::Io)?;
                    }
                }
                file.sync_all().map_err(ChunkError::Io)?;
            }
            cur.max(*want)
        };
        let size = size / lode_blob::ALIGN as u64 * lode_blob::ALIGN as u64;
        infos.push(DeviceInfo {
            path: path.display().to_string(),
            size,
        });
        files.push(file);
    }
    Ok((files, infos))
}

/// Checks that `[offset, offset+len)` lies inside the device.
pub(crate) fn check_bounds(
    infos: &[DeviceInfo],
    e: crate::Extent,
    len: usize,
) -> Result<(), ChunkError> {
    let dev = infos
        .get(e.dev as usize)
        .ok_or(ChunkError::BadChunk(e.id()))?;
    if len > e.len as usize
        || e.offset + e.len as u64 > dev.size
        || !e.offset.is_multiple_of(lode_blob::ALIGN as u64)
    {
        return Err(ChunkError::BadChunk(e.id()));
    }
    Ok(())
}
