//! S3 listing over the objects table in O(page) seeks.
//!
//! A delimiter listing seeks past each common prefix instead of scanning under it, so a page of
//! `n` entries costs at most `n + 1` seeks plus the keys it returns, however many keys lie below.

use crate::keys;
use crate::records::{ObjectRecord, decode};
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
    let base = keys::bucket_prefix(bucket);
    let mut full_prefix = base.clone();
    full_prefix.extend_from_slice(q.prefix.as_bytes());
    let delim = q.delimiter.filter(|d| !d.is_empty()).map(str::as_bytes);
    let after = q.after.map(str::as_bytes);

    let mut page = ListPage::default();
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
                if page.common_prefixes.len() + page.objects.len() >= q.max {
                    page.truncated = true;
                    break;
                }
                let cp = String::from_utf8(cp.to_vec())
                    .map_err(|e| MetaError::Corrupt(e.to_string()))?;
                page.last = Some(cp.clone());
                page.common_prefixes.push(cp);
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
        if page.common_prefixes.len() + page.objects.len() >= q.max {
            page.truncated = true;
            break;
        }
        let name =
            String::from_utf8(key.to_vec()).map_err(|e| MetaError::Corrupt(e.to_string()))?;
        let rec: ObjectRecord = decode(v)?;
        page.last = Some(name.clone());
        page.objects.push((name, rec));
        cur.next();
    }
    cur.status()?;
    Ok(page)
}
