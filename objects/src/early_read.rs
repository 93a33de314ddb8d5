//! A GET's first chunk read beside its record lookup, not after it.
//!
//! A GET reads the object's record and then its chunks: two reads in series. In cluster mode
//! each is a RADOS round trip, and under load each waits in an OSD's queue, so a GET's tail is
//! the sum of two tails (RGW keeps a small object's first bytes in its head object: one read).
//! Where the blob store never gives a chunk id to other bytes
//! ([`BlobStore::ids_are_never_reused`]; RADOS chunk objects are written once under unique
//! names), a gateway remembers the first chunk each key's record named when it last read or
//! wrote the key, and a GET of that key starts reading that chunk at once, beside its record
//! lookup.
//!
//! The record stays the only authority: the bytes read early are used only if the record the
//! lookup returned names exactly that chunk (id, length, crc32c), which then holds exactly those
//! bytes (the read checks their crc32c). Otherwise (the key was overwritten or deleted, through
//! any gateway) they are dropped and the chunk is read as before. A guess costs at most one
//! wasted read; nothing about the object is served from memory.
//!
//! A GET of one version by its id does the same, keyed by (bucket, key, version id): a
//! version's record never changes, so once such a GET read it here, the next ones of that
//! version (a dataset pinned to versions, read epoch after epoch) read early and guess right.
//!
//! The memory is bounded: two generations of at most [`GENERATION`] entries, each a hash of
//! the (bucket, key[, version id]) and a chunk ref (about 40 bytes). A hash collision only
//! makes a wrong guess.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use lode_blob::{BlobStore, ChunkError, ChunkRef};

/// Entries per generation: a full generation becomes the old one, and the old one is dropped.
pub const GENERATION: usize = 1 << 16;

/// The first chunk each key's record named when this gateway last read it.
#[derive(Default)]
pub struct FirstChunks {
    hasher: std::collections::hash_map::RandomState,
    gens: Mutex<[HashMap<u64, ChunkRef>; 2]>,
    used: AtomicU64,
    wasted: AtomicU64,
}

/// Counts of early reads ([`FirstChunks::counts`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EarlyCounts {
    /// Early reads whose bytes the GET served.
    pub used: u64,
    /// Early reads dropped: the record named another chunk (or none), the read failed, or the
    /// GET ended before it needed them.
    pub wasted: u64,
}

impl FirstChunks {
    fn slot(&self, bucket: &str, key: &str, version: Option<&str>) -> u64 {
        self.hasher.hash_one((bucket, key, version))
    }

    /// The chunk this key's record named when last seen.
    #[cfg(test)]
    fn guess(&self, bucket: &str, key: &str) -> Option<ChunkRef> {
        self.guess_slot(self.slot(bucket, key, None))
    }

    fn guess_slot(&self, h: u64) -> Option<ChunkRef> {
        let g = self.gens.lock().unwrap_or_else(|p| p.into_inner());
        g[0].get(&h).or_else(|| g[1].get(&h)).copied()
    }

    /// Notes the first chunk the key's record names now (`None`: none, e.g. an inline object).
    pub fn note(&self, bucket: &str, key: &str, first: Option<ChunkRef>) {
        self.note_slot(self.slot(bucket, key, None), first);
    }

    /// Notes the first chunk a version's record names (`None`: none, or no such version).
    pub fn note_version(&self, bucket: &str, key: &str, version: &str, first: Option<ChunkRef>) {
        self.note_slot(self.slot(bucket, key, Some(version)), first);
    }

    fn note_slot(&self, h: u64, first: Option<ChunkRef>) {
        let mut g = self.gens.lock().unwrap_or_else(|p| p.into_inner());
        match first {
            Some(c) => {
                if g[0].len() >= GENERATION && !g[0].contains_key(&h) {
                    g[1] = std::mem::take(&mut g[0]);
                }
                g[1].remove(&h);
                g[0].insert(h, c);
            }
            None => {
                g[0].remove(&h);
                g[1].remove(&h);
            }
        }
    }

    /// Starts reading the chunk last seen for the key, if any.
    pub fn start(
        self: &Arc<Self>,
        blobs: &Arc<dyn BlobStore>,
        bucket: &str,
        key: &str,
    ) -> Option<EarlyRead> {
        self.start_slot(blobs, self.slot(bucket, key, None))
    }

    /// Starts reading the chunk last seen for one version of the key, if any.
    pub fn start_version(
        self: &Arc<Self>,
        blobs: &Arc<dyn BlobStore>,
        bucket: &str,
        key: &str,
        version: &str,
    ) -> Option<EarlyRead> {
        self.start_slot(blobs, self.slot(bucket, key, Some(version)))
    }

    fn start_slot(self: &Arc<Self>, blobs: &Arc<dyn BlobStore>, h: u64) -> Option<EarlyRead> {
        if !blobs.ids_are_never_reused() {
            return None;
        }
        let chunk = self.guess_slot(h)?;
        let b = Arc::clone(blobs);
        let task = tokio::spawn(async move { b.read(&chunk).await });
        Some(EarlyRead {
            chunk,
            task: Some(task),
            counts: Arc::clone(self),
        })
    }

    pub fn counts(&self) -> EarlyCounts {
        EarlyCounts {
            used: self.used.load(Ordering::Relaxed),
            wasted: self.wasted.load(Ordering::Relaxed),
        }
    }

    /// Entries held (both generations).
    pub fn len(&self) -> usize {
        let g = self.gens.lock().unwrap_or_else(|p| p.into_inner());
        g[0].len() + g[1].len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A chunk read started before the record that may name it was known. Dropped unused, it is
/// cancelled and counted as wasted.
pub struct EarlyRead {
    chunk: ChunkRef,
    task: Option<tokio::task::JoinHandle<Result<Bytes, ChunkError>>>,
    counts: Arc<FirstChunks>,
}

impl EarlyRead {
    /// Whether this read is of `chunk` (the record's).
    pub fn is_of(&self, chunk: &ChunkRef) -> bool {
        self.chunk == *chunk
    }

    /// The chunk's bytes (crc-checked by the store), or `None` if the early read failed (the
    /// caller reads it again and sees the error itself, if it persists).
    pub async fn bytes(mut self) -> Option<Bytes> {
        let task = self.task.take()?;
        match task.await {
            Ok(Ok(b)) => {
                self.counts.used.fetch_add(1, Ordering::Relaxed);
                Some(b)
            }
            _ => {
                self.counts.wasted.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }
}

impl Drop for EarlyRead {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
            self.counts.wasted.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lode_blob::ChunkId;

    fn chunk(i: u64) -> ChunkRef {
        ChunkRef {
            id: ChunkId {
                space: 1,
                index: i,
                len: 0,
            },
            data_len: 10,
            crc32c: i as u32,
        }
    }

    #[test]
    fn a_note_replaces_and_none_forgets() {
        let f = FirstChunks::default();
        assert_eq!(f.guess("b", "k"), None);
        f.note("b", "k", Some(chunk(1)));
        assert_eq!(f.guess("b", "k"), Some(chunk(1)));
        assert_eq!(f.guess("b", "other"), None);
        assert_eq!(f.guess("c", "k"), None);
        f.note("b", "k", Some(chunk(2)));
        assert_eq!(f.guess("b", "k"), Some(chunk(2)));
        f.note("b", "k", None);
        assert_eq!(f.guess("b", "k"), None);
        assert!(f.is_empty());
        // A version is a key of its own, beside the key's current record.
        f.note("b", "k", Some(chunk(3)));
        f.note_version("b", "k", "v1", Some(chunk(4)));
        assert_eq!(f.guess("b", "k"), Some(chunk(3)));
        assert_eq!(f.guess_slot(f.slot("b", "k", Some("v1"))), Some(chunk(4)));
        assert_eq!(f.guess_slot(f.slot("b", "k", Some("v2"))), None);
        assert_eq!(f.len(), 2);
    }

    #[test]
    fn memory_stays_within_two_generations_and_keeps_the_recent_keys() {
        let f = FirstChunks::default();
        let n = 3 * GENERATION as u64;
        for i in 0..n {
            f.note("b", &i.to_string(), Some(chunk(i)));
        }
        assert!(f.len() <= 2 * GENERATION, "{} entries", f.len());
        // The last generation's worth of keys are all there; the first are gone.
        for i in n - GENERATION as u64..n {
            assert_eq!(f.guess("b", &i.to_string()), Some(chunk(i)));
        }
        assert_eq!(f.guess("b", "0"), None);
        // A key seen again moves to the new generation (it survives the next turn).
        f.note("b", &(n - 1).to_string(), Some(chunk(7)));
        assert_eq!(f.guess("b", &(n - 1).to_string()), Some(chunk(7)));
        assert!(f.len() <= 2 * GENERATION);
    }
}
