//! The KV catalog's object listings over the objects table, in O(page) seeks: a delimiter
//! listing seeks past each common prefix instead of scanning under it, so a page of `n`
//! entries costs at most `n + 1` seeks plus the keys it returns, however many keys lie below.
//! The S3 rules are [`lode_catalog::listing::PageFold`]'s.

use lode_metadata::records::{
    BriefRef, ObjectRecord, ObjectSummary, decode, decode_brief, decode_summary,
};
use lode_metadata::{Cursor, MetadataStore, Table, keys};

use lode_catalog::listing::{ListPage, ListQuery, PageFold, Step};
use lode_catalog::{CatalogError, Result};

/// Lists one page of a bucket's objects in S3 order (full records, as stored).
pub(crate) fn list_objects(
    store: &dyn MetadataStore,
    bucket: &str,
    q: &ListQuery<'_>,
) -> Result<ListPage> {
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
pub(crate) fn list_summaries(
    store: &dyn MetadataStore,
    bucket: &str,
    q: &ListQuery<'_>,
    f: &mut dyn FnMut(&str, &ObjectSummary<'_>),
) -> Result<ListPage> {
    walk(store, bucket, q, &mut |key, v| {
        f(key, &decode_summary(v)?);
        Ok(())
    })
}

/// [`list_objects`] for an S3 ListObjects page: `f` gets each key, [`ObjectSummary`],
/// [`lode_metadata::records::ChecksumNames`] and owner, borrowed from the store's value, in
/// order (as [`list_summaries`]).
pub(crate) fn list_briefs(
    store: &dyn MetadataStore,
    bucket: &str,
    q: &ListQuery<'_>,
    f: &mut dyn FnMut(&str, BriefRef<'_>),
) -> Result<ListPage> {
    walk(store, bucket, q, &mut |key, v| {
        f(key, decode_brief(v)?);
        Ok(())
    })
}

/// What [`walk`] hands each object to: its key and stored value.
type OnObject<'f> = dyn FnMut(&str, &[u8]) -> Result<()> + 'f;

fn corrupt(e: std::str::Utf8Error) -> CatalogError {
    CatalogError::Corrupt(e.to_string())
}

/// Pages of at least this many entries scan ([`MetadataStore::scan_cursor`]); smaller ones (a
/// one-key probe for a directory, a short page) seek with an ordinary cursor.
const LONG_PAGE: usize = 256;

/// A page's cursor on `table`: a scan for a page of up to `max >= LONG_PAGE` entries, until
/// the page skips a common prefix. From then on the page seeks from prefix to prefix (a
/// delimiter listing of many directories), where most of a scan's larger reads would be
/// skipped over, so it goes on with an ordinary cursor.
pub(crate) struct PageCursor<'s> {
    store: &'s dyn MetadataStore,
    table: Table,
    scanning: bool,
    pub cur: Box<dyn Cursor + 's>,
}

impl<'s> PageCursor<'s> {
    pub(crate) fn new(store: &'s dyn MetadataStore, table: Table, max: usize) -> Result<Self> {
        let scanning = max >= LONG_PAGE;
        let cur = if scanning {
            store.scan_cursor(table)?
        } else {
            store.cursor(table)?
        };
        Ok(Self {
            store,
            table,
            scanning,
            cur,
        })
    }

    /// Seeks past a skipped common prefix, to `key`.
    pub(crate) fn skip_to(&mut self, key: &[u8]) -> Result<()> {
        if self.scanning {
            self.cur = self.store.cursor(self.table)?;
            self.scanning = false;
        }
        self.cur.seek(key);
        Ok(())
    }
}

/// One page of `q`: the common prefixes go into the page, each object's key and stored value
/// to `on_object`.
fn walk(
    store: &dyn MetadataStore,
    bucket: &str,
    q: &ListQuery<'_>,
    on_object: &mut OnObject<'_>,
) -> Result<ListPage> {
    let base = keys::bucket_prefix(bucket);
    let mut full_prefix = base.clone();
    full_prefix.extend_from_slice(q.prefix.as_bytes());
    let mut fold = PageFold::of(q);
    let mut page = ListPage::default();
    // The last object listed, kept as bytes in one buffer (no string per entry); `None` once
    // a common prefix came after it.
    let mut last: Option<Vec<u8>> = None;
    let mut pc = PageCursor::new(store, Table::Objects, q.max)?;
    let start = match q.after {
        Some(a) if a > q.prefix => [&base[..], a.as_bytes()].concat(),
        _ => full_prefix.clone(),
    };
    pc.cur.seek(&start);
    while let Some((k, v)) = pc.cur.current() {
        if !k.starts_with(&full_prefix) {
            break;
        }
        let key = std::str::from_utf8(&k[base.len()..]).map_err(corrupt)?;
        if q.after.is_some_and(|a| key <= a) {
            pc.cur.next();
            continue;
        }
        match fold.offer(key) {
            Step::Take => {
                on_object(key, v)?;
                let b = last.get_or_insert_with(Vec::new);
                b.clear();
                b.extend_from_slice(key.as_bytes());
                pc.cur.next();
            }
            Step::Skip => pc.cur.next(),
            Step::Prefix { listed } => {
                let cp = fold.skipping().expect("a prefix is being skipped");
                if listed {
                    last = None;
                }
                match keys::prefix_successor(cp.as_bytes()) {
                    Some(s) => pc.skip_to(&[&base[..], &s].concat())?,
                    None => break,
                }
            }
            Step::Full => break,
        }
    }
    pc.cur.status()?;
    let objects_last = last
        .map(String::from_utf8)
        .transpose()
        .map_err(|e| CatalogError::Corrupt(e.to_string()))?;
    let (prefixes, truncated) = fold.finish();
    page.last = objects_last.or_else(|| prefixes.last().cloned());
    page.common_prefixes = prefixes;
    page.truncated = truncated;
    Ok(page)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use lode_metadata::records::{Checksums, ObjectMeta, encode};
    use lode_metadata::{FaultyMetadataStore, MemMetadataStore};
    use lode_metadata_rocks::{RocksConfig, RocksMetadataStore};

    use super::*;

    fn backends() -> Vec<(
        &'static str,
        Option<tempfile::TempDir>,
        Arc<dyn MetadataStore>,
    )> {
        let dir = tempfile::tempdir().unwrap();
        let rocks = RocksMetadataStore::open(&RocksConfig::new(dir.path().join("db"))).unwrap();
        vec![
            ("mem", None, Arc::new(MemMetadataStore::new())),
            ("rocks", Some(dir), Arc::new(rocks)),
            // The fault-injecting wrapper, no fault armed, lists as its inner store.
            (
                "faulty(mem)",
                None,
                Arc::new(FaultyMetadataStore::new(MemMetadataStore::new())),
            ),
        ]
    }

    fn put(s: &dyn MetadataStore, t: Table, k: &[u8], v: &[u8]) {
        let mut txn = s.begin();
        txn.put(t, k, v).unwrap();
        txn.commit().unwrap();
    }

    fn rec(size: u64) -> Vec<u8> {
        encode(&ObjectRecord {
            size,
            etag: "e".into(),
            last_modified_ms: 0,
            meta: ObjectMeta::default(),
            checksums: Checksums::default(),
            segments: vec![],
            parts: vec![],
            upload_id: None,
            version_id: None,
            delete_marker: false,
        })
    }

    #[test]
    fn listing_matches_the_model_page_by_page() {
        let keys: Vec<&str> = vec![
            "a",
            "a/b",
            "a/b/c",
            "a/c",
            "a0",
            "b",
            "b/x/y",
            "b/y",
            "c/",
            "c//d",
            "d",
            "photos/2024/1.jpg",
            "photos/2024/2.jpg",
            "photos/2025/1.jpg",
            "photos/x.jpg",
            "z",
        ];
        for (name, _d, s) in backends() {
            for k in &keys {
                put(&*s, Table::Objects, &keys::object("bk", k), &rec(1));
            }
            // A key in another bucket with a shared prefix must never show up.
            put(&*s, Table::Objects, &keys::object("bk2", "a"), &rec(1));
            put(&*s, Table::Objects, &keys::object("b", "k"), &rec(1));
            for prefix in ["", "a", "a/", "photos/", "photos/2024/", "nope"] {
                for delim in [None, Some("/"), Some("/2")] {
                    for max in [1, 2, 3, 1000] {
                        let want = lode_catalog::listing::reference_listing(
                            keys.iter().copied(),
                            prefix,
                            delim,
                            None,
                        );
                        let mut got = vec![];
                        let mut after: Option<String> = None;
                        loop {
                            let q = ListQuery {
                                prefix,
                                delimiter: delim,
                                after: after.as_deref(),
                                max,
                            };
                            let page = list_objects(&*s, "bk", &q).unwrap();
                            let mut entries: Vec<String> =
                                page.objects.iter().map(|o| o.0.clone()).collect();
                            entries.extend(page.common_prefixes.iter().cloned());
                            entries.sort();
                            assert!(entries.len() <= max);
                            got.extend(entries);
                            if !page.truncated {
                                break;
                            }
                            after = page.last.clone();
                        }
                        assert_eq!(
                            got, want,
                            "{name} prefix={prefix:?} delim={delim:?} max={max}"
                        );
                    }
                }
            }
            // start-after
            let q = ListQuery {
                prefix: "",
                delimiter: Some("/"),
                after: Some("a0"),
                max: 100,
            };
            let page = list_objects(&*s, "bk", &q).unwrap();
            let mut got: Vec<String> = page.objects.iter().map(|o| o.0.clone()).collect();
            got.extend(page.common_prefixes);
            got.sort();
            assert_eq!(
                got,
                lode_catalog::listing::reference_listing(
                    keys.iter().copied(),
                    "",
                    Some("/"),
                    Some("a0")
                ),
                "{name}"
            );
        }
    }
}
