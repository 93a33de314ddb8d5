//! The conformance suite every [`Catalog`] backend passes: the memory and RocksDB backends in
//! this crate's tests, the RADOS backend against a real cluster. Each function takes a fresh
//! catalog (or one where it makes its own buckets) and panics on the first divergence.
//! [`run_all`] runs them in sequence on one catalog.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::{
    Aborted, BucketRecord, Catalog, CatalogError, ChunkLoc, Completion, Cond, ListQuery,
    ObjectMeta, ObjectRecord, PartRecord, PartSummary, Refs, Segment, UploadQuery, UploadRecord,
    replace_check,
};
use crate::{Brief, ObjectSummary, VersionQuery, Versioning};

static NEXT_CHUNK: AtomicU64 = AtomicU64::new(1);

/// A chunk no other test uses.
pub fn chunk() -> ChunkLoc {
    ChunkLoc {
        dev: 7,
        offset: NEXT_CHUNK.fetch_add(1, Ordering::Relaxed) << 12,
        alloc_len: 4096,
        data_len: 100,
        crc32c: 0,
    }
}

/// A record of the given chunks (an inline one when there are none).
pub fn record(etag: &str, chunks: &[ChunkLoc]) -> ObjectRecord {
    ObjectRecord {
        size: 100 * chunks.len() as u64,
        etag: etag.into(),
        last_modified_ms: 1,
        meta: ObjectMeta::default(),
        checksums: Default::default(),
        segments: if chunks.is_empty() {
            vec![Segment::Inline(etag.as_bytes().to_vec())]
        } else {
            chunks.iter().map(|c| Segment::Chunk(*c)).collect()
        },
        parts: vec![],
        upload_id: None,
        version_id: None,
        delete_marker: false,
    }
}

pub fn bucket_rec(owner: &str) -> BucketRecord {
    BucketRecord {
        created_ms: 1,
        owner: owner.into(),
        tags: vec![],
        settings: vec![],
    }
}

fn set(c: &[ChunkLoc]) -> BTreeSet<(u32, u64)> {
    c.iter().map(|c| (c.dev, c.offset)).collect()
}

async fn new_bucket(c: &dyn Catalog, name: &str) {
    c.create_bucket(name, bucket_rec("o")).await.unwrap();
}

pub async fn buckets(c: &dyn Catalog) {
    new_bucket(c, "bk-a").await;
    match c.create_bucket("bk-a", bucket_rec("other")).await {
        Err(CatalogError::BucketExists { owner }) => assert_eq!(owner, "o"),
        r => panic!("second create: {r:?}"),
    }
    assert_eq!(c.bucket("bk-a").await.unwrap().unwrap().owner, "o");
    assert!(c.bucket("bk-none").await.unwrap().is_none());
    assert!(matches!(
        c.get("bk-none", "k").await,
        Err(CatalogError::NoSuchBucket)
    ));
    assert!(c.get("bk-a", "k").await.unwrap().is_none());
    let names: Vec<String> = c
        .list_buckets()
        .await
        .unwrap()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert!(names.contains(&"bk-a".to_owned()));
    c.put("bk-a", "k", record("e", &[]), &Cond::default(), Refs::Fresh)
        .await
        .unwrap();
    assert!(matches!(
        c.delete_bucket("bk-a").await,
        Err(CatalogError::BucketNotEmpty)
    ));
    c.delete("bk-a", "k", &Cond::default()).await.unwrap();
    c.delete_bucket("bk-a").await.unwrap();
    assert!(c.bucket("bk-a").await.unwrap().is_none());
    assert!(matches!(
        c.delete_bucket("bk-a").await,
        Err(CatalogError::NoSuchBucket)
    ));
    assert!(matches!(
        c.put("bk-a", "k", record("e", &[]), &Cond::default(), Refs::Fresh)
            .await,
        Err(CatalogError::NoSuchBucket)
    ));
}

pub async fn conditions(c: &dyn Catalog) {
    new_bucket(c, "cond").await;
    let put = |etag: &'static str, cond: Cond| async move {
        c.put("cond", "k", record(etag, &[]), &cond, Refs::Fresh)
            .await
    };
    let if_match = |e: &str| Cond {
        if_match: Some(e.into()),
        ..Default::default()
    };
    assert!(matches!(
        put("e1", if_match("*")).await,
        Err(CatalogError::NoSuchKey)
    ));
    assert!(c.get("cond", "k").await.unwrap().is_none());
    put("e1", Cond::absent()).await.unwrap();
    assert!(matches!(
        put("e2", Cond::absent()).await,
        Err(CatalogError::PreconditionFailed)
    ));
    assert!(matches!(
        put("e2", if_match("\"nope\"")).await,
        Err(CatalogError::PreconditionFailed)
    ));
    let none_match = |e: &str| Cond {
        if_none_match: Some(e.into()),
        ..Default::default()
    };
    assert!(matches!(
        put("e2", none_match("\"e1\"")).await,
        Err(CatalogError::PreconditionFailed)
    ));
    assert_eq!(c.get("cond", "k").await.unwrap().unwrap().etag, "e1");
    let done = put("e2", if_match("\"e1\"")).await.unwrap();
    assert_eq!(done.previous.unwrap().etag, "e1");
    put("e3", none_match("e1")).await.unwrap();
    assert_eq!(c.get("cond", "k").await.unwrap().unwrap().etag, "e3");
    c.delete("cond", "k", &Cond::default()).await.unwrap();
    c.delete_bucket("cond").await.unwrap();
}

/// Conditional deletes: `If-Match` (an ETag or `*`), size and modification time, checked in
/// the commit that removes the key; a delete whose condition fails changes nothing.
pub async fn conditional_deletes(c: &dyn Catalog) {
    new_bucket(c, "cdel").await;
    let mut rec = record("e1", &[chunk()]);
    rec.last_modified_ms = 1_700_000_123_456;
    c.put("cdel", "k", rec, &Cond::default(), Refs::Fresh)
        .await
        .unwrap();
    let del = |cond: Cond| async move { c.delete("cdel", "k", &cond).await };
    let failed =
        |r: crate::Result<crate::Commit>| matches!(r, Err(CatalogError::PreconditionFailed));
    let etag = |e: &str| Cond {
        if_match: Some(e.into()),
        ..Default::default()
    };
    let size = |n: u64| Cond {
        if_match_size: Some(n),
        ..Default::default()
    };
    let modified = |s: i64| Cond {
        if_match_modified_s: Some(s),
        ..Default::default()
    };
    assert!(failed(del(etag("\"e2\"")).await));
    assert!(failed(del(size(99)).await));
    assert!(failed(del(modified(1_700_000_124)).await));
    // The exact time: the same second is not enough.
    assert!(failed(
        del(Cond {
            if_match_modified_ms: Some(1_700_000_123_455),
            ..Default::default()
        })
        .await
    ));
    // Each condition that holds, with one that fails: still refused.
    assert!(failed(
        del(Cond {
            if_match: Some("e1".into()),
            if_match_size: Some(100),
            if_match_modified_s: Some(1_700_000_122),
            ..Default::default()
        })
        .await
    ));
    assert_eq!(c.get("cdel", "k").await.unwrap().unwrap().etag, "e1");
    let done = del(Cond {
        if_match: Some("\"e1\"".into()),
        if_match_size: Some(100),
        if_match_modified_s: Some(1_700_000_123),
        if_match_modified_ms: Some(1_700_000_123_456),
        ..Default::default()
    })
    .await
    .unwrap();
    assert_eq!(done.previous.unwrap().etag, "e1");
    assert_eq!(done.released.len(), 1, "the deleted object's chunk goes");
    assert!(c.get("cdel", "k").await.unwrap().is_none());
    // An absent key: If-Match (even `*`) is NoSuchKey; size and time alone hold.
    assert!(matches!(del(etag("*")).await, Err(CatalogError::NoSuchKey)));
    assert!(matches!(
        del(etag("e1")).await,
        Err(CatalogError::NoSuchKey)
    ));
    assert!(del(size(100)).await.unwrap().previous.is_none());
    assert!(del(modified(1)).await.unwrap().previous.is_none());
    c.put(
        "cdel",
        "k",
        record("e4", &[]),
        &Cond::default(),
        Refs::Fresh,
    )
    .await
    .unwrap();
    assert_eq!(del(etag("*")).await.unwrap().previous.unwrap().etag, "e4");
    c.delete_bucket("cdel").await.unwrap();
}

/// A delete conditioned on the ETag a reader saw, racing an overwrite: either the delete
/// wins (and the overwrite lands after it) or it fails; it never removes the new object.
pub async fn racing_conditional_delete(c: Arc<dyn Catalog>) {
    c.create_bucket("rdel", bucket_rec("o")).await.unwrap();
    for round in 0..20 {
        let key = format!("k{round}");
        c.put(
            "rdel",
            &key,
            record("old", &[]),
            &Cond::default(),
            Refs::Fresh,
        )
        .await
        .unwrap();
        let (c1, c2, k1, k2) = (Arc::clone(&c), Arc::clone(&c), key.clone(), key.clone());
        let del = tokio::spawn(async move {
            let cond = Cond {
                if_match: Some("old".into()),
                ..Default::default()
            };
            c1.delete("rdel", &k1, &cond).await
        });
        let put = tokio::spawn(async move {
            c2.put(
                "rdel",
                &k2,
                record("new", &[]),
                &Cond::default(),
                Refs::Fresh,
            )
            .await
        });
        let deleted = match del.await.unwrap() {
            Ok(done) => {
                assert_eq!(done.previous.unwrap().etag, "old", "round {round}");
                true
            }
            Err(CatalogError::PreconditionFailed) => false,
            Err(e) => panic!("round {round}: {e}"),
        };
        let replaced = put.await.unwrap().unwrap().previous;
        let now = c.get("rdel", &key).await.unwrap();
        // The new object is always there at the end: the delete removed only "old".
        assert_eq!(now.unwrap().etag, "new", "round {round}");
        // The put replaced "old" exactly when the delete did not remove it first.
        assert_eq!(replaced.is_some(), !deleted, "round {round}");
        c.delete("rdel", &key, &Cond::default()).await.unwrap();
    }
    c.delete_bucket("rdel").await.unwrap();
}

/// Chunk references: overwrites, copies and deletes release a chunk exactly when its last
/// reference goes.
pub async fn references(c: &dyn Catalog) {
    new_bucket(c, "refs").await;
    let (c1, c2, c3) = (chunk(), chunk(), chunk());
    let r = c
        .put(
            "refs",
            "a",
            record("a", &[c1, c2]),
            &Cond::default(),
            Refs::Fresh,
        )
        .await
        .unwrap();
    assert!(r.released.is_empty() && r.previous.is_none());
    let make = Arc::new(|src: &ObjectRecord| {
        let mut r = src.clone();
        r.etag = "copy".into();
        Ok(r)
    });
    let (rec, done) = c.copy(("refs", "a"), ("refs", "b"), make).await.unwrap();
    assert_eq!(rec.etag, "copy");
    assert!(done.released.is_empty());
    assert_eq!(c.get("refs", "b").await.unwrap().unwrap().etag, "copy");
    // Overwriting a: c1 and c2 are still b's.
    let r = c
        .put(
            "refs",
            "a",
            record("a2", &[c3]),
            &Cond::default(),
            Refs::Fresh,
        )
        .await
        .unwrap();
    // c1 and c2 are still b's: a backend that counts references keeps them; one that does
    // not reports the dropped reference, and its blob store keeps the chunks for b.
    if c.counts_references() {
        assert!(r.released.is_empty());
    } else {
        assert_eq!(set(&r.released), set(&[c1, c2]));
    }
    assert_eq!(
        set(&c
            .delete("refs", "b", &Cond::default())
            .await
            .unwrap()
            .released),
        set(&[c1, c2])
    );
    // Deleting a missing key releases nothing.
    let r = c.delete("refs", "b", &Cond::default()).await.unwrap();
    assert!(r.previous.is_none() && r.released.is_empty());
    // A copy refused by the caller's check changes nothing.
    let refuse = Arc::new(|_: &ObjectRecord| -> crate::Result<ObjectRecord> {
        Err(CatalogError::Refused("no".into()))
    });
    assert!(matches!(
        c.copy(("refs", "a"), ("refs", "x"), refuse).await,
        Err(CatalogError::Refused(_))
    ));
    assert!(c.get("refs", "x").await.unwrap().is_none());
    assert!(matches!(
        c.copy(
            ("refs", "missing"),
            ("refs", "x"),
            Arc::new(|r: &ObjectRecord| Ok(r.clone()))
        )
        .await,
        Err(CatalogError::NoSuchKey)
    ));
    // update keeps the chunks.
    let up = c
        .update(
            "refs",
            "a",
            Arc::new(|r: &ObjectRecord| {
                let mut r = r.clone();
                r.meta.content_type = Some("x/y".into());
                Ok(r)
            }),
        )
        .await
        .unwrap();
    assert_eq!(up.meta.content_type.as_deref(), Some("x/y"));
    assert_eq!(
        set(&c
            .delete("refs", "a", &Cond::default())
            .await
            .unwrap()
            .released),
        set(&[c3])
    );
    c.delete_bucket("refs").await.unwrap();
}

/// Listing matches the model page by page, for prefixes, delimiters and page sizes.
pub async fn listing(c: &dyn Catalog) {
    new_bucket(c, "lst").await;
    let alphabet = ["a", "b", "/", "ab", "a/"];
    let mut keys = BTreeSet::new();
    let mut seed = 0x2545_f491_u64;
    for _ in 0..120 {
        let mut k = String::new();
        for _ in 0..(1 + seed % 4) {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            k.push_str(alphabet[(seed >> 33) as usize % alphabet.len()]);
        }
        keys.insert(k);
    }
    for k in &keys {
        c.put("lst", k, record(k, &[]), &Cond::default(), Refs::Fresh)
            .await
            .unwrap();
    }
    for prefix in ["", "a", "a/", "b", "zz"] {
        for delim in [None, Some("/"), Some("b")] {
            for max in [1, 3, 1000] {
                let want = crate::listing::reference_listing(
                    keys.iter().map(String::as_str),
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
                    let page = c.list("lst", &q).await.unwrap();
                    let (bp, briefs) = c.list_briefs("lst", &q).await.unwrap();
                    let brief_keys: Vec<&String> = briefs.iter().map(|b| &b.key).collect();
                    let page_keys: Vec<&String> = page.objects.iter().map(|(k, _)| k).collect();
                    assert_eq!(brief_keys, page_keys, "briefs {prefix:?} {delim:?} {max}");
                    assert_eq!(
                        (&bp.common_prefixes, bp.truncated, &bp.last),
                        (&page.common_prefixes, page.truncated, &page.last),
                        "brief page {prefix:?} {delim:?} {max}"
                    );
                    let mut entries: Vec<String> = page
                        .objects
                        .iter()
                        .map(|(k, _)| k.clone())
                        .chain(page.common_prefixes.iter().cloned())
                        .collect();
                    entries.sort();
                    assert!(entries.len() <= max);
                    got.extend(entries);
                    if !page.truncated {
                        break;
                    }
                    after = page.last.clone();
                }
                assert_eq!(got, want, "prefix {prefix:?} delim {delim:?} max {max}");
            }
        }
    }
    let q0 = ListQuery {
        prefix: "",
        delimiter: None,
        after: None,
        max: 0,
    };
    let zero = c.list("lst", &q0).await.unwrap();
    assert!(zero.objects.is_empty() && !zero.truncated);
    let (zp, zb) = c.list_briefs("lst", &q0).await.unwrap();
    assert!(zb.is_empty() && !zp.truncated && zp.common_prefixes.is_empty());
    assert!(matches!(
        c.list_briefs("lst-none", &q0).await,
        Err(CatalogError::NoSuchBucket)
    ));
    // A marker equal to the prefix (a first page of one key that was the prefix itself)
    // excludes that key.
    keys.insert("a".into());
    c.put("lst", "a", record("a", &[]), &Cond::default(), Refs::Fresh)
        .await
        .unwrap();
    let q = ListQuery {
        prefix: "a",
        delimiter: None,
        after: Some("a"),
        max: 1000,
    };
    let page = c.list("lst", &q).await.unwrap();
    let want: Vec<&String> = keys
        .iter()
        .filter(|k| k.starts_with('a') && *k != "a")
        .collect();
    let got: Vec<&String> = page.objects.iter().map(|(k, _)| k).collect();
    assert_eq!(got, want, "after == prefix");
    for k in &keys {
        c.delete("lst", k, &Cond::default()).await.unwrap();
    }
    c.delete_bucket("lst").await.unwrap();
}

fn part(etag: &str, chunks: &[ChunkLoc]) -> PartRecord {
    PartRecord {
        size: 100 * chunks.len() as u64,
        etag: etag.into(),
        last_modified_ms: 1,
        checksums: Default::default(),
        segments: chunks.iter().map(|c| Segment::Chunk(*c)).collect(),
    }
}

fn upload_rec() -> UploadRecord {
    UploadRecord {
        initiated_ms: 1,
        meta: ObjectMeta::default(),
        checksum_algorithm: None,
        checksum_type: None,
        owner: "o".into(),
    }
}

/// Uploads, parts, completion, abort, and a bucket deleted with uploads in it.
pub async fn multipart(c: &dyn Catalog) {
    new_bucket(c, "mp").await;
    c.create_upload("mp", "k", "u1", upload_rec())
        .await
        .unwrap();
    assert!(matches!(
        c.upload("mp", "k", "u2").await,
        Err(CatalogError::NoSuchUpload)
    ));
    assert!(matches!(
        c.upload("mp-none", "k", "u1").await,
        Err(CatalogError::NoSuchBucket)
    ));
    let (p1, p2a, p2b, p3) = (chunk(), chunk(), chunk(), chunk());
    assert!(
        c.put_part("mp", "k", "u1", 1, part("e1", &[p1]))
            .await
            .unwrap()
            .is_empty()
    );
    c.put_part("mp", "k", "u1", 2, part("e2a", &[p2a]))
        .await
        .unwrap();
    // A part uploaded again replaces the first, whose chunks are released.
    let released = c
        .put_part("mp", "k", "u1", 2, part("e2b", &[p2b]))
        .await
        .unwrap();
    assert_eq!(set(&released), set(&[p2a]));
    c.put_part("mp", "k", "u1", 3, part("e3", &[p3]))
        .await
        .unwrap();
    assert!(matches!(
        c.put_part("mp", "k", "nope", 1, part("x", &[])).await,
        Err(CatalogError::NoSuchUpload)
    ));
    let (page, more) = c.list_parts("mp", "k", "u1", 0, 2).await.unwrap();
    assert_eq!(
        page.iter()
            .map(|(n, p)| (*n, p.etag.as_str()))
            .collect::<Vec<_>>(),
        vec![(1, "e1"), (2, "e2b")]
    );
    assert!(more);
    let (page, more) = c.list_parts("mp", "k", "u1", 2, 2).await.unwrap();
    assert_eq!(page.len(), 1);
    assert!(!more);
    c.create_upload("mp", "dir/x", "u3", upload_rec())
        .await
        .unwrap();
    let all = c
        .list_uploads(
            "mp",
            &UploadQuery {
                max: 1000,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let ids: Vec<(&str, &str)> = all
        .uploads
        .iter()
        .map(|(k, i, _)| (k.as_str(), i.as_str()))
        .collect();
    assert_eq!(ids, vec![("dir/x", "u3"), ("k", "u1")]);
    let grouped = c
        .list_uploads(
            "mp",
            &UploadQuery {
                delimiter: Some("/".into()),
                max: 1000,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(grouped.prefixes, vec!["dir/".to_owned()]);
    // Complete from parts 1 and 3: part 2's chunks are released; the object owns p1 and p3.
    c.put("mp", "k", record("old", &[]), &Cond::default(), Refs::Fresh)
        .await
        .unwrap();
    let f = Arc::new(|s: crate::UploadState<'_>| {
        assert_eq!(s.current.map(|r| r.etag.as_str()), Some("old"));
        let used = [1u32, 3];
        let segs: Vec<Segment> = used
            .iter()
            .flat_map(|n| s.parts[n].segments.clone())
            .collect();
        let mut rec = record("mp-2", &[]);
        rec.segments = segs;
        rec.parts = used
            .iter()
            .map(|n| PartSummary {
                number: *n,
                size: s.parts[n].size,
                etag: s.parts[n].etag.clone(),
                checksums: Default::default(),
            })
            .collect();
        rec.upload_id = Some("u1".into());
        Ok(Completion {
            record: rec,
            used_parts: used.to_vec(),
        })
    });
    // A failed condition leaves the upload as it was.
    assert!(matches!(
        c.complete("mp", "k", "u1", &Cond::absent(), f.clone())
            .await,
        Err(CatalogError::PreconditionFailed)
    ));
    let (rec, done) = c
        .complete("mp", "k", "u1", &Cond::default(), f.clone())
        .await
        .unwrap();
    assert_eq!(rec.etag, "mp-2");
    assert_eq!(done.previous.unwrap().etag, "old");
    assert_eq!(set(&done.released), set(&[p2b]));
    assert!(matches!(
        c.upload("mp", "k", "u1").await,
        Err(CatalogError::NoSuchUpload)
    ));
    assert!(
        c.list_parts("mp", "k", "u1", 0, 10)
            .await
            .unwrap()
            .0
            .is_empty()
    );
    assert!(matches!(
        c.complete("mp", "k", "u1", &Cond::default(), f).await,
        Err(CatalogError::NoSuchUpload)
    ));
    assert_eq!(
        set(&c
            .delete("mp", "k", &Cond::default())
            .await
            .unwrap()
            .released),
        set(&[p1, p3])
    );
    // Abort: released; a retry is `Before`; under another key, or a completed upload, no.
    c.create_upload("mp", "a", "u4", upload_rec())
        .await
        .unwrap();
    let q = chunk();
    c.put_part("mp", "a", "u4", 1, part("q", &[q]))
        .await
        .unwrap();
    match c.abort("mp", "a", "u4").await.unwrap() {
        Aborted::Now(released) => assert_eq!(set(&released), set(&[q])),
        Aborted::Before => panic!("first abort"),
    }
    assert_eq!(c.abort("mp", "a", "u4").await.unwrap(), Aborted::Before);
    assert!(matches!(
        c.abort("mp", "b", "u4").await,
        Err(CatalogError::NoSuchUpload)
    ));
    assert!(matches!(
        c.abort("mp", "k", "u1").await,
        Err(CatalogError::NoSuchUpload)
    ));
    // Deleting the bucket takes the remaining upload (u3) and its parts.
    let r = chunk();
    c.put_part("mp", "dir/x", "u3", 1, part("r", &[r]))
        .await
        .unwrap();
    assert_eq!(set(&c.delete_bucket("mp").await.unwrap()), set(&[r]));
    assert!(c.bucket("mp").await.unwrap().is_none());
}

/// ListMultipartUploads pages by (key, upload id) markers and groups common prefixes, the
/// same whatever the page size.
pub async fn upload_listing(c: &dyn Catalog) {
    new_bucket(c, "ul").await;
    let all = [
        ("a", "1"),
        ("a", "2"),
        ("b/1", "3"),
        ("b/2", "4"),
        ("c", "5"),
    ];
    for (k, id) in all {
        c.create_upload("ul", k, id, upload_rec()).await.unwrap();
    }
    for delimiter in [None, Some("/")] {
        let mut want: Vec<String> = vec![];
        for (k, id) in all {
            match delimiter.and_then(|d| k.find(d).map(|i| &k[..=i])) {
                Some(cp) if want.last().map(String::as_str) != Some(cp) => want.push(cp.to_owned()),
                Some(_) => {}
                None => want.push(format!("{k}#{id}")),
            }
        }
        for max in [1, 2, 1000] {
            let mut got = vec![];
            let (mut km, mut im): (Option<String>, Option<String>) = (None, None);
            loop {
                let q = UploadQuery {
                    prefix: String::new(),
                    delimiter: delimiter.map(str::to_owned),
                    key_marker: km.clone(),
                    id_marker: im.clone(),
                    max,
                };
                let page = c.list_uploads("ul", &q).await.unwrap();
                assert!(page.uploads.len() + page.prefixes.len() <= max);
                let mut entries: Vec<String> = page
                    .uploads
                    .iter()
                    .map(|(k, id, _)| format!("{k}#{id}"))
                    .chain(page.prefixes.iter().cloned())
                    .collect();
                entries.sort();
                got.extend(entries);
                if !page.truncated {
                    break;
                }
                let (k, id) = page
                    .last
                    .clone()
                    .expect("a truncated page names its last entry");
                km = Some(k);
                im = (!id.is_empty()).then_some(id);
            }
            assert_eq!(got, want, "delimiter {delimiter:?} max {max}");
        }
    }
    for (k, id) in all {
        c.abort("ul", k, id).await.unwrap();
    }
    c.delete_bucket("ul").await.unwrap();
}

/// Many writers racing `If-None-Match: *` on one key: exactly one wins.
pub async fn racing_conditional_puts(c: Arc<dyn Catalog>) {
    c.create_bucket("race", bucket_rec("o")).await.unwrap();
    for round in 0..20 {
        let key = format!("k{round}");
        let tasks: Vec<_> = (0..8)
            .map(|i| {
                let c = Arc::clone(&c);
                let key = key.clone();
                tokio::spawn(async move {
                    c.put(
                        "race",
                        &key,
                        record(&format!("w{i}"), &[]),
                        &Cond::absent(),
                        Refs::Fresh,
                    )
                    .await
                })
            })
            .collect();
        let mut wins = 0;
        for t in tasks {
            match t.await.unwrap() {
                Ok(_) => wins += 1,
                Err(CatalogError::PreconditionFailed) => {}
                Err(e) => panic!("racer: {e}"),
            }
        }
        assert_eq!(wins, 1, "round {round}");
        c.delete("race", &key, &Cond::default()).await.unwrap();
    }
    c.delete_bucket("race").await.unwrap();
}

/// POSIX renames and directory removal.
pub async fn renames(c: &dyn Catalog) {
    new_bucket(c, "ren").await;
    let (a, b) = (chunk(), chunk());
    for (k, ch) in [("d/x", a), ("d/y", b)] {
        c.put("ren", k, record(k, &[ch]), &Cond::default(), Refs::Fresh)
            .await
            .unwrap();
    }
    c.put("ren", "t", record("t", &[]), &Cond::default(), Refs::Fresh)
        .await
        .unwrap();
    assert!(matches!(
        c.rename("ren", "d/x", "t", replace_check(true), Versioning::Off)
            .await,
        Err(CatalogError::PreconditionFailed)
    ));
    c.rename("ren", "d/x", "d/z", replace_check(false), Versioning::Off)
        .await
        .unwrap();
    assert!(c.get("ren", "d/x").await.unwrap().is_none());
    assert_eq!(c.get("ren", "d/z").await.unwrap().unwrap().etag, "d/x");
    assert!(matches!(
        c.rename("ren", "nope", "t", replace_check(false), Versioning::Off)
            .await,
        Err(CatalogError::NoSuchKey)
    ));
    // A rename onto itself keeps the object (and releases nothing).
    let same = c
        .rename("ren", "t", "t", replace_check(false), Versioning::Off)
        .await
        .unwrap();
    assert!(same.previous.is_none() && same.released.is_empty());
    assert_eq!(c.get("ren", "t").await.unwrap().unwrap().etag, "t");
    assert!(matches!(
        c.rename("ren", "t", "t", replace_check(true), Versioning::Off)
            .await,
        Err(CatalogError::PreconditionFailed)
    ));
    assert!(c.get("ren", "t").await.unwrap().is_some());
    let (n, released) = c.rename_prefix("ren", "d/", "e/", 1024).await.unwrap();
    assert_eq!(n, 2);
    assert!(released.is_empty());
    assert!(
        c.get("ren", "e/y").await.unwrap().is_some()
            && c.get("ren", "d/y").await.unwrap().is_none()
    );
    assert!(matches!(
        c.remove_dir("ren", "e/").await,
        Err(CatalogError::DirectoryNotEmpty)
    ));
    c.put("ren", "m/", record("m", &[]), &Cond::default(), Refs::Fresh)
        .await
        .unwrap();
    c.remove_dir("ren", "m/").await.unwrap();
    assert!(matches!(
        c.remove_dir("ren", "m/").await,
        Err(CatalogError::NoSuchKey)
    ));
    for k in ["e/z", "e/y", "t"] {
        c.delete("ren", k, &Cond::default()).await.unwrap();
    }
    c.delete_bucket("ren").await.unwrap();
}

/// The system key space: conditional create, update, scan by prefix, delete.
pub async fn system_keys(c: &dyn Catalog) {
    let create = |v: &'static [u8]| {
        Arc::new(
            move |cur: Option<&[u8]>| -> crate::Result<Option<Vec<u8>>> {
                match cur {
                    Some(_) => Err(CatalogError::PreconditionFailed),
                    None => Ok(Some(v.to_vec())),
                }
            },
        )
    };
    c.sys_update(b"user\0alice", create(b"1")).await.unwrap();
    assert!(matches!(
        c.sys_update(b"user\0alice", create(b"2")).await,
        Err(CatalogError::PreconditionFailed)
    ));
    c.sys_update(b"user\0bob", create(b"3")).await.unwrap();
    c.sys_update(b"grant\0x", create(b"4")).await.unwrap();
    let users = c.sys_scan(b"user\0").await.unwrap();
    assert_eq!(
        users,
        vec![
            (b"user\0alice".to_vec(), b"1".to_vec()),
            (b"user\0bob".to_vec(), b"3".to_vec())
        ]
    );
    c.sys_update(b"user\0alice", Arc::new(|_| Ok(None)))
        .await
        .unwrap();
    assert_eq!(c.sys_get(b"user\0alice").await.unwrap(), None);
    assert_eq!(c.sys_get(b"user\0bob").await.unwrap(), Some(b"3".to_vec()));
    for k in [&b"user\0bob"[..], b"grant\0x"] {
        c.sys_update(k, Arc::new(|_| Ok(None))).await.unwrap();
    }
}

/// A record whose content is `bytes`, inline.
pub fn inline_record(etag: &str, bytes: &[u8]) -> ObjectRecord {
    ObjectRecord {
        size: bytes.len() as u64,
        segments: vec![Segment::Inline(bytes.to_vec())],
        ..record(etag, &[])
    }
}

/// The records the backends' format-2 migration tests store the old way: `a`, `b` and `d/x`,
/// 50 inline bytes each.
pub fn legacy_records() -> Vec<(&'static str, ObjectRecord)> {
    ["a", "b", "d/x"]
        .into_iter()
        .zip(1u8..)
        .map(|(k, i)| (k, inline_record(k, &pattern(50, i))))
        .collect()
}

/// `n` bytes that differ from position to position and from seed to seed.
pub fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8)
        .collect()
}

/// The inline bytes of a full record, in order (panics on a `Detached` segment).
fn inline_bytes(r: &ObjectRecord) -> Vec<u8> {
    let mut out = vec![];
    for s in &r.segments {
        match s {
            Segment::Inline(b) => out.extend_from_slice(b),
            Segment::Detached(n) => panic!("a full record has a Detached({n}) segment"),
            Segment::Chunk(_) => {}
        }
    }
    out
}

/// Checks that `got` is `full` in head form: the same record, every inline segment
/// `Detached` of its length, no byte of the payload.
fn assert_head_of(got: &ObjectRecord, full: &ObjectRecord, what: &str) {
    assert!(
        !got.segments.iter().any(|s| matches!(s, Segment::Inline(_))),
        "{what}: a head-form record carries inline bytes: {:?}",
        got.segments
    );
    assert_eq!(*got, full.clone().into_head(), "{what}");
    let lens: Vec<u64> = got.segments.iter().map(Segment::len).collect();
    let want: Vec<u64> = full.segments.iter().map(Segment::len).collect();
    assert_eq!(lens, want, "{what}: segment lengths");
}

/// `get` returns exactly `want` (full), `head` its head form, and the blocking and cached
/// reads agree with them.
async fn assert_stored(c: &Arc<dyn Catalog>, b: &str, k: &str, want: Option<&ObjectRecord>) {
    let what = format!("{b}/{k}");
    let got = c.get(b, k).await.unwrap();
    assert_eq!(got.as_ref(), want, "get {what}");
    if let Some(got) = &got {
        assert_eq!(
            inline_bytes(got),
            inline_bytes(want.expect("present")),
            "{what}"
        );
    }
    let head = c.head(b, k).await.unwrap();
    match (&head, want) {
        (Some(h), Some(w)) => assert_head_of(h, w, &format!("head {what}")),
        (None, None) => {}
        (h, w) => panic!("head {what}: {h:?}, want {w:?}"),
    }
    if let Some(cached) = c.get_cached(b, k) {
        assert_eq!(cached.unwrap().as_ref(), want, "get_cached {what}");
    }
    if let Some(cached) = c.head_cached(b, k) {
        assert_eq!(cached.unwrap(), head, "head_cached {what}");
    }
    // The blocking reads, from a thread that may block.
    let (c2, b2, k2) = (Arc::clone(c), b.to_owned(), k.to_owned());
    let (g, h) = tokio::task::spawn_blocking(move || {
        (
            c2.get_blocking(&b2, &k2).unwrap(),
            c2.head_blocking(&b2, &k2).unwrap(),
        )
    })
    .await
    .unwrap();
    assert_eq!(g.as_ref(), want, "get_blocking {what}");
    assert_eq!(h, head, "head_blocking {what}");
}

/// The objects under `prefix`, async and blocking (which must agree), with the head form
/// checked against `want` (key, full record).
async fn assert_listed(
    c: &Arc<dyn Catalog>,
    b: &str,
    prefix: &str,
    want: &[(&str, &ObjectRecord)],
) {
    let q = ListQuery {
        prefix,
        delimiter: None,
        after: None,
        max: 1000,
    };
    let page = c.list(b, &q).await.unwrap();
    // What S3 ListObjects shows of the same page, decoded on its own.
    let (brief_page, briefs) = c.list_briefs(b, &q).await.unwrap();
    let want_briefs: Vec<Brief> = page.objects.iter().map(|(k, r)| Brief::of(k, r)).collect();
    assert_eq!(briefs, want_briefs, "list_briefs {b}/{prefix}");
    assert!(brief_page.objects.is_empty(), "list_briefs {b}/{prefix}");
    assert_eq!(
        (
            &brief_page.common_prefixes,
            brief_page.truncated,
            &brief_page.last
        ),
        (&page.common_prefixes, page.truncated, &page.last),
        "list_briefs {b}/{prefix}"
    );
    let keys: Vec<&str> = page.objects.iter().map(|(k, _)| k.as_str()).collect();
    let want_keys: Vec<&str> = want.iter().map(|(k, _)| *k).collect();
    assert_eq!(keys, want_keys, "list {b}/{prefix}");
    for ((k, got), (_, full)) in page.objects.iter().zip(want) {
        assert_head_of(got, full, &format!("list {b}/{k}"));
    }
    let (c2, b2, p2) = (Arc::clone(c), b.to_owned(), prefix.to_owned());
    let blocking = tokio::task::spawn_blocking(move || {
        let q = ListQuery {
            prefix: &p2,
            delimiter: None,
            after: None,
            max: 1000,
        };
        let mut summaries = vec![];
        let rest = c2
            .list_summaries_blocking(&b2, &q, &mut |k, s| {
                summaries.push((k.to_owned(), format!("{s:?}")))
            })
            .unwrap();
        assert!(
            rest.objects.is_empty() && !rest.truncated,
            "list_summaries_blocking"
        );
        (c2.list_blocking(&b2, &q).unwrap().objects, summaries)
    })
    .await
    .unwrap();
    assert_eq!(blocking.0, page.objects, "list_blocking {b}/{prefix}");
    // The summaries are the listed records' own leading fields, key for key.
    let want_summaries: Vec<(String, String)> = page
        .objects
        .iter()
        .map(|(k, r)| (k.clone(), format!("{:?}", ObjectSummary::of(r))))
        .collect();
    assert_eq!(
        blocking.1, want_summaries,
        "list_summaries_blocking {b}/{prefix}"
    );
}

/// Objects with inline bytes: `get` returns them exactly; `head` and listings return the
/// head form (lengths, never the bytes); every commit keeps the bytes with their record
/// (put, overwrite either way, copy, update, rename, directory rename, complete, delete).
/// Leaves `bucket` holding `keep/inline` (inline bytes) and `keep/chunked` (none), so that a
/// backend's own test can look at what it stores; [`run_all`] then empties the bucket.
pub async fn inline_payloads(c: Arc<dyn Catalog>, bucket: &str) {
    let b = bucket;
    new_bucket(&*c, b).await;
    let fresh = Refs::Fresh;
    let any = Cond::default();
    // (a) Round trips, up to the 16 KiB inline limit, empty included.
    let big = inline_record("big", &pattern(16 * 1024, 1));
    let small = inline_record("small", b"hello, inline");
    let empty = inline_record("empty", b"");
    let mut mixed = inline_record("mixed", b"");
    let ch = chunk();
    mixed.segments = vec![
        Segment::Inline(b"head".to_vec()),
        Segment::Chunk(ch),
        Segment::Inline(pattern(300, 9)),
    ];
    mixed.size = 4 + 100 + 300;
    mixed.meta.content_type = Some("a/b".into());
    // Fields between the metadata and the checksums (tags, a lock), which a listing's brief
    // decode steps over, and checksums of two kinds.
    mixed.meta.user = vec![("mode".into(), "33188".into())];
    mixed.meta.tags = vec![("t".into(), "1".into())];
    mixed.meta.lock.mode = Some("GOVERNANCE".into());
    mixed.meta.lock.retain_until_ms = Some(7);
    mixed.checksums.crc64nvme = Some("AAAAAAAAAAA=".into());
    mixed.checksums.sha256 = Some("47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=".into());
    mixed.checksums.kind = Some("FULL_OBJECT".into());
    let mut small = small;
    small.checksums.crc32c = Some("AAAAAA==-2".into());
    small.checksums.kind = Some("COMPOSITE".into());
    for (k, r) in [
        ("big", &big),
        ("small", &small),
        ("empty", &empty),
        ("mixed", &mixed),
    ] {
        let done = c
            .put(b, k, r.clone(), &Cond::absent(), fresh)
            .await
            .unwrap();
        assert!(done.previous.is_none());
        assert_stored(&c, b, k, Some(r)).await;
    }
    // (b) Listings carry lengths, not bytes; briefs name the checksums.
    let all = ListQuery {
        max: 10,
        ..Default::default()
    };
    let (_, briefs) = c.list_briefs(b, &all).await.unwrap();
    let names: Vec<(&str, Vec<&str>, Option<&str>)> = briefs
        .iter()
        .map(|r| {
            let c = &r.checksums;
            (r.key.as_str(), c.algorithms().collect(), c.kind())
        })
        .collect();
    assert_eq!(
        names,
        vec![
            ("big", vec![], None),
            ("empty", vec![], None),
            ("mixed", vec!["CRC64NVME", "SHA256"], Some("FULL_OBJECT")),
            ("small", vec!["CRC32C"], Some("COMPOSITE")),
        ]
    );
    assert_listed(
        &c,
        b,
        "",
        &[
            ("big", &big),
            ("empty", &empty),
            ("mixed", &mixed),
            ("small", &small),
        ],
    )
    .await;
    assert!(c.head(b, "nope").await.unwrap().is_none());
    assert!(matches!(
        c.head("inl-no-such-bucket", "k").await,
        Err(CatalogError::NoSuchBucket)
    ));
    let (c2, k2) = (Arc::clone(&c), "inl-no-such-bucket");
    let (g, h) = tokio::task::spawn_blocking(move || {
        (
            c2.get_blocking(k2, "k").unwrap(),
            c2.head_blocking(k2, "k").unwrap(),
        )
    })
    .await
    .unwrap();
    assert!(g.is_none() && h.is_none());
    // A record in head form cannot be committed: it lacks its bytes.
    assert!(matches!(
        c.put(b, "small", small.clone().into_head(), &any, fresh)
            .await,
        Err(CatalogError::Corrupt(_))
    ));
    assert_stored(&c, b, "small", Some(&small)).await;
    // Overwrites: inline over inline (new bytes, same length), chunked over inline, inline
    // over chunked.
    let small2 = inline_record("small2", b"HELLO, INLINE");
    let done = c
        .put(b, "small", small2.clone(), &any, fresh)
        .await
        .unwrap();
    assert_head_of(done.previous.as_ref().unwrap(), &small, "previous");
    assert_stored(&c, b, "small", Some(&small2)).await;
    let chunked = record("chunked", &[chunk()]);
    c.put(b, "small", chunked.clone(), &any, fresh)
        .await
        .unwrap();
    assert_stored(&c, b, "small", Some(&chunked)).await;
    let small3 = inline_record("small3", &pattern(40, 3));
    c.put(b, "small", small3.clone(), &any, fresh)
        .await
        .unwrap();
    assert_stored(&c, b, "small", Some(&small3)).await;
    // (c) Copy: the bytes are written at the destination, replacing its own.
    let make = Arc::new(|src: &ObjectRecord| {
        assert!(!src.has_detached(), "copy's closure gets the full record");
        let mut r = src.clone();
        r.etag = format!("{}-copy", r.etag);
        Ok(r)
    });
    let (rec, done) = c
        .copy((b, "mixed"), (b, "small"), make.clone())
        .await
        .unwrap();
    let mut mixed_copy = mixed.clone();
    mixed_copy.etag = "mixed-copy".into();
    assert_eq!(rec, mixed_copy);
    assert_head_of(done.previous.as_ref().unwrap(), &small3, "copy previous");
    assert_stored(&c, b, "small", Some(&mixed_copy)).await;
    assert_stored(&c, b, "mixed", Some(&mixed)).await;
    let (rec, _) = c.copy((b, "big"), (b, "big2"), make.clone()).await.unwrap();
    assert_eq!(inline_bytes(&rec), inline_bytes(&big));
    assert_stored(&c, b, "big2", Some(&rec)).await;
    // A chunked source copied over an inline destination: the old bytes go.
    c.put(b, "chunked", chunked.clone(), &any, fresh)
        .await
        .unwrap();
    let (rec, _) = c.copy((b, "chunked"), (b, "big2"), make).await.unwrap();
    assert_stored(&c, b, "big2", Some(&rec)).await;
    // Update: the closure sees the bytes; the bytes stay; changing them is refused.
    let up = c
        .update(
            b,
            "mixed",
            Arc::new(|r: &ObjectRecord| {
                assert!(!r.has_detached(), "update's closure gets the full record");
                let mut r = r.clone();
                r.meta.content_type = Some("c/d".into());
                Ok(r)
            }),
        )
        .await
        .unwrap();
    let mut mixed2 = mixed.clone();
    mixed2.meta.content_type = Some("c/d".into());
    assert_eq!(up, mixed2);
    assert_stored(&c, b, "mixed", Some(&mixed2)).await;
    for change in [
        Arc::new(|r: &ObjectRecord| {
            let mut r = r.clone();
            r.segments[0] = Segment::Inline(b"HEAD".to_vec());
            Ok(r)
        }) as crate::RecordFn,
        Arc::new(|r: &ObjectRecord| Ok(r.clone().into_head())),
    ] {
        assert!(matches!(
            c.update(b, "mixed", change).await,
            Err(CatalogError::Corrupt(_))
        ));
        assert_stored(&c, b, "mixed", Some(&mixed2)).await;
    }
    // Rename: the bytes move; onto an inline destination, and then a chunked one over it.
    let done = c
        .rename(b, "mixed", "small", replace_check(false), Versioning::Off)
        .await
        .unwrap();
    assert_head_of(
        done.previous.as_ref().unwrap(),
        &mixed_copy,
        "rename previous",
    );
    assert_stored(&c, b, "mixed", None).await;
    assert_stored(&c, b, "small", Some(&mixed2)).await;
    c.rename(b, "small", "moved", replace_check(true), Versioning::Off)
        .await
        .unwrap();
    assert_stored(&c, b, "small", None).await;
    assert_stored(&c, b, "moved", Some(&mixed2)).await;
    c.rename(b, "chunked", "moved", replace_check(false), Versioning::Off)
        .await
        .unwrap();
    assert_stored(&c, b, "moved", Some(&chunked)).await;
    // A new object where the moved one was (chunked: bytes left behind by the move would
    // stay, for the backend's own check to find).
    let again = record("again", &[chunk()]);
    c.put(b, "mixed", again.clone(), &Cond::absent(), fresh)
        .await
        .unwrap();
    assert_stored(&c, b, "mixed", Some(&again)).await;
    // Directory rename: every key's bytes move; the target's marker (with bytes) is
    // replaced by the source's (without).
    let d1 = inline_record("d1", &pattern(10, 1));
    let d2 = inline_record("d2", &pattern(20, 2));
    let dm = record("dm", &[chunk()]);
    let tm = inline_record("tm", &pattern(30, 3));
    for (k, r) in [
        ("dir/", &dm),
        ("dir/1", &d1),
        ("dir/sub/2", &d2),
        ("to/", &tm),
    ] {
        c.put(b, k, r.clone(), &any, fresh).await.unwrap();
    }
    let (n, _) = c.rename_prefix(b, "dir/", "to/", 1024).await.unwrap();
    assert_eq!(n, 3);
    for k in ["dir/", "dir/1", "dir/sub/2"] {
        assert_stored(&c, b, k, None).await;
    }
    assert_stored(&c, b, "to/", Some(&dm)).await;
    assert_stored(&c, b, "to/1", Some(&d1)).await;
    assert_stored(&c, b, "to/sub/2", Some(&d2)).await;
    assert_listed(
        &c,
        b,
        "to/",
        &[("to/", &dm), ("to/1", &d1), ("to/sub/2", &d2)],
    )
    .await;
    // And back, the marker now inline: its bytes move too.
    c.put(b, "to/", tm.clone(), &any, fresh).await.unwrap();
    c.rename_prefix(b, "to/", "dir/", 1024).await.unwrap();
    assert_stored(&c, b, "dir/", Some(&tm)).await;
    assert_stored(&c, b, "dir/sub/2", Some(&d2)).await;
    // Directory removal takes the marker's bytes.
    for k in ["dir/1", "dir/sub/2"] {
        let done = c.delete(b, k, &Cond::default()).await.unwrap();
        assert!(done.previous.is_some());
    }
    c.remove_dir(b, "dir/").await.unwrap();
    assert_stored(&c, b, "dir/", None).await;
    c.put(b, "dir/", dm.clone(), &Cond::absent(), fresh)
        .await
        .unwrap();
    assert_stored(&c, b, "dir/", Some(&dm)).await;
    c.delete(b, "dir/", &Cond::default()).await.unwrap();
    // Complete: a chunked part and a small inline last part make an object with bytes; it
    // replaces one with other bytes; then a chunked completion replaces it.
    c.create_upload(b, "mp", "inl-u1", upload_rec())
        .await
        .unwrap();
    let p1 = chunk();
    c.put_part(b, "mp", "inl-u1", 1, part("pe1", &[p1]))
        .await
        .unwrap();
    let tail = PartRecord {
        size: 5,
        segments: vec![Segment::Inline(b"tail!".to_vec())],
        ..part("pe2", &[])
    };
    c.put_part(b, "mp", "inl-u1", 2, tail).await.unwrap();
    c.put(b, "mp", small.clone(), &any, fresh).await.unwrap();
    let f = Arc::new(|s: crate::UploadState<'_>| {
        let cur = s.current.expect("current");
        assert!(
            !cur.segments.iter().any(|g| matches!(g, Segment::Inline(_))),
            "Complete sees the current record in head form"
        );
        let mut rec = record("mp-2", &[]);
        rec.segments = s.parts.values().flat_map(|p| p.segments.clone()).collect();
        rec.size = 105;
        rec.upload_id = Some("inl-u1".into());
        Ok(Completion {
            record: rec,
            used_parts: vec![1, 2],
        })
    });
    let (rec, done) = c.complete(b, "mp", "inl-u1", &any, f).await.unwrap();
    assert_eq!(
        rec.segments,
        vec![Segment::Chunk(p1), Segment::Inline(b"tail!".to_vec())]
    );
    assert_head_of(done.previous.as_ref().unwrap(), &small, "complete previous");
    assert_stored(&c, b, "mp", Some(&rec)).await;
    c.create_upload(b, "mp", "inl-u2", upload_rec())
        .await
        .unwrap();
    let p3 = chunk();
    c.put_part(b, "mp", "inl-u2", 1, part("pe3", &[p3]))
        .await
        .unwrap();
    let f = Arc::new(|s: crate::UploadState<'_>| {
        let mut rec = record("mp-1", &[]);
        rec.segments = s.parts[&1].segments.clone();
        Ok(Completion {
            record: rec,
            used_parts: vec![1],
        })
    });
    let (rec2, _) = c.complete(b, "mp", "inl-u2", &any, f).await.unwrap();
    assert_stored(&c, b, "mp", Some(&rec2)).await;
    // Deletes take the bytes; a new object at the key has only its own.
    for k in ["big", "big2", "empty", "mixed", "moved", "mp"] {
        c.delete(b, k, &Cond::default()).await.unwrap();
        assert_stored(&c, b, k, None).await;
    }
    c.put(b, "big", chunked.clone(), &Cond::absent(), fresh)
        .await
        .unwrap();
    assert_stored(&c, b, "big", Some(&chunked)).await;
    c.delete(b, "big", &Cond::default()).await.unwrap();
    assert_listed(&c, b, "", &[]).await;
    // What stays for the backend's own checks.
    let keep_inline = inline_record("keep", &pattern(100, 5));
    c.put(b, "keep/inline", keep_inline, &any, fresh)
        .await
        .unwrap();
    c.put(b, "keep/chunked", record("keep-c", &[chunk()]), &any, fresh)
        .await
        .unwrap();
}

/// Reads racing overwrites of an inline object never pair a record with another version's
/// bytes: the versions have the same length, and each read's bytes must be its own ETag's.
pub async fn inline_reads_race_overwrites(c: Arc<dyn Catalog>) {
    c.create_bucket("inl-race", bucket_rec("o")).await.unwrap();
    let versions: Arc<Vec<ObjectRecord>> = Arc::new(
        (0..4u8)
            .map(|i| inline_record(&format!("v{i}"), &pattern(2048, i)))
            .collect(),
    );
    let check = |versions: &[ObjectRecord], got: Option<ObjectRecord>| {
        let got = got.expect("the key is never absent");
        let want = versions
            .iter()
            .find(|v| v.etag == got.etag)
            .expect("a known version");
        assert_eq!(&got, want, "a record with another version's bytes");
    };
    c.put(
        "inl-race",
        "k",
        versions[0].clone(),
        &Cond::default(),
        Refs::Fresh,
    )
    .await
    .unwrap();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (c, versions, done) = (Arc::clone(&c), Arc::clone(&versions), Arc::clone(&done));
        tokio::spawn(async move {
            for round in 0..300 {
                let v = versions[round % versions.len()].clone();
                c.put("inl-race", "k", v, &Cond::default(), Refs::Fresh)
                    .await
                    .unwrap();
            }
            done.store(true, Ordering::Relaxed);
        })
    };
    let readers: Vec<_> = (0..3)
        .map(|i| {
            let (c, versions, done) = (Arc::clone(&c), Arc::clone(&versions), Arc::clone(&done));
            tokio::spawn(async move {
                let mut reads = 0u32;
                while !done.load(Ordering::Relaxed) || reads == 0 {
                    if i == 0 {
                        let c2 = Arc::clone(&c);
                        let got = tokio::task::spawn_blocking(move || {
                            c2.get_blocking("inl-race", "k").unwrap()
                        })
                        .await
                        .unwrap();
                        check(&versions, got);
                    } else {
                        if let Some(got) = c.get_cached("inl-race", "k") {
                            check(&versions, got.unwrap());
                        }
                        check(&versions, c.get("inl-race", "k").await.unwrap());
                    }
                    reads += 1;
                }
            })
        })
        .collect();
    writer.await.unwrap();
    for r in readers {
        r.await.unwrap();
    }
    c.delete("inl-race", "k", &Cond::default()).await.unwrap();
    c.delete_bucket("inl-race").await.unwrap();
}

/// Deletes every object of `bucket`, then the bucket.
pub async fn empty_and_delete_bucket(c: &dyn Catalog, bucket: &str) {
    let q = ListQuery {
        prefix: "",
        delimiter: None,
        after: None,
        max: 1000,
    };
    for (k, _) in c.list(bucket, &q).await.unwrap().objects {
        c.delete(bucket, &k, &Cond::default()).await.unwrap();
    }
    c.delete_bucket(bucket).await.unwrap();
}

fn tag(k: &str, v: &str) -> (String, String) {
    (k.to_owned(), v.to_owned())
}

/// Bucket records rewritten in one step (bucket tags): read back by `bucket` and
/// `list_buckets`; a refusal or a change of owner changes nothing; racing updates lose none;
/// gone with the bucket (a bucket made again under the name starts untagged). Object tags
/// ride in the record's metadata through put, get, head, list, update and rename.
pub async fn tags_and_bucket_updates(c: Arc<dyn Catalog>) {
    new_bucket(&*c, "tagb").await;
    let set = |tags: Vec<(String, String)>| -> crate::BucketFn {
        Arc::new(move |b: &BucketRecord| {
            Ok(BucketRecord {
                tags: tags.clone(),
                ..b.clone()
            })
        })
    };
    let got = c
        .update_bucket("tagb", set(vec![tag("a", "1"), tag("b", "")]))
        .await
        .unwrap();
    assert_eq!(got.tags, vec![tag("a", "1"), tag("b", "")]);
    assert_eq!(got.owner, "o");
    assert_eq!(c.bucket("tagb").await.unwrap().unwrap(), got);
    let listed = c.list_buckets().await.unwrap();
    assert_eq!(
        listed.iter().find(|(n, _)| n == "tagb").map(|(_, b)| b),
        Some(&got)
    );
    // A refusal and an owner change leave the record as it was.
    let refuse: crate::BucketFn = Arc::new(|_| Err(CatalogError::PreconditionFailed));
    assert!(matches!(
        c.update_bucket("tagb", refuse).await,
        Err(CatalogError::PreconditionFailed)
    ));
    let steal: crate::BucketFn = Arc::new(|b| {
        Ok(BucketRecord {
            owner: "thief".into(),
            tags: vec![],
            ..b.clone()
        })
    });
    assert!(matches!(
        c.update_bucket("tagb", steal).await,
        Err(CatalogError::Corrupt(_))
    ));
    assert_eq!(c.bucket("tagb").await.unwrap().unwrap(), got);
    assert!(matches!(
        c.update_bucket("tag-none", set(vec![])).await,
        Err(CatalogError::NoSuchBucket)
    ));
    // Racing read-modify-writes: each adds its own tag, none is lost.
    let mut tasks = Vec::new();
    for i in 0..6 {
        let c = Arc::clone(&c);
        tasks.push(tokio::spawn(async move {
            let add: crate::BucketFn = Arc::new(move |b: &BucketRecord| {
                let mut b = b.clone();
                b.tags.push(tag(&format!("r{i}"), "x"));
                b.tags.sort();
                Ok(b)
            });
            c.update_bucket("tagb", add).await.unwrap();
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let tags = c.bucket("tagb").await.unwrap().unwrap().tags;
    assert_eq!(tags.len(), 8, "{tags:?}");
    // Settings ride in the same record.
    let setting: crate::BucketFn = Arc::new(|b: &BucketRecord| {
        Ok(BucketRecord {
            settings: vec![("lifecycle".into(), "{\"rules\":[]}".into())],
            ..b.clone()
        })
    });
    c.update_bucket("tagb", setting).await.unwrap();
    let b = c.bucket("tagb").await.unwrap().unwrap();
    assert_eq!(b.settings[0].1, "{\"rules\":[]}");
    assert_eq!(b.tags.len(), 8);

    // Object tags live in the record's metadata.
    let mut rec = record("t1", &[]);
    rec.meta.tags = vec![tag("k", "v")];
    c.put("tagb", "o", rec.clone(), &Cond::default(), Refs::Fresh)
        .await
        .unwrap();
    assert_eq!(
        c.get("tagb", "o").await.unwrap().unwrap().meta.tags,
        rec.meta.tags
    );
    assert_eq!(
        c.head("tagb", "o").await.unwrap().unwrap().meta.tags,
        rec.meta.tags
    );
    let retag: crate::RecordFn = Arc::new(|r: &ObjectRecord| {
        let mut r = r.clone();
        r.meta.tags = vec![tag("k", "w"), tag("z", "")];
        Ok(r)
    });
    let up = c.update("tagb", "o", retag).await.unwrap();
    assert_eq!(up.meta.tags, vec![tag("k", "w"), tag("z", "")]);
    let page = c
        .list(
            "tagb",
            &ListQuery {
                prefix: "",
                delimiter: None,
                after: None,
                max: 10,
            },
        )
        .await
        .unwrap();
    assert_eq!(page.objects[0].1.meta.tags, up.meta.tags);
    c.rename("tagb", "o", "o2", replace_check(false), Versioning::Off)
        .await
        .unwrap();
    assert_eq!(
        c.get("tagb", "o2").await.unwrap().unwrap().meta.tags,
        up.meta.tags
    );
    c.delete("tagb", "o2", &Cond::default()).await.unwrap();
    c.delete_bucket("tagb").await.unwrap();
    assert!(matches!(
        c.update_bucket("tagb", set(vec![tag("late", "")])).await,
        Err(CatalogError::NoSuchBucket)
    ));
    new_bucket(&*c, "tagb").await;
    assert!(c.bucket("tagb").await.unwrap().unwrap().tags.is_empty());
    c.delete_bucket("tagb").await.unwrap();
}

fn vq(
    prefix: &str,
    delimiter: Option<&str>,
    marker: Option<(&str, Option<&str>)>,
    max: usize,
) -> VersionQuery {
    VersionQuery {
        prefix: prefix.into(),
        delimiter: delimiter.map(Into::into),
        key_marker: marker.map(|(k, _)| k.into()),
        version_marker: marker.and_then(|(_, v)| v.map(Into::into)),
        max,
    }
}

/// (key, etag or "DM" for a delete marker, is_latest) of a version listing.
async fn listed(c: &dyn Catalog, b: &str, q: &VersionQuery) -> Vec<(String, String, bool)> {
    c.list_versions(b, q)
        .await
        .unwrap()
        .entries
        .into_iter()
        .map(|e| {
            let what = if e.record.delete_marker {
                "DM".to_owned()
            } else {
                e.record.etag
            };
            (e.key, what, e.is_latest)
        })
        .collect()
}

fn row(k: &str, what: &str, latest: bool) -> (String, String, bool) {
    (k.to_owned(), what.to_owned(), latest)
}

/// Versioned buckets: writes keep what they replace (Enabled) or replace the `null` version
/// (Suspended); deletes add delete markers; a version is read, rewritten and removed by id,
/// and removing the current one makes the previous one current; listings of versions merge
/// current and noncurrent ones in S3 order, paged and with common prefixes; chunks are
/// released only when the last version holding them goes.
pub async fn versions(c: Arc<dyn Catalog>) {
    new_bucket(&*c, "ver").await;
    let en = Cond {
        versioning: Versioning::Enabled,
        ..Default::default()
    };
    let su = Cond {
        versioning: Versioning::Suspended,
        ..Default::default()
    };
    assert!(c.supports_versions());
    let (n0c, v1c) = (chunk(), chunk());
    c.put(
        "ver",
        "k",
        record("n0", &[n0c]),
        &Cond::default(),
        Refs::Fresh,
    )
    .await
    .unwrap();
    let d1 = c
        .put("ver", "k", record("v1", &[v1c]), &en, Refs::Fresh)
        .await
        .unwrap();
    assert!(d1.released.is_empty(), "the null version is kept");
    let id1 = d1.version_id.clone().unwrap();
    assert!(crate::is_version_id(&id1), "{id1}");
    let d2 = c
        .put("ver", "k", record("v2", &[]), &en, Refs::Fresh)
        .await
        .unwrap();
    let id2 = d2.version_id.clone().unwrap();
    assert_ne!(id1, id2);
    let cur = c.get("ver", "k").await.unwrap().unwrap();
    assert_eq!(
        (cur.etag.as_str(), cur.version_id.as_deref()),
        ("v2", Some(id2.as_str()))
    );
    assert_eq!(
        c.get_version("ver", "k", &id1).await.unwrap().unwrap().etag,
        "v1"
    );
    assert_eq!(
        c.get_version("ver", "k", "null")
            .await
            .unwrap()
            .unwrap()
            .etag,
        "n0"
    );
    assert_eq!(
        c.get_version("ver", "k", &id2)
            .await
            .unwrap()
            .unwrap()
            .segments,
        record("v2", &[]).segments
    );
    assert!(
        c.get_version("ver", "k", "00000000000000000000ff")
            .await
            .unwrap()
            .is_none()
    );
    let all = vq("", None, None, 100);
    assert_eq!(
        listed(&*c, "ver", &all).await,
        vec![
            row("k", "v2", true),
            row("k", "v1", false),
            row("k", "n0", false)
        ]
    );
    // A delete adds a marker on top; the key reads as absent.
    let dm = c.delete("ver", "k", &en).await.unwrap();
    assert!(dm.delete_marker && dm.released.is_empty());
    let mid = dm.version_id.clone().unwrap();
    assert!(c.get("ver", "k").await.unwrap().is_none());
    assert!(
        c.newest_version("ver", "k")
            .await
            .unwrap()
            .unwrap()
            .delete_marker
    );
    assert_eq!(
        listed(&*c, "ver", &all).await,
        vec![
            row("k", "DM", true),
            row("k", "v2", false),
            row("k", "v1", false),
            row("k", "n0", false)
        ]
    );
    // Removing the marker brings v2 back; removing v2 (current) makes v1 current.
    let gone = c.delete_version("ver", "k", &mid, None).await.unwrap();
    assert!(gone.delete_marker);
    assert_eq!(c.get("ver", "k").await.unwrap().unwrap().etag, "v2");
    // A check that refuses leaves the version, current or not, where it was.
    let no: crate::RecordCheck = Arc::new(|_| Err(CatalogError::PreconditionFailed));
    for id in [&id2, &id1] {
        assert!(matches!(
            c.delete_version("ver", "k", id, Some(Arc::clone(&no)))
                .await,
            Err(CatalogError::PreconditionFailed)
        ));
    }
    assert_eq!(c.get("ver", "k").await.unwrap().unwrap().etag, "v2");
    assert!(c.get_version("ver", "k", &id1).await.unwrap().is_some());
    // The check sees the version it addresses (a conditional delete of a version judges that
    // version, not the current one).
    let only_v1: crate::RecordCheck = Arc::new(|r| match r.etag.as_str() {
        "v1" => Err(CatalogError::PreconditionFailed),
        _ => Ok(()),
    });
    assert!(matches!(
        c.delete_version("ver", "k", &id1, Some(only_v1)).await,
        Err(CatalogError::PreconditionFailed)
    ));
    assert!(c.get_version("ver", "k", &id1).await.unwrap().is_some());
    // An id no version has: nothing removed, nothing named, the check never run.
    let absent = c
        .delete_version("ver", "k", "0000000000000000ffffff", Some(Arc::clone(&no)))
        .await
        .unwrap();
    assert!(absent.previous.is_none() && absent.released.is_empty());
    c.delete_version("ver", "k", &id2, None).await.unwrap();
    let cur = c.get("ver", "k").await.unwrap().unwrap();
    assert_eq!(
        (cur.etag.as_str(), cur.version_id.as_deref()),
        ("v1", Some(id1.as_str()))
    );
    // A version's tags are rewritten in place, current or not.
    let tag: crate::RecordFn = Arc::new(|r: &ObjectRecord| {
        let mut r = r.clone();
        r.meta.tags = vec![("t".into(), "1".into())];
        Ok(r)
    });
    c.update_version("ver", "k", "null", tag).await.unwrap();
    assert_eq!(
        c.get_version("ver", "k", "null")
            .await
            .unwrap()
            .unwrap()
            .meta
            .tags
            .len(),
        1
    );
    // Suspended: the write is the null version, and the old null version's chunk goes.
    let s1 = c
        .put("ver", "k", record("s1", &[]), &su, Refs::Fresh)
        .await
        .unwrap();
    assert_eq!(s1.version_id, None);
    assert_eq!(set(&s1.released), set(&[n0c]));
    assert_eq!(
        listed(&*c, "ver", &all).await,
        vec![row("k", "s1", true), row("k", "v1", false)]
    );
    let s2 = c
        .put("ver", "k", record("s2", &[]), &su, Refs::Fresh)
        .await
        .unwrap();
    assert_eq!(
        s2.previous.unwrap().etag,
        "s1",
        "the current null version is replaced"
    );
    let sm = c.delete("ver", "k", &su).await.unwrap();
    assert!(sm.delete_marker && sm.version_id.is_none());
    assert_eq!(
        listed(&*c, "ver", &all).await,
        vec![row("k", "DM", true), row("k", "v1", false)]
    );
    assert!(matches!(
        c.delete_bucket("ver").await,
        Err(CatalogError::BucketNotEmpty)
    ));
    // Only the last version holding a chunk releases it.
    assert_eq!(
        set(&c
            .delete_version("ver", "k", &id1, None)
            .await
            .unwrap()
            .released),
        set(&[v1c])
    );
    c.delete_version("ver", "k", "null", None).await.unwrap();
    assert!(c.newest_version("ver", "k").await.unwrap().is_none());
    assert!(
        c.delete_version("ver", "k", "null", None)
            .await
            .unwrap()
            .previous
            .is_none()
    );
    // Paging and common prefixes over several keys.
    for k in ["a", "d/1", "d/2", "e"] {
        for i in 0..3 {
            c.put("ver", k, record(&format!("{k}{i}"), &[]), &en, Refs::Fresh)
                .await
                .unwrap();
        }
    }
    c.delete("ver", "e", &en).await.unwrap();
    let full = listed(&*c, "ver", &all).await;
    assert_eq!(full.len(), 13);
    assert_eq!(full[0], row("a", "a2", true));
    assert_eq!(full[9], row("e", "DM", true));
    assert_eq!(full[10], row("e", "e2", false));
    let mut paged = vec![];
    let mut marker: Option<(String, Option<String>)> = None;
    for n in 0.. {
        assert!(n < 20);
        let q = vq(
            "",
            None,
            marker.as_ref().map(|(k, v)| (k.as_str(), v.as_deref())),
            2,
        );
        let page = c.list_versions("ver", &q).await.unwrap();
        paged.extend(page.entries.into_iter().map(|e| {
            (
                e.key,
                if e.record.delete_marker {
                    "DM".into()
                } else {
                    e.record.etag
                },
                e.is_latest,
            )
        }));
        if !page.truncated {
            break;
        }
        marker = page.next;
    }
    assert_eq!(paged, full);
    let page = c
        .list_versions("ver", &vq("", Some("/"), None, 100))
        .await
        .unwrap();
    assert_eq!(page.prefixes, vec!["d/".to_owned()]);
    assert_eq!(page.entries.len(), 7);
    let page = c
        .list_versions("ver", &vq("d/", None, Some(("d/1", None)), 100))
        .await
        .unwrap();
    assert!(page.entries.iter().all(|e| e.key == "d/2"));
    // A Complete in a versioned bucket makes a version too.
    c.create_upload("ver", "a", "vu", upload_rec())
        .await
        .unwrap();
    let pc = chunk();
    c.put_part("ver", "a", "vu", 1, part("p1", &[pc]))
        .await
        .unwrap();
    let f: crate::CompleteFn = Arc::new(|s| {
        let mut rec = record("mp-1", &[]);
        rec.segments = s.parts[&1].segments.clone();
        Ok(Completion {
            record: rec,
            used_parts: vec![1],
        })
    });
    let (rec, done) = c.complete("ver", "a", "vu", &en, f).await.unwrap();
    assert!(rec.version_id.is_some() && done.version_id == rec.version_id);
    assert!(done.released.is_empty());
    assert_eq!(listed(&*c, "ver", &vq("a", None, None, 100)).await.len(), 4);
    // Emptied version by version, the bucket can go.
    loop {
        let page = c.list_versions("ver", &all).await.unwrap();
        if page.entries.is_empty() {
            break;
        }
        for e in page.entries {
            let id = e.record.version_id.unwrap_or_else(|| "null".into());
            c.delete_version("ver", &e.key, &id, None).await.unwrap();
        }
    }
    c.delete_bucket("ver").await.unwrap();
}

/// Versioned commits of one key racing (puts and deletes in an Enabled bucket, then deletes
/// in a Suspended one): each makes exactly one version, the ids are distinct and list newest
/// first in each writer's commit order, one version is the latest and the current record
/// agrees with it, noncurrent versions keep their inline bytes, and the key keeps one `null`
/// version.
pub async fn racing_versioned_commits(c: Arc<dyn Catalog>) {
    new_bucket(&*c, "rver").await;
    let en = Cond {
        versioning: Versioning::Enabled,
        ..Default::default()
    };
    let mut tasks = vec![];
    for t in 0..6 {
        let (c, en) = (Arc::clone(&c), en.clone());
        tasks.push(tokio::spawn(async move {
            let mut made = vec![];
            for i in 0..5 {
                let etag = format!("t{t}i{i}");
                let done = if i == 2 {
                    c.delete("rver", "k", &en).await.unwrap()
                } else {
                    c.put("rver", "k", record(&etag, &[]), &en, Refs::Fresh)
                        .await
                        .unwrap()
                };
                assert_eq!(done.delete_marker, i == 2);
                made.push((done.version_id.expect("an id"), (i != 2).then_some(etag)));
            }
            made
        }));
    }
    let mut per_writer = vec![];
    for t in tasks {
        per_writer.push(t.await.unwrap());
    }
    let all = vq("", None, None, 1000);
    let page = c.list_versions("rver", &all).await.unwrap();
    let ids: Vec<String> = page
        .entries
        .iter()
        .map(|e| e.record.version_id.clone().expect("no null version"))
        .collect();
    assert_eq!(ids.len(), 30);
    let mut sorted = ids.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted, ids, "distinct, newest (smallest) first");
    let at = |id: &str| ids.iter().position(|x| x == id).expect("listed");
    for made in &per_writer {
        for w in made.windows(2) {
            assert!(at(&w[1].0) < at(&w[0].0), "a later commit is newer");
        }
        for (id, etag) in made {
            let v = c.get_version("rver", "k", id).await.unwrap().unwrap();
            match etag {
                Some(e) => assert_eq!(v.segments, record(e, &[]).segments, "inline bytes kept"),
                None => assert!(v.delete_marker),
            }
        }
    }
    let latest: Vec<_> = page.entries.iter().filter(|e| e.is_latest).collect();
    assert_eq!(latest.len(), 1);
    assert!(page.entries[0].is_latest);
    match c.get("rver", "k").await.unwrap() {
        None => assert!(page.entries[0].record.delete_marker),
        Some(cur) => assert_eq!(cur.version_id.as_deref(), Some(ids[0].as_str())),
    }
    // Suspended: racing deletes each make the `null` marker, replacing each other's.
    let su = Cond {
        versioning: Versioning::Suspended,
        ..Default::default()
    };
    let dels: Vec<_> = (0..6)
        .map(|_| {
            let (c, su) = (Arc::clone(&c), su.clone());
            tokio::spawn(async move { c.delete("rver", "k", &su).await })
        })
        .collect();
    for d in dels {
        let d = d.await.unwrap().unwrap();
        assert!(d.delete_marker && d.version_id.is_none());
    }
    let page = c.list_versions("rver", &all).await.unwrap();
    assert_eq!(page.entries.len(), 31);
    let nulls: Vec<_> = page
        .entries
        .iter()
        .filter(|e| e.record.version_id.is_none())
        .collect();
    assert_eq!(nulls.len(), 1, "one null version");
    assert!(nulls[0].record.delete_marker && nulls[0].is_latest);
    assert!(c.get("rver", "k").await.unwrap().is_none());
    for e in page.entries {
        let id = e.record.version_id.unwrap_or_else(|| "null".into());
        c.delete_version("rver", "k", &id, None).await.unwrap();
    }
    assert!(c.newest_version("rver", "k").await.unwrap().is_none());
    c.delete_bucket("rver").await.unwrap();
}

/// An append of chunk `c` to the current record (a new one when there is none); the ETag
/// counts the segments.
fn append_chunk(c: ChunkLoc) -> crate::AppendFn {
    Arc::new(move |cur| {
        let mut r = cur.cloned().unwrap_or_else(|| record("a", &[]));
        if cur.is_none() {
            r.segments.clear();
            r.size = 0;
        }
        r.segments.push(Segment::Chunk(c));
        r.size += u64::from(c.data_len);
        r.etag = format!("e{}", r.segments.len());
        Ok(r)
    })
}

/// Appends in a versioned bucket: each makes a new version that shares the chunks of the one
/// it extends, which stays as a noncurrent version (Suspended: the `null` one is replaced). A
/// chunk is released only when the last version holding it goes: by a removal of a version
/// (current or not, with promotion), a Suspended append, delete marker or put.
pub async fn versioned_appends(c: Arc<dyn Catalog>) {
    new_bucket(&*c, "vapp").await;
    let (en, su) = (Versioning::Enabled, Versioning::Suspended);
    let ch: Vec<ChunkLoc> = (0..7).map(|_| chunk()).collect();
    let segs =
        |ids: &[usize]| -> Vec<Segment> { ids.iter().map(|&i| Segment::Chunk(ch[i])).collect() };
    let (r1, d1) = c
        .append("vapp", "k", append_chunk(ch[0]), en)
        .await
        .unwrap();
    let id1 = r1.version_id.clone().expect("a version id");
    assert_eq!(d1.version_id.as_deref(), Some(id1.as_str()));
    let (r2, d2) = c
        .append("vapp", "k", append_chunk(ch[1]), en)
        .await
        .unwrap();
    let id2 = r2.version_id.clone().expect("a version id");
    assert_ne!(id1, id2);
    assert!(d1.released.is_empty() && d2.released.is_empty());
    assert_eq!(d2.previous.unwrap().etag, "e1");
    let cur = c.get("vapp", "k").await.unwrap().unwrap();
    assert_eq!(
        (cur.segments, cur.version_id),
        (segs(&[0, 1]), Some(id2.clone()))
    );
    let v1 = c.get_version("vapp", "k", &id1).await.unwrap().unwrap();
    assert_eq!(
        v1.segments,
        segs(&[0]),
        "the appended-to version stays as it was"
    );
    // Removing the current version releases only its own chunk and brings back the older one.
    let d = c.delete_version("vapp", "k", &id2, None).await.unwrap();
    assert_eq!(set(&d.released), set(&ch[1..2]));
    let cur = c.get("vapp", "k").await.unwrap().unwrap();
    assert_eq!(
        (cur.segments, cur.version_id),
        (segs(&[0]), Some(id1.clone()))
    );
    let (r2, _) = c
        .append("vapp", "k", append_chunk(ch[2]), en)
        .await
        .unwrap();
    let id2 = r2.version_id.unwrap();
    // Removing the old version leaves its chunk to the current one.
    let gone = c.delete_version("vapp", "k", &id1, None).await.unwrap();
    assert!(gone.released.is_empty(), "{:?}", gone.released);
    let (r3, _) = c
        .append("vapp", "k", append_chunk(ch[3]), en)
        .await
        .unwrap();
    let id3 = r3.version_id.clone().unwrap();
    // Suspended: the first append keeps the current version (it has an id), the second
    // replaces the null version it made, whose chunks the new one still holds.
    let (r4, d4) = c
        .append("vapp", "k", append_chunk(ch[4]), su)
        .await
        .unwrap();
    assert_eq!((r4.version_id, d4.released.len()), (None, 0));
    let (_, d5) = c
        .append("vapp", "k", append_chunk(ch[5]), su)
        .await
        .unwrap();
    assert!(d5.released.is_empty(), "{:?}", d5.released);
    let all = vq("", None, None, 100);
    assert_eq!(
        listed(&*c, "vapp", &all).await,
        vec![
            row("k", "e5", true),
            row("k", "e3", false),
            row("k", "e2", false)
        ]
    );
    // A Suspended delete replaces the null version with a marker: of its chunks, only those
    // no version holds go; a Suspended put then replaces the marker.
    let sus = Cond {
        versioning: su,
        ..Default::default()
    };
    let m = c.delete("vapp", "k", &sus).await.unwrap();
    assert!(m.delete_marker);
    assert_eq!(set(&m.released), set(&ch[4..6]));
    let f = c
        .put("vapp", "k", record("f", &[ch[6]]), &sus, Refs::Fresh)
        .await
        .unwrap();
    assert!(f.released.is_empty(), "{:?}", f.released);
    let d = c.delete_version("vapp", "k", &id3, None).await.unwrap();
    assert_eq!(set(&d.released), set(&ch[3..4]));
    let d = c.delete_version("vapp", "k", &id2, None).await.unwrap();
    assert_eq!(set(&d.released), set(&[ch[0], ch[2]]));
    let d = c.delete_version("vapp", "k", "null", None).await.unwrap();
    assert_eq!(set(&d.released), set(&ch[6..]));
    assert!(c.newest_version("vapp", "k").await.unwrap().is_none());
    // Removing a directory marker (rmdir on the mount) leaves what its older versions hold.
    let (x, y) = (chunk(), chunk());
    c.append("vapp", "d/", append_chunk(x), en).await.unwrap();
    let (_, dd) = c.append("vapp", "d/", append_chunk(y), en).await.unwrap();
    let old = dd.previous.unwrap().version_id.unwrap();
    assert_eq!(set(&c.remove_dir("vapp", "d/").await.unwrap()), set(&[y]));
    let d = c.delete_version("vapp", "d/", &old, None).await.unwrap();
    assert_eq!(set(&d.released), set(&[x]));
    c.delete_bucket("vapp").await.unwrap();
}

/// Renames in a versioned bucket: the source's current version moves to the target as its
/// new version (the target's is kept, the source gets a delete marker, the source's other
/// versions stay), with a failing check changing nothing; Suspended moves it as the `null`
/// version. No chunk is released or shared by the move. A key whose versions share chunks
/// (an append) moves on a backend that counts references and is refused on one that does
/// not ([`CatalogError::SharedVersions`]).
pub async fn versioned_renames(c: Arc<dyn Catalog>) {
    new_bucket(&*c, "vren").await;
    let (en, su) = (Versioning::Enabled, Versioning::Suspended);
    let cond = |v| Cond {
        versioning: v,
        ..Default::default()
    };
    let (s0, s1, t0) = (chunk(), chunk(), chunk());
    for (k, e, ch) in [("src", "s0", s0), ("src", "s1", s1), ("dst", "t0", t0)] {
        c.put("vren", k, record(e, &[ch]), &cond(en), Refs::Fresh)
            .await
            .unwrap();
    }
    let id_s1 = c
        .get("vren", "src")
        .await
        .unwrap()
        .unwrap()
        .version_id
        .unwrap();
    assert!(matches!(
        c.rename("vren", "src", "dst", replace_check(true), en)
            .await,
        Err(CatalogError::PreconditionFailed)
    ));
    let d = c
        .rename("vren", "src", "dst", replace_check(false), en)
        .await
        .unwrap();
    assert!(d.released.is_empty(), "{:?}", d.released);
    assert_eq!(d.previous.unwrap().etag, "t0");
    let moved = c.get("vren", "dst").await.unwrap().unwrap();
    assert_eq!(moved.etag, "s1");
    assert_eq!(moved.segments, record("s1", &[s1]).segments);
    assert!(moved.version_id.is_some() && moved.version_id != Some(id_s1.clone()));
    assert_eq!(moved.version_id, d.version_id);
    assert!(
        moved.last_modified_ms > 1,
        "a new version of the target is made now"
    );
    assert!(c.get("vren", "src").await.unwrap().is_none());
    assert!(
        c.get_version("vren", "src", &id_s1)
            .await
            .unwrap()
            .is_none()
    );
    let all = vq("", None, None, 100);
    assert_eq!(
        listed(&*c, "vren", &all).await,
        vec![
            row("dst", "s1", true),
            row("dst", "t0", false),
            row("src", "DM", true),
            row("src", "s0", false)
        ]
    );
    // Suspended: the move is the target's null version and the source's marker is null.
    let d = c
        .rename("vren", "dst", "src", replace_check(false), su)
        .await
        .unwrap();
    assert!(d.released.is_empty() && d.version_id.is_none());
    let back = c.get("vren", "src").await.unwrap().unwrap();
    assert_eq!(
        (back.etag.as_str(), back.version_id.as_deref()),
        ("s1", None)
    );
    assert_eq!(
        listed(&*c, "vren", &all).await,
        vec![
            row("dst", "DM", true),
            row("dst", "t0", false),
            row("src", "s1", true),
            row("src", "DM", false),
            row("src", "s0", false)
        ]
    );
    // A key whose versions share chunks.
    let (a0, a1) = (chunk(), chunk());
    c.append("vren", "ap", append_chunk(a0), en).await.unwrap();
    let (_, first) = c.append("vren", "ap", append_chunk(a1), en).await.unwrap();
    let first = first.previous.unwrap().version_id.unwrap();
    let r = c
        .rename("vren", "ap", "ap2", replace_check(false), en)
        .await;
    if c.counts_references() {
        r.unwrap();
        let d = c.delete_version("vren", "ap", &first, None).await.unwrap();
        assert!(d.released.is_empty(), "{:?}", d.released);
        assert_eq!(c.get("vren", "ap2").await.unwrap().unwrap().etag, "e2");
    } else {
        assert!(matches!(r, Err(CatalogError::SharedVersions)));
        assert_eq!(c.get("vren", "ap").await.unwrap().unwrap().etag, "e2");
    }
    // Every chunk is released once, when its last version goes.
    let mut released = vec![];
    loop {
        let page = c.list_versions("vren", &all).await.unwrap();
        let Some(e) = page.entries.first() else { break };
        let id = e.record.version_id.clone().unwrap_or_else(|| "null".into());
        let d = c.delete_version("vren", &e.key, &id, None).await.unwrap();
        released.extend(d.released);
    }
    let mut want = vec![s0, s1, t0, a0, a1];
    want.sort_by_key(|c| c.offset);
    released.sort_by_key(|c| c.offset);
    assert_eq!(released, want);
    c.delete_bucket("vren").await.unwrap();
}

/// Every test above but the renames (which a partitioned backend refuses across partitions,
/// [`CatalogError::CrossPartition`]), in sequence, on one catalog.
pub async fn run_all_but_renames(c: Arc<dyn Catalog>) {
    inline_reads_race_overwrites(Arc::clone(&c)).await;
    buckets(&*c).await;
    conditions(&*c).await;
    conditional_deletes(&*c).await;
    references(&*c).await;
    listing(&*c).await;
    multipart(&*c).await;
    upload_listing(&*c).await;
    system_keys(&*c).await;
    tags_and_bucket_updates(Arc::clone(&c)).await;
    versions(Arc::clone(&c)).await;
    racing_versioned_commits(Arc::clone(&c)).await;
    appends(Arc::clone(&c)).await;
    versioned_appends(Arc::clone(&c)).await;
    racing_conditional_delete(Arc::clone(&c)).await;
    racing_conditional_puts(c).await;
}

/// Rename conditions (S3 RenameObject): the check sees the source and the current target; a
/// failing check changes nothing; racing conditional renames of one source: exactly one wins.
pub async fn conditional_renames(c: Arc<dyn Catalog>) {
    new_bucket(&*c, "cren").await;
    let src = record("s1", &[chunk()]);
    c.put("cren", "src", src, &Cond::default(), Refs::Fresh)
        .await
        .unwrap();
    c.put(
        "cren",
        "dst",
        record("d1", &[chunk()]),
        &Cond::default(),
        Refs::Fresh,
    )
    .await
    .unwrap();
    let seen = Arc::new(std::sync::Mutex::new(vec![]));
    let log = Arc::clone(&seen);
    let refuse: crate::RenameCheck = Arc::new(move |s, t| {
        log.lock()
            .unwrap()
            .push((s.etag.clone(), t.map(|r| r.etag.clone())));
        Err(CatalogError::PreconditionFailed)
    });
    assert!(matches!(
        c.rename("cren", "src", "dst", refuse.clone(), Versioning::Off)
            .await,
        Err(CatalogError::PreconditionFailed)
    ));
    assert!(matches!(
        c.rename("cren", "src", "new", refuse, Versioning::Off)
            .await,
        Err(CatalogError::PreconditionFailed)
    ));
    assert_eq!(
        *seen.lock().unwrap(),
        [
            ("s1".to_owned(), Some("d1".to_owned())),
            ("s1".to_owned(), None)
        ]
    );
    assert_eq!(c.get("cren", "src").await.unwrap().unwrap().etag, "s1");
    assert_eq!(c.get("cren", "dst").await.unwrap().unwrap().etag, "d1");
    assert!(c.get("cren", "new").await.unwrap().is_none());
    // A check that passes: the target's chunk goes, the source's moves.
    let only_over_d1: crate::RenameCheck = Arc::new(|s, t| match t {
        Some(t) if t.etag == "d1" && s.etag == "s1" => Ok(()),
        _ => Err(CatalogError::PreconditionFailed),
    });
    let done = c
        .rename("cren", "src", "dst", only_over_d1, Versioning::Off)
        .await
        .unwrap();
    assert_eq!(done.previous.unwrap().etag, "d1");
    assert_eq!(done.released.len(), 1);
    assert!(c.get("cren", "src").await.unwrap().is_none());
    assert_eq!(c.get("cren", "dst").await.unwrap().unwrap().etag, "s1");
    // A rename conditioned on the target it saw ("t1"), racing an overwrite of that target:
    // the check sees the target the commit replaces, never an older one.
    for round in 0..20 {
        let (from, to) = (format!("ts{round}"), format!("tt{round}"));
        c.put(
            "cren",
            &from,
            record("s", &[]),
            &Cond::default(),
            Refs::Fresh,
        )
        .await
        .unwrap();
        c.put(
            "cren",
            &to,
            record("t1", &[]),
            &Cond::default(),
            Refs::Fresh,
        )
        .await
        .unwrap();
        let over_t1: crate::RenameCheck = Arc::new(|_, t| match t {
            Some(t) if t.etag == "t1" => Ok(()),
            _ => Err(CatalogError::PreconditionFailed),
        });
        let (c1, c2, f1, t1, t2) = (
            Arc::clone(&c),
            Arc::clone(&c),
            from.clone(),
            to.clone(),
            to.clone(),
        );
        let ren =
            tokio::spawn(
                async move { c1.rename("cren", &f1, &t1, over_t1, Versioning::Off).await },
            );
        let put = tokio::spawn(async move {
            c2.put(
                "cren",
                &t2,
                record("t2", &[]),
                &Cond::default(),
                Refs::Fresh,
            )
            .await
        });
        let renamed = match ren.await.unwrap() {
            Ok(done) => {
                assert_eq!(done.previous.unwrap().etag, "t1", "round {round}");
                true
            }
            Err(CatalogError::PreconditionFailed) => false,
            Err(e) => panic!("round {round}: {e}"),
        };
        let replaced = put.await.unwrap().unwrap().previous.unwrap().etag;
        // The put always lands last or first; the rename only ever replaced "t1".
        assert_eq!(replaced, if renamed { "s" } else { "t1" }, "round {round}");
        assert_eq!(c.get("cren", &to).await.unwrap().unwrap().etag, "t2");
        assert_eq!(
            c.get("cren", &from).await.unwrap().is_some(),
            !renamed,
            "round {round}"
        );
        for k in [&from, &to] {
            c.delete("cren", k, &Cond::default()).await.unwrap();
        }
    }
    // Eight renames of one source to eight targets, each only onto an absent target: the
    // source moves exactly once; the others find no source.
    for round in 0..10 {
        let from = format!("r{round}");
        c.put(
            "cren",
            &from,
            record(&from, &[]),
            &Cond::default(),
            Refs::Fresh,
        )
        .await
        .unwrap();
        let tasks: Vec<_> = (0..8)
            .map(|i| {
                let (c, from) = (Arc::clone(&c), from.clone());
                tokio::spawn(async move {
                    let to = format!("{from}-to{i}");
                    c.rename("cren", &from, &to, replace_check(true), Versioning::Off)
                        .await
                })
            })
            .collect();
        let mut wins = 0;
        for t in tasks {
            match t.await.unwrap() {
                Ok(_) => wins += 1,
                Err(CatalogError::NoSuchKey) => {}
                Err(e) => panic!("round {round}: {e}"),
            }
        }
        assert_eq!(wins, 1, "round {round}");
        let page = c
            .list(
                "cren",
                &ListQuery {
                    prefix: &from,
                    delimiter: None,
                    after: None,
                    max: 100,
                },
            )
            .await
            .unwrap();
        assert_eq!(
            page.objects.len(),
            1,
            "round {round}: one copy of the object"
        );
        let (k, _) = &page.objects[0];
        assert!(k.starts_with(&format!("{from}-to")));
        c.delete("cren", k, &Cond::default()).await.unwrap();
    }
    c.delete("cren", "dst", &Cond::default()).await.unwrap();
    c.delete_bucket("cren").await.unwrap();
}

/// Appends: the new record keeps the object's segments and adds fresh ones; a refused or
/// malformed append changes nothing; racing appenders at one size: exactly one wins; a delete
/// releases the appended chunks with the rest.
pub async fn appends(c: Arc<dyn Catalog>) {
    new_bucket(&*c, "app").await;
    let at = |size: u64, add: Vec<Segment>, added: u64| -> crate::AppendFn {
        Arc::new(move |cur| {
            if cur.map_or(0, |r| r.size) != size {
                return Err(CatalogError::PreconditionFailed);
            }
            let mut r = cur.cloned().unwrap_or_else(|| record("a", &[]));
            if cur.is_none() {
                r.segments.clear();
                r.size = 0;
            }
            r.segments.extend(add.iter().cloned());
            r.size += added;
            r.etag = format!("e{}", r.size);
            Ok(r)
        })
    };
    let (c1, c2) = (chunk(), chunk());
    let off = Versioning::Off;
    let r = c
        .append(
            "app",
            "k",
            at(0, vec![Segment::Inline(b"ab".to_vec())], 2),
            off,
        )
        .await
        .unwrap()
        .0;
    assert_eq!(r.size, 2);
    let r = c
        .append("app", "k", at(2, vec![Segment::Chunk(c1)], 100), off)
        .await
        .unwrap()
        .0;
    assert_eq!(r.size, 102);
    let got = c.get("app", "k").await.unwrap().unwrap();
    assert_eq!(
        got.segments,
        [Segment::Inline(b"ab".to_vec()), Segment::Chunk(c1)]
    );
    // A wrong size, and an append that would drop the object's bytes: nothing changes.
    assert!(matches!(
        c.append("app", "k", at(2, vec![Segment::Chunk(c2)], 100), off)
            .await,
        Err(CatalogError::PreconditionFailed)
    ));
    let drop_bytes: crate::AppendFn = Arc::new(|cur| {
        let mut r = cur.cloned().expect("exists");
        r.segments.remove(0);
        Ok(r)
    });
    assert!(matches!(
        c.append("app", "k", drop_bytes, off).await,
        Err(CatalogError::Corrupt(_))
    ));
    assert_eq!(c.get("app", "k").await.unwrap().unwrap(), got);
    // Racing appenders at one size: exactly one wins.
    let tasks: Vec<_> = (0..8u8)
        .map(|i| {
            let c = Arc::clone(&c);
            let f = at(102, vec![Segment::Inline(vec![b'0' + i])], 1);
            tokio::spawn(async move { c.append("app", "k", f, off).await })
        })
        .collect();
    let mut wins = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok((r, _)) => {
                wins += 1;
                assert_eq!(r.size, 103);
            }
            Err(CatalogError::PreconditionFailed) => {}
            Err(e) => panic!("appender: {e}"),
        }
    }
    assert_eq!(wins, 1);
    let now = c.get("app", "k").await.unwrap().unwrap();
    assert_eq!((now.size, now.segments.len()), (103, 3));
    let done = c.delete("app", "k", &Cond::default()).await.unwrap();
    assert_eq!(
        done.released,
        [c1],
        "the appended chunk goes with the object"
    );
    c.delete_bucket("app").await.unwrap();
}

/// Renders every change as "<key> <what>" for destination "d" (and, for keys under `both/`,
/// for "d2" too).
struct Keys;

impl crate::events::EventDraft for Keys {
    fn render(&self, c: &crate::events::Change<'_>, _: u64) -> Vec<(String, Vec<u8>)> {
        use crate::events::What;
        let what = match c.what {
            What::Written { record } => format!("put {}", record.etag),
            What::Removed { version_id: None } => "removed".into(),
            What::Removed {
                version_id: Some(_),
            } => "version removed".into(),
            What::MarkerCreated { .. } => "marker".into(),
        };
        let body = format!("{} {what}", c.key).into_bytes();
        let mut out = vec![("d".to_owned(), body.clone())];
        if c.key.starts_with("both/") {
            out.push(("d2".to_owned(), body));
        }
        out
    }
}

/// The event outbox ([`crate::events`]), on a backend that has one: an armed commit stores its
/// entries with it and only then (not refused, not unarmed, not a no-op), in order, for every
/// kind of commit; scans page, removals remove, a deleted bucket's entries stay.
pub async fn events(c: Arc<dyn Catalog>) {
    use crate::events::{EventDraft, armed};
    if !c.supports_events() {
        return;
    }
    new_bucket(&*c, "evt").await;
    let d: Arc<dyn EventDraft> = Arc::new(Keys);
    let put = |key: &'static str, etag: &'static str, cond: Cond| {
        let (c, d) = (Arc::clone(&c), Arc::clone(&d));
        async move {
            let r = record(etag, &[]);
            armed(
                d,
                async move { c.put("evt", key, r, &cond, Refs::Fresh).await },
            )
            .await
        }
    };
    put("k", "e1", Cond::default()).await.unwrap();
    // Refused by its condition: nothing stored, no event.
    assert!(put("k", "e2", Cond::absent()).await.is_err());
    // Not armed: no event.
    c.put("evt", "k", record("e3", &[]), &Cond::default(), Refs::Fresh)
        .await
        .unwrap();
    let tag: crate::RecordFn = Arc::new(|r: &ObjectRecord| {
        let mut n = r.clone();
        n.etag = "tagged".into();
        Ok(n)
    });
    armed(Arc::clone(&d), c.update("evt", "k", tag))
        .await
        .unwrap();
    let make: crate::RecordFn = Arc::new(|r: &ObjectRecord| {
        let mut n = r.clone();
        n.etag = "copied".into();
        Ok(n)
    });
    armed(
        Arc::clone(&d),
        c.copy(("evt", "k"), ("evt", "both/c"), make),
    )
    .await
    .unwrap();
    armed(Arc::clone(&d), c.delete("evt", "k", &Cond::default()))
        .await
        .unwrap();
    // Deleting what is not there changes nothing and tells nothing.
    armed(Arc::clone(&d), c.delete("evt", "k", &Cond::default()))
        .await
        .unwrap();
    put("dir/", "marker", Cond::default()).await.unwrap();
    put("dir/a", "a", Cond::default()).await.unwrap();
    armed(
        Arc::clone(&d),
        c.rename(
            "evt",
            "dir/a",
            "dir/b",
            replace_check(false),
            Versioning::Off,
        ),
    )
    .await
    .unwrap();
    armed(
        Arc::clone(&d),
        c.rename_prefix("evt", "dir/", "moved/", 1024),
    )
    .await
    .unwrap();
    armed(Arc::clone(&d), c.delete("evt", "moved/b", &Cond::default()))
        .await
        .unwrap();
    armed(Arc::clone(&d), c.remove_dir("evt", "moved/"))
        .await
        .unwrap();
    let bodies = |got: &[crate::events::Outboxed]| -> Vec<String> {
        got.iter()
            .map(|o| String::from_utf8(o.body.clone()).unwrap())
            .collect()
    };
    let mut want = vec![
        "k put e1",
        "k put tagged",
        "both/c put copied",
        "k removed",
        "dir/ put marker",
        "dir/a put a",
        "dir/a removed",
        "dir/b put a",
    ];
    let got = c.outbox_scan("d", None, 100).await.unwrap();
    // A directory rename moves every key under it: each is a removal and a write, in an order
    // of the backend's.
    let all = bodies(&got);
    assert_eq!(all[..want.len()], want[..]);
    let moved = &all[want.len()..];
    let mut moved_sorted = moved[..4].to_vec();
    moved_sorted.sort();
    assert_eq!(
        moved_sorted,
        [
            "dir/ removed",
            "dir/b removed",
            "moved/ put marker",
            "moved/b put a"
        ]
    );
    assert_eq!(moved[4..], ["moved/b removed", "moved/ removed"]);
    assert!(got.windows(2).all(|w| w[0].seq < w[1].seq));
    assert_eq!(c.outbox_len("d").await.unwrap(), 14);
    assert_eq!(
        bodies(&c.outbox_scan("d2", None, 10).await.unwrap()),
        ["both/c put copied"]
    );
    assert_eq!(c.outbox_len("other").await.unwrap(), 0);
    // Pages follow the sequence.
    let first = c.outbox_scan("d", None, 3).await.unwrap();
    assert_eq!(first[..], got[..3]);
    let next = c.outbox_scan("d", Some(first[2].seq), 3).await.unwrap();
    assert_eq!(next[..], got[3..6]);
    c.outbox_remove("d", &[got[0].seq, got[1].seq])
        .await
        .unwrap();
    assert_eq!(c.outbox_scan("d", None, 100).await.unwrap()[..], got[2..]);
    let t = c.outbox_add("d", b"test".to_vec()).await.unwrap();
    assert!(t > got.last().unwrap().seq);
    assert_eq!(c.outbox_len("d").await.unwrap(), 13);
    // A versioned bucket: each version's write, its marker, a version removed by id.
    let v = Cond {
        versioning: Versioning::Enabled,
        ..Default::default()
    };
    put("both/v", "v1", v.clone()).await.unwrap();
    let del = armed(Arc::clone(&d), c.delete("evt", "both/v", &v))
        .await
        .unwrap();
    assert!(del.delete_marker);
    let marker = del.version_id.unwrap();
    armed(
        Arc::clone(&d),
        c.delete_version("evt", "both/v", &marker, None),
    )
    .await
    .unwrap();
    let ids = c
        .list_versions(
            "evt",
            &VersionQuery {
                max: 10,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    for e in ids.entries {
        if let Some(id) = e.record.version_id.clone() {
            armed(Arc::clone(&d), c.delete_version("evt", &e.key, &id, None))
                .await
                .unwrap();
        }
    }
    want = vec![
        "both/v put v1",
        "both/v marker",
        "both/v version removed",
        "both/v version removed",
    ];
    let got2 = bodies(&c.outbox_scan("d2", Some(got[2].seq), 100).await.unwrap());
    assert_eq!(got2, want);
    // The bucket goes; its last changes' entries stay until delivered.
    c.delete("evt", "both/c", &Cond::default()).await.unwrap();
    c.delete_bucket("evt").await.unwrap();
    let left = c.outbox_scan("d", None, 100).await.unwrap();
    assert_eq!(left.len(), 13 + 4);
    let seqs: Vec<u64> = left.iter().map(|o| o.seq).collect();
    c.outbox_remove("d", &seqs).await.unwrap();
    let d2: Vec<u64> = c
        .outbox_scan("d2", None, 100)
        .await
        .unwrap()
        .iter()
        .map(|o| o.seq)
        .collect();
    assert_eq!(d2.len(), 5);
    c.outbox_remove("d2", &d2).await.unwrap();
    assert_eq!(c.outbox_len("d").await.unwrap(), 0);
    assert_eq!(c.outbox_len("d2").await.unwrap(), 0);
    assert!(c.outbox_scan("d", None, 10).await.unwrap().is_empty());
}

/// Every test above, in sequence, on one catalog.
pub async fn run_all(c: Arc<dyn Catalog>) {
    events(Arc::clone(&c)).await;
    inline_payloads(Arc::clone(&c), "inl").await;
    empty_and_delete_bucket(&*c, "inl").await;
    renames(&*c).await;
    conditional_renames(Arc::clone(&c)).await;
    versioned_renames(Arc::clone(&c)).await;
    run_all_but_renames(c).await;
}
