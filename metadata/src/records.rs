//! Versioned records. Every value starts with a format byte; the body is postcard-encoded.
//! Each record type says which format it writes (`Record::FORMAT`); older formats stay
//! decodable: `mod v1` keeps the old structs and `Record::decode_old` migrates them.

use serde::{Deserialize, Serialize, de::DeserializeOwned};

use crate::MetaError;

/// The first record format (every type but `ObjectRecord` still writes it).
pub const FORMAT_V1: u8 = 1;
/// `ObjectRecord` since it names its multipart upload and its parts' numbers.
pub const FORMAT_V2: u8 = 2;

/// A value stored in the metadata store, with its format byte.
pub trait Record: Serialize + DeserializeOwned {
    /// The format this type is written in.
    const FORMAT: u8 = FORMAT_V1;

    /// Decodes a body written in an older `format` (the default knows none).
    fn decode_old(format: u8, _body: &[u8]) -> Result<Self, MetaError> {
        Err(MetaError::UnknownFormat(format))
    }
}

fn postcard_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, MetaError> {
    postcard::from_bytes(body).map_err(|e| MetaError::Corrupt(e.to_string()))
}

pub fn encode<T: Record>(r: &T) -> Vec<u8> {
    let mut out = vec![T::FORMAT];
    out.extend(postcard::to_stdvec(r).expect("records always serialize"));
    out
}

pub fn decode<T: Record>(b: &[u8]) -> Result<T, MetaError> {
    match b.first() {
        Some(&f) if f == T::FORMAT => postcard_body(&b[1..]),
        Some(&f) => T::decode_old(f, &b[1..]),
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
    /// The part number it was uploaded with (completions may skip numbers).
    pub number: u32,
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
    /// The multipart upload this object was completed from (a retried Complete of that upload
    /// answers with this object instead of `NoSuchUpload`).
    pub upload_id: Option<String>,
}

impl Record for ObjectRecord {
    const FORMAT: u8 = FORMAT_V2;

    fn decode_old(format: u8, body: &[u8]) -> Result<Self, MetaError> {
        match format {
            FORMAT_V1 => Ok(postcard_body::<v1::ObjectRecord>(body)?.into()),
            f => Err(MetaError::UnknownFormat(f)),
        }
    }
}

/// A multipart upload that was aborted, remembered for a day so that a retried abort (whose
/// first reply was lost) answers 204 like the first one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AbortedUpload {
    pub bucket: String,
    pub key: String,
    pub aborted_ms: i64,
}

impl Record for AbortedUpload {}
impl Record for BucketRecord {}
impl Record for UploadRecord {}
impl Record for PartRecord {}
impl Record for ExtentRecord {}

/// Formats no longer written, kept to read old data dirs.
mod v1 {
    use serde::Deserialize;

    use super::{Checksums, ObjectMeta, Segment};

    #[derive(Deserialize)]
    pub struct PartSummary {
        pub size: u64,
        pub etag: String,
        pub checksums: Checksums,
    }

    #[derive(Deserialize)]
    pub struct ObjectRecord {
        pub size: u64,
        pub etag: String,
        pub last_modified_ms: i64,
        pub meta: ObjectMeta,
        pub checksums: Checksums,
        pub segments: Vec<Segment>,
        pub parts: Vec<PartSummary>,
    }

    impl From<ObjectRecord> for super::ObjectRecord {
        /// v1 did not keep part numbers: its completions are read as parts 1..=N, which is what
        /// v1's `partNumber` reads assumed.
        fn from(r: ObjectRecord) -> Self {
            Self {
                size: r.size,
                etag: r.etag,
                last_modified_ms: r.last_modified_ms,
                meta: r.meta,
                checksums: r.checksums,
                segments: r.segments,
                parts: r
                    .parts
                    .into_iter()
                    .zip(1u32..)
                    .map(|(p, number)| super::PartSummary {
                        number,
                        size: p.size,
                        etag: p.etag,
                        checksums: p.checksums,
                    })
                    .collect(),
                upload_id: None,
            }
        }
    }
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
            upload_id: Some("u1".into()),
        };
        let b = encode(&r);
        assert_eq!(b[0], FORMAT_V2);
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
        assert_eq!(r.upload_id, None);
    }

    /// A v1 multipart record (two parts) migrates with part numbers 1 and 2.
    #[test]
    fn v1_multipart_fixture_gets_part_numbers() {
        #[derive(Serialize)]
        struct P {
            size: u64,
            etag: String,
            checksums: Checksums,
        }
        #[derive(Serialize)]
        struct O {
            size: u64,
            etag: String,
            last_modified_ms: i64,
            meta: ObjectMeta,
            checksums: Checksums,
            segments: Vec<Segment>,
            parts: Vec<P>,
        }
        let p = |e: &str| P {
            size: 1,
            etag: e.into(),
            checksums: Checksums::default(),
        };
        let mut b = vec![FORMAT_V1];
        b.extend(
            postcard::to_stdvec(&O {
                size: 2,
                etag: "x-2".into(),
                last_modified_ms: 7,
                meta: ObjectMeta::default(),
                checksums: Checksums::default(),
                segments: vec![],
                parts: vec![p("a"), p("b")],
            })
            .unwrap(),
        );
        let r: ObjectRecord = decode(&b).unwrap();
        let got: Vec<(u32, &str)> = r
            .parts
            .iter()
            .map(|p| (p.number, p.etag.as_str()))
            .collect();
        assert_eq!(got, vec![(1, "a"), (2, "b")]);
        // Re-encoding writes the current format.
        assert_eq!(encode(&r)[0], FORMAT_V2);
        assert_eq!(decode::<ObjectRecord>(&encode(&r)).unwrap(), r);
    }
}
