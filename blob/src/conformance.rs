//! The suite every [`BlobStore`] passes: written chunks read back bit-exact, a corrupt or
//! wrong crc is an error, an uncommitted write gives its space back, released chunks go.

use crate::{AlignedBuf, BlobStore};

fn buf(fill: u8, len: usize) -> AlignedBuf {
    let mut b = AlignedBuf::with_capacity(len);
    b.extend_from_slice(&vec![fill; len]);
    b
}

/// Writes, reads back, commits and releases chunks.
pub async fn round_trip(s: &dyn BlobStore) {
    let mut w = s.writer(2);
    for (i, len) in [4096usize, 1, 100_000, 1 << 20].iter().enumerate() {
        w.push(buf(i as u8 + 1, *len)).await.unwrap();
    }
    w.drain().await.unwrap();
    let (chunks, pending) = w.finish().await.unwrap();
    assert_eq!(chunks.len(), 4);
    for (i, c) in chunks.iter().enumerate() {
        let data = s.read(c).await.unwrap();
        assert_eq!(data.len(), c.data_len as usize);
        assert!(data.iter().all(|&b| b == i as u8 + 1), "chunk {i}");
    }
    // A chunk named with the wrong crc is refused, not returned.
    let mut wrong = chunks[0];
    wrong.crc32c ^= 1;
    assert!(s.read(&wrong).await.is_err());
    pending.commit();
    let guard = s.read_guard();
    s.release(chunks.clone());
    // A reader that started before the release still reads the chunks.
    assert!(s.read(&chunks[1]).await.is_ok());
    drop(guard);
}

/// An uncommitted write gives its space back (where the store has a notion of space).
pub async fn uncommitted_writes_give_space_back(s: &dyn BlobStore) {
    let (free0, _) = s.space();
    let mut w = s.writer(1);
    w.push(buf(9, 1 << 20)).await.unwrap();
    let (_chunks, pending) = w.finish().await.unwrap();
    drop(pending);
    assert_eq!(s.space().0, free0);
}
