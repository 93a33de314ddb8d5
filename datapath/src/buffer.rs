//! 4 KiB-aligned IO buffers for `O_DIRECT`.
//!
//! One of the two modules of Lode where `unsafe` is allowed (the other is `ring`).
#![allow(unsafe_code)]

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// The alignment (and size granularity) of every device IO.
pub const ALIGN: usize = 4096;

/// Rounds `n` up to a multiple of [`ALIGN`].
pub const fn align_up(n: usize) -> usize {
    n.div_ceil(ALIGN) * ALIGN
}

/// A heap buffer whose start and capacity are multiples of 4 KiB, as `O_DIRECT` needs.
///
/// `len` is the logical length (the bytes that matter); the IO length is `io_len()`, which is
/// `len` rounded up to 4 KiB. Bytes between `len` and the capacity are zero on allocation.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    cap: usize,
    len: usize,
}

// SAFETY: AlignedBuf owns its allocation exclusively (like Vec<u8>); no interior sharing.
unsafe impl Send for AlignedBuf {}
// SAFETY: &AlignedBuf only hands out &[u8]; no interior mutability.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// A zeroed buffer of at least `cap` bytes (rounded up to 4 KiB), with logical length 0.
    pub fn with_capacity(cap: usize) -> Self {
        let cap = align_up(cap.max(1));
        let layout = Layout::from_size_align(cap, ALIGN).expect("aligned layout");
        // SAFETY: layout has non-zero size (cap >= ALIGN).
        let raw = unsafe { alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            std::alloc::handle_alloc_error(layout)
        };
        Self { ptr, cap, len: 0 }
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
        // SAFETY: ptr is valid for cap bytes, zero-initialised at allocation, uniquely borrowed.
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
        let layout = Layout::from_size_align(self.cap, ALIGN).expect("aligned layout");
        // SAFETY: allocated in with_capacity with this exact layout; freed once.
        unsafe { dealloc(self.ptr.as_ptr(), layout) }
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
}
