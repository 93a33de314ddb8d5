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
};

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
    }
}

fn bucket_rec(owner: &str) -> BucketRecord {
    BucketRecord {
        created_ms: 1,
        owner: owner.into(),
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
    c.delete("bk-a", "k").await.unwrap();
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
    c.delete("cond", "k").await.unwrap();
    c.delete_bucket("cond").await.unwrap();
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
        set(&c.delete("refs", "b").await.unwrap().released),
        set(&[c1, c2])
    );
    // Deleting a missing key releases nothing.
    let r = c.delete("refs", "b").await.unwrap();
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
        set(&c.delete("refs", "a").await.unwrap().released),
        set(&[c3])
    );
    c.delete_bucket("refs").await.unwrap();
}

/// The plain definition of an S3 listing over a sorted key list.
fn model(keys: &BTreeSet<String>, prefix: &str, delim: Option<&str>) -> Vec<String> {
    let mut out: Vec<String> = vec![];
    for k in keys {
        let Some(rest) = k.strip_prefix(prefix) else {
            continue;
        };
        let e = match delim.and_then(|d| rest.find(d).map(|i| (i, d))) {
            Some((i, d)) => format!("{prefix}{}", &rest[..i + d.len()]),
            None => k.clone(),
        };
        if out.last() != Some(&e) {
            out.push(e);
        }
    }
    out
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
                let want = model(&keys, prefix, delim);
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
    let zero = c
        .list(
            "lst",
            &ListQuery {
                prefix: "",
                delimiter: None,
                after: None,
                max: 0,
            },
        )
        .await
        .unwrap();
    assert!(zero.objects.is_empty() && !zero.truncated);
    for k in &keys {
        c.delete("lst", k).await.unwrap();
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
        set(&c.delete("mp", "k").await.unwrap().released),
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
        c.delete("race", &key).await.unwrap();
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
        c.rename("ren", "d/x", "t", true).await,
        Err(CatalogError::PreconditionFailed)
    ));
    c.rename("ren", "d/x", "d/z", false).await.unwrap();
    assert!(c.get("ren", "d/x").await.unwrap().is_none());
    assert_eq!(c.get("ren", "d/z").await.unwrap().unwrap().etag, "d/x");
    assert!(matches!(
        c.rename("ren", "nope", "t", false).await,
        Err(CatalogError::NoSuchKey)
    ));
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
        c.delete("ren", k).await.unwrap();
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

/// Every test above, in sequence, on one catalog.
pub async fn run_all(c: Arc<dyn Catalog>) {
    buckets(&*c).await;
    conditions(&*c).await;
    references(&*c).await;
    listing(&*c).await;
    multipart(&*c).await;
    upload_listing(&*c).await;
    renames(&*c).await;
    system_keys(&*c).await;
    racing_conditional_puts(c).await;
}
