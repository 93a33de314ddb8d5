//! The catalog conformance suite against the RADOS backend on a real cluster
//! (`LODE_CEPH_CONF`, as `./test.sh` sets it after `scripts/ceph-dev.sh start`). Each run uses
//! a fresh RADOS namespace of one shared replicated pool. Then what the backend stores for
//! inline payloads, and records written in format 2.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use lode_catalog::{Catalog, CatalogError, ListQuery, ObjectRecord, conformance};
use lode_catalog_rados::{RadosCatalog, esc, unesc};
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
    let io = c
        .ioctx(POOL)
        .await
        .unwrap()
        .with_namespace(&ns)
        .await
        .unwrap();
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
        assert_eq!(v[0], records::FORMAT_V3, "{k}");
        assert!(
            !v.windows(want.len()).any(|w| w == want),
            "{k} holds its payload"
        );
    }
    for k in ["keep/inline", "keep/chunked"] {
        cat.delete("leak", k).await.unwrap();
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
        },
    )
    .await
    .unwrap();
    let recs = conformance::legacy_records();
    // Format 3's encoding of a record with its bytes inside, with format 2's byte, is format
    // 2's (the records fixture test pins format 2's bytes).
    let entries: Vec<(Vec<u8>, Vec<u8>)> = recs
        .iter()
        .map(|(k, r)| {
            let mut key = vec![b'o'];
            key.extend(esc(k.as_bytes()));
            let mut v = records::encode(r);
            v[0] = records::FORMAT_V2;
            (key, v)
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
    assert_eq!(format(&o, "a"), Some(records::FORMAT_V3));
    // A rename moves the value as it is (and a payload, here none).
    cat.rename("old", "b", "b2", false).await.unwrap();
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
        assert!(cat.delete("old", k).await.unwrap().previous.is_some());
    }
    assert!(tagged_entries(&io, "old", b'd').await.is_empty());
    cat.delete_bucket("old").await.unwrap();
}
