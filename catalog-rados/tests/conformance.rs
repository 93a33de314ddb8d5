//! The catalog conformance suite against the RADOS backend on a real cluster
//! (`LODE_CEPH_CONF`, as `./test.sh` sets it after `scripts/ceph-dev.sh start`). Each run uses
//! a fresh RADOS namespace of one shared replicated pool. Then what the backend stores for
//! inline payloads, and records written in format 2.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use std::collections::BTreeMap;

use lode_catalog::{
    Catalog, CatalogError, Cond, ListQuery, ObjectRecord, Refs, Versioning, conformance,
    replace_check,
};
use lode_catalog_rados::{PartitionConfig, PartitionInfo, RadosCatalog, SplitStop, esc, unesc};
use lode_metadata::records;
use lode_rados::{Cluster, ClusterConfig, IoCtx, PoolSpec, WriteOp};

const POOL: &str = "lode-catalog-test";

async fn cluster() -> Option<Arc<Cluster>> {
    let Some(conf) = std::env::var_os("LODE_CEPH_CONF") else {
        if std::env::var("LODE_SKIP_CLUSTER_TESTS").as_deref() == Ok("1") {
            eprintln!("skipped: no cluster");
            return None;
        }
        panic!(
            "LODE_CEPH_CONF is not set: start a cluster with `scripts/ceph-dev.sh start DIR` and \
             set LODE_CEPH_CONF=DIR/ceph.conf (or LODE_SKIP_CLUSTER_TESTS=1 to skip)"
        );
    };
    let cfg = ClusterConfig {
        conf_path: conf.into(),
        op_timeout: Duration::from_secs(30),
        ..ClusterConfig::default()
    };
    Some(Cluster::connect(&cfg).await.expect("connect"))
}

fn namespace(tag: &str) -> String {
    let ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{tag}-{ns:x}")
}

async fn catalog(c: &Arc<Cluster>, tag: &str) -> RadosCatalog {
    c.create_pool(POOL, &PoolSpec::replicated(3))
        .await
        .expect("test pool");
    RadosCatalog::open(c, POOL, &namespace(tag))
        .await
        .expect("open the catalog")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rados_backend_conforms() {
    let Some(c) = cluster().await else { return };
    conformance::run_all(Arc::new(catalog(&c, "conf").await)).await;
}

/// Two catalogs on the same namespace stand for two gateways: a write through one is read
/// through the other at once, and their conditional writes race correctly.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_gateways_share_one_namespace() {
    let Some(c) = cluster().await else { return };
    c.create_pool(POOL, &PoolSpec::replicated(3)).await.unwrap();
    let ns = namespace("two");
    let a: Arc<dyn Catalog> = Arc::new(RadosCatalog::open(&c, POOL, &ns).await.unwrap());
    let c2 = cluster().await.unwrap();
    let b: Arc<dyn Catalog> = Arc::new(RadosCatalog::open(&c2, POOL, &ns).await.unwrap());
    a.create_bucket(
        "shared",
        lode_catalog::BucketRecord {
            created_ms: 1,
            owner: "o".into(),
            tags: vec![],
            settings: vec![],
        },
    )
    .await
    .unwrap();
    assert!(b.bucket("shared").await.unwrap().is_some());
    for round in 0..50 {
        let key = format!("k{round}");
        let rec = conformance::record("x", &[]);
        let absent = lode_catalog::Cond::absent();
        let fresh = lode_catalog::Refs::Fresh;
        let (ra, rb) = tokio::join!(
            a.put("shared", &key, rec.clone(), &absent, fresh),
            b.put("shared", &key, rec.clone(), &absent, fresh)
        );
        let wins = [&ra, &rb].iter().filter(|r| r.is_ok()).count();
        assert_eq!(wins, 1, "round {round}: {ra:?} {rb:?}");
        for r in [ra, rb] {
            if let Err(e) = r {
                assert!(matches!(e, CatalogError::PreconditionFailed), "{e}");
            }
        }
        assert!(a.get("shared", &key).await.unwrap().is_some());
    }
}

/// Renders every change as its key, for destination "d".
struct KeyDraft;

impl lode_catalog::events::EventDraft for KeyDraft {
    fn render(&self, c: &lode_catalog::events::Change<'_>, _: u64) -> Vec<(String, Vec<u8>)> {
        vec![("d".into(), c.key.as_bytes().to_vec())]
    }
}

/// Two gateways' catalogs over namespace `ns`; the first made bucket `ev` and committed a put
/// of each of `keys` with an event for destination `d` (the key as its body).
async fn two_gateways_with_events(
    c: &Arc<Cluster>,
    ns: &str,
    keys: &[&str],
) -> (Arc<dyn Catalog>, Arc<dyn Catalog>) {
    use lode_catalog::events::{EventDraft, armed};
    c.create_pool(POOL, &PoolSpec::replicated(3)).await.unwrap();
    let a: Arc<dyn Catalog> = Arc::new(RadosCatalog::open(c, POOL, ns).await.unwrap());
    let b: Arc<dyn Catalog> = Arc::new(RadosCatalog::open(c, POOL, ns).await.unwrap());
    a.create_bucket("ev", conformance::bucket_rec("o"))
        .await
        .unwrap();
    let d: Arc<dyn EventDraft> = Arc::new(KeyDraft);
    for k in keys {
        let rec = conformance::record(k, &[]);
        armed(
            d.clone(),
            a.put("ev", k, rec, &Cond::default(), Refs::Fresh),
        )
        .await
        .unwrap();
    }
    (a, b)
}

/// The event outbox across gateways: the entries of a gateway that went away (its lease ran
/// out) are adopted by another one, which reads them in order and, once they are removed,
/// removes the dead gateway's registry. A live gateway's entries are never adopted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_gone_gateways_event_outbox_is_adopted() {
    let Some(c) = cluster().await else { return };
    let ns = namespace("adopt");
    let (a, b) = two_gateways_with_events(&c, &ns, &["k1", "k2", "k3"]).await;
    let mine = a.outbox_scan("d", None, 10).await.unwrap();
    assert_eq!(mine.len(), 3);
    // B sees none of a live gateway's entries, however long it looks.
    assert!(b.outbox_scan("d", None, 10).await.unwrap().is_empty());
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(b.outbox_scan("d", None, 10).await.unwrap().is_empty());
    // A goes away (its lease is no longer renewed): B adopts its entries.
    drop(a);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let got = loop {
        let got = b.outbox_scan("d", None, 10).await.unwrap();
        if !got.is_empty() || std::time::Instant::now() > deadline {
            break got;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let keys: Vec<&[u8]> = got.iter().map(|o| &o.body[..]).collect();
    assert_eq!(keys, [b"k1", b"k2", b"k3"]);
    assert_eq!(got, mine);
    assert_eq!(b.outbox_len("d").await.unwrap(), 3);
    let seqs: Vec<u64> = got.iter().map(|o| o.seq).collect();
    b.outbox_remove("d", &seqs).await.unwrap();
    assert_eq!(b.outbox_len("d").await.unwrap(), 0);
    // Emptied, the adopted registry goes (B's own stays).
    let io = c
        .ioctx(POOL)
        .await
        .unwrap()
        .with_namespace(&ns)
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let left = io.omap_get_all("lode.events").await.unwrap().len();
        if left == 1 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{left} registries left"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A gateway stopping gracefully hands its event outbox off: another gateway adopts it at its
/// next upkeep tick (every 5 s), not once the stopped gateway's 20 s lease ran out (the
/// stopped one had renewed it just before).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_gateway_stopping_hands_its_event_outbox_off_at_once() {
    let Some(c) = cluster().await else { return };
    let ns = namespace("handoff");
    let (a, b) = two_gateways_with_events(&c, &ns, &["k1", "k2"]).await;
    let mine = a.outbox_scan("d", None, 10).await.unwrap();
    assert_eq!(mine.len(), 2);
    assert!(b.outbox_scan("d", None, 10).await.unwrap().is_empty());
    a.hand_off().await.unwrap();
    let handed = std::time::Instant::now();
    let got = loop {
        let got = b.outbox_scan("d", None, 10).await.unwrap();
        if !got.is_empty() || handed.elapsed() > Duration::from_secs(30) {
            break got;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(got, mine);
    // One tick of B and its scan; a lease (20 s) would mean the hand-off did nothing.
    assert!(
        handed.elapsed() < Duration::from_secs(12),
        "adopted {:?} after the hand-off",
        handed.elapsed()
    );
    drop(a);
}

/// An erasure-coded pool cannot hold an index: a clear error, and nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_erasure_coded_index_pool_is_refused() {
    let Some(c) = cluster().await else { return };
    c.set_erasure_code_profile(
        "lode-test-ec",
        &[("k", "2"), ("m", "1"), ("crush-failure-domain", "osd")],
    )
    .await
    .unwrap();
    c.create_pool("lode-catalog-test-ec", &PoolSpec::erasure("lode-test-ec"))
        .await
        .unwrap();
    match RadosCatalog::open(&c, "lode-catalog-test-ec", "x").await {
        Err(e) => assert!(e.to_string().contains("erasure-coded"), "{e}"),
        Ok(_) => panic!("an EC index pool was accepted"),
    }
    let io = c.ioctx("lode-catalog-test-ec").await.unwrap();
    assert!(io.list_objects(None).await.unwrap().is_empty());
    assert!(matches!(
        RadosCatalog::open(&c, "no-such-pool", "x").await,
        Err(CatalogError::Backend(_))
    ));
}

/// The index object's omap entries with tag `tag`, as (object key, value).
async fn tagged_entries(io: &IoCtx, bucket: &str, tag: u8) -> Vec<(String, Bytes)> {
    io.omap_get_all(&format!("lode.idx.{bucket}"))
        .await
        .unwrap()
        .into_iter()
        .filter(|(k, _)| k.first() == Some(&tag))
        .map(|(k, v)| (String::from_utf8(unesc(&k[1..]).unwrap()).unwrap(), v))
        .collect()
}

/// A catalog on a fresh namespace, and a handle on that namespace to look at the index.
async fn catalog_and_io(c: &Arc<Cluster>, tag: &str) -> (Arc<dyn Catalog>, IoCtx) {
    c.create_pool(POOL, &PoolSpec::replicated(3)).await.unwrap();
    let ns = namespace(tag);
    let cat = RadosCatalog::open(c, POOL, &ns).await.unwrap();
    let io = io_of(c, &ns).await;
    (Arc::new(cat), io)
}

/// Payloads live under `d<key>` beside their `o<key>` record, which holds none of the
/// bytes; every commit of the suite leaves exactly one payload per record with inline bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rados_payloads_live_apart_and_never_leak() {
    let Some(c) = cluster().await else { return };
    let (cat, io) = catalog_and_io(&c, "payload").await;
    conformance::inline_payloads(Arc::clone(&cat), "leak").await;
    let payloads = tagged_entries(&io, "leak", b'd').await;
    assert_eq!(
        payloads.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
        vec!["keep/inline"]
    );
    let want = conformance::pattern(100, 5);
    assert_eq!(payloads[0].1.as_ref(), &want[..]);
    for (k, v) in tagged_entries(&io, "leak", b'o').await {
        assert_eq!(v[0], records::FORMAT_V7, "{k}");
        assert!(
            !v.windows(want.len()).any(|w| w == want),
            "{k} holds its payload"
        );
    }
    for k in ["keep/inline", "keep/chunked"] {
        cat.delete("leak", k, &Cond::default()).await.unwrap();
    }
    assert!(tagged_entries(&io, "leak", b'd').await.is_empty());
    cat.delete_bucket("leak").await.unwrap();
}

/// Records written in format 2 (the bytes inside the `o` value) read whole through `get`, in
/// head form through `head` and `list`, are split when a commit rewrites them, and move as
/// they are with a directory rename.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rados_reads_and_migrates_format_2_records() {
    let Some(c) = cluster().await else { return };
    let (cat, io) = catalog_and_io(&c, "v2").await;
    cat.create_bucket(
        "old",
        lode_catalog::BucketRecord {
            created_ms: 1,
            owner: "o".into(),
            tags: vec![],
            settings: vec![],
        },
    )
    .await
    .unwrap();
    let recs = conformance::legacy_records();
    // Format 2 (the records fixture test pins format 2's bytes).
    let entries: Vec<(Vec<u8>, Vec<u8>)> = recs
        .iter()
        .map(|(k, r)| {
            let mut key = vec![b'o'];
            key.extend(esc(k.as_bytes()));
            (key, records::encode_v2(r))
        })
        .collect();
    io.operate_write("lode.idx.old", WriteOp::new().omap_set(&entries))
        .await
        .unwrap();
    for (k, r) in &recs {
        assert_eq!(cat.get("old", k).await.unwrap().as_ref(), Some(r));
        let head = cat.head("old", k).await.unwrap().unwrap();
        assert_eq!(head, r.clone().into_head());
    }
    let q = ListQuery {
        prefix: "",
        delimiter: None,
        after: None,
        max: 10,
    };
    let page = cat.list("old", &q).await.unwrap();
    assert_eq!(page.objects.len(), recs.len());
    for ((k, got), (want_k, want)) in page.objects.iter().zip(&recs) {
        assert_eq!((k.as_str(), got), (*want_k, &want.clone().into_head()));
    }
    cat.update(
        "old",
        "a",
        Arc::new(|r: &ObjectRecord| {
            let mut r = r.clone();
            r.meta.content_type = Some("t/t".into());
            Ok(r)
        }),
    )
    .await
    .unwrap();
    assert_eq!(
        cat.get("old", "a").await.unwrap().unwrap().segments,
        recs[0].1.segments
    );
    let format = |entries: &[(String, Bytes)], k: &str| {
        entries.iter().find(|(x, _)| x == k).map(|(_, v)| v[0])
    };
    let o = tagged_entries(&io, "old", b'o').await;
    assert_eq!(format(&o, "a"), Some(records::FORMAT_V7));
    // A rename moves the value as it is (and a payload, here none).
    cat.rename("old", "b", "b2", replace_check(false), Versioning::Off)
        .await
        .unwrap();
    assert_eq!(
        cat.get("old", "b2").await.unwrap().as_ref(),
        Some(&recs[1].1)
    );
    cat.rename_prefix("old", "d/", "e/", 1024).await.unwrap();
    assert_eq!(
        cat.get("old", "e/x").await.unwrap().as_ref(),
        Some(&recs[2].1)
    );
    let d = tagged_entries(&io, "old", b'd').await;
    assert_eq!(
        d.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
        vec!["a"]
    );
    for k in ["a", "b2", "e/x"] {
        assert!(
            cat.delete("old", k, &Cond::default())
                .await
                .unwrap()
                .previous
                .is_some()
        );
    }
    assert!(tagged_entries(&io, "old", b'd').await.is_empty());
    cat.delete_bucket("old").await.unwrap();
}

// ---------------------------------------------------------------------- partitions and splits

/// A catalog on namespace `ns` whose partitions split at `split_keys` keys, with a claim of
/// `lease`.
async fn partitioned(c: &Arc<Cluster>, ns: &str, split_keys: u64, lease: Duration) -> RadosCatalog {
    c.create_pool(POOL, &PoolSpec::replicated(3)).await.unwrap();
    let cfg = PartitionConfig {
        split_keys,
        split_lease: lease,
        ..Default::default()
    };
    RadosCatalog::open_with(c, POOL, ns, cfg).await.unwrap()
}

/// Puts a record with ETag `etag` at `key`, unconditionally.
async fn put_rec(
    c: &dyn Catalog,
    bucket: &str,
    key: &str,
    etag: &str,
) -> lode_catalog::Result<lode_catalog::Commit> {
    c.put(
        bucket,
        key,
        conformance::record(etag, &[]),
        &Cond::default(),
        Refs::Fresh,
    )
    .await
}

fn bucket_rec() -> lode_catalog::BucketRecord {
    lode_catalog::BucketRecord {
        created_ms: 1,
        owner: "o".into(),
        tags: vec![],
        settings: vec![],
    }
}

/// Every key of a bucket through paged listings of `page` keys: (key, etag).
async fn list_all(c: &dyn Catalog, bucket: &str, page: usize) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = vec![];
    let mut after: Option<String> = None;
    loop {
        let q = ListQuery {
            prefix: "",
            delimiter: None,
            after: after.as_deref(),
            max: page,
        };
        let p = c.list(bucket, &q).await.unwrap();
        out.extend(p.objects.into_iter().map(|(k, r)| (k, r.etag)));
        if !p.truncated {
            return out;
        }
        after = p.last.clone();
    }
}

/// Waits until no partition of `bucket` is being split and no background split check is
/// running (one begun by the last writes may not have claimed its partition yet); returns
/// them.
async fn settled(c: &RadosCatalog, bucket: &str) -> Vec<PartitionInfo> {
    for _ in 0..600 {
        if c.background_splits() == 0 {
            let parts = c.partitions(bucket).await.unwrap();
            if parts.iter().all(|p| !p.splitting) {
                return parts;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("splits of {bucket} did not settle");
}

/// What each partition object holds: every entry inside its own range, no split log, no
/// claim; the ranges chain from the empty key to no bound.
async fn assert_clean_partitions(io: &IoCtx, parts: &[PartitionInfo]) {
    assert!(parts[0].lo.is_empty());
    assert!(parts.last().unwrap().hi.is_none());
    for w in parts.windows(2) {
        assert_eq!(w[0].hi.as_ref(), Some(&w[1].lo), "ranges chain");
    }
    for p in parts {
        let xattrs = io
            .operate_read(&p.oid, lode_rados::ReadOp::new().getxattrs())
            .await
            .unwrap();
        assert!(
            xattrs.xattr("lode.split").is_none(),
            "{}: claim left",
            p.oid
        );
        assert!(xattrs.xattr("lode.state").is_none(), "{}: building", p.oid);
        for (k, _) in io.omap_get_all(&p.oid).await.unwrap() {
            assert_ne!(k[0], b'l', "{}: split log left", p.oid);
            let pos = &k[1..];
            assert!(
                pos >= p.lo.as_slice() && p.hi.as_deref().is_none_or(|h| pos < h),
                "{}: entry {:?} outside its range",
                p.oid,
                String::from_utf8_lossy(&k)
            );
        }
    }
}

/// The suite with partitions of 6 keys: its listings, uploads, bucket deletions and
/// conditional writes cross partition boundaries that splits move while it runs. (Renames
/// across partitions are refused: `renames_and_bucket_deletion_across_partitions`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rados_backend_conforms_with_tiny_partitions() {
    let Some(c) = cluster().await else { return };
    let cat = partitioned(&c, &namespace("tiny"), 6, Duration::from_secs(30)).await;
    conformance::run_all_but_renames(Arc::new(cat)).await;
}

/// Two gateways write (puts, overwrites, deletes, monotonic appends, multipart uploads) while
/// partitions split under them and two listers list; every full listing is in order without
/// duplicates and holds every key that was there all along; at the end the index equals the
/// reference model exactly and every partition holds only its own range.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn splits_under_concurrent_writers_and_listers_match_a_reference_model() {
    let Some(c) = cluster().await else { return };
    let ns = namespace("split");
    let a = Arc::new(partitioned(&c, &ns, 40, Duration::from_secs(30)).await);
    let c2 = cluster().await.unwrap();
    let b = Arc::new(partitioned(&c2, &ns, 40, Duration::from_secs(30)).await);
    a.create_bucket("s", bucket_rec()).await.unwrap();
    // Keys that stay put all along.
    let stable: Vec<String> = (0..60).map(|i| format!("stable/{:03}", i * 7)).collect();
    for k in &stable {
        put_rec(&*a, "s", k, k).await.unwrap();
    }
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut writers = vec![];
    for w in 0..4usize {
        let cat: Arc<RadosCatalog> = if w % 2 == 0 { a.clone() } else { b.clone() };
        writers.push(tokio::spawn(async move {
            let mut model: BTreeMap<String, String> = BTreeMap::new();
            let mut seed = 0x9e37_79b9_u64 ^ w as u64;
            let mut rnd = |n: u64| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed % n
            };
            for i in 0..150usize {
                let op = rnd(10);
                if op < 4 {
                    // Random keys of this writer (disjoint from the others').
                    let key = format!("r/{:03}/{w}", rnd(120));
                    let etag = format!("{key}@{i}");
                    let rec = conformance::record(&etag, &[]);
                    cat.put("s", &key, rec, &Cond::default(), Refs::Fresh)
                        .await
                        .unwrap();
                    model.insert(key, etag);
                } else if op < 6 {
                    let key = format!("r/{:03}/{w}", rnd(120));
                    cat.delete("s", &key, &Cond::default()).await.unwrap();
                    model.remove(&key);
                } else if op < 9 {
                    // Monotonic names: every writer appends at the end.
                    let key = format!("shard-{i:06}-{w}");
                    let rec = conformance::record(&key, &[]);
                    cat.put("s", &key, rec, &Cond::default(), Refs::Fresh)
                        .await
                        .unwrap();
                    model.insert(key.clone(), key);
                } else {
                    // A multipart upload, its part written and completed a moment apart.
                    let key = format!("mp/{i:03}/{w}");
                    let id = format!("u{i}-{w}");
                    let up = lode_catalog::UploadRecord {
                        initiated_ms: 1,
                        meta: Default::default(),
                        checksum_algorithm: None,
                        checksum_type: None,
                        owner: "o".into(),
                    };
                    cat.create_upload("s", &key, &id, up).await.unwrap();
                    let part = lode_catalog::PartRecord {
                        size: 1,
                        etag: "p".into(),
                        last_modified_ms: 1,
                        checksums: Default::default(),
                        segments: vec![lode_catalog::Segment::Inline(b"x".to_vec())],
                    };
                    cat.put_part("s", &key, &id, 1, part).await.unwrap();
                    let etag = format!("{key}@mp");
                    let e2 = etag.clone();
                    let f: lode_catalog::CompleteFn = Arc::new(move |st| {
                        assert_eq!(st.parts.len(), 1, "the part moved with its upload");
                        Ok(lode_catalog::Completion {
                            record: conformance::record(&e2, &[]),
                            used_parts: vec![1],
                        })
                    });
                    cat.complete("s", &key, &id, &Cond::default(), f)
                        .await
                        .unwrap();
                    model.insert(key, etag);
                }
            }
            model
        }));
    }
    let mut listers = vec![];
    for l in 0..2usize {
        let cat: Arc<RadosCatalog> = if l == 0 { a.clone() } else { b.clone() };
        let (done, stable) = (done.clone(), stable.clone());
        listers.push(tokio::spawn(async move {
            let mut rounds = 0;
            while !done.load(std::sync::atomic::Ordering::Relaxed) || rounds == 0 {
                let all = list_all(cat.as_ref(), "s", 17 + l * 10).await;
                for w in all.windows(2) {
                    assert!(w[0].0 < w[1].0, "listing out of order: {:?}", w);
                }
                let keys: std::collections::BTreeSet<&str> =
                    all.iter().map(|(k, _)| k.as_str()).collect();
                for k in &stable {
                    assert!(keys.contains(k.as_str()), "listing lost {k}");
                }
                rounds += 1;
            }
            rounds
        }));
    }
    let mut model: BTreeMap<String, String> =
        stable.iter().map(|k| (k.clone(), k.clone())).collect();
    for w in writers {
        model.extend(w.await.unwrap());
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    for l in listers {
        assert!(l.await.unwrap() > 0);
    }
    let parts = settled(&a, "s").await;
    assert!(parts.len() >= 4, "only {} partitions", parts.len());
    let want: Vec<(String, String)> = model.into_iter().collect();
    assert_eq!(list_all(a.as_ref(), "s", 1000).await, want);
    assert_eq!(list_all(b.as_ref(), "s", 7).await, want);
    for (k, etag) in &want {
        assert_eq!(&b.get("s", k).await.unwrap().unwrap().etag, etag, "{k}");
    }
    assert_eq!(parts.iter().map(|p| p.keys).sum::<usize>(), want.len());
    let io = io_of(&c, &ns).await;
    assert_clean_partitions(&io, &parts).await;
    // No upload is left behind, in any partition.
    let ups = a
        .list_uploads(
            "s",
            &lode_catalog::UploadQuery {
                max: 1000,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(ups.uploads.is_empty(), "{:?}", ups.uploads);
}

/// Monotonic names (`shard-000123`) split the last partition near its top: the partitions
/// left behind stay nearly full (a median split would leave them half full) and the new last
/// one takes the new keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn monotonic_keys_leave_full_partitions_behind() {
    let Some(c) = cluster().await else { return };
    let cat = partitioned(&c, &namespace("mono"), 32, Duration::from_secs(30)).await;
    cat.create_bucket("m", bucket_rec()).await.unwrap();
    for i in 0..300 {
        let key = format!("shard-{i:06}");
        put_rec(&cat, "m", &key, &key).await.unwrap();
    }
    let parts = settled(&cat, "m").await;
    assert!(parts.len() >= 5, "{parts:?}");
    assert_eq!(parts.iter().map(|p| p.keys).sum::<usize>(), 300);
    for p in &parts[..parts.len() - 1] {
        assert!(p.keys >= 24, "a partition left {} keys: {parts:?}", p.keys);
    }
}

/// Splits cut short, as by a gateway killed in the middle: another gateway finds each one
/// after its claim ran out and abandons it (not sealed: the old partition is still the truth)
/// or finishes it (sealed, or activated but not cleaned). Nothing is lost either way, and
/// writes during the copy land.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn splits_cut_short_are_taken_over() {
    let Some(c) = cluster().await else { return };
    let ns = namespace("takeover");
    let lease = Duration::from_millis(1500);
    let dead = partitioned(&c, &ns, 1_000_000, lease).await;
    let live = partitioned(&c, &ns, 1_000_000, lease).await;
    let io = io_of(&c, &ns).await;
    for (n, stop) in [SplitStop::Copied, SplitStop::Sealed, SplitStop::Activated]
        .into_iter()
        .enumerate()
    {
        let bucket = format!("t{n}");
        live.create_bucket(&bucket, bucket_rec()).await.unwrap();
        let mut model = BTreeMap::new();
        for i in 0..50 {
            let key = format!("k{i:03}");
            put_rec(&live, &bucket, &key, &key).await.unwrap();
            model.insert(key.clone(), key);
        }
        assert!(dead.split_until(&bucket, "k025", stop).await.unwrap());
        // Writes on both sides of the split key, through the other gateway, while the
        // claim holds (the sealed range waits for the claim to run out, then is finished).
        for key in ["k010", "k030", "k049", "k060"] {
            let etag = format!("{key}@{stop:?}");
            put_rec(&live, &bucket, key, &etag).await.unwrap();
            model.insert(key.to_owned(), etag);
        }
        live.delete(&bucket, "k040", &Cond::default())
            .await
            .unwrap();
        model.remove("k040");
        // A later check (or a bucket deletion) takes over whatever is left.
        tokio::time::sleep(lease).await;
        live.check_partition(&bucket, "k000").await.unwrap();
        let parts = settled(&live, &bucket).await;
        let want: Vec<(String, String)> = model.clone().into_iter().collect();
        assert_eq!(list_all(&live, &bucket, 9).await, want, "{stop:?}");
        assert_eq!(list_all(&dead, &bucket, 1000).await, want, "{stop:?}");
        assert_clean_partitions(&io, &parts).await;
        let expect_parts = if stop == SplitStop::Copied { 1 } else { 2 };
        assert_eq!(parts.len(), expect_parts, "{stop:?}: {parts:?}");
        if stop == SplitStop::Copied {
            // Abandoned, so it can split again.
            assert!(live.split_at(&bucket, "k025").await.unwrap());
            assert_eq!(list_all(&live, &bucket, 1000).await, want);
            assert_eq!(settled(&live, &bucket).await.len(), 2);
        }
    }
}

/// Every version of a bucket, paged `max` at a time: (key, version id), and the common
/// prefixes under `delimiter`.
async fn list_versions_all(
    c: &dyn Catalog,
    bucket: &str,
    delimiter: Option<&str>,
    max: usize,
) -> (Vec<(String, Option<String>)>, Vec<String>) {
    let mut q = lode_catalog::VersionQuery {
        delimiter: delimiter.map(str::to_owned),
        max,
        ..Default::default()
    };
    let (mut entries, mut prefixes) = (vec![], vec![]);
    loop {
        let p = c.list_versions(bucket, &q).await.unwrap();
        entries.extend(p.entries.into_iter().map(|e| (e.key, e.record.version_id)));
        prefixes.extend(p.prefixes);
        if !p.truncated {
            return (entries, prefixes);
        }
        let (k, v) = p.next.unwrap();
        (q.key_marker, q.version_marker) = (Some(k), v);
    }
}

/// A split left activated but not cleaned (its gateway died before the clean): the old
/// partition still holds its copies of the moved range past its new end. Version listings
/// through it, whole, paged, and with a delimiter, list every version and prefix of the new
/// partition once: the leftovers are skipped, and the listing's cursor does not move past
/// what the new partition holds below them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn version_listings_across_a_split_left_uncleaned_miss_nothing() {
    let Some(c) = cluster().await else { return };
    let ns = namespace("vleft");
    let lease = Duration::from_secs(60);
    let dead = partitioned(&c, &ns, 1_000_000, lease).await;
    let live = partitioned(&c, &ns, 1_000_000, lease).await;
    live.create_bucket("b", bucket_rec()).await.unwrap();
    let en = Cond {
        versioning: lode_catalog::Versioning::Enabled,
        ..Default::default()
    };
    let mut keys: Vec<String> = (0..40).map(|i| format!("k{i:03}")).collect();
    keys.extend(["p/1", "p/2", "q/1"].map(str::to_owned));
    for (i, key) in keys.iter().enumerate() {
        for v in 0..3 {
            if v == 1 && i % 5 == 0 {
                live.delete("b", key, &en).await.unwrap();
            } else {
                live.put(
                    "b",
                    key,
                    conformance::record(&format!("{key}.{v}"), &[]),
                    &en,
                    Refs::Fresh,
                )
                .await
                .unwrap();
            }
        }
    }
    let before: Vec<_> = [
        list_versions_all(&live, "b", None, 1000).await,
        list_versions_all(&live, "b", Some("/"), 1000).await,
    ]
    .into();
    assert_eq!(before[0].0.len(), keys.len() * 3);
    assert_eq!(before[1].1, vec!["p/".to_owned(), "q/".to_owned()]);
    assert!(
        dead.split_until("b", "k020", SplitStop::Activated)
            .await
            .unwrap()
    );
    let parts = live.partitions("b").await.unwrap();
    assert_eq!(parts.len(), 2, "{parts:?}");
    for max in [1000, 7, 2] {
        assert_eq!(
            list_versions_all(&live, "b", None, max).await,
            before[0],
            "max {max}"
        );
        assert_eq!(
            list_versions_all(&live, "b", Some("/"), max).await,
            before[1],
            "max {max}"
        );
    }
}

/// Two gateways of namespace `tag`, the writer on a connection of its own (its op counts
/// are its alone), and bucket `b` holding `k000`..`k039` (the model), written by the writer.
struct TwoGateways {
    c: Arc<Cluster>,
    c2: Arc<Cluster>,
    ns: String,
    lease: Duration,
    splitter: RadosCatalog,
    writer: Arc<RadosCatalog>,
    model: BTreeMap<String, String>,
}

async fn two_gateways(tag: &str) -> Option<TwoGateways> {
    let c = cluster().await?;
    let ns = namespace(tag);
    let lease = Duration::from_millis(1500);
    let splitter = partitioned(&c, &ns, 1_000_000, lease).await;
    let c2 = cluster().await.unwrap();
    let writer = Arc::new(partitioned(&c2, &ns, 1_000_000, lease).await);
    writer.create_bucket("b", bucket_rec()).await.unwrap();
    let mut model = BTreeMap::new();
    for i in 0..40 {
        let key = format!("k{i:03}");
        put_rec(&*writer, "b", &key, &key).await.unwrap();
        model.insert(key.clone(), key);
    }
    Some(TwoGateways {
        c,
        c2,
        ns,
        lease,
        splitter,
        writer,
        model,
    })
}

/// Reads and writes of the index pool by connection `c` so far.
fn index_ops(c: &Cluster) -> (u64, u64) {
    c.op_counts()
        .into_iter()
        .filter(|(pool, ..)| pool == POOL)
        .fold((0, 0), |(r, w), (_, r2, w2)| (r + r2, w + w2))
}

/// The object keys that bucket `b`'s first partition holds split log entries for, sorted
/// (a log entry's key is `l` and the omap key it logs: `o` and the escaped object key).
async fn logged_keys(io: &IoCtx) -> Vec<String> {
    let mut logged: Vec<String> = tagged_entries(io, "b", b'l')
        .await
        .into_iter()
        .filter_map(|(k, _)| k.strip_prefix('o').map(str::to_owned))
        .collect();
    logged.sort();
    logged
}

/// Puts `keys` (each its own name as value) at once through `writer`, each new.
async fn put_new_at_once(writer: &Arc<RadosCatalog>, keys: &[String]) {
    let tasks: Vec<_> = keys
        .iter()
        .map(|key| {
            let (w, key) = (writer.clone(), key.clone());
            tokio::spawn(async move { put_rec(&*w, "b", &key, &key).await })
        })
        .collect();
    for t in tasks {
        assert!(t.await.unwrap().unwrap().previous.is_none());
    }
}

/// The keys of `keys` at or above `split`, sorted.
fn at_or_above(keys: &[String], split: &str) -> Vec<String> {
    let mut above: Vec<String> = keys
        .iter()
        .filter(|k| k.as_str() >= split)
        .cloned()
        .collect();
    above.sort();
    above
}

/// New keys committed while a split copies their partition (claimed, not yet sealed) still
/// go blind, several to an op and with no read, and log what they change above the split key
/// as every commit there does; the split, abandoned and done again, leaves every key in place.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn new_keys_commit_blind_and_logged_while_a_split_copies() {
    let Some(TwoGateways {
        c,
        c2,
        ns,
        lease,
        splitter,
        writer,
        mut model,
    }) = two_gateways("blindsplit").await
    else {
        return;
    };
    assert!(
        splitter
            .split_until("b", "k020", SplitStop::Copied)
            .await
            .unwrap()
    );
    // One read of the partition: the writer's cache now holds the claim's epoch.
    assert!(writer.get("b", "k001").await.unwrap().is_some());
    let (reads0, writes0) = index_ops(&c2);
    // Half below the split key, half above it.
    let new: Vec<String> = (0..16)
        .map(|i| match i % 2 {
            0 => format!("k{:03}x", 4 + i),
            _ => format!("k{:03}y", 24 + i),
        })
        .collect();
    put_new_at_once(&writer, &new).await;
    let (reads, writes) = index_ops(&c2);
    assert_eq!(reads - reads0, 0, "new keys read nothing");
    assert!(
        writes - writes0 < new.len() as u64 / 2,
        "{} ops for {} new keys",
        writes - writes0,
        new.len()
    );
    // A log entry for each key above the split key, and for none below it.
    let io = io_of(&c, &ns).await;
    assert_eq!(logged_keys(&io).await, at_or_above(&new, "k020"));
    model.extend(new.iter().map(|k| (k.clone(), k.clone())));
    // The claim runs out: the split is abandoned (it never sealed), then done again.
    tokio::time::sleep(lease).await;
    writer.check_partition("b", "k000").await.unwrap();
    assert!(writer.split_at("b", "k020").await.unwrap());
    let parts = settled(&writer, "b").await;
    assert_eq!(parts.len(), 2, "{parts:?}");
    assert_clean_partitions(&io, &parts).await;
    let want: Vec<(String, String)> = model.into_iter().collect();
    assert_eq!(list_all(&*writer, "b", 7).await, want);
    assert_eq!(list_all(&splitter, "b", 1000).await, want);
}

/// New keys whose group commit fails because the partition's epoch changed under it (a
/// split's claim from another gateway) read the partition again, once for all of them, and go
/// blind again, batched: they do not each take a read and a guarded write of their own, and
/// the bucket's later new keys still commit blind (an epoch change is not a miss of a key).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_group_commit_failed_by_an_epoch_change_commits_blind_again() {
    let Some(TwoGateways {
        c,
        c2,
        ns,
        lease,
        splitter,
        writer,
        mut model,
    }) = two_gateways("blindstale").await
    else {
        return;
    };
    // The writer caches the partition, then another gateway's claim changes its epoch.
    assert!(writer.get("b", "k001").await.unwrap().is_some());
    assert!(
        splitter
            .split_until("b", "k020", SplitStop::Copied)
            .await
            .unwrap()
    );
    let (reads0, writes0) = index_ops(&c2);
    let new: Vec<String> = (0..16).map(|i| format!("k{:03}n", 2 * i)).collect();
    put_new_at_once(&writer, &new).await;
    let (reads1, writes1) = index_ops(&c2);
    // One read sorts the failed batch out and one reads the partition again, for all of
    // them (each reading it for itself: 17 reads).
    assert!(
        reads1 - reads0 <= 3,
        "{} index reads for {} new keys after an epoch change",
        reads1 - reads0,
        new.len()
    );
    assert!(
        writes1 - writes0 < new.len() as u64 / 2,
        "{} write ops for {} new keys after an epoch change",
        writes1 - writes0,
        new.len()
    );
    // Above the split key, logged for the split as every commit there is.
    let io = io_of(&c, &ns).await;
    assert_eq!(logged_keys(&io).await, at_or_above(&new, "k020"));
    model.extend(new.iter().map(|k| (k.clone(), k.clone())));
    // Later new keys: blind, no read.
    let more: Vec<String> = (0..16).map(|i| format!("k{:03}m", 2 * i + 1)).collect();
    put_new_at_once(&writer, &more).await;
    let (reads2, writes2) = index_ops(&c2);
    assert_eq!(reads2 - reads1, 0, "later new keys read nothing");
    assert!(writes2 - writes1 < more.len() as u64 / 2);
    model.extend(more.iter().map(|k| (k.clone(), k.clone())));
    tokio::time::sleep(lease).await;
    writer.check_partition("b", "k000").await.unwrap();
    let want: Vec<(String, String)> = model.into_iter().collect();
    assert_eq!(list_all(&*writer, "b", 7).await, want);
    assert_eq!(list_all(&splitter, "b", 1000).await, want);
}

/// A writer waiting for another gateway's split to hand its range over is woken by the
/// activation's announcement, not by reading the new partition again every few milliseconds
/// (which, with many writers, slowed the very ops the activation waited for).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn waiters_for_another_gateways_split_wake_at_its_activation_without_polling() {
    let Some(TwoGateways {
        c,
        c2,
        ns,
        splitter,
        writer,
        mut model,
        ..
    }) = two_gateways("wake").await
    else {
        return;
    };
    let io = io_of(&c, &ns).await;
    // The writer caches the partition; the watch for activations is up by now.
    assert!(writer.get("b", "k001").await.unwrap().is_some());
    let hold = Duration::from_millis(1000);
    let split = {
        let s = Arc::new(splitter);
        let s2 = s.clone();
        (
            s,
            tokio::spawn(async move {
                s2.split_until("b", "k020", SplitStop::HoldSealed(hold))
                    .await
            }),
        )
    };
    // Until the seal: P names its successor.
    let sealed = loop {
        let x = io
            .operate_read("lode.idx.b", lode_rados::ReadOp::new().getxattrs())
            .await
            .unwrap();
        if x.xattr("lode.next").is_some() {
            break std::time::Instant::now();
        }
        assert!(!split.1.is_finished(), "the split ended before its seal");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let (reads0, _) = index_ops(&c2);
    put_rec(&*writer, "b", "k030x", "new").await.unwrap();
    let waited = sealed.elapsed();
    let (reads1, _) = index_ops(&c2);
    assert!(split.1.await.unwrap().unwrap());
    model.insert("k030x".into(), "new".into());
    // It waited for the hand-over (the seal held for `hold`)...
    assert!(waited >= hold * 7 / 10, "the write waited only {waited:?}");
    // ...reading the new partition a few times (7 here), not every 5-50 ms (27 reads in
    // about a second with the announcements off).
    assert!(
        reads1 - reads0 < 10,
        "{} index reads by a writer waiting {waited:?} for another gateway's split",
        reads1 - reads0
    );
    let parts = settled(&writer, "b").await;
    assert_eq!(parts.len(), 2, "{parts:?}");
    assert_clean_partitions(&io, &parts).await;
    let want: Vec<(String, String)> = model.into_iter().collect();
    assert_eq!(list_all(&*writer, "b", 7).await, want);
    assert_eq!(list_all(&*split.0, "b", 1000).await, want);
}

/// A bucket whose index spans partitions: a rename across them is refused and changes
/// nothing; deletion refuses while any partition holds a key (and the bucket takes writes
/// afterwards), then removes every partition object; the name can be created again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn renames_and_bucket_deletion_across_partitions() {
    let Some(c) = cluster().await else { return };
    let ns = namespace("xpart");
    let cat = partitioned(&c, &ns, 1_000_000, Duration::from_secs(30)).await;
    cat.create_bucket("x", bucket_rec()).await.unwrap();
    for key in ["a/1", "a/2", "m/1", "z/1", "z/2"] {
        put_rec(&cat, "x", key, key).await.unwrap();
    }
    assert!(cat.split_at("x", "m/1").await.unwrap());
    assert!(cat.split_at("x", "z/1").await.unwrap());
    assert_eq!(cat.partitions("x").await.unwrap().len(), 3);
    let before = list_all(&cat, "x", 100).await;
    assert!(matches!(
        cat.rename("x", "a/1", "z/9", replace_check(false), Versioning::Off)
            .await,
        Err(CatalogError::CrossPartition)
    ));
    assert!(matches!(
        cat.rename_prefix("x", "a/", "z/new/", 1024).await,
        Err(CatalogError::CrossPartition)
    ));
    assert_eq!(list_all(&cat, "x", 100).await, before);
    // Within one partition a rename is one commit as always.
    cat.rename("x", "z/1", "z/3", replace_check(false), Versioning::Off)
        .await
        .unwrap();
    assert!(cat.get("x", "z/3").await.unwrap().is_some());
    // Removing a directory marker whose directory goes on in the next partition.
    put_rec(&cat, "x", "d/", "d").await.unwrap();
    put_rec(&cat, "x", "d/x", "dx").await.unwrap();
    assert!(cat.split_at("x", "d/x").await.unwrap());
    assert!(matches!(
        cat.remove_dir("x", "d/").await,
        Err(CatalogError::DirectoryNotEmpty)
    ));
    cat.delete("x", "d/x", &Cond::default()).await.unwrap();
    cat.remove_dir("x", "d/").await.unwrap();
    // Not empty while the last partition holds a key; the others reopen.
    for key in ["a/1", "a/2", "m/1", "z/3"] {
        cat.delete("x", key, &Cond::default()).await.unwrap();
    }
    assert!(matches!(
        cat.delete_bucket("x").await,
        Err(CatalogError::BucketNotEmpty)
    ));
    put_rec(&cat, "x", "a/1", "again").await.unwrap();
    for key in ["a/1", "z/2"] {
        cat.delete("x", key, &Cond::default()).await.unwrap();
    }
    let oids: Vec<String> = cat
        .partitions("x")
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.oid)
        .collect();
    assert_eq!(oids.len(), 4);
    cat.delete_bucket("x").await.unwrap();
    for oid in &oids {
        assert!(
            io_of(&c, &ns).await.stat(oid).await.is_err(),
            "{oid} outlived its bucket"
        );
    }
    assert!(matches!(
        put_rec(&cat, "x", "z/5", "z").await,
        Err(CatalogError::NoSuchBucket)
    ));
    cat.create_bucket("x", bucket_rec()).await.unwrap();
    put_rec(&cat, "x", "z/5", "z").await.unwrap();
    assert_eq!(
        list_all(&cat, "x", 10).await,
        vec![("z/5".into(), "z".into())]
    );
}

async fn io_of(c: &Arc<Cluster>, ns: &str) -> IoCtx {
    c.ioctx(POOL)
        .await
        .unwrap()
        .with_namespace(ns)
        .await
        .unwrap()
}

/// A takeover cut short itself (it swapped the claim on the old partition, then died before
/// it swapped the new partition's builder): the next gateway still finishes the split.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_takeover_cut_short_is_taken_over_again() {
    let Some(c) = cluster().await else { return };
    let ns = namespace("retake");
    let lease = Duration::from_millis(800);
    let dead = partitioned(&c, &ns, 1_000_000, lease).await;
    let live = partitioned(&c, &ns, 1_000_000, lease).await;
    let io = io_of(&c, &ns).await;
    live.create_bucket("r", bucket_rec()).await.unwrap();
    for i in 0..20 {
        let key = format!("k{i:02}");
        put_rec(&live, "r", &key, &key).await.unwrap();
    }
    assert!(
        dead.split_until("r", "k10", SplitStop::Sealed)
            .await
            .unwrap()
    );
    // The claim as a dead takeover leaves it: another builder token, expired.
    let first = "lode.idx.r";
    let x = io
        .operate_read(first, lode_rados::ReadOp::new().getxattrs())
        .await
        .unwrap();
    let claim = String::from_utf8(x.xattr("lode.split").unwrap().to_vec()).unwrap();
    let mut f: Vec<&str> = claim.split('|').collect();
    f[2] = "ghost-builder";
    f[3] = "1";
    io.operate_write(first, WriteOp::new().setxattr("lode.split", f.join("|")))
        .await
        .unwrap();
    tokio::time::sleep(lease).await;
    // A read in the moved range waits, then finishes the split itself.
    assert_eq!(live.get("r", "k15").await.unwrap().unwrap().etag, "k15");
    live.check_partition("r", "k00").await.unwrap();
    let parts = settled(&live, "r").await;
    assert_eq!(parts.len(), 2);
    assert_clean_partitions(&io, &parts).await;
    let want: Vec<(String, String)> = (0..20)
        .map(|i| (format!("k{i:02}"), format!("k{i:02}")))
        .collect();
    assert_eq!(list_all(&live, "r", 6).await, want);
}

/// A split whose gateway died after the seal holds the writes of the moved range only for the
/// sealed lease (5 s), not the copy's lease (30 s here): the seal shortened the claim, and a
/// writer waiting for the new partition finishes the split itself once the claim ran out.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sealed_split_holds_its_range_only_for_the_sealed_lease() {
    let Some(c) = cluster().await else { return };
    let ns = namespace("sealed");
    let lease = Duration::from_secs(30);
    let dead = partitioned(&c, &ns, 1_000_000, lease).await;
    let live = partitioned(&c, &ns, 1_000_000, lease).await;
    let io = io_of(&c, &ns).await;
    live.create_bucket("s", bucket_rec()).await.unwrap();
    for i in 0..20 {
        let key = format!("k{i:02}");
        put_rec(&live, "s", &key, &key).await.unwrap();
    }
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    assert!(
        dead.split_until("s", "k10", SplitStop::Sealed)
            .await
            .unwrap()
    );
    let x = io
        .operate_read("lode.idx.s", lode_rados::ReadOp::new().getxattrs())
        .await
        .unwrap();
    let claim = String::from_utf8(x.xattr("lode.split").unwrap().to_vec()).unwrap();
    let deadline: i64 = claim.rsplit('|').next().unwrap().parse().unwrap();
    assert!(
        deadline <= before + 5_000 + 2_000 && deadline >= before + 4_000,
        "the sealed claim runs for the sealed lease: {claim} (sealed at about {before})"
    );
    // A write in the moved range waits for Q, then finishes the split and lands.
    put_rec(&live, "s", "k15", "new").await.unwrap();
    assert_eq!(live.get("s", "k15").await.unwrap().unwrap().etag, "new");
    let parts = settled(&live, "s").await;
    assert_eq!(parts.len(), 2);
    assert_clean_partitions(&io, &parts).await;
    let want: Vec<(String, String)> = (0..20)
        .map(|i| {
            let k = format!("k{i:02}");
            let v = if i == 15 { "new".to_owned() } else { k.clone() };
            (k, v)
        })
        .collect();
    assert_eq!(list_all(&live, "s", 6).await, want);
}

/// Concurrent commits of new keys go as group commits (one op per partition for the keys
/// waiting): among racing commits of one key exactly one sees it absent, whether the others
/// carry `If-None-Match: *` (then they fail) or not (then they replace it and return the
/// record they replaced, so that each value written is replaced once or is the last).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_new_keys_group_commit_exactly_once() {
    let Some(c) = cluster().await else { return };
    let cat = Arc::new(catalog(&c, "group").await);
    let writers = 8usize;
    for round in 0..12 {
        // A fresh bucket each round: its blind commits are not yet turned off by misses.
        let b = format!("b{round}");
        cat.create_bucket(&b, bucket_rec()).await.unwrap();
        // The first commit reads the partition (the cache the blind commits rely on).
        put_rec(&*cat, &b, "warm", "w").await.unwrap();
        let start = Arc::new(tokio::sync::Barrier::new(2 * writers));
        let mut tasks = vec![];
        for t in 0..2 * writers {
            let (cat, b, start) = (cat.clone(), b.clone(), start.clone());
            tasks.push(tokio::spawn(async move {
                let exclusive = t % 2 == 0;
                let cond = Cond {
                    if_none_match_any: exclusive,
                    ..Cond::default()
                };
                let k = if exclusive { "excl" } else { "plain" };
                start.wait().await;
                let r = cat
                    .put(
                        &b,
                        k,
                        conformance::record(&format!("t{t}"), &[]),
                        &cond,
                        Refs::Fresh,
                    )
                    .await;
                (
                    k,
                    t,
                    r.map(|c| c.previous.map(|p| p.etag))
                        .map_err(|e| e.to_string()),
                )
            }));
        }
        type Outcome = std::result::Result<Option<String>, String>;
        let mut results: BTreeMap<&str, Vec<(usize, Outcome)>> = BTreeMap::new();
        for t in tasks {
            let (k, t, r) = t.await.unwrap();
            results.entry(k).or_default().push((t, r));
        }
        for (k, rs) in &results {
            let absent = rs.iter().filter(|(_, r)| matches!(r, Ok(None))).count();
            assert_eq!(
                absent, 1,
                "round {round}, {k}: one commit finds it new: {rs:?}"
            );
            let last = cat.head(&b, k).await.unwrap().unwrap().etag;
            if *k == "excl" {
                let failed = rs
                    .iter()
                    .filter(|(_, r)| matches!(r, Err(e) if e.contains("precondition")))
                    .count();
                assert_eq!(failed, writers - 1, "round {round}: {rs:?}");
                let winner = rs.iter().find(|(_, r)| matches!(r, Ok(None))).unwrap().0;
                assert_eq!(last, format!("t{winner}"));
            } else {
                let mut seen: Vec<String> = rs
                    .iter()
                    .filter_map(|(_, r)| r.clone().expect("plain puts succeed"))
                    .collect();
                seen.push(last);
                seen.sort();
                let mut written: Vec<String> = rs.iter().map(|(t, _)| format!("t{t}")).collect();
                written.sort();
                assert_eq!(seen, written, "round {round}: {rs:?}");
            }
        }
    }
}

/// Delimiter listings over directories of very different sizes (the reads shrink while they
/// walk large directories and grow again after them), page by page at several page sizes,
/// against the expected entries.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn delimiter_listings_over_large_and_small_directories() {
    let Some(c) = cluster().await else { return };
    let cat = catalog(&c, "delim").await;
    cat.create_bucket("b", bucket_rec()).await.unwrap();
    let mut keys = vec!["b".to_owned(), "e".to_owned(), "d/x".to_owned()];
    for (dir, n) in [("a", 50), ("c", 300), ("f", 1200), ("g", 3)] {
        keys.extend((0..n).map(|i| format!("{dir}/{i:04}")));
    }
    keys.extend((0..40).map(|i| format!("h{i:02}")));
    use futures::StreamExt;
    let mut jobs =
        futures::stream::iter(keys.iter().map(|k| put_rec(&cat, "b", k, "e"))).buffer_unordered(32);
    while let Some(r) = jobs.next().await {
        r.unwrap();
    }
    let mut want: Vec<String> = ["a/", "b", "c/", "d/", "e", "f/", "g/"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    want.extend((0..40).map(|i| format!("h{i:02}")));
    for max in [1usize, 2, 3, 7, 1000] {
        let mut got: Vec<String> = vec![];
        let mut after: Option<String> = None;
        loop {
            let q = ListQuery {
                prefix: "",
                delimiter: Some("/"),
                after: after.as_deref(),
                max,
            };
            let p = cat.list("b", &q).await.unwrap();
            assert!(p.objects.len() + p.common_prefixes.len() <= max);
            let mut page: Vec<String> = p.objects.iter().map(|(k, _)| k.clone()).collect();
            page.extend(p.common_prefixes.iter().cloned());
            page.sort();
            got.extend(page);
            if !p.truncated {
                break;
            }
            after = p.last.clone();
        }
        assert_eq!(got, want, "max {max}");
    }
}

/// A delimiter listing that took several reads of one partition is remembered with the
/// partition's version; the same query answers from it only while that version holds: a key
/// written under a listed directory, a new directory, a directory emptied, and a write through
/// another gateway each make the next listing read the partition again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_remembered_delimiter_page_serves_only_an_unchanged_partition() {
    let Some(c) = cluster().await else { return };
    let ns = namespace("pages");
    let cat = partitioned(&c, &ns, 1_000_000, Duration::from_secs(30)).await;
    let other = partitioned(&c, &ns, 1_000_000, Duration::from_secs(30)).await;
    cat.create_bucket("b", bucket_rec()).await.unwrap();
    let mut keys = vec!["z".to_owned()];
    for (dir, n) in [("a", 1100), ("b", 5), ("c", 1100)] {
        keys.extend((0..n).map(|i| format!("{dir}/{i:04}")));
    }
    use futures::StreamExt;
    let mut jobs =
        futures::stream::iter(keys.iter().map(|k| put_rec(&cat, "b", k, "e"))).buffer_unordered(32);
    while let Some(r) = jobs.next().await {
        r.unwrap();
    }
    let q = ListQuery {
        prefix: "",
        delimiter: Some("/"),
        after: None,
        max: 1000,
    };
    let listed = |p: lode_catalog::ListPage| {
        let mut v: Vec<String> = p.objects.into_iter().map(|(k, _)| k).collect();
        v.extend(p.common_prefixes);
        v.sort();
        v
    };
    let hits = || cat.remembered_page_hits();
    assert_eq!(
        listed(cat.list("b", &q).await.unwrap()),
        ["a/", "b/", "c/", "z"]
    );
    assert_eq!(hits(), 0);
    assert_eq!(
        listed(cat.list("b", &q).await.unwrap()),
        ["a/", "b/", "c/", "z"]
    );
    assert_eq!(hits(), 1, "the unchanged partition's page is used");
    // The last listing was answered from memory: the next one makes no seek before its first
    // read shows whether the partition changed (it did not: none is made).
    let made = cat.seeks_made_ahead();
    assert!(
        made >= 1,
        "the listing after a walk made its seeks beside its first read"
    );
    assert_eq!(
        listed(cat.list("b", &q).await.unwrap()),
        ["a/", "b/", "c/", "z"]
    );
    assert_eq!(hits(), 2);
    assert_eq!(
        cat.seeks_made_ahead(),
        made,
        "no seek is made for a page in memory"
    );
    // Another query is not that page.
    let q2 = ListQuery { max: 2, ..q };
    assert_eq!(listed(cat.list("b", &q2).await.unwrap()), ["a/", "b/"]);
    assert_eq!(hits(), 2);

    put_rec(&cat, "b", "b/new", "e").await.unwrap();
    assert_eq!(cat.seeks_taken_ahead(), 0);
    assert_eq!(
        listed(cat.list("b", &q).await.unwrap()),
        ["a/", "b/", "c/", "z"]
    );
    assert_eq!(hits(), 2, "a write to the partition voids the page");
    assert!(
        cat.seeks_taken_ahead() >= 1,
        "the last listing's seeks were made ahead"
    );
    put_rec(&cat, "b", "bb/1", "e").await.unwrap();
    assert_eq!(
        listed(cat.list("b", &q).await.unwrap()),
        ["a/", "b/", "bb/", "c/", "z"]
    );
    for k in (0..5)
        .map(|i| format!("b/{i:04}"))
        .chain(["b/new".to_owned()])
    {
        cat.delete("b", &k, &Cond::default()).await.unwrap();
    }
    assert_eq!(
        listed(cat.list("b", &q).await.unwrap()),
        ["a/", "bb/", "c/", "z"]
    );
    assert_eq!(
        listed(cat.list("b", &q).await.unwrap()),
        ["a/", "bb/", "c/", "z"]
    );
    assert_eq!(hits(), 3);
    put_rec(&other, "b", "y", "e").await.unwrap();
    assert_eq!(
        listed(cat.list("b", &q).await.unwrap()),
        ["a/", "bb/", "c/", "y", "z"]
    );
    assert_eq!(hits(), 3, "another gateway's write voids the page");
    let mut jobs = futures::stream::iter((0..1100).map(|i| format!("bc/{i:04}")))
        .map(|k| {
            let cat = &cat;
            async move { put_rec(cat, "b", &k, "e").await }
        })
        .buffer_unordered(32);
    while let Some(r) = jobs.next().await {
        r.unwrap();
    }
    let want = ["a/", "bb/", "bc/", "c/", "y", "z"];
    assert_eq!(listed(cat.list("b", &q).await.unwrap()), want);
    assert_eq!(listed(cat.list("b", &q).await.unwrap()), want);
    assert_eq!(hits(), 4);
}

/// A gateway that used a bucket a moment ago knows it exists without IO (the hint that spares
/// a chunked PUT its bucket check); once another gateway deleted it, the next commit through
/// the first answers `NoSuchBucket` (blind or not) and the hint is dropped; a bucket made
/// again under the same name takes writes through both.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_known_bucket_deleted_elsewhere_fails_the_commit_and_is_forgotten() {
    let Some(c) = cluster().await else { return };
    c.create_pool(POOL, &PoolSpec::replicated(3)).await.unwrap();
    let ns = namespace("known");
    let a = RadosCatalog::open(&c, POOL, &ns).await.unwrap();
    let c2 = cluster().await.unwrap();
    let b = RadosCatalog::open(&c2, POOL, &ns).await.unwrap();
    assert!(!a.bucket_known("gone"));
    a.create_bucket("gone", bucket_rec()).await.unwrap();
    put_rec(&a, "gone", "k1", "e").await.unwrap();
    put_rec(&a, "gone", "k2", "e").await.unwrap();
    assert!(a.bucket_known("gone"));
    b.delete("gone", "k1", &Cond::default()).await.unwrap();
    b.delete("gone", "k2", &Cond::default()).await.unwrap();
    b.delete_bucket("gone").await.unwrap();
    assert!(a.bucket_known("gone"), "a hint, not the truth");
    assert!(matches!(
        put_rec(&a, "gone", "k3", "e").await,
        Err(CatalogError::NoSuchBucket)
    ));
    assert!(!a.bucket_known("gone"));
    b.create_bucket("gone", bucket_rec()).await.unwrap();
    put_rec(&a, "gone", "k4", "e").await.unwrap();
    put_rec(&b, "gone", "k5", "e").await.unwrap();
    let keys: Vec<String> = list_all(&a, "gone", 10)
        .await
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(keys, ["k4", "k5"]);
}

/// A gateway's view of a bucket's first partition (range and epoch) must not admit a blind
/// commit into the partition of a bucket made again under the same name: the same sequence
/// of splits would bring its epoch to the same number, with another range. Gateway A knows
/// the first life's first partition (split at "m"); B deletes the bucket, makes it again and
/// splits it at "g"; A's new key "h" must land where listings find it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_view_of_a_deleted_bucket_never_admits_a_commit_into_its_successor() {
    let Some(c) = cluster().await else { return };
    c.create_pool(POOL, &PoolSpec::replicated(3)).await.unwrap();
    let ns = namespace("reborn");
    let a = RadosCatalog::open(&c, POOL, &ns).await.unwrap();
    let c2 = cluster().await.unwrap();
    let b = RadosCatalog::open(&c2, POOL, &ns).await.unwrap();
    a.create_bucket("r", bucket_rec()).await.unwrap();
    for k in ["a", "c", "m", "p"] {
        put_rec(&a, "r", k, "e").await.unwrap();
    }
    assert!(a.split_at("r", "m").await.unwrap());
    // A's view of the first partition: [.., "m").
    put_rec(&a, "r", "b", "e").await.unwrap();
    for k in ["a", "b", "c", "m", "p"] {
        b.delete("r", k, &Cond::default()).await.unwrap();
    }
    b.delete_bucket("r").await.unwrap();
    b.create_bucket("r", bucket_rec()).await.unwrap();
    for k in ["a", "c", "g", "p"] {
        put_rec(&b, "r", k, "e").await.unwrap();
    }
    assert!(b.split_at("r", "g").await.unwrap());
    put_rec(&a, "r", "h", "e").await.unwrap();
    let keys: Vec<String> = list_all(&b, "r", 10)
        .await
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(keys, ["a", "c", "g", "h", "p"]);
    assert!(b.get("r", "h").await.unwrap().is_some());
}

/// Versions live beside their key: a split moves a key's versions and head with it, never
/// between them; versions count toward a split, and a partition full of one key's versions
/// does not split (there is no point between keys); a bucket with versions left is not empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn versions_move_with_their_key_and_weigh_on_splits() {
    let Some(c) = cluster().await else { return };
    let ns = namespace("vsplit");
    let cat = partitioned(&c, &ns, 16, Duration::from_secs(30)).await;
    cat.create_bucket("v", bucket_rec()).await.unwrap();
    let en = Cond {
        versioning: lode_catalog::Versioning::Enabled,
        ..Default::default()
    };
    // One key's versions only: 40 entries, nowhere to split.
    for i in 0..40 {
        cat.put(
            "v",
            "only",
            conformance::record(&format!("o{i}"), &[]),
            &en,
            Refs::Fresh,
        )
        .await
        .unwrap();
    }
    assert!(!cat.check_partition("v", "only").await.unwrap());
    assert_eq!(settled(&cat, "v").await.len(), 1);
    // Three more keys with 6 versions each (a delete marker among them): the 58 entries of
    // 4 keys split between keys.
    for k in ["a", "m", "z"] {
        for i in 0..6 {
            if i == 3 {
                cat.delete("v", k, &en).await.unwrap();
            } else {
                cat.put(
                    "v",
                    k,
                    conformance::record(&format!("{k}{i}"), &[]),
                    &en,
                    Refs::Fresh,
                )
                .await
                .unwrap();
            }
        }
    }
    cat.check_partition("v", "a").await.unwrap();
    let parts = settled(&cat, "v").await;
    assert!(parts.len() >= 2, "{parts:?}");
    assert_clean_partitions(&io_of(&c, &ns).await, &parts).await;
    let q = lode_catalog::VersionQuery {
        max: 1000,
        ..Default::default()
    };
    let listed = cat.list_versions("v", &q).await.unwrap();
    let mut counts = std::collections::BTreeMap::new();
    for e in &listed.entries {
        *counts.entry(e.key.as_str()).or_insert(0) += 1;
    }
    assert_eq!(
        counts.into_iter().collect::<Vec<_>>(),
        vec![("a", 6), ("m", 6), ("only", 40), ("z", 6)]
    );
    // Paged 7 at a time across the partitions: the same listing.
    let (paged, _) = list_versions_all(&cat, "v", None, 7).await;
    let whole: Vec<_> = listed
        .entries
        .iter()
        .map(|e| (e.key.clone(), e.record.version_id.clone()))
        .collect();
    assert_eq!(paged, whole);
    // Every key's current state survived the move.
    assert!(cat.get("v", "a").await.unwrap().is_some());
    assert_eq!(cat.get("v", "only").await.unwrap().unwrap().etag, "o39");
    // Emptied of current objects, the bucket still holds versions.
    for k in ["a", "m", "only", "z"] {
        cat.delete("v", k, &Cond::default()).await.unwrap();
    }
    assert!(matches!(
        cat.delete_bucket("v").await,
        Err(CatalogError::BucketNotEmpty)
    ));
    for e in cat
        .list_versions(
            "v",
            &lode_catalog::VersionQuery {
                max: 1000,
                ..Default::default()
            },
        )
        .await
        .unwrap()
        .entries
    {
        let id = e.record.version_id.unwrap_or_else(|| "null".into());
        cat.delete_version("v", &e.key, &id, None).await.unwrap();
    }
    cat.delete_bucket("v").await.unwrap();
}

/// Version listings racing versioned writes (overwrites and deletes of a few keys): every
/// listing, paged two at a time, lists each version at most once and each key's versions
/// newest first, though versions move from current to noncurrent between its reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn version_listings_racing_versioned_writes_list_each_version_once() {
    let Some(c) = cluster().await else { return };
    let cat =
        Arc::new(partitioned(&c, &namespace("vrace"), 1_000_000, Duration::from_secs(30)).await);
    cat.create_bucket("r", bucket_rec()).await.unwrap();
    let en = Cond {
        versioning: lode_catalog::Versioning::Enabled,
        ..Default::default()
    };
    let keys = ["a", "b", "c"];
    for k in keys {
        for i in 0..3 {
            cat.put(
                "r",
                k,
                conformance::record(&format!("{k}{i}"), &[]),
                &en,
                Refs::Fresh,
            )
            .await
            .unwrap();
        }
    }
    // 300 versioned commits while listings run.
    let writer = {
        let (cat, en) = (Arc::clone(&cat), en.clone());
        tokio::spawn(async move {
            for n in 0..300u32 {
                let k = keys[n as usize % keys.len()];
                if n % 4 == 3 {
                    cat.delete("r", k, &en).await.unwrap();
                } else {
                    cat.put(
                        "r",
                        k,
                        conformance::record(&format!("w{n}"), &[]),
                        &en,
                        Refs::Fresh,
                    )
                    .await
                    .unwrap();
                }
            }
        })
    };
    let mut round = 0;
    while round == 0 || !writer.is_finished() {
        round += 1;
        let mut q = lode_catalog::VersionQuery {
            max: 2,
            ..Default::default()
        };
        let mut seen: Vec<(String, String)> = vec![];
        loop {
            let p = cat.list_versions("r", &q).await.unwrap();
            for e in &p.entries {
                let id = e.record.version_id.clone().unwrap_or_else(|| "null".into());
                seen.push((e.key.clone(), id));
            }
            if !p.truncated {
                break;
            }
            let (k, v) = p.next.unwrap();
            (q.key_marker, q.version_marker) = (Some(k), v);
        }
        let mut sorted = seen.clone();
        sorted.sort();
        let mut unique = sorted.clone();
        unique.dedup();
        assert_eq!(
            unique.len(),
            seen.len(),
            "round {round}: a version listed twice: {seen:?}"
        );
        assert_eq!(
            sorted, seen,
            "round {round}: not in key order, newest first: {seen:?}"
        );
    }
    writer.await.unwrap();
    assert!(round > 1, "listings ran while the writer wrote");
}

/// Reads of versions by their id are point reads, as GETs are: a versioned dataset read by
/// version id while an ingest writes another key range of its partition splits between them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reads_of_versions_by_id_count_toward_a_split_for_load() {
    let Some(c) = cluster().await else { return };
    let ns = namespace("vload");
    let cat = Arc::new(partitioned(&c, &ns, 1_000_000, Duration::from_secs(30)).await);
    cat.create_bucket("hv", bucket_rec()).await.unwrap();
    let en = Cond {
        versioning: lode_catalog::Versioning::Enabled,
        ..Default::default()
    };
    for i in 0..100 {
        let k = format!("samples/{i:04}");
        cat.put("hv", &k, conformance::record("s", &[]), &en, Refs::Fresh)
            .await
            .unwrap();
    }
    let q = lode_catalog::VersionQuery {
        max: 1000,
        ..Default::default()
    };
    let ids: Vec<(String, String)> = cat
        .list_versions("hv", &q)
        .await
        .unwrap()
        .entries
        .into_iter()
        .map(|e| (e.key, e.record.version_id.expect("a version id")))
        .collect();
    assert_eq!(ids.len(), 100);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (cat, stop, ids) = (Arc::clone(&cat), Arc::clone(&stop), ids.clone());
        tokio::spawn(async move {
            let mut i = 0usize;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let (k, id) = &ids[(i * 37) % ids.len()];
                assert!(cat.get_version("hv", k, id).await.unwrap().is_some());
                i += 1;
            }
        })
    };
    let start = std::time::Instant::now();
    let mut n = 0u64;
    while start.elapsed() < Duration::from_secs(30) {
        let k = format!("ingest/{n:06}");
        cat.put("hv", &k, conformance::record("w", &[]), &en, Refs::Fresh)
            .await
            .unwrap();
        n += 1;
        if n.is_multiple_of(20) && cat.partitions("hv").await.unwrap().len() > 1 {
            break;
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    reader.await.unwrap();
    let parts = settled(&cat, "hv").await;
    assert_eq!(
        parts.len(),
        2,
        "split between the ingest and the samples: {parts:?}"
    );
    // Every version is where its key is, and reads back.
    for (k, id) in &ids {
        assert!(cat.get_version("hv", k, id).await.unwrap().is_some(), "{k}");
    }
}

/// A partition written in one key range while it is read in another is split between the two
/// (splits for load): the reads then go to a partition that the writes do not touch, and keys
/// written later on the writes' side stay there. Reads and writes of one range split nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_partition_written_in_one_range_and_read_in_another_is_split_between_them() {
    let Some(c) = cluster().await else { return };
    let ns = namespace("load");
    let cat = Arc::new(partitioned(&c, &ns, 1_000_000, Duration::from_secs(30)).await);
    cat.create_bucket("h", bucket_rec()).await.unwrap();
    for i in 0..200 {
        put_rec(&*cat, "h", &format!("samples/{i:04}"), "s")
            .await
            .unwrap();
    }
    for i in 0..5 {
        put_rec(&*cat, "h", &format!("ckpt/{i}"), "c")
            .await
            .unwrap();
    }
    // Reads of the samples while one writer does `write(n)`, until `until` or `done()`.
    let run = |write: fn(u64) -> String, until: Duration, done: fn(usize) -> bool| {
        let cat = Arc::clone(&cat);
        async move {
            let start = std::time::Instant::now();
            let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let reader = {
                let (cat, stop) = (Arc::clone(&cat), Arc::clone(&stop));
                tokio::spawn(async move {
                    let mut i = 0u64;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let k = format!("samples/{:04}", (i * 37) % 200);
                        assert!(cat.head("h", &k).await.unwrap().is_some(), "{k}");
                        i += 1;
                    }
                })
            };
            let mut n = 0u64;
            while start.elapsed() < until {
                put_rec(&*cat, "h", &write(n), "w").await.unwrap();
                n += 1;
                if n.is_multiple_of(20) && done(cat.partitions("h").await.unwrap().len()) {
                    break;
                }
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            reader.await.unwrap();
            n
        }
    };
    // 1. Overwrites of the samples while they are read: 4.5 s (more windows than a split for
    //    load needs in a row), no split.
    run(
        |n| format!("samples/{:04}", (n * 13) % 200),
        Duration::from_millis(4500),
        |_| false,
    )
    .await;
    let parts = settled(&cat, "h").await;
    assert_eq!(parts.len(), 1, "{parts:?}");
    // 2. An ingest of new keys and checkpoint overwrites while the samples are read: split
    //    between `ingest/` and `samples/` (at `j`, so that later ingest keys stay below).
    let ingested = run(
        |n| {
            if n.is_multiple_of(4) {
                format!("ckpt/{}", n % 5)
            } else {
                format!("ingest/{n:06}")
            }
        },
        Duration::from_secs(30),
        |parts| parts > 1,
    )
    .await;
    let parts = settled(&cat, "h").await;
    assert_eq!(parts.len(), 2, "{parts:?}");
    assert_eq!(parts[1].lo, b"j".to_vec(), "{parts:?}");
    assert_eq!(parts[1].keys, 200, "the samples, alone: {parts:?}");
    let ingest_keys = (0..ingested).filter(|n| !n.is_multiple_of(4)).count();
    assert_eq!(parts[0].keys, 5 + ingest_keys, "{parts:?}");
    let io = io_of(&c, &ns).await;
    assert_clean_partitions(&io, &parts).await;
    // Every key is listed, across the boundary.
    assert_eq!(list_all(&*cat, "h", 97).await.len(), 205 + ingest_keys);
    // 3. The same load again: the partitions are split already, nothing more happens.
    run(
        |n| format!("ingest/{:06}", 1_000_000 + n),
        Duration::from_millis(4500),
        |_| false,
    )
    .await;
    assert_eq!(settled(&cat, "h").await.len(), 2);
}
