//! Server-side encryption at rest (issue 33), the parts below the object service's write and
//! read paths: the sealed segment format, data keys sealed by versioned master keys, the key
//! ring boundary (SSE-KMS), and the SSE-C key check.
//!
//! **Segment format.** An object's bytes are encrypted in segments of [`SEGMENT`] plaintext
//! bytes (the last one shorter), each stored as `nonce (12) || ciphertext || tag (16)` with
//! AES-256-GCM under the object's own data key. The nonce is random per segment (so a retried or
//! raced write of the same position never reuses one), and the additional data binds the
//! object's encryption id and the segment's index: a segment moved to another position or
//! another object fails to open, and is answered as corruption, never as wrong bytes. A
//! truncated stream is caught by its length ([`plain_len`] of a stored length that no
//! plaintext length maps to) or by the record's size. A ranged read opens only the segments it
//! touches ([`span`]).
//!
//! AEAD: `ring`'s AES-256-GCM (already in the tree through rustls; AES-NI and CLMUL assembly),
//! not a hand-written cipher.

use std::collections::BTreeMap;

use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};

/// Plaintext bytes per sealed segment.
pub const SEGMENT: usize = 64 * 1024;
/// What sealing adds to each segment: its nonce and its tag.
pub const OVERHEAD: usize = NONCE_LEN + 16;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SseError {
    /// A segment or a sealed key did not open: tampered, misplaced, or the wrong key.
    #[error("encrypted data failed its authentication check (corrupt, moved, or the wrong key)")]
    Corrupt,
    /// A stored length that no plaintext length seals to.
    #[error("encrypted data of {0} bytes is truncated")]
    Truncated(u64),
    /// A sealed data key names a master key version this server does not have.
    #[error("no master key version {0} (was a newer master key lost?)")]
    NoMasterKey(u32),
    /// A sealed data key names a master key version an operator retired (`lode admin
    /// master-key retire`): `reseal` had not moved it, or it was written while the retirement
    /// was under way. `unretire` opens it again.
    #[error(
        "master key version {0} is retired (run `lode admin master-key unretire {0}`, then `reseal`)"
    )]
    Retired(u32),
    #[error("the system random source failed")]
    Random,
}

fn random<const N: usize>() -> Result<[u8; N], SseError> {
    let mut b = [0u8; N];
    SystemRandom::new()
        .fill(&mut b)
        .map_err(|_| SseError::Random)?;
    Ok(b)
}

/// An object's data key (AES-256). Never stored in clear, never printed; wiped on drop.
pub struct DataKey([u8; 32]);

impl Drop for DataKey {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.0);
    }
}

impl std::fmt::Debug for DataKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DataKey(..)")
    }
}

impl DataKey {
    /// A fresh random key.
    pub fn generate() -> Result<Self, SseError> {
        Ok(DataKey(random()?))
    }

    /// A key from its 32 bytes (SSE-C: the customer's key).
    pub fn from_bytes(b: [u8; 32]) -> Self {
        DataKey(b)
    }

    fn aead(&self) -> LessSafeKey {
        LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &self.0).expect("32-byte AES-256 key"))
    }
}

/// How many segments `n` plaintext bytes make (an empty object is one empty segment: its tag
/// still proves the object is empty).
pub fn segments(n: u64) -> u64 {
    n.div_ceil(SEGMENT as u64).max(1)
}

/// How many plaintext bytes a sealed chunk holds so that it stays within `chunk_size` stored
/// bytes: whole segments (at least one).
pub fn plain_per_chunk(chunk_size: usize) -> usize {
    (chunk_size / (SEGMENT + OVERHEAD)).max(1) * SEGMENT
}

/// The stored length of `n` plaintext bytes.
pub fn sealed_len(n: u64) -> u64 {
    n + segments(n) * OVERHEAD as u64
}

/// The plaintext length of a stored length; `None` when no plaintext seals to it (truncated).
pub fn plain_len(stored: u64) -> Option<u64> {
    let whole = (SEGMENT + OVERHEAD) as u64;
    let (full, rest) = (stored / whole, stored % whole);
    let n = match (full, rest) {
        // An empty object: one empty segment.
        (0, r) if r == OVERHEAD as u64 => 0,
        (f, 0) if f > 0 => f * SEGMENT as u64,
        // No room for a segment's nonce, tag and at least one byte.
        (_, r) if r <= OVERHEAD as u64 => return None,
        (f, r) => f * SEGMENT as u64 + r - OVERHEAD as u64,
    };
    (sealed_len(n) == stored).then_some(n)
}

/// Which segments a plaintext range `[start, end)` touches, and where they lie in the stored
/// bytes: `(first segment, stored offset, stored length)`.
pub fn span(start: u64, end: u64, plain_total: u64) -> (u64, u64, u64) {
    let seg = SEGMENT as u64;
    let first = start / seg;
    let last = end.min(plain_total).saturating_sub(1) / seg;
    let last = last.max(first);
    let from = first * (seg + OVERHEAD as u64);
    let to = sealed_len(((last + 1) * seg).min(plain_total)).max(from + OVERHEAD as u64);
    (first, from, to - from)
}

fn aad(object: &[u8; 16], index: u64) -> [u8; 24] {
    let mut a = [0u8; 24];
    a[..16].copy_from_slice(object);
    a[16..].copy_from_slice(&index.to_be_bytes());
    a
}

/// Seals `plain` as the segments numbered from `first` of the object `object` (its encryption
/// id): `plain` starts on a segment boundary; every segment but the last is whole.
pub fn seal(
    key: &DataKey,
    object: &[u8; 16],
    first: u64,
    plain: &[u8],
) -> Result<Vec<u8>, SseError> {
    let mut out = vec![0u8; sealed_len(plain.len() as u64) as usize];
    seal_into(key, object, first, plain, &mut out)?;
    Ok(out)
}

/// [`seal`] into `out`, which is exactly [`sealed_len`] of `plain` long (a chunk buffer: no
/// copy beyond the one into place).
pub fn seal_into(
    key: &DataKey,
    object: &[u8; 16],
    first: u64,
    plain: &[u8],
    out: &mut [u8],
) -> Result<(), SseError> {
    assert_eq!(
        out.len() as u64,
        sealed_len(plain.len() as u64),
        "sealed length"
    );
    let k = key.aead();
    let pieces: Vec<&[u8]> = if plain.is_empty() {
        vec![&[][..]]
    } else {
        plain.chunks(SEGMENT).collect()
    };
    let mut at = 0usize;
    for (i, piece) in pieces.into_iter().enumerate() {
        let nonce: [u8; NONCE_LEN] = random()?;
        out[at..at + NONCE_LEN].copy_from_slice(&nonce);
        let body = at + NONCE_LEN;
        let end = body + piece.len();
        out[body..end].copy_from_slice(piece);
        let tag = k
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad(object, first + i as u64)),
                &mut out[body..end],
            )
            .map_err(|_| SseError::Corrupt)?;
        out[end..end + 16].copy_from_slice(tag.as_ref());
        at = end + 16;
    }
    Ok(())
}

/// Opens stored segments numbered from `first` (as [`seal`] made them); any segment that does
/// not open is [`SseError::Corrupt`].
pub fn open(
    key: &DataKey,
    object: &[u8; 16],
    first: u64,
    stored: &[u8],
) -> Result<Vec<u8>, SseError> {
    let mut out = vec![0u8; stored.len()];
    let n = open_into(key, object, first, stored, &mut out)?;
    out.truncate(n);
    Ok(out)
}

/// [`open`] into `out` (at least as long as `stored`; a pooled read buffer): returns the
/// plaintext's length. Each segment is copied once into place and opened there.
pub fn open_into(
    key: &DataKey,
    object: &[u8; 16],
    first: u64,
    stored: &[u8],
    out: &mut [u8],
) -> Result<usize, SseError> {
    assert!(out.len() >= stored.len(), "room to open into");
    let k = key.aead();
    let mut at = 0usize;
    for (i, seg) in stored.chunks(SEGMENT + OVERHEAD).enumerate() {
        if seg.len() < OVERHEAD {
            return Err(SseError::Truncated(stored.len() as u64));
        }
        let nonce: [u8; NONCE_LEN] = seg[..NONCE_LEN].try_into().expect("nonce length");
        let body = &seg[NONCE_LEN..];
        out[at..at + body.len()].copy_from_slice(body);
        let n = k
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad(object, first + i as u64)),
                &mut out[at..at + body.len()],
            )
            .map_err(|_| SseError::Corrupt)?
            .len();
        at += n;
    }
    Ok(at)
}

/// The master keys that seal data keys (SSE-S3), by version. New keys are sealed by the newest;
/// every older version still opens what it sealed (rotation re-seals keys, never data).
pub struct MasterKeys {
    keys: BTreeMap<u32, DataKey>,
}

impl std::fmt::Debug for MasterKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MasterKeys")
            .field("versions", &self.keys.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// What labels a sealed data key's purpose in its additional data (a key sealed for one use
/// does not open for another).
const DATA_KEY_LABEL: &[u8] = b"lode-sse-data-key-v1";

impl MasterKeys {
    /// Master keys from their versions and bytes (at least one).
    pub fn new(keys: impl IntoIterator<Item = (u32, [u8; 32])>) -> Self {
        MasterKeys {
            keys: keys
                .into_iter()
                .map(|(v, k)| (v, DataKey::from_bytes(k)))
                .collect(),
        }
    }

    /// Master keys already opened (from where they are kept sealed).
    pub fn from_opened(keys: impl IntoIterator<Item = (u32, DataKey)>) -> Self {
        MasterKeys {
            keys: keys.into_iter().collect(),
        }
    }

    /// The versions held, oldest first.
    pub fn versions(&self) -> Vec<u32> {
        self.keys.keys().copied().collect()
    }

    /// The newest version (what new data keys are sealed with).
    pub fn current(&self) -> Option<u32> {
        self.keys.keys().next_back().copied()
    }

    /// Seals a data key with the newest master key: `(version, nonce || sealed key || tag)`.
    pub fn seal_key(&self, key: &DataKey) -> Result<(u32, Vec<u8>), SseError> {
        let v = self.current().ok_or(SseError::NoMasterKey(0))?;
        Ok((v, seal_key_with(&self.keys[&v], key, DATA_KEY_LABEL)?))
    }

    /// Opens a data key sealed by [`MasterKeys::seal_key`] with master key `version`.
    pub fn open_key(&self, version: u32, sealed: &[u8]) -> Result<DataKey, SseError> {
        let m = self
            .keys
            .get(&version)
            .ok_or(SseError::NoMasterKey(version))?;
        open_key_with(m, sealed, DATA_KEY_LABEL)
    }

    /// Re-seals a data key sealed by an older version with the newest (rotation: the data
    /// stays as it is).
    pub fn reseal(&self, version: u32, sealed: &[u8]) -> Result<(u32, Vec<u8>), SseError> {
        let k = self.open_key(version, sealed)?;
        self.seal_key(&k)
    }
}

/// Seals a data key under a key-encrypting key, bound to `label` (its purpose and context):
/// `nonce || sealed key || tag`.
pub fn seal_key_with(kek: &DataKey, key: &DataKey, label: &[u8]) -> Result<Vec<u8>, SseError> {
    let nonce: [u8; NONCE_LEN] = random()?;
    let mut out = nonce.to_vec();
    let mut body = key.0.to_vec();
    let tag = kek
        .aead()
        .seal_in_place_separate_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(label),
            &mut body,
        )
        .map_err(|_| SseError::Corrupt)?;
    out.extend_from_slice(&body);
    out.extend_from_slice(tag.as_ref());
    zeroize::Zeroize::zeroize(&mut body);
    Ok(out)
}

/// Opens what [`seal_key_with`] sealed under the same key and label.
pub fn open_key_with(kek: &DataKey, sealed: &[u8], label: &[u8]) -> Result<DataKey, SseError> {
    if sealed.len() != NONCE_LEN + 32 + 16 {
        return Err(SseError::Corrupt);
    }
    let nonce: [u8; NONCE_LEN] = sealed[..NONCE_LEN].try_into().expect("nonce length");
    let mut body = sealed[NONCE_LEN..].to_vec();
    let opened = kek.aead().open_in_place(
        Nonce::assume_unique_for_key(nonce),
        Aad::from(label),
        &mut body,
    );
    let key = opened.map(|plain| {
        let mut k = [0u8; 32];
        k.copy_from_slice(plain);
        DataKey(k)
    });
    zeroize::Zeroize::zeroize(&mut body);
    key.map_err(|_| SseError::Corrupt)
}

/// SSE-C: what is stored to check a later request's key: a random salt and the HMAC-SHA256 of
/// the key under it (never the key).
pub fn customer_key_check(key: &[u8; 32]) -> Result<([u8; 16], [u8; 32]), SseError> {
    let salt: [u8; 16] = random()?;
    Ok((salt, customer_key_mac(&salt, key)))
}

fn customer_key_mac(salt: &[u8; 16], key: &[u8; 32]) -> [u8; 32] {
    let k = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, salt);
    let tag = ring::hmac::sign(&k, key);
    let mut out = [0u8; 32];
    out.copy_from_slice(tag.as_ref());
    out
}

/// Whether `key` is the key whose check is `(salt, mac)` (compared in constant time).
pub fn customer_key_matches(key: &[u8; 32], salt: &[u8; 16], mac: &[u8; 32]) -> bool {
    let k = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, salt);
    ring::hmac::verify(&k, key, mac).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const OBJ: [u8; 16] = [7; 16];

    fn pattern(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 31 % 251) as u8).collect()
    }

    #[test]
    fn lengths_round_trip_and_truncations_have_none() {
        for n in [
            0u64,
            1,
            100,
            SEGMENT as u64 - 1,
            SEGMENT as u64,
            SEGMENT as u64 + 1,
            5 * SEGMENT as u64,
            5 * SEGMENT as u64 + 77,
        ] {
            let s = sealed_len(n);
            assert_eq!(plain_len(s), Some(n), "{n}");
            assert_eq!(s, n + segments(n) * OVERHEAD as u64);
        }
        assert_eq!(plain_len(0), None);
        assert_eq!(plain_len(OVERHEAD as u64 - 1), None);
        // A whole segment plus a tail too short to be a segment.
        assert_eq!(plain_len((SEGMENT + OVERHEAD) as u64 + 5), None);
    }

    #[test]
    fn seal_open_and_ranges() {
        let key = DataKey::generate().unwrap();
        let plain = pattern(3 * SEGMENT + 1000);
        let stored = seal(&key, &OBJ, 0, &plain).unwrap();
        assert_eq!(stored.len() as u64, sealed_len(plain.len() as u64));
        assert_ne!(&stored[NONCE_LEN..NONCE_LEN + 64], &plain[..64]);
        assert_eq!(open(&key, &OBJ, 0, &stored).unwrap(), plain);
        // A range opens only the segments it touches.
        let total = plain.len() as u64;
        for (a, b) in [
            (0u64, 10u64),
            (SEGMENT as u64 - 5, SEGMENT as u64 + 5),
            (2 * SEGMENT as u64 + 3, total),
            (total - 1, total),
        ] {
            let (first, off, len) = span(a, b, total);
            let part = open(
                &key,
                &OBJ,
                first,
                &stored[off as usize..(off + len) as usize],
            )
            .unwrap();
            let base = first as usize * SEGMENT;
            assert_eq!(
                &part[a as usize - base..b as usize - base],
                &plain[a as usize..b as usize]
            );
        }
        // Empty: one empty segment that still authenticates.
        let e = seal(&key, &OBJ, 0, &[]).unwrap();
        assert_eq!(e.len(), OVERHEAD);
        assert_eq!(open(&key, &OBJ, 0, &e).unwrap(), Vec::<u8>::new());
    }

    #[test]
    fn tampered_moved_or_foreign_segments_do_not_open() {
        let key = DataKey::generate().unwrap();
        let plain = pattern(2 * SEGMENT);
        let stored = seal(&key, &OBJ, 0, &plain).unwrap();
        let w = SEGMENT + OVERHEAD;
        // A flipped byte anywhere.
        for at in [0, NONCE_LEN + 5, w - 1, w + 100] {
            let mut bad = stored.clone();
            bad[at] ^= 1;
            assert_eq!(open(&key, &OBJ, 0, &bad), Err(SseError::Corrupt), "{at}");
        }
        // Swapped segments.
        let mut swapped = stored[w..].to_vec();
        swapped.extend_from_slice(&stored[..w]);
        assert_eq!(open(&key, &OBJ, 0, &swapped), Err(SseError::Corrupt));
        // The right segment at the wrong index, or in another object, or another key.
        assert_eq!(open(&key, &OBJ, 1, &stored[..w]), Err(SseError::Corrupt));
        assert_eq!(open(&key, &[8; 16], 0, &stored), Err(SseError::Corrupt));
        let other = DataKey::generate().unwrap();
        assert_eq!(open(&other, &OBJ, 0, &stored), Err(SseError::Corrupt));
        // A tail too short to be a segment.
        let mut cut = stored.clone();
        cut.truncate(w + 3);
        assert_eq!(
            open(&key, &OBJ, 0, &cut),
            Err(SseError::Truncated(cut.len() as u64))
        );
        // The same plaintext sealed twice differs (random nonces).
        assert_ne!(seal(&key, &OBJ, 0, &plain).unwrap(), stored);
    }

    #[test]
    fn master_keys_seal_open_and_rotate() {
        let old = MasterKeys::new([(1, [1u8; 32])]);
        let dk = DataKey::generate().unwrap();
        let (v, sealed) = old.seal_key(&dk).unwrap();
        assert_eq!(v, 1);
        assert!(!sealed.windows(32).any(|w| w == dk.0));
        assert_eq!(old.open_key(1, &sealed).unwrap().0, dk.0);
        // Rotation: version 2 seals new keys; version 1's still open; re-sealing moves them.
        let both = MasterKeys::new([(1, [1u8; 32]), (2, [2u8; 32])]);
        assert_eq!(both.current(), Some(2));
        assert_eq!(both.open_key(1, &sealed).unwrap().0, dk.0);
        let (v2, resealed) = both.reseal(1, &sealed).unwrap();
        assert_eq!(v2, 2);
        assert_eq!(both.open_key(2, &resealed).unwrap().0, dk.0);
        // A lost version is a clear error; a wrong key or a flipped byte does not open.
        assert_eq!(
            old.open_key(2, &resealed).unwrap_err(),
            SseError::NoMasterKey(2)
        );
        let wrong = MasterKeys::new([(1, [9u8; 32])]);
        assert_eq!(wrong.open_key(1, &sealed).unwrap_err(), SseError::Corrupt);
        let mut bad = sealed.clone();
        bad[20] ^= 1;
        assert_eq!(old.open_key(1, &bad).unwrap_err(), SseError::Corrupt);
        // Keys never show in Debug output.
        assert!(!format!("{both:?}").contains("1, 1, 1"));
        assert_eq!(format!("{dk:?}"), "DataKey(..)");
    }

    #[test]
    fn customer_keys_are_checked_by_salted_mac() {
        let key = [5u8; 32];
        let (salt, mac) = customer_key_check(&key).unwrap();
        assert!(customer_key_matches(&key, &salt, &mac));
        assert!(!customer_key_matches(&[6u8; 32], &salt, &mac));
        let (salt2, mac2) = customer_key_check(&key).unwrap();
        assert_ne!((salt, mac), (salt2, mac2), "salted: equal keys do not show");
        assert!(!mac.windows(32).any(|w| w == key));
    }
}
