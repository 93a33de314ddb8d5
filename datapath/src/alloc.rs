//! The extent allocator: free space per device, in 4 KiB-aligned extents.
//!
//! The allocator is in memory only. Its durable state is the set of *used* extents, which the
//! object service records in the metadata store in the same batch as the object that owns them;
//! at start the allocator is rebuilt from that set (`mark_used`). Space handed out for a write
//! that never commits is simply given back (or, after a crash, was never recorded as used).

use std::collections::BTreeMap;

use crate::{ChunkError, Extent};
use lode_blob::ALIGN;

/// Free space of one device: offset -> length, coalesced.
#[derive(Debug, Default)]
struct DeviceFree {
    size: u64,
    free: BTreeMap<u64, u64>,
    free_bytes: u64,
    /// Where the next search starts (next-fit keeps writes roughly sequential).
    cursor: u64,
}

impl DeviceFree {
    fn new(size: u64) -> Self {
        let size = size / ALIGN as u64 * ALIGN as u64;
        let mut free = BTreeMap::new();
        if size > 0 {
            free.insert(0, size);
        }
        Self {
            size,
            free,
            free_bytes: size,
            cursor: 0,
        }
    }

    fn take(&mut self, len: u64) -> Option<u64> {
        if self.free_bytes < len {
            return None;
        }
        let pick = self
            .free
            .range(self.cursor..)
            .chain(self.free.range(..self.cursor))
            .find(|(_, l)| **l >= len)
            .map(|(o, l)| (*o, *l))?;
        let (off, flen) = pick;
        self.free.remove(&off);
        if flen > len {
            self.free.insert(off + len, flen - len);
        }
        self.free_bytes -= len;
        self.cursor = off + len;
        Some(off)
    }

    /// Removes `[off, off+len)` from the free set. False when any of it was not free.
    fn remove_range(&mut self, off: u64, len: u64) -> bool {
        let Some((&foff, &flen)) = self.free.range(..=off).next_back() else {
            return false;
        };
        if foff + flen < off + len {
            return false;
        }
        self.free.remove(&foff);
        if foff < off {
            self.free.insert(foff, off - foff);
        }
        if off + len < foff + flen {
            self.free.insert(off + len, foff + flen - (off + len));
        }
        self.free_bytes -= len;
        true
    }

    /// Returns `[off, off+len)` to the free set. False when any of it was already free.
    fn give_back(&mut self, off: u64, len: u64) -> bool {
        if off + len > self.size {
            return false;
        }
        let mut start = off;
        let mut end = off + len;
        if let Some((&p, &pl)) = self.free.range(..=off).next_back() {
            if p + pl > off {
                return false;
            }
            if p + pl == off {
                self.free.remove(&p);
                start = p;
            }
        }
        if let Some((&n, &nl)) = self.free.range(off..).next() {
            if n < end {
                return false;
            }
            if n == end {
                self.free.remove(&n);
                end = n + nl;
            }
        }
        self.free.insert(start, end - start);
        self.free_bytes += len;
        true
    }
}

/// Free/used space across all devices, with round-robin striping of new extents.
#[derive(Debug)]
pub struct ExtentAllocator {
    devices: Vec<DeviceFree>,
    next_dev: usize,
}

impl ExtentAllocator {
    /// All of each device free. Sizes are rounded down to 4 KiB.
    pub fn new(device_sizes: &[u64]) -> Self {
        Self {
            devices: device_sizes.iter().map(|&s| DeviceFree::new(s)).collect(),
            next_dev: 0,
        }
    }

    /// Allocates `len` bytes (rounded up to 4 KiB) on the next device with room.
    pub fn allocate(&mut self, len: u64) -> Result<Extent, ChunkError> {
        let len = len.div_ceil(ALIGN as u64) * ALIGN as u64;
        let n = self.devices.len();
        for i in 0..n {
            let dev = (self.next_dev + i) % n;
            if let Some(offset) = self.devices[dev].take(len) {
                self.next_dev = (dev + 1) % n;
                return Ok(Extent {
                    dev: dev as u32,
                    offset,
                    len: len as u32,
                });
            }
        }
        Err(ChunkError::NoSpace)
    }

    /// Marks an extent used (rebuilding from metadata at start). Errors on a double use.
    pub fn mark_used(&mut self, e: Extent) -> Result<(), ChunkError> {
        let d = self
            .devices
            .get_mut(e.dev as usize)
            .ok_or(ChunkError::BadChunk(e.id()))?;
        if d.remove_range(e.offset, u64::from(e.len)) {
            Ok(())
        } else {
            Err(ChunkError::BadChunk(e.id()))
        }
    }

    /// Returns an extent to the free set. Errors if it was (partly) free already.
    pub fn free(&mut self, e: Extent) -> Result<(), ChunkError> {
        let d = self
            .devices
            .get_mut(e.dev as usize)
            .ok_or(ChunkError::BadChunk(e.id()))?;
        if d.give_back(e.offset, u64::from(e.len)) {
            Ok(())
        } else {
            Err(ChunkError::BadChunk(e.id()))
        }
    }

    /// Free bytes over all devices.
    pub fn free_bytes(&self) -> u64 {
        self.devices.iter().map(|d| d.free_bytes).sum()
    }

    /// Total bytes over all devices.
    pub fn total_bytes(&self) -> u64 {
        self.devices.iter().map(|d| d.size).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocate_free_coalesce() {
        let mut a = ExtentAllocator::new(&[64 * 4096]);
        let x = a.allocate(4096).unwrap();
        let y = a.allocate(5000).unwrap();
        assert_eq!(y.len, 8192);
        assert_eq!(a.free_bytes(), 61 * 4096);
        a.free(x).unwrap();
        assert!(a.free(x).is_err(), "double free is refused");
        a.free(y).unwrap();
        assert_eq!(a.free_bytes(), 64 * 4096);
        // Coalesced back into one extent: a whole-device allocation fits again.
        let all = a.allocate(64 * 4096).unwrap();
        assert_eq!(all.offset, 0);
        assert!(matches!(a.allocate(4096), Err(ChunkError::NoSpace)));
    }

    #[test]
    fn mark_used_detects_double_use() {
        let mut a = ExtentAllocator::new(&[16 * 4096, 16 * 4096]);
        let e = Extent {
            dev: 1,
            offset: 4096,
            len: 8192,
        };
        a.mark_used(e).unwrap();
        assert!(a.mark_used(e).is_err());
        assert!(
            a.mark_used(Extent {
                dev: 2,
                offset: 0,
                len: 4096
            })
            .is_err()
        );
        assert_eq!(a.free_bytes(), 30 * 4096);
    }

    #[test]
    fn stripes_across_devices() {
        let mut a = ExtentAllocator::new(&[16 * 4096, 16 * 4096]);
        let d: Vec<u32> = (0..4).map(|_| a.allocate(4096).unwrap().dev).collect();
        assert_eq!(d, vec![0, 1, 0, 1]);
    }

    #[test]
    fn randomized_against_model() {
        // Allocate/free at random; the free byte count and non-overlap must always hold.
        let mut a = ExtentAllocator::new(&[256 * 4096]);
        let mut live: Vec<Extent> = vec![];
        let mut seed = 0x9e3779b97f4a7c15u64;
        for _ in 0..5000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            if !seed.is_multiple_of(3) || live.is_empty() {
                if let Ok(e) = a.allocate((seed >> 8) % (8 * 4096) + 1) {
                    for l in &live {
                        let overlap = l.offset < e.offset + u64::from(e.len)
                            && e.offset < l.offset + u64::from(l.len);
                        assert!(!overlap, "{l:?} overlaps {e:?}");
                    }
                    live.push(e);
                }
            } else {
                let i = (seed as usize >> 4) % live.len();
                a.free(live.swap_remove(i)).unwrap();
            }
            let used: u64 = live.iter().map(|e| u64::from(e.len)).sum();
            assert_eq!(a.free_bytes() + used, 256 * 4096);
        }
    }
}
