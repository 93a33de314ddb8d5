//! Versioned records. Every value starts with a format byte; the body is postcard-encoded.
//! Each record type says which format it writes (`Record::FORMAT`); older formats stay
//! decodable: `mod v1` keeps the old structs and `Record::decode_old` migrates them.
//!
//! An [`ObjectRecord`] is stored in two pieces since format 3: the record, with each inline
//! segment replaced by its length ([`Segment::Detached`]), and its **payload**, the bytes of
//! those segments, under a key of its own ([`split_inline`], [`join_inline`]). Stats, HEADs and
//! listings read only the record (the "head" form, [`ObjectRecord::into_head`]); reads of the
//! content join the two.

use serde::{Deserialize, Serialize, de::DeserializeOwned};

use crate::MetaError;

/// The first record format (aborted uploads, parts and extents still write it).
pub const FORMAT_V1: u8 = 1;
/// `ObjectRecord` since it names its multipart upload and its parts' numbers (inline bytes
/// still inside the value).
pub const FORMAT_V2: u8 = 2;
/// `ObjectRecord` since its inline bytes are stored apart from it: the value holds
/// [`Segment::Detached`] lengths, the bytes are its payload ([`split_inline`]).
pub const FORMAT_V3: u8 = 3;
/// `ObjectRecord` and `UploadRecord` since their metadata holds the object's tags
/// ([`ObjectMeta::tags`]), `BucketRecord` since it holds the bucket's ([`BucketRecord::tags`]).
/// (The last two went from format 1 to 4.)
pub const FORMAT_V4: u8 = 4;
/// `ObjectRecord` and `UploadRecord` since their metadata holds the object's lock (retention
/// and legal hold, [`ObjectMeta::lock`]).
pub const FORMAT_V5: u8 = 5;
/// `ObjectRecord` and `UploadRecord` since their metadata names the object's owner and holds
/// its access control list ([`ObjectMeta::owner`], [`ObjectMeta::acl`]).
pub const FORMAT_V6: u8 = 6;
/// `ObjectRecord` and `UploadRecord` since their metadata says how the object is encrypted at
/// rest ([`ObjectMeta::sse`]).
pub const FORMAT_V7: u8 = 7;

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
    /// The bucket's tag set (PutBucketTagging), sorted by key; empty: none.
    pub tags: Vec<(String, String)>,
    /// Bucket settings the object service keeps, by name (`lifecycle`), each in the service's
    /// own encoding (JSON), sorted by name. Kept apart from the record's layout so that a new
    /// setting needs no new record format; a name the service does not know is kept as is.
    pub settings: Vec<(String, String)>,
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
    /// The object's tag set (`x-amz-tagging`, PutObjectTagging), sorted by key.
    pub tags: Vec<(String, String)>,
    /// Object lock: the version's retention and legal hold.
    pub lock: ObjectLock,
    /// Who owns the object (the version): a user name, as the object service names users.
    /// `None`: the bucket's owner (every record written before format 6).
    pub owner: Option<String>,
    /// The version's access control list as (grantee, permission) pairs, each in the object
    /// service's own encoding. `None`: the default (`private`: its owner has full control).
    pub acl: Option<Vec<(String, String)>>,
    /// How the object's bytes are encrypted at rest. `None`: in clear (every record written
    /// before format 7, and objects written with encryption turned off).
    pub sse: Option<Sse>,
}

/// How an object's bytes are encrypted at rest: every segment of its content (inline or in
/// chunks) is sealed under its data key (the object service's `sse` module says how).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sse {
    pub kind: SseKind,
    /// Random, bound into every sealed segment's additional data (a segment of another object
    /// does not open as this object's).
    pub id: [u8; 16],
    /// The data key, sealed: by master key version `key_version` (SSE-S3) or by the key ring
    /// (SSE-KMS). Empty for SSE-C (the customer's key is the data key and is never stored).
    #[serde(with = "serde_bytes")]
    pub sealed_key: Vec<u8>,
    pub key_version: u32,
    /// `BucketKeyEnabled`, as asked (accepted and reported).
    pub bucket_key: bool,
    /// Each segment's sequence base, in the order of the record's segments, as little-endian
    /// u64s: the index bound into the additional data of the segment's first sealed piece (its
    /// other pieces follow on). Unique within the object, so no piece opens at another place.
    /// Empty in an upload's record (each part's bases follow from its number).
    #[serde(with = "serde_bytes")]
    pub seq: Vec<u8>,
}

impl Sse {
    /// The sequence base of the record's `i`-th segment.
    pub fn seq_at(&self, i: usize) -> Option<u64> {
        let b = self.seq.get(i * 8..i * 8 + 8)?;
        Some(u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }

    /// Every segment's sequence base.
    pub fn seqs(&self) -> Vec<u64> {
        (0..self.seq.len() / 8)
            .filter_map(|i| self.seq_at(i))
            .collect()
    }

    /// Sets every segment's sequence base.
    pub fn set_seqs(&mut self, seqs: &[u64]) {
        self.seq = seqs.iter().flat_map(|s| s.to_le_bytes()).collect();
    }
}

/// Who holds the key that opens an object's data key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SseKind {
    /// SSE-S3 (`AES256`): Lode's master keys.
    S3,
    /// SSE-KMS (`aws:kms`, `aws:kms:dsse` when `dsse`): a key of the key ring, with the
    /// encryption context as given (base64 JSON; `None`: none).
    Kms {
        key_id: String,
        context: Option<String>,
        dsse: bool,
    },
    /// SSE-C: a salted HMAC-SHA256 of the customer's key (never the key), to check later
    /// requests' keys.
    Customer { salt: [u8; 16], mac: [u8; 32] },
}

/// A version's object lock (S3 Object Lock): a retention mode with its date, and a legal hold.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectLock {
    /// `GOVERNANCE` or `COMPLIANCE`, set together with `retain_until_ms`.
    pub mode: Option<String>,
    /// Until when (ms since the epoch) the version may not be removed.
    pub retain_until_ms: Option<i64>,
    pub legal_hold: bool,
}

impl ObjectLock {
    pub fn is_empty(&self) -> bool {
        self.mode.is_none() && self.retain_until_ms.is_none() && !self.legal_hold
    }
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
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
    /// `n` inline bytes kept apart from the record: an [`Segment::Inline`] segment as a format-3
    /// value stores it. The bytes of every such segment of a record, concatenated in order, are
    /// the record's payload, stored under a key of its own ([`split_inline`]); a record read
    /// without its payload (the head form) has these, [`join_inline`] turns them back into
    /// `Inline` segments. (Last variant: postcard encodes the variant index, so older values
    /// decode as they were.)
    Detached(u32),
}

impl Segment {
    pub fn len(&self) -> u64 {
        match self {
            Segment::Inline(b) => b.len() as u64,
            Segment::Chunk(c) => u64::from(c.data_len),
            Segment::Detached(n) => u64::from(*n),
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
    /// The version's id in a versioned bucket (`None`: the `null` version, which is every
    /// object of a bucket that was never versioned).
    pub version_id: Option<String>,
    /// A delete marker (a version that says the key was deleted: no content). Only ever a
    /// noncurrent entry of a versioned bucket, never the current record at a key.
    pub delete_marker: bool,
}

impl ObjectRecord {
    /// Whether some segment is [`Segment::Detached`] (the record lacks its payload).
    pub fn has_detached(&self) -> bool {
        self.segments
            .iter()
            .any(|s| matches!(s, Segment::Detached(_)))
    }

    /// The head form: every `Inline` segment replaced by `Detached` of its length.
    pub fn into_head(mut self) -> Self {
        for s in &mut self.segments {
            if let Segment::Inline(b) = s {
                *s = Segment::Detached(inline_len(b));
            }
        }
        self
    }
}

fn inline_len(b: &[u8]) -> u32 {
    u32::try_from(b.len()).expect("an inline segment is far below 4 GiB")
}

/// Splits a record for storage: the format-3 value (every `Inline` segment written as
/// `Detached` of its length) and the payload (the bytes of those segments, concatenated in
/// order; `None` when there is no inline segment). `rec` should be whole: a `Detached` segment
/// in it is written as is, and its bytes are not in the payload.
pub fn split_inline(rec: &ObjectRecord) -> (Vec<u8>, Option<Vec<u8>>) {
    let mut payload: Option<Vec<u8>> = None;
    let segments = rec
        .segments
        .iter()
        .map(|s| match s {
            Segment::Inline(b) => {
                payload.get_or_insert_with(Vec::new).extend_from_slice(b);
                Segment::Detached(inline_len(b))
            }
            s => s.clone(),
        })
        .collect();
    let head = ObjectRecord {
        size: rec.size,
        etag: rec.etag.clone(),
        last_modified_ms: rec.last_modified_ms,
        meta: rec.meta.clone(),
        checksums: rec.checksums.clone(),
        segments,
        parts: rec.parts.clone(),
        upload_id: rec.upload_id.clone(),
        version_id: rec.version_id.clone(),
        delete_marker: rec.delete_marker,
    };
    (encode(&head), payload)
}

/// Puts a payload back into a record read in head form: each `Detached(n)` segment becomes
/// `Inline` of the payload's next `n` bytes. A payload shorter or longer than the `Detached`
/// segments together is [`MetaError::Corrupt`]. (A record without `Detached` segments, say one
/// in format 1 or 2, comes back as it was given an empty payload.)
pub fn join_inline(mut rec: ObjectRecord, payload: &[u8]) -> Result<ObjectRecord, MetaError> {
    let mut at = 0usize;
    for s in &mut rec.segments {
        if let Segment::Detached(n) = *s {
            let end = at.saturating_add(n as usize);
            let bytes = payload.get(at..end).ok_or_else(|| {
                MetaError::Corrupt(format!(
                    "inline payload of {} bytes is shorter than its record says",
                    payload.len()
                ))
            })?;
            *s = Segment::Inline(bytes.to_vec());
            at = end;
        }
    }
    if at != payload.len() {
        return Err(MetaError::Corrupt(format!(
            "inline payload of {} bytes, its record names {at}",
            payload.len()
        )));
    }
    Ok(rec)
}

/// Decodes a stored object record into its head form (inline bytes as `Detached`, whichever
/// format the value is in).
pub fn decode_head(b: &[u8]) -> Result<ObjectRecord, MetaError> {
    decode::<ObjectRecord>(b).map(ObjectRecord::into_head)
}

/// What a directory listing shows of an object: the leading fields of its record, borrowed
/// from the stored value. Decoding it copies no string and stops before the checksums and the
/// segments (a large object's chunk list), which a whole-record decode allocates and fills for
/// every entry. Every [`ObjectRecord`] format so far starts with these fields in this order.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ObjectSummary<'a> {
    pub size: u64,
    pub etag: &'a str,
    pub last_modified_ms: i64,
    #[serde(borrow)]
    pub meta: MetaSummary<'a>,
}

/// The leading fields of an [`ObjectMeta`], borrowed (see [`ObjectSummary`]).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct MetaSummary<'a> {
    pub content_type: Option<&'a str>,
    pub cache_control: Option<&'a str>,
    pub content_disposition: Option<&'a str>,
    pub content_encoding: Option<&'a str>,
    pub content_language: Option<&'a str>,
    pub expires: Option<&'a str>,
    /// `x-amz-meta-*`, as in [`ObjectMeta::user`].
    #[serde(borrow)]
    pub user: Vec<(&'a str, &'a str)>,
}

impl<'a> ObjectSummary<'a> {
    /// The summary of a decoded record (for a catalog that has no stored value to borrow from).
    pub fn of(r: &'a ObjectRecord) -> Self {
        let m = &r.meta;
        ObjectSummary {
            size: r.size,
            etag: &r.etag,
            last_modified_ms: r.last_modified_ms,
            meta: MetaSummary {
                content_type: m.content_type.as_deref(),
                cache_control: m.cache_control.as_deref(),
                content_disposition: m.content_disposition.as_deref(),
                content_encoding: m.content_encoding.as_deref(),
                content_language: m.content_language.as_deref(),
                expires: m.expires.as_deref(),
                user: m
                    .user
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect(),
            },
        }
    }
}

/// Decodes the [`ObjectSummary`] of a stored object record, of any format.
pub fn decode_summary(b: &[u8]) -> Result<ObjectSummary<'_>, MetaError> {
    match b.first() {
        Some(&f) if (FORMAT_V1..=ObjectRecord::FORMAT).contains(&f) => {
            postcard::from_bytes(&b[1..]).map_err(|e| MetaError::Corrupt(e.to_string()))
        }
        Some(&f) => Err(MetaError::UnknownFormat(f)),
        None => Err(MetaError::Corrupt("empty record".into())),
    }
}

/// Which flexible checksums an object has, as S3 listings show them (each `Object`'s and
/// `ObjectVersion`'s `ChecksumAlgorithm` and `ChecksumType`): names only, no values.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChecksumNames {
    /// Bit `i` set: the object has the `i`-th of [`ChecksumNames::ALGORITHMS`].
    present: u8,
    composite: bool,
}

impl ChecksumNames {
    /// S3's algorithm names, in the order of [`Checksums`]' fields.
    pub const ALGORITHMS: [&'static str; 5] = ["CRC32", "CRC32C", "CRC64NVME", "SHA1", "SHA256"];

    fn from_present(values: [bool; 5], kind: Option<&str>) -> Self {
        let present = values
            .iter()
            .enumerate()
            .fold(0u8, |m, (i, &p)| if p { m | 1 << i } else { m });
        ChecksumNames {
            present,
            composite: kind == Some("COMPOSITE"),
        }
    }

    /// The names of a decoded record's checksums.
    pub fn of(c: &Checksums) -> Self {
        Self::from_present(
            [
                c.crc32.is_some(),
                c.crc32c.is_some(),
                c.crc64nvme.is_some(),
                c.sha1.is_some(),
                c.sha256.is_some(),
            ],
            c.kind.as_deref(),
        )
    }

    /// The algorithms the object has a checksum of, in S3's names.
    pub fn algorithms(&self) -> impl Iterator<Item = &'static str> + '_ {
        Self::ALGORITHMS
            .iter()
            .enumerate()
            .filter(|(i, _)| self.present & (1 << i) != 0)
            .map(|(_, a)| *a)
    }

    /// `FULL_OBJECT` or `COMPOSITE`; `None` for an object without checksums.
    pub fn kind(&self) -> Option<&'static str> {
        match (self.present, self.composite) {
            (0, _) => None,
            (_, true) => Some("COMPOSITE"),
            (_, false) => Some("FULL_OBJECT"),
        }
    }
}

/// [`Checksums`] borrowed from a stored value (what a listing needs of them is which are there).
#[derive(Deserialize)]
struct ChecksumsRef<'a> {
    crc32: Option<&'a str>,
    crc32c: Option<&'a str>,
    crc64nvme: Option<&'a str>,
    sha1: Option<&'a str>,
    sha256: Option<&'a str>,
    kind: Option<&'a str>,
}

impl From<ChecksumsRef<'_>> for ChecksumNames {
    fn from(c: ChecksumsRef<'_>) -> Self {
        ChecksumNames::from_present(
            [
                c.crc32.is_some(),
                c.crc32c.is_some(),
                c.crc64nvme.is_some(),
                c.sha1.is_some(),
                c.sha256.is_some(),
            ],
            c.kind,
        )
    }
}

/// What an S3 listing shows of a stored record, decoded in one borrowed pass per format:
/// postcard writes a struct as its fields in order with nothing between, so the metadata's
/// later fields (tags since format 4, the lock since 5) can follow [`MetaSummary`] flat, and
/// the checksums come next.
mod brief {
    use serde::Deserialize;

    use super::{ChecksumsRef, ObjectSummary};

    #[derive(Deserialize)]
    pub struct LockRef<'a> {
        pub _mode: Option<&'a str>,
        pub _retain_until_ms: Option<i64>,
        pub _legal_hold: bool,
    }

    #[derive(Deserialize)]
    pub struct V3<'a> {
        #[serde(borrow)]
        pub summary: ObjectSummary<'a>,
        #[serde(borrow)]
        pub checksums: ChecksumsRef<'a>,
    }

    #[derive(Deserialize)]
    pub struct V4<'a> {
        #[serde(borrow)]
        pub summary: ObjectSummary<'a>,
        #[serde(borrow)]
        pub _tags: Vec<(&'a str, &'a str)>,
        #[serde(borrow)]
        pub checksums: ChecksumsRef<'a>,
    }

    #[derive(Deserialize)]
    pub struct V5<'a> {
        #[serde(borrow)]
        pub summary: ObjectSummary<'a>,
        #[serde(borrow)]
        pub _tags: Vec<(&'a str, &'a str)>,
        #[serde(borrow)]
        pub _lock: LockRef<'a>,
        #[serde(borrow)]
        pub checksums: ChecksumsRef<'a>,
    }

    #[derive(Deserialize)]
    pub struct V6<'a> {
        #[serde(borrow)]
        pub summary: ObjectSummary<'a>,
        #[serde(borrow)]
        pub _tags: Vec<(&'a str, &'a str)>,
        #[serde(borrow)]
        pub _lock: LockRef<'a>,
        #[serde(borrow)]
        pub owner: Option<&'a str>,
        #[serde(borrow)]
        pub _acl: Option<Vec<(&'a str, &'a str)>>,
        #[serde(borrow)]
        pub checksums: ChecksumsRef<'a>,
    }

    /// [`super::SseKind`], borrowed and skipped.
    #[derive(Deserialize)]
    pub enum SseKindRef<'a> {
        S3,
        Kms {
            _key_id: &'a str,
            _context: Option<&'a str>,
            _dsse: bool,
        },
        Customer {
            _salt: [u8; 16],
            _mac: [u8; 32],
        },
    }

    /// [`super::Sse`], borrowed and skipped.
    #[derive(Deserialize)]
    pub struct SseRef<'a> {
        #[serde(borrow)]
        pub _kind: SseKindRef<'a>,
        pub _id: [u8; 16],
        pub _sealed_key: &'a [u8],
        pub _key_version: u32,
        pub _bucket_key: bool,
        pub _seq: &'a [u8],
    }

    #[derive(Deserialize)]
    pub struct V7<'a> {
        #[serde(borrow)]
        pub summary: ObjectSummary<'a>,
        #[serde(borrow)]
        pub _tags: Vec<(&'a str, &'a str)>,
        #[serde(borrow)]
        pub _lock: LockRef<'a>,
        #[serde(borrow)]
        pub owner: Option<&'a str>,
        #[serde(borrow)]
        pub _acl: Option<Vec<(&'a str, &'a str)>>,
        #[serde(borrow)]
        pub _sse: Option<SseRef<'a>>,
        #[serde(borrow)]
        pub checksums: ChecksumsRef<'a>,
    }
}

/// What an S3 listing shows of one stored object record ([`decode_brief`]).
pub type BriefRef<'a> = (ObjectSummary<'a>, ChecksumNames, Option<&'a str>);

/// Decodes what an S3 listing shows of a stored object record, of any format: its
/// [`ObjectSummary`], [`ChecksumNames`] and owner ([`ObjectMeta::owner`]), with no string
/// copied (the segments, a large object's chunk list, are not read).
pub fn decode_brief(b: &[u8]) -> Result<BriefRef<'_>, MetaError> {
    let body = b.get(1..).unwrap_or_default();
    let corrupt = |e: postcard::Error| MetaError::Corrupt(e.to_string());
    match b.first() {
        Some(&FORMAT_V7) => postcard::from_bytes::<brief::V7<'_>>(body)
            .map(|r| (r.summary, r.checksums.into(), r.owner))
            .map_err(corrupt),
        Some(&FORMAT_V6) => postcard::from_bytes::<brief::V6<'_>>(body)
            .map(|r| (r.summary, r.checksums.into(), r.owner))
            .map_err(corrupt),
        Some(&FORMAT_V5) => postcard::from_bytes::<brief::V5<'_>>(body)
            .map(|r| (r.summary, r.checksums.into(), None))
            .map_err(corrupt),
        Some(&FORMAT_V4) => postcard::from_bytes::<brief::V4<'_>>(body)
            .map(|r| (r.summary, r.checksums.into(), None))
            .map_err(corrupt),
        Some(&f) if (FORMAT_V1..=FORMAT_V3).contains(&f) => {
            postcard::from_bytes::<brief::V3<'_>>(body)
                .map(|r| (r.summary, r.checksums.into(), None))
                .map_err(corrupt)
        }
        Some(&f) => Err(MetaError::UnknownFormat(f)),
        None => Err(MetaError::Corrupt("empty record".into())),
    }
}

impl Record for ObjectRecord {
    const FORMAT: u8 = FORMAT_V7;

    fn decode_old(format: u8, body: &[u8]) -> Result<Self, MetaError> {
        match format {
            FORMAT_V1 => Ok(postcard_body::<v1::ObjectRecord>(body)?.into()),
            // Formats 2 and 3: one struct (format 2 with the inline bytes inside the value),
            // metadata without tags.
            FORMAT_V2 | FORMAT_V3 => Ok(postcard_body::<v3::ObjectRecord>(body)?.into()),
            FORMAT_V4 => Ok(postcard_body::<v4::ObjectRecord>(body)?.into()),
            FORMAT_V5 => Ok(postcard_body::<v5::ObjectRecord>(body)?.into()),
            FORMAT_V6 => Ok(postcard_body::<v6::ObjectRecord>(body)?.into()),
            f => Err(MetaError::UnknownFormat(f)),
        }
    }
}

/// An object record in format 2 (inline bytes inside the value, no tags): what data dirs
/// written before format 3 hold. For tests that check such records still read.
pub fn encode_v2(rec: &ObjectRecord) -> Vec<u8> {
    let old = v3::ObjectRecord::from(rec.clone());
    let mut out = vec![FORMAT_V2];
    out.extend(postcard::to_stdvec(&old).expect("records always serialize"));
    out
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
impl Record for BucketRecord {
    const FORMAT: u8 = FORMAT_V4;

    fn decode_old(format: u8, body: &[u8]) -> Result<Self, MetaError> {
        match format {
            FORMAT_V1 => Ok(postcard_body::<v3::BucketRecord>(body)?.into()),
            f => Err(MetaError::UnknownFormat(f)),
        }
    }
}

impl Record for UploadRecord {
    const FORMAT: u8 = FORMAT_V7;

    fn decode_old(format: u8, body: &[u8]) -> Result<Self, MetaError> {
        match format {
            FORMAT_V1 => Ok(postcard_body::<v3::UploadRecord>(body)?.into()),
            FORMAT_V4 => Ok(postcard_body::<v4::UploadRecord>(body)?.into()),
            FORMAT_V5 => Ok(postcard_body::<v5::UploadRecord>(body)?.into()),
            FORMAT_V6 => Ok(postcard_body::<v6::UploadRecord>(body)?.into()),
            f => Err(MetaError::UnknownFormat(f)),
        }
    }
}
impl Record for PartRecord {}
impl Record for ExtentRecord {}

/// The layouts before tags: `ObjectRecord` formats 2 and 3, `UploadRecord` and
/// `BucketRecord` format 1.
mod v3 {
    use serde::{Deserialize, Serialize};

    use super::{Checksums, PartSummary, Segment};

    #[derive(Serialize, Deserialize)]
    pub struct ObjectMeta {
        pub content_type: Option<String>,
        pub cache_control: Option<String>,
        pub content_disposition: Option<String>,
        pub content_encoding: Option<String>,
        pub content_language: Option<String>,
        pub expires: Option<String>,
        pub user: Vec<(String, String)>,
    }

    impl From<ObjectMeta> for super::ObjectMeta {
        fn from(m: ObjectMeta) -> Self {
            Self {
                content_type: m.content_type,
                cache_control: m.cache_control,
                content_disposition: m.content_disposition,
                content_encoding: m.content_encoding,
                content_language: m.content_language,
                expires: m.expires,
                user: m.user,
                tags: vec![],
                lock: Default::default(),
                owner: None,
                acl: None,
                sse: None,
            }
        }
    }

    impl From<super::ObjectMeta> for ObjectMeta {
        fn from(m: super::ObjectMeta) -> Self {
            Self {
                content_type: m.content_type,
                cache_control: m.cache_control,
                content_disposition: m.content_disposition,
                content_encoding: m.content_encoding,
                content_language: m.content_language,
                expires: m.expires,
                user: m.user,
            }
        }
    }

    #[derive(Serialize, Deserialize)]
    pub struct ObjectRecord {
        pub size: u64,
        pub etag: String,
        pub last_modified_ms: i64,
        pub meta: ObjectMeta,
        pub checksums: Checksums,
        pub segments: Vec<Segment>,
        pub parts: Vec<PartSummary>,
        pub upload_id: Option<String>,
    }

    impl From<ObjectRecord> for super::ObjectRecord {
        fn from(r: ObjectRecord) -> Self {
            Self {
                size: r.size,
                etag: r.etag,
                last_modified_ms: r.last_modified_ms,
                meta: r.meta.into(),
                checksums: r.checksums,
                segments: r.segments,
                parts: r.parts,
                upload_id: r.upload_id,
                version_id: None,
                delete_marker: false,
            }
        }
    }

    impl From<super::ObjectRecord> for ObjectRecord {
        fn from(r: super::ObjectRecord) -> Self {
            Self {
                size: r.size,
                etag: r.etag,
                last_modified_ms: r.last_modified_ms,
                meta: r.meta.into(),
                checksums: r.checksums,
                segments: r.segments,
                parts: r.parts,
                upload_id: r.upload_id,
            }
        }
    }

    #[derive(Deserialize)]
    pub struct UploadRecord {
        pub initiated_ms: i64,
        pub meta: ObjectMeta,
        pub checksum_algorithm: Option<String>,
        pub checksum_type: Option<String>,
        pub owner: String,
    }

    impl From<UploadRecord> for super::UploadRecord {
        fn from(u: UploadRecord) -> Self {
            Self {
                initiated_ms: u.initiated_ms,
                meta: u.meta.into(),
                checksum_algorithm: u.checksum_algorithm,
                checksum_type: u.checksum_type,
                owner: u.owner,
            }
        }
    }

    #[derive(Deserialize)]
    pub struct BucketRecord {
        pub created_ms: i64,
        pub owner: String,
    }

    impl From<BucketRecord> for super::BucketRecord {
        fn from(b: BucketRecord) -> Self {
            Self {
                created_ms: b.created_ms,
                owner: b.owner,
                tags: vec![],
                settings: vec![],
            }
        }
    }
}

/// The layouts of format 4 (tags, no object lock): `ObjectRecord` and `UploadRecord`.
mod v4 {
    use serde::{Deserialize, Serialize};

    use super::{Checksums, PartSummary, Segment};

    #[derive(Serialize, Deserialize)]
    pub struct ObjectMeta {
        pub content_type: Option<String>,
        pub cache_control: Option<String>,
        pub content_disposition: Option<String>,
        pub content_encoding: Option<String>,
        pub content_language: Option<String>,
        pub expires: Option<String>,
        pub user: Vec<(String, String)>,
        pub tags: Vec<(String, String)>,
    }

    impl From<ObjectMeta> for super::ObjectMeta {
        fn from(m: ObjectMeta) -> Self {
            Self {
                content_type: m.content_type,
                cache_control: m.cache_control,
                content_disposition: m.content_disposition,
                content_encoding: m.content_encoding,
                content_language: m.content_language,
                expires: m.expires,
                user: m.user,
                tags: m.tags,
                lock: Default::default(),
                owner: None,
                acl: None,
                sse: None,
            }
        }
    }

    impl From<super::ObjectMeta> for ObjectMeta {
        fn from(m: super::ObjectMeta) -> Self {
            Self {
                content_type: m.content_type,
                cache_control: m.cache_control,
                content_disposition: m.content_disposition,
                content_encoding: m.content_encoding,
                content_language: m.content_language,
                expires: m.expires,
                user: m.user,
                tags: m.tags,
            }
        }
    }

    #[derive(Serialize, Deserialize)]
    pub struct ObjectRecord {
        pub size: u64,
        pub etag: String,
        pub last_modified_ms: i64,
        pub meta: ObjectMeta,
        pub checksums: Checksums,
        pub segments: Vec<Segment>,
        pub parts: Vec<PartSummary>,
        pub upload_id: Option<String>,
        pub version_id: Option<String>,
        pub delete_marker: bool,
    }

    impl From<ObjectRecord> for super::ObjectRecord {
        fn from(r: ObjectRecord) -> Self {
            Self {
                size: r.size,
                etag: r.etag,
                last_modified_ms: r.last_modified_ms,
                meta: r.meta.into(),
                checksums: r.checksums,
                segments: r.segments,
                parts: r.parts,
                upload_id: r.upload_id,
                version_id: r.version_id,
                delete_marker: r.delete_marker,
            }
        }
    }

    impl From<super::ObjectRecord> for ObjectRecord {
        fn from(r: super::ObjectRecord) -> Self {
            Self {
                size: r.size,
                etag: r.etag,
                last_modified_ms: r.last_modified_ms,
                meta: r.meta.into(),
                checksums: r.checksums,
                segments: r.segments,
                parts: r.parts,
                upload_id: r.upload_id,
                version_id: r.version_id,
                delete_marker: r.delete_marker,
            }
        }
    }

    #[derive(Serialize, Deserialize)]
    pub struct UploadRecord {
        pub initiated_ms: i64,
        pub meta: ObjectMeta,
        pub checksum_algorithm: Option<String>,
        pub checksum_type: Option<String>,
        pub owner: String,
    }

    impl From<UploadRecord> for super::UploadRecord {
        fn from(u: UploadRecord) -> Self {
            Self {
                initiated_ms: u.initiated_ms,
                meta: u.meta.into(),
                checksum_algorithm: u.checksum_algorithm,
                checksum_type: u.checksum_type,
                owner: u.owner,
            }
        }
    }

    impl From<super::UploadRecord> for UploadRecord {
        fn from(u: super::UploadRecord) -> Self {
            Self {
                initiated_ms: u.initiated_ms,
                meta: u.meta.into(),
                checksum_algorithm: u.checksum_algorithm,
                checksum_type: u.checksum_type,
                owner: u.owner,
            }
        }
    }
}

/// The layouts before owners and ACLs: `ObjectRecord` and `UploadRecord` format 5.
mod v5 {
    use serde::{Deserialize, Serialize};

    use super::{Checksums, ObjectLock, PartSummary, Segment};

    #[derive(Serialize, Deserialize)]
    pub struct ObjectMeta {
        pub content_type: Option<String>,
        pub cache_control: Option<String>,
        pub content_disposition: Option<String>,
        pub content_encoding: Option<String>,
        pub content_language: Option<String>,
        pub expires: Option<String>,
        pub user: Vec<(String, String)>,
        pub tags: Vec<(String, String)>,
        pub lock: ObjectLock,
    }

    impl From<ObjectMeta> for super::ObjectMeta {
        fn from(m: ObjectMeta) -> Self {
            Self {
                content_type: m.content_type,
                cache_control: m.cache_control,
                content_disposition: m.content_disposition,
                content_encoding: m.content_encoding,
                content_language: m.content_language,
                expires: m.expires,
                user: m.user,
                tags: m.tags,
                lock: m.lock,
                owner: None,
                acl: None,
                sse: None,
            }
        }
    }

    impl From<super::ObjectMeta> for ObjectMeta {
        fn from(m: super::ObjectMeta) -> Self {
            Self {
                content_type: m.content_type,
                cache_control: m.cache_control,
                content_disposition: m.content_disposition,
                content_encoding: m.content_encoding,
                content_language: m.content_language,
                expires: m.expires,
                user: m.user,
                tags: m.tags,
                lock: m.lock,
            }
        }
    }

    #[derive(Serialize, Deserialize)]
    pub struct ObjectRecord {
        pub size: u64,
        pub etag: String,
        pub last_modified_ms: i64,
        pub meta: ObjectMeta,
        pub checksums: Checksums,
        pub segments: Vec<Segment>,
        pub parts: Vec<PartSummary>,
        pub upload_id: Option<String>,
        pub version_id: Option<String>,
        pub delete_marker: bool,
    }

    impl From<ObjectRecord> for super::ObjectRecord {
        fn from(r: ObjectRecord) -> Self {
            Self {
                size: r.size,
                etag: r.etag,
                last_modified_ms: r.last_modified_ms,
                meta: r.meta.into(),
                checksums: r.checksums,
                segments: r.segments,
                parts: r.parts,
                upload_id: r.upload_id,
                version_id: r.version_id,
                delete_marker: r.delete_marker,
            }
        }
    }

    impl From<super::ObjectRecord> for ObjectRecord {
        fn from(r: super::ObjectRecord) -> Self {
            Self {
                size: r.size,
                etag: r.etag,
                last_modified_ms: r.last_modified_ms,
                meta: r.meta.into(),
                checksums: r.checksums,
                segments: r.segments,
                parts: r.parts,
                upload_id: r.upload_id,
                version_id: r.version_id,
                delete_marker: r.delete_marker,
            }
        }
    }

    #[derive(Serialize, Deserialize)]
    pub struct UploadRecord {
        pub initiated_ms: i64,
        pub meta: ObjectMeta,
        pub checksum_algorithm: Option<String>,
        pub checksum_type: Option<String>,
        pub owner: String,
    }

    impl From<UploadRecord> for super::UploadRecord {
        fn from(u: UploadRecord) -> Self {
            Self {
                initiated_ms: u.initiated_ms,
                meta: u.meta.into(),
                checksum_algorithm: u.checksum_algorithm,
                checksum_type: u.checksum_type,
                owner: u.owner,
            }
        }
    }

    impl From<super::UploadRecord> for UploadRecord {
        fn from(u: super::UploadRecord) -> Self {
            Self {
                initiated_ms: u.initiated_ms,
                meta: u.meta.into(),
                checksum_algorithm: u.checksum_algorithm,
                checksum_type: u.checksum_type,
                owner: u.owner,
            }
        }
    }
}

/// The layouts of format 6 (owner and ACL, no encryption).
mod v6 {
    use serde::{Deserialize, Serialize};

    use super::{Checksums, ObjectLock, PartSummary, Segment};

    #[derive(Serialize, Deserialize)]
    pub struct ObjectMeta {
        pub content_type: Option<String>,
        pub cache_control: Option<String>,
        pub content_disposition: Option<String>,
        pub content_encoding: Option<String>,
        pub content_language: Option<String>,
        pub expires: Option<String>,
        pub user: Vec<(String, String)>,
        pub tags: Vec<(String, String)>,
        pub lock: ObjectLock,
        pub owner: Option<String>,
        pub acl: Option<Vec<(String, String)>>,
    }

    impl From<ObjectMeta> for super::ObjectMeta {
        fn from(m: ObjectMeta) -> Self {
            Self {
                content_type: m.content_type,
                cache_control: m.cache_control,
                content_disposition: m.content_disposition,
                content_encoding: m.content_encoding,
                content_language: m.content_language,
                expires: m.expires,
                user: m.user,
                tags: m.tags,
                lock: m.lock,
                owner: m.owner,
                acl: m.acl,
                sse: None,
            }
        }
    }

    impl From<super::ObjectMeta> for ObjectMeta {
        fn from(m: super::ObjectMeta) -> Self {
            Self {
                content_type: m.content_type,
                cache_control: m.cache_control,
                content_disposition: m.content_disposition,
                content_encoding: m.content_encoding,
                content_language: m.content_language,
                expires: m.expires,
                user: m.user,
                tags: m.tags,
                lock: m.lock,
                owner: m.owner,
                acl: m.acl,
            }
        }
    }

    #[derive(Serialize, Deserialize)]
    pub struct ObjectRecord {
        pub size: u64,
        pub etag: String,
        pub last_modified_ms: i64,
        pub meta: ObjectMeta,
        pub checksums: Checksums,
        pub segments: Vec<Segment>,
        pub parts: Vec<PartSummary>,
        pub upload_id: Option<String>,
        pub version_id: Option<String>,
        pub delete_marker: bool,
    }

    impl From<ObjectRecord> for super::ObjectRecord {
        fn from(r: ObjectRecord) -> Self {
            Self {
                size: r.size,
                etag: r.etag,
                last_modified_ms: r.last_modified_ms,
                meta: r.meta.into(),
                checksums: r.checksums,
                segments: r.segments,
                parts: r.parts,
                upload_id: r.upload_id,
                version_id: r.version_id,
                delete_marker: r.delete_marker,
            }
        }
    }

    impl From<super::ObjectRecord> for ObjectRecord {
        fn from(r: super::ObjectRecord) -> Self {
            Self {
                size: r.size,
                etag: r.etag,
                last_modified_ms: r.last_modified_ms,
                meta: r.meta.into(),
                checksums: r.checksums,
                segments: r.segments,
                parts: r.parts,
                upload_id: r.upload_id,
                version_id: r.version_id,
                delete_marker: r.delete_marker,
            }
        }
    }

    #[derive(Serialize, Deserialize)]
    pub struct UploadRecord {
        pub initiated_ms: i64,
        pub meta: ObjectMeta,
        pub checksum_algorithm: Option<String>,
        pub checksum_type: Option<String>,
        pub owner: String,
    }

    impl From<UploadRecord> for super::UploadRecord {
        fn from(u: UploadRecord) -> Self {
            Self {
                initiated_ms: u.initiated_ms,
                meta: u.meta.into(),
                checksum_algorithm: u.checksum_algorithm,
                checksum_type: u.checksum_type,
                owner: u.owner,
            }
        }
    }

    impl From<super::UploadRecord> for UploadRecord {
        fn from(u: super::UploadRecord) -> Self {
            Self {
                initiated_ms: u.initiated_ms,
                meta: u.meta.into(),
                checksum_algorithm: u.checksum_algorithm,
                checksum_type: u.checksum_type,
                owner: u.owner,
            }
        }
    }
}

/// Formats no longer written, kept to read old data dirs.
mod v1 {
    use serde::Deserialize;

    use super::v3::ObjectMeta;
    use super::{Checksums, Segment};

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
                meta: r.meta.into(),
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
                version_id: None,
                delete_marker: false,
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
            version_id: None,
            delete_marker: false,
        };
        let b = encode(&r);
        assert_eq!(b[0], FORMAT_V7);
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
            meta: v3::ObjectMeta,
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
                meta: ObjectMeta::default().into(),
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
        assert_eq!(encode(&r)[0], FORMAT_V7);
        assert_eq!(decode::<ObjectRecord>(&encode(&r)).unwrap(), r);
    }

    /// A summary decoded from the stored bytes is the record's own leading fields, in every
    /// format (the current one with tags and a lock behind the user metadata, 4, 3 and 1).
    #[test]
    fn summaries_decode_from_every_format() {
        let mut r = v2_fixture_record();
        r.meta.user.push(("mode".into(), "33188".into()));
        r.meta.tags = vec![("t".into(), "1".into())];
        r.meta.lock.legal_hold = true;
        r.meta.lock.mode = Some("COMPLIANCE".into());
        r.meta.lock.retain_until_ms = Some(9);
        r.checksums = Checksums {
            crc32c: Some("AAAAAA==-2".into()),
            sha1: Some("2jmj7l5rSw0yVb/vlWAYkK/YBwk=".into()),
            kind: Some("COMPOSITE".into()),
            ..Default::default()
        };
        let mut v4b = vec![FORMAT_V4];
        v4b.extend(postcard::to_stdvec(&v4::ObjectRecord::from(r.clone())).unwrap());
        let mut v3b = vec![FORMAT_V3];
        v3b.extend(postcard::to_stdvec(&v3::ObjectRecord::from(r.clone())).unwrap());
        for b in [encode(&r), v4b, v3b] {
            let full: ObjectRecord = decode(&b).unwrap();
            assert_eq!(
                decode_summary(&b).unwrap(),
                ObjectSummary::of(&full),
                "format {}",
                b[0]
            );
            // A listing's brief: the same summary, and the checksums behind tags and lock.
            assert_eq!(
                decode_brief(&b).unwrap(),
                (
                    ObjectSummary::of(&full),
                    ChecksumNames::of(&full.checksums),
                    full.meta.owner.as_deref()
                ),
                "format {}",
                b[0]
            );
            let names = decode_brief(&b).unwrap().1;
            assert_eq!(names.algorithms().collect::<Vec<_>>(), ["CRC32C", "SHA1"]);
            assert_eq!(names.kind(), Some("COMPOSITE"));
        }
        let want = ObjectSummary::of(&r);
        assert_eq!(want.meta.user, vec![("k", "v"), ("mode", "33188")]);
        assert_eq!((want.size, want.etag), (107, "e-1"));
        assert_eq!(decode_summary(&encode(&r)).unwrap(), want);
        let v1: &[u8] = &[
            1, 3, 3, 97, 98, 99, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 3, 120, 121, 122,
            0,
        ];
        let s = decode_summary(v1).unwrap();
        assert_eq!((s.size, s.etag, s.last_modified_ms), (3, "abc", 5));
        let (s, names, owner) = decode_brief(v1).unwrap();
        assert_eq!(owner, None);
        assert_eq!((s.size, names), (3, ChecksumNames::default()));
        assert_eq!((names.algorithms().count(), names.kind()), (0, None));
        assert!(matches!(
            decode_brief(&[9, 0]),
            Err(MetaError::UnknownFormat(9))
        ));
        assert!(matches!(
            decode_brief(&encode(&r)[..4]),
            Err(MetaError::Corrupt(_))
        ));
        assert!(matches!(
            decode_summary(&[9, 0]),
            Err(MetaError::UnknownFormat(9))
        ));
        assert!(matches!(
            decode_summary(&encode(&r)[..4]),
            Err(MetaError::Corrupt(_))
        ));
    }

    /// Records written in format 4 (tags, versions, no object lock) read with no lock;
    /// re-encoding writes format 5.
    #[test]
    fn format_4_records_read_without_a_lock() {
        let mut r = v2_fixture_record();
        r.meta.tags = vec![("t".into(), "1".into())];
        r.version_id = Some("0123".into());
        let mut b = vec![FORMAT_V4];
        b.extend(postcard::to_stdvec(&v4::ObjectRecord::from(r.clone())).unwrap());
        let back: ObjectRecord = decode(&b).unwrap();
        assert_eq!(back, r);
        assert!(back.meta.lock.is_empty());
        let mut locked = r.clone();
        locked.meta.lock = ObjectLock {
            mode: Some("GOVERNANCE".into()),
            retain_until_ms: Some(1),
            legal_hold: true,
        };
        assert_eq!(encode(&locked)[0], FORMAT_V7);
        assert_eq!(decode::<ObjectRecord>(&encode(&locked)).unwrap(), locked);
        let u = UploadRecord {
            initiated_ms: 3,
            meta: r.meta.clone(),
            checksum_algorithm: None,
            checksum_type: None,
            owner: "o".into(),
        };
        let mut b = vec![FORMAT_V4];
        b.extend(postcard::to_stdvec(&v4::UploadRecord::from(u.clone())).unwrap());
        assert_eq!(decode::<UploadRecord>(&b).unwrap(), u);
    }

    /// The record of the v2 fixture: two inline segments around a chunk, metadata, a part.
    fn v2_fixture_record() -> ObjectRecord {
        ObjectRecord {
            size: 107,
            etag: "e-1".into(),
            last_modified_ms: 1_700_000_000_123,
            meta: ObjectMeta {
                content_type: Some("text/plain".into()),
                user: vec![("k".into(), "v".into())],
                ..ObjectMeta::default()
            },
            checksums: Checksums {
                crc32c: Some("AAAAAA==".into()),
                ..Checksums::default()
            },
            segments: vec![
                Segment::Inline(b"abc".to_vec()),
                Segment::Chunk(ChunkLoc {
                    dev: 1,
                    offset: 8192,
                    alloc_len: 4096,
                    data_len: 100,
                    crc32c: 0xdead_beef,
                }),
                Segment::Inline(b"defg".to_vec()),
            ],
            parts: vec![PartSummary {
                number: 2,
                size: 107,
                etag: "p2".into(),
                checksums: Checksums::default(),
            }],
            upload_id: Some("u1".into()),
            version_id: None,
            delete_marker: false,
        }
    }

    /// A v2 object record (inline bytes inside the value) as format 2's encoder wrote it; kept
    /// so later formats must still read it. Re-encoding it writes format 3, split.
    #[test]
    fn v2_fixture_decodes_and_reencodes_split() {
        let fixture: &[u8] = &[
            2, 107, 3, 101, 45, 49, 246, 161, 171, 254, 249, 98, 1, 10, 116, 101, 120, 116, 47,
            112, 108, 97, 105, 110, 0, 0, 0, 0, 0, 1, 1, 107, 1, 118, 0, 1, 8, 65, 65, 65, 65, 65,
            65, 61, 61, 0, 0, 0, 0, 3, 0, 3, 97, 98, 99, 1, 1, 128, 64, 128, 32, 100, 239, 253,
            182, 245, 13, 0, 4, 100, 101, 102, 103, 1, 2, 107, 2, 112, 50, 0, 0, 0, 0, 0, 0, 1, 2,
            117, 49,
        ];
        let want = v2_fixture_record();
        let r: ObjectRecord = decode(fixture).unwrap();
        assert_eq!(r, want);
        assert!(!r.has_detached());
        let (value, payload) = split_inline(&r);
        assert_eq!(value[0], FORMAT_V7);
        assert_eq!(payload.as_deref(), Some(&b"abcdefg"[..]));
        // The value holds no inline byte: it is the v2 body minus the bytes, plus lengths.
        let head: ObjectRecord = decode(&value).unwrap();
        assert!(head.has_detached());
        assert_eq!(head, want.clone().into_head());
        assert_eq!(decode_head(fixture).unwrap(), head);
        assert_eq!(
            head.segments.iter().map(Segment::len).collect::<Vec<_>>(),
            vec![3, 100, 4]
        );
        assert_eq!(join_inline(head, b"abcdefg").unwrap(), want);
    }

    #[test]
    fn split_and_join() {
        let mut r = v2_fixture_record();
        // No inline segment: no payload, and the value is the record itself.
        let chunk_only = ObjectRecord {
            segments: vec![r.segments[1].clone()],
            ..r.clone()
        };
        let (value, payload) = split_inline(&chunk_only);
        assert_eq!(payload, None);
        assert_eq!(value, encode(&chunk_only));
        assert_eq!(
            join_inline(decode(&value).unwrap(), b"").unwrap(),
            chunk_only
        );
        // An empty inline segment is kept (an empty object), with an empty payload.
        r.segments = vec![Segment::Inline(vec![])];
        let (value, payload) = split_inline(&r);
        assert_eq!(payload.as_deref(), Some(&b""[..]));
        let head: ObjectRecord = decode(&value).unwrap();
        assert_eq!(head.segments, vec![Segment::Detached(0)]);
        assert_eq!(join_inline(head, b"").unwrap(), r);
        // A payload that does not match the lengths is corrupt, short or long.
        let head: ObjectRecord = decode(&split_inline(&v2_fixture_record()).0).unwrap();
        for bad in [&b"abcdef"[..], b"abcdefgh", b""] {
            assert!(matches!(
                join_inline(head.clone(), bad),
                Err(MetaError::Corrupt(_))
            ));
        }
        // Order matters: the first segment takes the first bytes.
        let j = join_inline(head, b"xyz1234").unwrap();
        assert_eq!(j.segments[0], Segment::Inline(b"xyz".to_vec()));
        assert_eq!(j.segments[2], Segment::Inline(b"1234".to_vec()));
    }

    /// A v3 object record (the v2 fixture's record, split) as format 3's encoder wrote it,
    /// and format-1 bucket and upload records: kept so that later formats must still read
    /// them. They read with no tags; re-encoding writes format 4.
    #[test]
    fn v3_and_untagged_v1_fixtures_decode() {
        let fixture: &[u8] = &[
            3, 107, 3, 101, 45, 49, 246, 161, 171, 254, 249, 98, 1, 10, 116, 101, 120, 116, 47,
            112, 108, 97, 105, 110, 0, 0, 0, 0, 0, 1, 1, 107, 1, 118, 0, 1, 8, 65, 65, 65, 65, 65,
            65, 61, 61, 0, 0, 0, 0, 3, 2, 3, 1, 1, 128, 64, 128, 32, 100, 239, 253, 182, 245, 13,
            2, 4, 1, 2, 107, 2, 112, 50, 0, 0, 0, 0, 0, 0, 1, 2, 117, 49,
        ];
        let want = v2_fixture_record().into_head();
        let r: ObjectRecord = decode(fixture).unwrap();
        assert_eq!(r, want);
        assert!(r.meta.tags.is_empty());
        assert_eq!(encode(&r)[0], FORMAT_V7);
        assert_eq!(decode_head(fixture).unwrap(), want);
        // BucketRecord v1: created_ms 5, owner "al".
        let b: BucketRecord = decode(&[1, 10, 2, 97, 108]).unwrap();
        assert_eq!(
            b,
            BucketRecord {
                created_ms: 5,
                owner: "al".into(),
                tags: vec![],
                settings: vec![],
            }
        );
        // UploadRecord v1: initiated 7, content type "t", one user pair, CRC32, no type, "al".
        let u: UploadRecord = decode(&[
            1, 14, 1, 1, 116, 0, 0, 0, 0, 0, 1, 1, 107, 1, 118, 1, 5, 67, 82, 67, 51, 50, 0, 2, 97,
            108,
        ])
        .unwrap();
        assert_eq!(u.meta.content_type.as_deref(), Some("t"));
        assert_eq!(u.meta.user, vec![("k".into(), "v".into())]);
        assert!(u.meta.tags.is_empty());
        assert_eq!(u.checksum_algorithm.as_deref(), Some("CRC32"));
        assert_eq!(u.owner, "al");
        assert_eq!(encode(&u)[0], FORMAT_V7);
    }

    /// Tags round-trip in every record that carries them, and `encode_v2` writes what format 2
    /// wrote (tags dropped, bytes inside).
    #[test]
    fn tags_roundtrip_and_v2_encoding() {
        let mut r = v2_fixture_record();
        r.meta.tags = vec![("a".into(), "1".into()), ("b".into(), String::new())];
        assert_eq!(decode::<ObjectRecord>(&encode(&r)).unwrap(), r);
        let (value, payload) = split_inline(&r);
        let joined = join_inline(decode(&value).unwrap(), &payload.unwrap()).unwrap();
        assert_eq!(joined, r);
        let v2 = encode_v2(&r);
        assert_eq!(v2[0], FORMAT_V2);
        let back: ObjectRecord = decode(&v2).unwrap();
        assert!(back.meta.tags.is_empty());
        assert_eq!(
            back,
            ObjectRecord {
                meta: ObjectMeta {
                    tags: vec![],
                    ..r.meta.clone()
                },
                ..r
            }
        );
        let b = BucketRecord {
            created_ms: 1,
            owner: "o".into(),
            tags: vec![("k".into(), "v".into())],
            settings: vec![("lifecycle".into(), "{}".into())],
        };
        assert_eq!(decode::<BucketRecord>(&encode(&b)).unwrap(), b);
    }

    /// Object and upload records in format 5 (a lock, no owner or ACL) as format 5's encoder
    /// wrote them: kept so later formats must still read them. They read with no owner and the
    /// default ACL; re-encoding writes format 6.
    #[test]
    fn v5_fixtures_decode_without_owner_or_acl() {
        let obj: &[u8] = &[
            5, 5, 1, 101, 18, 1, 1, 116, 0, 0, 0, 0, 0, 0, 1, 1, 97, 1, 98, 0, 0, 1, 0, 1, 8, 65,
            65, 65, 65, 65, 65, 61, 61, 0, 0, 0, 1, 11, 70, 85, 76, 76, 95, 79, 66, 74, 69, 67, 84,
            1, 2, 5, 0, 0, 1, 2, 118, 49, 0,
        ];
        let r: ObjectRecord = decode(obj).unwrap();
        assert_eq!((r.size, r.etag.as_str()), (5, "e"));
        assert_eq!(r.meta.content_type.as_deref(), Some("t"));
        assert_eq!(r.meta.tags, vec![("a".into(), "b".into())]);
        assert!(r.meta.lock.legal_hold);
        assert_eq!((r.meta.owner.clone(), r.meta.acl.clone()), (None, None));
        assert_eq!(r.checksums.crc32c.as_deref(), Some("AAAAAA=="));
        assert_eq!(r.segments, vec![Segment::Detached(5)]);
        assert_eq!(r.version_id.as_deref(), Some("v1"));
        let (s, names, owner) = decode_brief(obj).unwrap();
        assert_eq!((s.size, owner), (5, None));
        assert_eq!(names.algorithms().collect::<Vec<_>>(), ["CRC32C"]);
        assert_eq!(decode_summary(obj).unwrap(), ObjectSummary::of(&r));
        assert_eq!(encode(&r)[0], FORMAT_V7);
        let up: &[u8] = &[
            5, 6, 1, 1, 116, 0, 0, 0, 0, 0, 0, 1, 1, 97, 1, 98, 0, 0, 1, 0, 0, 1, 111,
        ];
        let u: UploadRecord = decode(up).unwrap();
        assert_eq!((u.initiated_ms, u.owner.as_str()), (3, "o"));
        assert!(u.meta.lock.legal_hold && u.meta.acl.is_none() && u.meta.owner.is_none());
        assert_eq!(encode(&u)[0], FORMAT_V7);
    }

    /// Owner and ACL round-trip in format 6, and a listing's brief names the owner (the
    /// checksums behind them still read).
    #[test]
    fn owner_and_acl_roundtrip_and_brief() {
        let mut r = v2_fixture_record();
        r.meta.tags = vec![("t".into(), "1".into())];
        r.meta.lock.legal_hold = true;
        r.meta.owner = Some("alice".into());
        r.meta.acl = Some(vec![("group:AllUsers".into(), "READ".into())]);
        let b = encode(&r);
        assert_eq!(b[0], FORMAT_V7);
        assert_eq!(decode::<ObjectRecord>(&b).unwrap(), r);
        let (s, names, owner) = decode_brief(&b).unwrap();
        assert_eq!((s, owner), (ObjectSummary::of(&r), Some("alice")));
        assert_eq!(names.algorithms().collect::<Vec<_>>(), ["CRC32C"]);
        let mut v5b = vec![FORMAT_V5];
        v5b.extend(postcard::to_stdvec(&v5::ObjectRecord::from(r.clone())).unwrap());
        let back: ObjectRecord = decode(&v5b).unwrap();
        assert_eq!((back.meta.owner, back.meta.acl), (None, None));
        assert_eq!(back.meta.lock, r.meta.lock);
    }

    /// Encryption round-trips in format 7 (every kind), a listing's brief reads past it, and a
    /// format-6 value still reads, unencrypted.
    #[test]
    fn encryption_roundtrips_in_format_7_and_format_6_reads() {
        for kind in [
            SseKind::S3,
            SseKind::Kms {
                key_id: "1234abcd-12ab-34cd-56ef-1234567890ab".into(),
                context: Some("eyJhIjoiYiJ9".into()),
                dsse: true,
            },
            SseKind::Customer {
                salt: [3; 16],
                mac: [4; 32],
            },
        ] {
            let mut r = v2_fixture_record();
            r.meta.owner = Some("alice".into());
            r.meta.sse = Some(Sse {
                kind,
                id: [9; 16],
                sealed_key: vec![1, 2, 3, 4, 5],
                key_version: 2,
                bucket_key: true,
                seq: vec![],
            });
            r.meta.sse.as_mut().unwrap().set_seqs(&[0, 5, 1 << 32]);
            assert_eq!(r.meta.sse.as_ref().unwrap().seqs(), [0, 5, 1 << 32]);
            let b = encode(&r);
            assert_eq!(b[0], FORMAT_V7);
            assert_eq!(decode::<ObjectRecord>(&b).unwrap(), r);
            let (s, names, owner) = decode_brief(&b).unwrap();
            assert_eq!((s, owner), (ObjectSummary::of(&r), Some("alice")));
            assert_eq!(names.algorithms().collect::<Vec<_>>(), ["CRC32C"]);
            let mut v6b = vec![FORMAT_V6];
            v6b.extend(postcard::to_stdvec(&v6::ObjectRecord::from(r.clone())).unwrap());
            let back: ObjectRecord = decode(&v6b).unwrap();
            assert_eq!(back.meta.sse, None);
            assert_eq!(back.meta.owner.as_deref(), Some("alice"));
            let (_, _, owner) = decode_brief(&v6b).unwrap();
            assert_eq!(owner, Some("alice"));
        }
    }
}
