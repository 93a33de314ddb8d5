//! The catalog conformance suite against the RADOS backend on a real cluster
//! (`LODE_CEPH_CONF`, as `./test.sh` sets it after `scripts/ceph-dev.sh start`). Each run uses
//! a fresh RADOS namespace of one shared replicated pool.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lode_catalog::{Catalog, CatalogError, conformance};
use lode_catalog_rados::RadosCatalog;
use lode_rados::{Cluster, ClusterConfig, PoolSpec};

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
