//! Tag sets of objects and buckets: AWS's rules for them, and the `x-amz-tagging` header's
//! form (a URL query: `k1=v1&k2`, `+` for a space).
//!
//! The rules (S3 user guide, "Categorizing your storage using tags"; observed answers of S3 in
//! SEMANTICS.md): at most 10 tags on an object (more: `400 BadRequest`, "Object tags cannot be
//! greater than 10") and 50 on a bucket; keys unique, 1 to 128 characters, values 0 to 256,
//! counted in UTF-16 units as S3 stores them; only Unicode letters, digits, spaces and
//! `_ . : / = + @ -`; no key starting with `aws:` (reserved for AWS). Any other breach is
//! `400 InvalidTag`. A set is kept sorted by key, the order S3 answers in.

use crate::{ObjError, ObjResult};

/// A tag set: (key, value) pairs, sorted by key.
pub type TagSet = Vec<(String, String)>;

/// At most this many tags on an object.
pub const MAX_OBJECT_TAGS: usize = 10;
/// At most this many tags on a bucket.
pub const MAX_BUCKET_TAGS: usize = 50;
const MAX_KEY_UNITS: usize = 128;
const MAX_VALUE_UNITS: usize = 256;

/// What a tag set is for: the limits differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    Object,
    Bucket,
}

fn allowed(c: char) -> bool {
    c.is_alphanumeric()
        || (c.is_whitespace() && !c.is_control())
        || matches!(c, '_' | '.' | ':' | '/' | '=' | '+' | '@' | '-')
}

fn invalid(what: &str) -> ObjError {
    ObjError::InvalidTag(format!("The {what} you have provided is invalid"))
}

/// Checks a tag set against AWS's rules and returns it sorted by key.
pub fn check(mut tags: TagSet, owner: Owner) -> ObjResult<TagSet> {
    match owner {
        Owner::Object if tags.len() > MAX_OBJECT_TAGS => {
            return Err(ObjError::BadRequest(format!(
                "Object tags cannot be greater than {MAX_OBJECT_TAGS}"
            )));
        }
        Owner::Bucket if tags.len() > MAX_BUCKET_TAGS => {
            return Err(ObjError::InvalidTag(format!(
                "Bucket tag count cannot be greater than {MAX_BUCKET_TAGS}"
            )));
        }
        _ => {}
    }
    for (k, v) in &tags {
        let units = k.encode_utf16().count();
        if units == 0 || units > MAX_KEY_UNITS || !k.chars().all(allowed) {
            return Err(invalid("TagKey"));
        }
        if k.get(..4).is_some_and(|p| p.eq_ignore_ascii_case("aws:")) {
            return Err(ObjError::InvalidTag(
                "Your TagKey cannot be prefixed with aws:".into(),
            ));
        }
        if v.encode_utf16().count() > MAX_VALUE_UNITS || !v.chars().all(allowed) {
            return Err(invalid("TagValue"));
        }
    }
    tags.sort();
    if tags.windows(2).any(|w| w[0].0 == w[1].0) {
        return Err(ObjError::InvalidTag(
            "Cannot provide multiple Tags with the same key".into(),
        ));
    }
    Ok(tags)
}

/// Parses `x-amz-tagging` (PutObject, CopyObject, CreateMultipartUpload) into an object's tag
/// set: `&`-separated pairs, each `key=value` or `key` (the empty value), form-encoded. A pair
/// with a second `=` (after decoding nothing is split again), bad percent-encoding, bytes that
/// are not UTF-8, or a key given twice are `InvalidArgument`, as S3 answers; then [`check`].
pub fn parse_header(header: &str) -> ObjResult<TagSet> {
    let bad = || {
        ObjError::InvalidArgument(
            "The header 'x-amz-tagging' shall be encoded as UTF-8 then URLEncoded URL query parameters without tag name duplicates.".into(),
        )
    };
    let decode = |s: &str| -> ObjResult<String> {
        let plus = s.replace('+', " ");
        urlencoding::decode(&plus)
            .map(|c| c.into_owned())
            .map_err(|_| bad())
    };
    let mut tags = TagSet::new();
    for pair in header.split('&').filter(|p| !p.is_empty()) {
        let mut it = pair.splitn(3, '=');
        let k = it.next().unwrap_or_default();
        let v = it.next().unwrap_or_default();
        if it.next().is_some() {
            return Err(bad());
        }
        tags.push((decode(k)?, decode(v)?));
    }
    let mut keys: Vec<&str> = tags.iter().map(|(k, _)| k.as_str()).collect();
    keys.sort_unstable();
    if keys.windows(2).any(|w| w[0] == w[1]) {
        return Err(bad());
    }
    check(tags, Owner::Object)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(k: &str, v: &str) -> (String, String) {
        (k.into(), v.into())
    }

    #[test]
    fn header_forms() {
        assert_eq!(
            parse_header("foo=bar&bar").unwrap(),
            vec![t("bar", ""), t("foo", "bar")]
        );
        assert_eq!(
            parse_header("a%20b=c+d&e=%2B").unwrap(),
            vec![t("a b", "c d"), t("e", "+")]
        );
        assert_eq!(parse_header("").unwrap(), vec![]);
        for bad in [
            "a=b=c",
            "a=1&a=2",
            "a=%ff",
            "TagSet=[{Key=string,Value=string}]",
        ] {
            assert!(
                matches!(parse_header(bad), Err(ObjError::InvalidArgument(_))),
                "{bad}"
            );
        }
        // One key of characters outside the alphabet: InvalidTag, as S3 answered.
        assert!(matches!(
            parse_header("TagSet%3D%5B%7BKey%3Dstring%2CValue%3Dstring%7D%5D"),
            Err(ObjError::InvalidTag(_))
        ));
    }

    #[test]
    fn limits() {
        let n = |n: usize| {
            (0..n)
                .map(|i| t(&format!("k{i:02}"), "v"))
                .collect::<TagSet>()
        };
        assert_eq!(check(n(10), Owner::Object).unwrap().len(), 10);
        assert!(matches!(
            check(n(11), Owner::Object),
            Err(ObjError::BadRequest(_))
        ));
        assert_eq!(check(n(50), Owner::Bucket).unwrap().len(), 50);
        assert!(matches!(
            check(n(51), Owner::Bucket),
            Err(ObjError::InvalidTag(_))
        ));
        let long = |c: &str, n: usize| c.repeat(n);
        assert!(check(vec![t(&long("k", 128), &long("v", 256))], Owner::Object).is_ok());
        // Counted in UTF-16 units: 64 characters outside the BMP are 128 units.
        assert!(check(vec![t(&long("\u{10400}", 64), "")], Owner::Object).is_ok());
        for bad in [
            t(&long("k", 129), ""),
            t("k", &long("v", 257)),
            t(&long("\u{10400}", 65), ""),
            t("", "v"),
            t("a,b", "v"),
            t("k", "v#"),
            t("k\n", "v"),
            t("aws:x", "v"),
            t("AWS:x", "v"),
        ] {
            assert!(
                matches!(
                    check(vec![bad.clone()], Owner::Object),
                    Err(ObjError::InvalidTag(_))
                ),
                "{bad:?}"
            );
        }
        assert!(check(vec![t("Zürich 1_.:/=+@-", "ÿ é")], Owner::Object).is_ok());
        assert!(matches!(
            check(vec![t("a", "1"), t("a", "2")], Owner::Bucket),
            Err(ObjError::InvalidTag(_))
        ));
        assert_eq!(
            check(vec![t("b", ""), t("a", "")], Owner::Bucket).unwrap(),
            vec![t("a", ""), t("b", "")]
        );
    }
}
