//! 4 KiB-aligned IO buffers for `O_DIRECT`.
//!
//! One of the few modules of Lode where `unsafe` is allowed (with the datapath's `ring` and the
//! librados FFI). It moved here from the datapath with the blob boundary, whose writers take it.
#![allow(unsafe_code)]

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::Mutex;

/// The alignment (and size granularity) of every device IO.
pub const ALIGN: usize = 4096;

/// Rounds `n` up to a multiple of [`ALIGN`].
pub const fn align_up(n: usize) -> usize {
    n.div_ceil(ALIGN) * ALIGN
}

/// A heap buffer whose start and capacity are multiples of 4 KiB, as `O_DIRECT` needs.
///
/// `len` is the logical length (the bytes that matter); the IO length is `io_len()`, which is
/// `len` rounded up to 4 KiB. Bytes past `len` hold zeroes or bytes of an earlier use of the
/// memory (buffers are recycled through a small pool): whoever writes them to a device zeroes
/// the padding first ([`AlignedBuf::zero_tail`]).
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    cap: usize,
    /// The size of the allocation: `cap` rounded up to its pool class.
    alloc: usize,
    len: usize,
}

/// Allocations up to this size are rounded to 4 KiB classes, larger ones to 64 KiB classes.
const SMALL: usize = 64 << 10;
/// Largest allocation kept for reuse (a default chunk).
const POOL_MAX_ALLOC: usize = 4 << 20;
/// At most this many bytes sit in the pool.
const POOL_MAX_BYTES: usize = 64 << 20;

/// The allocation size used for a buffer of capacity `cap` (a multiple of 4 KiB).
const fn class_of(cap: usize) -> usize {
    if cap <= SMALL {
        cap
    } else {
        cap.div_ceil(SMALL) * SMALL
    }
}

/// A freed allocation waiting for reuse.
struct Free(NonNull<u8>);
// SAFETY: a pooled allocation is owned by the pool alone (no other pointer to it exists).
unsafe impl Send for Free {}

/// Freed allocations by size class, so the hot read and write paths reuse memory instead of
/// zeroing fresh memory for every chunk. Memory is reused as it is, never shared.
struct Pool {
    free: std::collections::HashMap<usize, Vec<Free>>,
    bytes: usize,
}

static POOL: Mutex<Option<Pool>> = Mutex::new(None);

fn pool_take(alloc: usize) -> Option<NonNull<u8>> {
    let mut g = POOL.lock().unwrap_or_else(|e| e.into_inner());
    let p = g.as_mut()?;
    let f = p.free.get_mut(&alloc)?.pop()?;
    p.bytes -= alloc;
    Some(f.0)
}

/// Keeps the allocation for reuse; hands it back when the pool is full.
fn pool_put(ptr: NonNull<u8>, alloc: usize) -> Option<NonNull<u8>> {
    if alloc > POOL_MAX_ALLOC {
        return Some(ptr);
    }
    let mut g = POOL.lock().unwrap_or_else(|e| e.into_inner());
    let p = g.get_or_insert_with(|| Pool {
        free: Default::default(),
        bytes: 0,
    });
    if p.bytes + alloc > POOL_MAX_BYTES {
        return Some(ptr);
    }
    p.bytes += alloc;
    p.free.entry(alloc).or_default().push(Free(ptr));
    None
}

// SAFETY: AlignedBuf owns its allocation exclusively (like Vec<u8>); no interior sharing.
unsafe impl Send for AlignedBuf {}
// SAFETY: &AlignedBuf only hands out &[u8]; no interior mutability.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// A buffer of `cap` bytes rounded up to 4 KiB, with logical length 0: recycled memory
    /// when the pool has some of its class, else freshly zeroed memory.
    pub fn with_capacity(cap: usize) -> Self {
        let cap = align_up(cap.max(1));
        let alloc = class_of(cap);
        if let Some(ptr) = pool_take(alloc) {
            return Self {
                ptr,
                cap,
                alloc,
                len: 0,
            };
        }
        let layout = Layout::from_size_align(alloc, ALIGN).expect("aligned layout");
        // SAFETY: layout has non-zero size (alloc >= cap >= ALIGN).
        let raw = unsafe { alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            std::alloc::handle_alloc_error(layout)
        };
        Self {
            ptr,
            cap,
            alloc,
            len: 0,
        }
    }

    /// A buffer holding a copy of `data`.
    pub fn from_slice(data: &[u8]) -> Self {
        let mut b = Self::with_capacity(data.len());
        b.extend_from_slice(data);
        b
    }

    pub fn capacity(&self) -> usize {
        self.cap
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Free space left before the capacity.
    pub fn remaining(&self) -> usize {
        self.cap - self.len
    }

    /// The length of the device IO for this buffer: `len` rounded up to 4 KiB.
    pub fn io_len(&self) -> usize {
        align_up(self.len)
    }

    /// Sets the logical length. Panics when `len > capacity`.
    pub fn set_len(&mut self, len: usize) {
        assert!(len <= self.cap, "AlignedBuf::set_len beyond capacity");
        self.len = len;
    }

    /// Appends as much of `data` as fits; returns how many bytes were taken.
    pub fn extend_from_slice(&mut self, data: &[u8]) -> usize {
        let n = data.len().min(self.remaining());
        let start = self.len;
        self.full_mut()[start..start + n].copy_from_slice(&data[..n]);
        self.len += n;
        n
    }

    /// Zeroes the tail between `len` and `io_len()`, so padding never carries stale bytes.
    pub fn zero_tail(&mut self) {
        let (l, io) = (self.len, self.io_len());
        self.full_mut()[l..io].fill(0);
    }

    /// The whole capacity as a mutable slice (for reads into the buffer).
    pub fn full_mut(&mut self) -> &mut [u8] {
        // SAFETY: ptr is valid for alloc >= cap bytes, all initialised (zeroed when allocated,
        // whatever a previous owner wrote when recycled), uniquely borrowed.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.cap) }
    }

    /// Raw pointer for the kernel. Valid for `capacity()` bytes while `self` lives.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr is valid for cap >= len initialised bytes.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        let len = self.len;
        &mut self.full_mut()[..len]
    }
}

impl AsRef<[u8]> for AlignedBuf {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if let Some(ptr) = pool_put(self.ptr, self.alloc) {
            let layout = Layout::from_size_align(self.alloc, ALIGN).expect("aligned layout");
            // SAFETY: allocated in with_capacity with this exact layout; freed once, since the
            // pool did not take it.
            unsafe { dealloc(ptr.as_ptr(), layout) }
        }
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("len", &self.len)
            .field("cap", &self.cap)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_and_padded() {
        let mut b = AlignedBuf::with_capacity(5000);
        assert_eq!(b.capacity(), 8192);
        assert_eq!(b.as_mut_ptr() as usize % ALIGN, 0);
        assert_eq!(b.extend_from_slice(&[7u8; 10_000]), 8192);
        assert_eq!(b.len(), 8192);
        b.set_len(100);
        assert_eq!(b.io_len(), 4096);
        b.zero_tail();
        assert!(b.full_mut()[100..4096].iter().all(|&x| x == 0));
        assert_eq!(&b[..], &[7u8; 100][..]);
    }

    #[test]
    fn recycled_buffers_keep_their_requested_capacity() {
        // 300,000 bytes: a 64 KiB class of 327,680 bytes behind a 4 KiB-aligned capacity.
        let mut a = AlignedBuf::with_capacity(300_000);
        assert_eq!(a.capacity(), 303_104);
        assert_eq!(a.extend_from_slice(&vec![9u8; 400_000]), 303_104);
        let p = a.as_mut_ptr() as usize;
        drop(a);
        // Same class, smaller request: the capacity is what was asked, not the class size.
        let mut b = AlignedBuf::with_capacity(290_000);
        assert_eq!(b.capacity(), 290_816);
        assert_eq!(b.remaining(), 290_816);
        assert_eq!(b.as_mut_ptr() as usize % ALIGN, 0);
        // Another thread may have taken the pooled one; when this is it, the padding rule holds.
        if b.as_mut_ptr() as usize == p {
            b.set_len(10);
            b.zero_tail();
            assert!(b.full_mut()[10..4096].iter().all(|&x| x == 0));
        }
    }
}
