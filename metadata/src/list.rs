//! S3 listing over the objects table in O(page) seeks.
//!
//! A delimiter listing seeks past each common prefix instead of scanning under it, so a page of
//! `n` entries costs at most `n + 1` seeks plus the keys it returns, however many keys lie below.

use crate::keys;
use crate::records::{BriefRef, ObjectRecord, ObjectSummary, decode, decode_brief, decode_summary};
use crate::{MetaError, MetadataStore, Table};

/// What to list.
#[derive(Debug, Clone, Default)]
pub struct ListQuery<'a> {
    pub prefix: &'a str,
    pub delimiter: Option<&'a str>,
    /// Exclusive lower bound: a key or common prefix to start after (start-after, marker, or
    /// the last entry of the previous page).
    pub after: Option<&'a str>,
    pub max: usize,
}

/// One page.
#[derive(Debug, Default)]
pub struct ListPage {
    pub objects: Vec<(String, ObjectRecord)>,
    pub common_prefixes: Vec<String>,
    pub truncated: bool,
    /// The last key or common prefix returned (the next page starts after it).
    pub last: Option<String>,
}

/// Lists one page of a bucket's objects in S3 order.
pub fn list_objects(
    store: &dyn MetadataStore,
    bucket: &str,
    q: &ListQuery<'_>,
) -> Result<ListPage, MetaError> {
    let mut objects = Vec::new();
    let mut page = walk(store, bucket, q, &mut |key, v| {
        objects.push((key.to_owned(), decode::<ObjectRecord>(v)?));
        Ok(())
    })?;
    page.objects = objects;
    Ok(page)
}

/// [`list_objects`] for a caller that needs only each object's [`ObjectSummary`] (a directory
/// listing): `f` gets each key and summary, borrowed from the store's value, in order; the
/// page returned has the common prefixes and where to go on, and no `objects`.
pub fn list_summaries(
    store: &dyn MetadataStore,
    bucket: &str,
    q: &ListQuery<'_>,
    f: &mut dyn FnMut(&str, &ObjectSummary<'_>),
) -> Result<ListPage, MetaError> {
    walk(store, bucket, q, &mut |key, v| {
        f(key, &decode_summary(v)?);
        Ok(())
    })
}

/// [`list_objects`] for an S3 ListObjects page: `f` gets each key, [`ObjectSummary`] and
/// [`crate::records::ChecksumNames`] and owner, borrowed from the store's value, in order (as [`list_summaries`]).
pub fn list_briefs(
    store: &dyn MetadataStore,
    bucket: &str,
    q: &ListQuery<'_>,
    f: &mut dyn FnMut(&str, BriefRef<'_>),
) -> Result<ListPage, MetaError> {
    walk(store, bucket, q, &mut |key, v| {
        f(key, decode_brief(v)?);
        Ok(())
    })
}

/// What [`walk`] hands each object to: its key and stored value.
type OnObject<'f> = dyn FnMut(&str, &[u8]) -> Result<(), MetaError> + 'f;

/// One page of `q`: the common prefixes go into the page, each object's key and stored value
/// to `on_object`.
fn walk(
    store: &dyn MetadataStore,
    bucket: &str,
    q: &ListQuery<'_>,
    on_object: &mut OnObject<'_>,
) -> Result<ListPage, MetaError> {
    let base = keys::bucket_prefix(bucket);
    let mut full_prefix = base.clone();
    full_prefix.extend_from_slice(q.prefix.as_bytes());
    let delim = q.delimiter.filter(|d| !d.is_empty()).map(str::as_bytes);
    let after = q.after.map(str::as_bytes);

    let mut page = ListPage::default();
    let mut entries = 0usize;
    // The last entry returned, kept as bytes in one buffer (no string per entry).
    let mut last: Option<Vec<u8>> = None;
    let set_last = |last: &mut Option<Vec<u8>>, k: &[u8]| {
        let b = last.get_or_insert_with(Vec::new);
        b.clear();
        b.extend_from_slice(k);
    };
    let mut cur = store.cursor(Table::Objects)?;
    let start = match after {
        Some(a) if a > q.prefix.as_bytes() => {
            let mut k = base.clone();
            k.extend_from_slice(a);
            k
        }
        _ => full_prefix.clone(),
    };
    cur.seek(&start);
    while let Some((k, v)) = cur.current() {
        if !k.starts_with(&full_prefix) {
            break;
        }
        let key = &k[base.len()..];
        // A common prefix, if the delimiter occurs after the prefix.
        let cp_end = delim.and_then(|d| {
            let rest = &key[q.prefix.len()..];
            rest.windows(d.len())
                .position(|w| w == d)
                .map(|i| q.prefix.len() + i + d.len())
        });
        if let Some(end) = cp_end {
            let cp = &key[..end];
            let skip = after.is_some_and(|a| cp <= a);
            if !skip {
                if entries >= q.max {
                    page.truncated = true;
                    break;
                }
                let cp = String::from_utf8(cp.to_vec())
                    .map_err(|e| MetaError::Corrupt(e.to_string()))?;
                set_last(&mut last, cp.as_bytes());
                page.common_prefixes.push(cp);
                entries += 1;
            }
            let mut next = base.clone();
            match keys::prefix_successor(cp) {
                Some(s) => next.extend_from_slice(&s),
                None => break,
            }
            cur.seek(&next);
            continue;
        }
        if after.is_some_and(|a| key <= a) {
            cur.next();
            continue;
        }
        if entries >= q.max {
            page.truncated = true;
            break;
        }
        let name = std::str::from_utf8(key).map_err(|e| MetaError::Corrupt(e.to_string()))?;
        on_object(name, v)?;
        set_last(&mut last, key);
        entries += 1;
        cur.next();
    }
    cur.status()?;
    page.last = last
        .map(String::from_utf8)
        .transpose()
        .map_err(|e| MetaError::Corrupt(e.to_string()))?;
    Ok(page)
}
