//! Flexible checksums (CRC32, CRC32C, CRC64NVME, SHA1, SHA256): computing them while a body
//! streams, verifying what the client sent (header or aws-chunked trailer), and the multipart
//! composite and full-object forms.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use crc_fast::{CrcAlgorithm, Digest as CrcDigest};
use lode_catalog::{Checksums, PartRecord, UploadRecord};
use sha1::Digest as _;

use crate::error::{ObjError, ObjResult};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algo {
    Crc32,
    Crc32c,
    Crc64Nvme,
    Sha1,
    Sha256,
}

impl Algo {
    pub const ALL: [Algo; 5] = [
        Algo::Crc32,
        Algo::Crc32c,
        Algo::Crc64Nvme,
        Algo::Sha1,
        Algo::Sha256,
    ];

    /// From `CRC32`, `crc32c`, or a header name like `x-amz-checksum-crc64nvme`.
    pub fn parse(s: &str) -> Option<Self> {
        let s = s.trim().to_ascii_lowercase();
        let s = s.strip_prefix("x-amz-checksum-").unwrap_or(&s);
        Some(match s {
            "crc32" => Algo::Crc32,
            "crc32c" => Algo::Crc32c,
            "crc64nvme" => Algo::Crc64Nvme,
            "sha1" => Algo::Sha1,
            "sha256" => Algo::Sha256,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Algo::Crc32 => "CRC32",
            Algo::Crc32c => "CRC32C",
            Algo::Crc64Nvme => "CRC64NVME",
            Algo::Sha1 => "SHA1",
            Algo::Sha256 => "SHA256",
        }
    }

    pub fn header(self) -> &'static str {
        match self {
            Algo::Crc32 => "x-amz-checksum-crc32",
            Algo::Crc32c => "x-amz-checksum-crc32c",
            Algo::Crc64Nvme => "x-amz-checksum-crc64nvme",
            Algo::Sha1 => "x-amz-checksum-sha1",
            Algo::Sha256 => "x-amz-checksum-sha256",
        }
    }

    fn crc(self) -> Option<(CrcAlgorithm, usize)> {
        match self {
            Algo::Crc32 => Some((CrcAlgorithm::Crc32IsoHdlc, 4)),
            Algo::Crc32c => Some((CrcAlgorithm::Crc32Iscsi, 4)),
            Algo::Crc64Nvme => Some((CrcAlgorithm::Crc64Nvme, 8)),
            _ => None,
        }
    }

    /// The checksum of `data`, raw bytes.
    pub fn digest(self, data: &[u8]) -> Vec<u8> {
        let mut h = Hasher::new(&[self]);
        h.update(data);
        h.finish_raw().remove(0).1
    }
}

/// A value per algorithm (base64 text, as on the wire).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChecksumSet {
    pub values: Vec<(Algo, String)>,
}

impl ChecksumSet {
    pub fn get(&self, a: Algo) -> Option<&str> {
        self.values
            .iter()
            .find(|(x, _)| *x == a)
            .map(|(_, v)| v.as_str())
    }

    pub fn set(&mut self, a: Algo, v: String) {
        self.values.retain(|(x, _)| *x != a);
        self.values.push((a, v));
    }

    /// From the five optional DTO fields.
    pub fn from_fields(
        crc32: Option<String>,
        crc32c: Option<String>,
        crc64nvme: Option<String>,
        sha1: Option<String>,
        sha256: Option<String>,
    ) -> Self {
        let mut s = Self::default();
        for (a, v) in [
            (Algo::Crc32, crc32),
            (Algo::Crc32c, crc32c),
            (Algo::Crc64Nvme, crc64nvme),
            (Algo::Sha1, sha1),
            (Algo::Sha256, sha256),
        ] {
            if let Some(v) = v {
                s.set(a, v);
            }
        }
        s
    }

    /// Adds the `x-amz-checksum-*` entries of a header map (e.g. an aws-chunked trailer).
    pub fn merge_headers(&mut self, h: &http::HeaderMap) -> ObjResult<()> {
        for a in Algo::ALL {
            if let Some(v) = h.get(a.header()) {
                let v = v.to_str().map_err(|_| {
                    ObjError::InvalidArgument(format!("invalid {} value", a.header()))
                })?;
                self.set(a, v.trim().to_owned());
            }
        }
        Ok(())
    }

    /// Every value sent must equal the one computed.
    pub fn verify(&self, expected: &ChecksumSet) -> ObjResult<()> {
        for (a, want) in &expected.values {
            match self.get(*a) {
                Some(got) if got == want => {}
                Some(_) => {
                    return Err(ObjError::BadDigest(format!(
                        "The {} you specified did not match the calculated checksum.",
                        a.name()
                    )));
                }
                None => {
                    return Err(ObjError::InvalidRequest(format!(
                        "The {} checksum was sent without being announced (x-amz-sdk-checksum-algorithm or x-amz-trailer).",
                        a.name()
                    )));
                }
            }
        }
        Ok(())
    }

    /// Checks the checksums a client listed for a part in CompleteMultipartUpload.
    pub fn verify_against(&self, stored: &Checksums, part: i32) -> ObjResult<()> {
        let stored = Self::from_record(stored);
        for (a, want) in &self.values {
            if stored.get(*a).is_some_and(|got| got != want) {
                return Err(ObjError::InvalidPart(format!(
                    "The {} checksum of part {part} does not match the uploaded part.",
                    a.name()
                )));
            }
        }
        Ok(())
    }

    pub fn from_record(c: &Checksums) -> Self {
        Self::from_fields(
            c.crc32.clone(),
            c.crc32c.clone(),
            c.crc64nvme.clone(),
            c.sha1.clone(),
            c.sha256.clone(),
        )
    }

    pub fn to_record(&self) -> Checksums {
        Checksums {
            crc32: self.get(Algo::Crc32).map(str::to_owned),
            crc32c: self.get(Algo::Crc32c).map(str::to_owned),
            crc64nvme: self.get(Algo::Crc64Nvme).map(str::to_owned),
            sha1: self.get(Algo::Sha1).map(str::to_owned),
            sha256: self.get(Algo::Sha256).map(str::to_owned),
            kind: if self.values.is_empty() {
                None
            } else {
                Some("FULL_OBJECT".into())
            },
        }
    }
}

enum State {
    Crc(CrcDigest),
    Sha1(sha1::Sha1),
    Sha256(sha2::Sha256),
}

/// Computes several checksums in one pass.
pub struct Hasher {
    states: Vec<(Algo, State)>,
}

impl Hasher {
    /// Hashes with `algos`; with none, CRC64NVME (what S3 stores for objects sent without one).
    pub fn new(algos: &[Algo]) -> Self {
        let mut list: Vec<Algo> = algos.to_vec();
        if list.is_empty() {
            list.push(Algo::Crc64Nvme);
        }
        list.dedup();
        let states = list
            .into_iter()
            .map(|a| {
                let s = match a {
                    Algo::Sha1 => State::Sha1(sha1::Sha1::new()),
                    Algo::Sha256 => State::Sha256(sha2::Sha256::new()),
                    crc => State::Crc(CrcDigest::new(crc.crc().expect("crc algorithm").0)),
                };
                (a, s)
            })
            .collect();
        Self { states }
    }

    pub fn update(&mut self, data: &[u8]) {
        for (_, s) in &mut self.states {
            match s {
                State::Crc(d) => d.update(data),
                State::Sha1(d) => d.update(data),
                State::Sha256(d) => d.update(data),
            }
        }
    }

    /// The raw digests.
    pub fn finish_raw(self) -> Vec<(Algo, Vec<u8>)> {
        let mut out = vec![];
        for (a, s) in self.states {
            let raw = match s {
                State::Crc(d) => {
                    let v = d.finalize();
                    let w = a.crc().expect("crc").1;
                    v.to_be_bytes()[8 - w..].to_vec()
                }
                State::Sha1(d) => d.finalize().to_vec(),
                State::Sha256(d) => d.finalize().to_vec(),
            };
            out.push((a, raw));
        }
        out
    }

    /// The digests as base64 text.
    pub fn finish(self) -> ChecksumSet {
        let mut out = ChecksumSet::default();
        for (a, raw) in self.finish_raw() {
            out.set(a, B64.encode(raw));
        }
        out
    }
}

fn decode_crc(v: &str, width: usize) -> Option<u64> {
    let b = B64.decode(v).ok()?;
    if b.len() != width {
        return None;
    }
    let mut buf = [0u8; 8];
    buf[8 - width..].copy_from_slice(&b);
    Some(u64::from_be_bytes(buf))
}

/// The checksums of an object after an append: each CRC that both the object (as a whole: not
/// a multipart `COMPOSITE`) and the appended bytes have, combined into the CRC of the whole
/// (`FULL_OBJECT`). Other algorithms (SHA-1, SHA-256) cannot be extended and are dropped.
pub fn append_checksums(object: &Checksums, appended: &Checksums, appended_len: u64) -> Checksums {
    if object.kind.as_deref() == Some("COMPOSITE") {
        return Checksums::default();
    }
    let (a, b) = (
        ChecksumSet::from_record(object),
        ChecksumSet::from_record(appended),
    );
    let mut out = ChecksumSet::default();
    for algo in [Algo::Crc32, Algo::Crc32c, Algo::Crc64Nvme] {
        let (Some((calg, width)), Some(x), Some(y)) = (algo.crc(), a.get(algo), b.get(algo)) else {
            continue;
        };
        let (Some(x), Some(y)) = (decode_crc(x, width), decode_crc(y, width)) else {
            continue;
        };
        let c = crc_fast::checksum_combine(calg, x, y, appended_len);
        out.set(algo, B64.encode(&c.to_be_bytes()[8 - width..]));
    }
    let mut rec = out.to_record();
    if !out.values.is_empty() {
        rec.kind = Some("FULL_OBJECT".into());
    }
    rec
}

/// The object checksum of a completed multipart upload.
///
/// * CRC algorithms with `FULL_OBJECT` (the only form of CRC64NVME, and Lode's default when the
///   upload named no algorithm): the parts' CRCs combined into the CRC of the whole object.
/// * `COMPOSITE` (the default for CRC32/CRC32C/SHA1/SHA256 uploads): the checksum of the
///   concatenated part checksums, `-N`.
pub fn combine_parts(
    up: &UploadRecord,
    parts: &[(u32, PartRecord)],
    whole: &ChecksumSet,
) -> ObjResult<Checksums> {
    let algo = match up.checksum_algorithm.as_deref() {
        Some(a) => Algo::parse(a)
            .ok_or_else(|| ObjError::InvalidArgument(format!("unknown checksum algorithm {a}")))?,
        None => Algo::Crc64Nvme,
    };
    let explicit_type = up.checksum_type.as_deref().map(str::to_ascii_uppercase);
    let full_object = match explicit_type.as_deref() {
        Some("FULL_OBJECT") => true,
        Some("COMPOSITE") => false,
        _ => algo == Algo::Crc64Nvme,
    };
    let per_part: Vec<Option<String>> = parts
        .iter()
        .map(|(_, p)| {
            ChecksumSet::from_record(&p.checksums)
                .get(algo)
                .map(str::to_owned)
        })
        .collect();
    if per_part.iter().any(Option::is_none) {
        // Some part has no checksum of this algorithm: the object gets none (S3 would have refused
        // the part; Lode computes them for every part, so this only happens for old data).
        return Ok(Checksums::default());
    }
    let per_part: Vec<String> = per_part.into_iter().map(Option::unwrap).collect();
    let mut out = ChecksumSet::default();
    let kind;
    if full_object {
        let (calg, width) = algo.crc().ok_or_else(|| {
            ObjError::InvalidRequest(format!(
                "The FULL_OBJECT checksum type is not supported for {}",
                algo.name()
            ))
        })?;
        let mut acc: Option<u64> = None;
        for ((_, p), v) in parts.iter().zip(&per_part) {
            let c = decode_crc(v, width)
                .ok_or_else(|| ObjError::Internal("stored part checksum is malformed".into()))?;
            acc = Some(match acc {
                None => c,
                Some(a) => crc_fast::checksum_combine(calg, a, c, p.size),
            });
        }
        let v = acc.unwrap_or(0).to_be_bytes()[8 - width..].to_vec();
        out.set(algo, B64.encode(v));
        kind = "FULL_OBJECT";
    } else {
        let mut cat = vec![];
        for v in &per_part {
            cat.extend(
                B64.decode(v)
                    .map_err(|_| ObjError::Internal("stored part checksum is malformed".into()))?,
            );
        }
        out.set(
            algo,
            format!("{}-{}", B64.encode(algo.digest(&cat)), parts.len()),
        );
        kind = "COMPOSITE";
    }
    // A whole-object value sent with Complete must match (full-object form only).
    for (a, want) in &whole.values {
        if let Some(got) = out.get(*a)
            && got != want
            && got.split('-').next() != Some(want.as_str())
        {
            return Err(ObjError::BadDigest(format!(
                "The {} you specified for the object did not match the calculated checksum.",
                a.name()
            )));
        }
    }
    let mut rec = out.to_record();
    rec.kind = Some(kind.into());
    Ok(rec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appended_crcs_combine_into_the_whole_objects() {
        let sums = |d: &[u8], algos: &[Algo]| {
            let mut h = Hasher::new(algos);
            h.update(d);
            h.finish().to_record()
        };
        let all = [Algo::Crc32, Algo::Crc32c, Algo::Crc64Nvme, Algo::Sha256];
        let (a, b) = (b"hello, ".as_slice(), b"appended world".as_slice());
        let got = append_checksums(&sums(a, &all), &sums(b, &all), b.len() as u64);
        let whole = sums(b"hello, appended world", &all);
        assert_eq!(got.crc32, whole.crc32);
        assert_eq!(got.crc32c, whole.crc32c);
        assert_eq!(got.crc64nvme, whole.crc64nvme);
        assert!(got.crc32.is_some() && got.sha256.is_none());
        assert_eq!(got.kind.as_deref(), Some("FULL_OBJECT"));
        // Only what both sides have; a composite object's checksum is not extended.
        let got = append_checksums(&sums(a, &[Algo::Crc32]), &sums(b, &all), b.len() as u64);
        assert!(got.crc32.is_some() && got.crc64nvme.is_none());
        let mut comp = sums(a, &all);
        comp.kind = Some("COMPOSITE".into());
        assert_eq!(
            append_checksums(&comp, &sums(b, &all), 1),
            Checksums::default()
        );
    }

    #[test]
    fn known_vectors() {
        let mut h = Hasher::new(&[Algo::Crc32, Algo::Crc32c, Algo::Crc64Nvme, Algo::Sha256]);
        h.update(b"1234");
        h.update(b"56789");
        let s = h.finish();
        // crc32("123456789") = cbf43926, crc32c = e3069283, crc64nvme = ae8b14860a799888
        assert_eq!(
            B64.decode(s.get(Algo::Crc32).unwrap()).unwrap(),
            hex::decode("cbf43926").unwrap()
        );
        assert_eq!(
            B64.decode(s.get(Algo::Crc32c).unwrap()).unwrap(),
            hex::decode("e3069283").unwrap()
        );
        assert_eq!(
            B64.decode(s.get(Algo::Crc64Nvme).unwrap()).unwrap(),
            hex::decode("ae8b14860a799888").unwrap()
        );
        assert_eq!(
            hex::encode(B64.decode(s.get(Algo::Sha256).unwrap()).unwrap()),
            "15e2b0d3c33891ebb0f1ef609ec419420c20e320ce94c65fbc8c3312448eb225"
        );
    }

    #[test]
    fn full_object_combination_equals_whole_crc() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
        let (a, b) = data.split_at(60_000);
        for algo in [Algo::Crc32, Algo::Crc32c, Algo::Crc64Nvme] {
            let part = |d: &[u8]| {
                let mut h = Hasher::new(&[algo]);
                h.update(d);
                PartRecord {
                    size: d.len() as u64,
                    etag: String::new(),
                    last_modified_ms: 0,
                    checksums: h.finish().to_record(),
                    segments: vec![],
                }
            };
            let up = UploadRecord {
                initiated_ms: 0,
                meta: Default::default(),
                checksum_algorithm: Some(algo.name().into()),
                checksum_type: Some("FULL_OBJECT".into()),
                owner: String::new(),
            };
            let got =
                combine_parts(&up, &[(1, part(a)), (2, part(b))], &ChecksumSet::default()).unwrap();
            let mut whole = Hasher::new(&[algo]);
            whole.update(&data);
            assert_eq!(ChecksumSet::from_record(&got), whole.finish(), "{algo:?}");
            assert_eq!(got.kind.as_deref(), Some("FULL_OBJECT"));
        }
    }

    #[test]
    fn mismatch_is_bad_digest() {
        let mut h = Hasher::new(&[Algo::Crc32]);
        h.update(b"abc");
        let got = h.finish();
        let mut want = ChecksumSet::default();
        want.set(Algo::Crc32, "AAAAAA==".into());
        assert!(matches!(got.verify(&want), Err(ObjError::BadDigest(_))));
    }
}
