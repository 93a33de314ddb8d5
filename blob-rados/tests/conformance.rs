//! The blob boundary's suite against the RADOS blob store on a real cluster (`LODE_CEPH_CONF`).

use std::sync::Arc;
use std::time::Duration;

use lode_blob::{AlignedBuf, BlobStore};
use lode_blob_rados::{RadosBlobConfig, RadosBlobStore, chunk_oid};
use lode_rados::{Cluster, ClusterConfig, PoolSpec};

async fn store(grace: Duration) -> Option<(RadosBlobStore, lode_rados::IoCtx, lode_rados::IoCtx)> {
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
    let gc = io.with_namespace(&format!("{ns}-gc")).await.unwrap();
    Some((
        RadosBlobStore::new(
            io.clone(),
            gc.clone(),
            RadosBlobConfig {
                release_grace: grace,
                dead_after: Duration::from_secs(3),
            },
        ),
        io,
        gc,
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rados_blob_store_conforms() {
    let Some((s, io, _)) = store(Duration::from_millis(200)).await else {
        return;
    };
    lode_blob::conformance::round_trip(&s).await;
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
    let Some((s, io, _)) = store(Duration::from_secs(60)).await else {
        return;
    };
    let mut w = s.writer(2);
    let mut b = AlignedBuf::with_capacity(5000);
    b.extend_from_slice(&[7u8; 5000]);
    w.push(b).await.unwrap();
    let (chunks, pending) = w.finish().await.unwrap();
    assert_eq!(io.list_objects(None).await.unwrap().len(), 1);
    // A flipped byte in the stored chunk is detected on read.
    io.write_full(&chunk_oid(&chunks[0].id), vec![8u8; 5000])
        .await
        .unwrap();
    assert!(matches!(
        s.read(&chunks[0]).await,
        Err(lode_blob::ChunkError::Corrupt { .. })
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

/// Chunks a gateway released stay readable for the grace period, then go, even when the
/// gateway that released them is gone: they wait in its GC log (a queue object in the index
/// pool), which any other gateway's collector drains; a drained, idle log is removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn released_chunks_of_a_gone_gateway_are_collected_by_another() {
    let grace = Duration::from_secs(2);
    let Some((a, io, gc)) = store(grace).await else {
        return;
    };
    let mut w = a.writer(4);
    for fill in 0..3u8 {
        let mut b = AlignedBuf::with_capacity(4096);
        b.extend_from_slice(&[fill; 4096]);
        w.push(b).await.unwrap();
    }
    let (chunks, pending) = w.finish().await.unwrap();
    pending.commit();
    a.release(chunks.clone());
    // The release is queued durably before anything is removed.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let queued = lode_blob_rados::queued_chunks(&gc).await.unwrap();
        if queued.len() == 3 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the release was not queued"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The releasing gateway is gone (nothing of it runs any more).
    drop(a);
    // Another gateway: nothing is due within the grace period, chunks stay readable...
    let b = RadosBlobStore::new(
        io.clone(),
        gc.clone(),
        RadosBlobConfig {
            release_grace: grace,
            dead_after: Duration::from_secs(3),
        },
    );
    let p = b.collect_once().await.unwrap();
    assert_eq!((p.logs, p.removed, p.waiting), (1, 0, 3), "{p:?}");
    assert_eq!(b.read(&chunks[1]).await.unwrap()[0], 1);
    // ...and after it they go, with the queue drained.
    tokio::time::sleep(grace + Duration::from_millis(200)).await;
    let p = b.collect_once().await.unwrap();
    assert_eq!((p.removed, p.waiting), (3, 0), "{p:?}");
    assert!(io.list_objects(Some("lode.c.")).await.unwrap().is_empty());
    assert!(
        lode_blob_rados::queued_chunks(&gc)
            .await
            .unwrap()
            .is_empty()
    );
    // A drained log stays until it has been idle for twice the grace, then goes.
    assert_eq!(b.collect_once().await.unwrap().logs_removed, 0);
    tokio::time::sleep(grace * 2 + Duration::from_millis(200)).await;
    assert_eq!(b.collect_once().await.unwrap().logs_removed, 1);
    assert!(gc.list_objects(None).await.unwrap().is_empty());
}

/// A gateway killed in the middle of writes (its writers never finished nor dropped): once
/// its run is silent for `dead_after`, another gateway's collector removes the chunks of its
/// unfinished writes (journaled intents without a mark) and keeps those of finished ones
/// (marked: they may be committed), then removes the journal. The dead run's late mark (it
/// was only paused) fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunks_of_writes_cut_off_by_a_dead_gateway_are_swept() {
    let Some((a, io, gc)) = store(Duration::from_secs(1)).await else {
        return;
    };
    let fill = |n: u8| {
        let mut b = AlignedBuf::with_capacity(4096);
        b.extend_from_slice(&[n; 4096]);
        b
    };
    // Finished (marked) and committed: must stay.
    let mut w = a.writer(2);
    w.push(fill(1)).await.unwrap();
    let (kept, pending) = w.finish().await.unwrap();
    pending.commit();
    // Cut off: 20 chunks (two journal blocks), never finished; the writer is leaked as a
    // killed process would leave it (no drop cleanup).
    let mut cut = a.writer(4);
    for n in 0..20u8 {
        cut.push(fill(n)).await.unwrap();
    }
    cut.drain().await.unwrap();
    std::mem::forget(cut);
    // A second writer cut off while paused: its late finish must fail after the sweep.
    let mut late = a.writer(1);
    late.push(fill(9)).await.unwrap();
    late.drain().await.unwrap();
    let chunks = |io: lode_rados::IoCtx| async move {
        io.list_objects(Some("lode.c.")).await.unwrap().len()
    };
    assert_eq!(chunks(io.clone()).await, 22);
    // The run's collector never runs again; another gateway's does, after the run is silent.
    let b = RadosBlobStore::new(
        io.clone(),
        gc.clone(),
        RadosBlobConfig {
            release_grace: Duration::from_secs(1),
            dead_after: Duration::from_secs(3),
        },
    );
    let p = b.collect_once().await.unwrap();
    assert_eq!(p.swept, 0, "a live run is never swept: {p:?}");
    tokio::time::sleep(Duration::from_secs(4)).await;
    let p = b.collect_once().await.unwrap();
    assert_eq!(p.swept, 21, "{p:?}");
    assert_eq!(chunks(io.clone()).await, 1);
    assert_eq!(a.read(&kept[0]).await.unwrap()[0], 1);
    assert!(
        gc.list_objects(Some("lode.intent."))
            .await
            .unwrap()
            .is_empty()
            && gc
                .list_objects(Some("lode.alive."))
                .await
                .unwrap()
                .is_empty(),
        "the journal and the liveness record go"
    );
    assert!(late.finish().await.is_err(), "a swept run's mark must fail");
}

/// A write takes a block of chunk names whose intent was journaled ahead, so its first chunk
/// waits for no journal append: only the first write of a run (and one after the blocks went
/// stale) waits. A stale block is never used: its names would carry an old time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_take_chunk_names_journaled_ahead_and_never_stale_ones() {
    let Some((s, _io, gc)) = store(Duration::from_secs(1)).await else {
        return;
    };
    let write = |n: u8| {
        let s = &s;
        async move {
            let mut b = AlignedBuf::with_capacity(4096);
            b.extend_from_slice(&[n; 4096]);
            let mut w = s.writer(1);
            w.push(b).await.unwrap();
            let (chunks, p) = w.finish().await.unwrap();
            p.commit();
            chunks[0]
        }
    };
    for n in 0..10 {
        write(n).await;
    }
    assert_eq!(
        s.journal_waits(),
        1,
        "only the run's first write waits for an intent"
    );
    // dead_after is 3 s here: a block journaled ahead is fresh for 0.75 s.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let c = write(10).await;
    assert_eq!(s.journal_waits(), 2, "stale blocks are dropped, not used");
    assert!(
        c.id.index >> 20 >= before,
        "the chunk's name carries the time of its block's intent"
    );
    assert_eq!(s.read(&c).await.unwrap()[0], 10);
    assert!(
        !gc.list_objects(Some("lode.intent."))
            .await
            .unwrap()
            .is_empty()
    );
}
