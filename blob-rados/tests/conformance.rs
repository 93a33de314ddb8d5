//! The blob boundary's suite against the RADOS blob store on a real cluster (`LODE_CEPH_CONF`).

use std::sync::Arc;
use std::time::Duration;

use lode_blob_rados::{RadosBlobConfig, RadosBlobStore, chunk_oid};
use lode_datapath::{AlignedBuf, BlobStore};
use lode_rados::{Cluster, ClusterConfig, PoolSpec};

async fn store(grace: Duration) -> Option<(RadosBlobStore, lode_rados::IoCtx)> {
    let Some(conf) = std::env::var_os("LODE_CEPH_CONF") else {
        if std::env::var("LODE_SKIP_CLUSTER_TESTS").as_deref() == Ok("1") {
            eprintln!("skipped: no cluster");
            return None;
        }
        panic!("LODE_CEPH_CONF is not set (start a cluster with scripts/ceph-dev.sh)");
    };
    let c: Arc<Cluster> = Cluster::connect(&ClusterConfig {
        conf_path: conf.into(),
        ..ClusterConfig::default()
    })
    .await
    .unwrap();
    c.create_pool("lode-blob-test", &PoolSpec::replicated(3))
        .await
        .unwrap();
    let ns = format!("t{:x}", rand::random::<u64>());
    let io = c
        .ioctx("lode-blob-test")
        .await
        .unwrap()
        .with_namespace(&ns)
        .await
        .unwrap();
    Some((
        RadosBlobStore::new(
            io.clone(),
            RadosBlobConfig {
                release_grace: grace,
            },
        ),
        io,
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rados_blob_store_conforms() {
    let Some((s, io)) = store(Duration::from_millis(200)).await else {
        return;
    };
    lode_datapath::blob::conformance::round_trip(&s).await;
    // Released chunks are gone once the grace period passed; nothing else is left behind.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !io.list_objects(None).await.unwrap().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "released chunks were not removed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncommitted_write_leaves_no_chunk_and_a_damaged_chunk_is_an_error() {
    let Some((s, io)) = store(Duration::from_secs(60)).await else {
        return;
    };
    let mut w = s.writer(2);
    let mut b = AlignedBuf::with_capacity(5000);
    b.extend_from_slice(&[7u8; 5000]);
    w.push(b).await.unwrap();
    let (chunks, pending) = w.finish().await.unwrap();
    assert_eq!(io.list_objects(None).await.unwrap().len(), 1);
    // A flipped byte in the stored chunk is detected on read.
    io.write_full(&chunk_oid(&chunks[0].extent), vec![8u8; 5000])
        .await
        .unwrap();
    assert!(matches!(
        s.read(&chunks[0]).await,
        Err(lode_datapath::ChunkError::Corrupt { .. })
    ));
    drop(pending);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !io.list_objects(None).await.unwrap().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "an uncommitted chunk was left behind"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
