//! Versioned records. Every value starts with a format byte; the body is postcard-encoded.
//! Old formats stay decodable: when v2 comes, `mod v1` keeps the old structs and `decode`
//! migrates them.

use serde::{Deserialize, Serialize, de::DeserializeOwned};

use crate::MetaError;

/// The current record format.
pub const FORMAT_V1: u8 = 1;

pub fn encode<T: Serialize>(r: &T) -> Vec<u8> {
    let mut out = vec![FORMAT_V1];
    out.extend(postcard::to_stdvec(r).expect("records always serialize"));
    out
}

pub fn decode<T: DeserializeOwned>(b: &[u8]) -> Result<T, MetaError> {
    match b.first() {
        Some(&FORMAT_V1) => {
            postcard::from_bytes(&b[1..]).map_err(|e| MetaError::Corrupt(e.to_string()))
        }
        Some(&v) => Err(MetaError::UnknownFormat(v)),
        None => Err(MetaError::Corrupt("empty record".into())),
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BucketRecord {
    pub created_ms: i64,
    pub owner: String,
}

/// Standard and user metadata of an object, as given at upload.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectMeta {
    pub content_type: Option<String>,
    pub cache_control: Option<String>,
    pub content_disposition: Option<String>,
    pub content_encoding: Option<String>,
    pub content_language: Option<String>,
    /// HTTP-date text, as given.
    pub expires: Option<String>,
    /// `x-amz-meta-*` (names without the prefix, lower case), sorted.
    pub user: Vec<(String, String)>,
}

/// Flexible checksums: base64 values as S3 returns them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checksums {
    pub crc32: Option<String>,
    pub crc32c: Option<String>,
    pub crc64nvme: Option<String>,
    pub sha1: Option<String>,
    pub sha256: Option<String>,
    /// "FULL_OBJECT" or "COMPOSITE" (the latter for multipart composites).
    pub kind: Option<String>,
}

impl Checksums {
    pub fn is_empty(&self) -> bool {
        self.crc32.is_none()
            && self.crc32c.is_none()
            && self.crc64nvme.is_none()
            && self.sha1.is_none()
            && self.sha256.is_none()
    }
}

/// One stored chunk on a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkLoc {
    pub dev: u32,
    pub offset: u64,
    pub alloc_len: u32,
    pub data_len: u32,
    pub crc32c: u32,
}

/// A piece of an object's content, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Segment {
    /// Bytes kept inside the record (objects under the inline threshold). `serde_bytes`: the
    /// same postcard bytes as a plain `Vec<u8>` (length + raw bytes), decoded in one copy
    /// instead of byte by byte.
    Inline(#[serde(with = "serde_bytes")] Vec<u8>),
    Chunk(ChunkLoc),
}

impl Segment {
    pub fn len(&self) -> u64 {
        match self {
            Segment::Inline(b) => b.len() as u64,
            Segment::Chunk(c) => u64::from(c.data_len),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Summary of one part of a completed multipart object (for `partNumber` reads).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartSummary {
    pub size: u64,
    pub etag: String,
    pub checksums: Checksums,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectRecord {
    pub size: u64,
    /// Hex MD5 of the content, or `<hex>-N` for multipart. Without quotes.
    pub etag: String,
    pub last_modified_ms: i64,
    pub meta: ObjectMeta,
    pub checksums: Checksums,
    pub segments: Vec<Segment>,
    /// Parts of a multipart object; empty for a single PUT.
    pub parts: Vec<PartSummary>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UploadRecord {
    pub initiated_ms: i64,
    pub meta: ObjectMeta,
    /// CRC32, CRC32C, CRC64NVME, SHA1, SHA256 as requested at create.
    pub checksum_algorithm: Option<String>,
    /// FULL_OBJECT or COMPOSITE as requested at create.
    pub checksum_type: Option<String>,
    pub owner: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartRecord {
    pub size: u64,
    pub etag: String,
    pub last_modified_ms: i64,
    pub checksums: Checksums,
    pub segments: Vec<Segment>,
}

/// A used extent and how many records reference it (copies share extents).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExtentRecord {
    pub len: u32,
    pub refs: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_version_check() {
        let r = ObjectRecord {
            size: 3,
            etag: "abc".into(),
            last_modified_ms: 5,
            meta: ObjectMeta::default(),
            checksums: Checksums::default(),
            segments: vec![Segment::Inline(b"xyz".to_vec())],
            parts: vec![],
        };
        let b = encode(&r);
        assert_eq!(b[0], FORMAT_V1);
        assert_eq!(decode::<ObjectRecord>(&b).unwrap(), r);
        let mut bad = b.clone();
        bad[0] = 9;
        assert!(matches!(
            decode::<ObjectRecord>(&bad),
            Err(MetaError::UnknownFormat(9))
        ));
        assert!(matches!(
            decode::<ObjectRecord>(&b[..3]),
            Err(MetaError::Corrupt(_))
        ));
    }

    /// A v1 object record as written by this version; kept so later formats must still read it.
    #[test]
    fn v1_fixture_decodes() {
        let fixture: &[u8] = &[
            1, 3, 3, 97, 98, 99, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 3, 120, 121, 122,
            0,
        ];
        let r: ObjectRecord = decode(fixture).unwrap();
        assert_eq!(r.etag, "abc");
        assert_eq!(r.segments, vec![Segment::Inline(b"xyz".to_vec())]);
    }
}
