//! Key encoding. Byte order of encoded keys equals S3 listing order within a bucket.
//!
//! Bucket names never contain `\0` and object keys are refused when they do, so `\0` is a safe
//! separator: all keys of bucket `a` sort together and before bucket `a-b`'s.

pub const SEP: u8 = 0;

/// `bucket \0 key` in the objects table.
pub fn object(bucket: &str, key: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(bucket.len() + 1 + key.len());
    k.extend_from_slice(bucket.as_bytes());
    k.push(SEP);
    k.extend_from_slice(key.as_bytes());
    k
}

/// A noncurrent version's key in [`crate::Table::Versions`]: the object's key, NUL, and the
/// version's suffix (which orders a key's versions newest first). Keys hold no NUL, so a key's
/// versions sort together and before any longer key's.
pub fn version(bucket: &str, key: &str, suffix: &str) -> Vec<u8> {
    let mut k = version_prefix(bucket, key);
    k.extend_from_slice(suffix.as_bytes());
    k
}

/// The prefix of every version of `bucket/key` in [`crate::Table::Versions`].
pub fn version_prefix(bucket: &str, key: &str) -> Vec<u8> {
    let mut k = object(bucket, key);
    k.push(SEP);
    k
}

/// The prefix shared by every object (or upload) key of a bucket.
pub fn bucket_prefix(bucket: &str) -> Vec<u8> {
    object(bucket, "")
}

/// `bucket \0 key \0 upload_id` in the uploads table.
pub fn upload(bucket: &str, key: &str, upload_id: &str) -> Vec<u8> {
    let mut k = object(bucket, key);
    k.push(SEP);
    k.extend_from_slice(upload_id.as_bytes());
    k
}

/// Splits an uploads-table key (without its bucket prefix) into (key, upload id).
pub fn split_upload(rest: &[u8]) -> Option<(&[u8], &[u8])> {
    let i = rest.iter().rposition(|&b| b == SEP)?;
    Some((&rest[..i], &rest[i + 1..]))
}

/// `upload_id \0 part_number(BE)` in the parts table.
pub fn part(upload_id: &str, part_number: u32) -> Vec<u8> {
    let mut k = part_prefix(upload_id);
    k.extend_from_slice(&part_number.to_be_bytes());
    k
}

pub fn part_prefix(upload_id: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(upload_id.len() + 5);
    k.extend_from_slice(upload_id.as_bytes());
    k.push(SEP);
    k
}

/// Where the system table remembers an aborted upload (so a retried abort still succeeds).
pub const ABORTED_PREFIX: &[u8] = b"aborted\0";

/// `aborted \0 upload_id` in the system table. Upload ids begin with their creation time in
/// fixed-width hex, so these keys sort oldest upload first.
pub fn aborted(upload_id: &str) -> Vec<u8> {
    let mut k = ABORTED_PREFIX.to_vec();
    k.extend_from_slice(upload_id.as_bytes());
    k
}

/// `dev(BE) offset(BE)` in the extents table.
pub fn extent(dev: u32, offset: u64) -> [u8; 12] {
    let mut k = [0u8; 12];
    k[..4].copy_from_slice(&dev.to_be_bytes());
    k[4..].copy_from_slice(&offset.to_be_bytes());
    k
}

pub fn parse_extent(k: &[u8]) -> Option<(u32, u64)> {
    if k.len() != 12 {
        return None;
    }
    Some((
        u32::from_be_bytes(k[..4].try_into().ok()?),
        u64::from_be_bytes(k[4..].try_into().ok()?),
    ))
}

/// The smallest byte string greater than every string starting with `p`, or `None` if there is
/// none (all `0xff`). Used to seek past a common prefix in one step.
pub fn prefix_successor(p: &[u8]) -> Option<Vec<u8>> {
    let mut v = p.to_vec();
    while let Some(last) = v.pop() {
        if last < 0xff {
            v.push(last + 1);
            return Some(v);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_matches_s3_within_and_across_buckets() {
        let mut keys = vec![
            object("a", "b"),
            object("a-b", ""),
            object("a", "a/b"),
            object("a", "a"),
            object("a", "a0"),
            object("ab", "x"),
        ];
        keys.sort();
        assert_eq!(
            keys,
            vec![
                object("a", "a"),
                object("a", "a/b"),
                object("a", "a0"),
                object("a", "b"),
                object("a-b", ""),
                object("ab", "x"),
            ]
        );
    }

    #[test]
    fn successor_and_parts() {
        assert_eq!(prefix_successor(b"a/"), Some(b"a0".to_vec()));
        assert_eq!(prefix_successor(b"a\xff\xff"), Some(b"b".to_vec()));
        assert_eq!(prefix_successor(b"\xff"), None);
        assert!(part("u", 2) < part("u", 10));
        assert_eq!(parse_extent(&extent(3, 1 << 40)), Some((3, 1 << 40)));
        let k = upload("b", "x/y", "id1");
        assert_eq!(split_upload(&k[2..]), Some((&b"x/y"[..], &b"id1"[..])));
    }
}
