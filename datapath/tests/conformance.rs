//! One conformance suite for every `ChunkStore` backend, plus the `Datapath` rules on top:
//! crc32c on read, poisoning after a write/fsync error, and give-back of unused allocations.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use lode_blob::{AlignedBuf, ChunkError};
use lode_datapath::{
    ChunkStore, Datapath, Extent, FaultyChunkStore, FileChunkStore, MemChunkStore, UringChunkStore,
};

const DEV: u64 = 16 << 20;

fn backends(dir: &std::path::Path) -> Vec<Arc<dyn ChunkStore>> {
    let devs = vec![(dir.join("d0.img"), DEV), (dir.join("d1.img"), DEV)];
    let uring = UringChunkStore::open(&devs, 64).expect(
        "io_uring must be available for the test suite (the portable backend is tested separately)",
    );
    let devs_f = vec![(dir.join("f0.img"), DEV), (dir.join("f1.img"), DEV)];
    vec![
        Arc::new(MemChunkStore::new(&[DEV, DEV])),
        Arc::new(FileChunkStore::open(&devs_f).unwrap()),
        Arc::new(uring),
    ]
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_read_roundtrip_on_every_backend() {
    let dir = tempfile::tempdir().unwrap();
    for store in backends(dir.path()) {
        let name = store.backend_name();
        assert_eq!(store.devices().len(), 2);
        assert_eq!(store.devices()[1].size, DEV);
        // Many concurrent IOs of assorted sizes at distinct offsets on both devices.
        let mut tasks = vec![];
        for i in 0..64u32 {
            let store = Arc::clone(&store);
            tasks.push(tokio::spawn(async move {
                let len = [1usize, 4096, 5000, 65536, 512 << 10][i as usize % 5];
                let ext = Extent {
                    dev: i % 2,
                    offset: u64::from(i / 2) * (512 << 10),
                    len: 512 << 10,
                };
                let data = pattern(len, i as u8);
                let buf = store
                    .write(ext, AlignedBuf::from_slice(&data))
                    .await
                    .unwrap();
                assert_eq!(buf.len(), len);
                store.sync(ext.dev).await.unwrap();
                let mut rb = AlignedBuf::with_capacity(len);
                rb.set_len(len);
                let rb = store.read(ext, rb).await.unwrap();
                assert_eq!(&rb[..], &data[..]);
            }));
        }
        for t in tasks {
            t.await.unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        // Out of bounds and bad device are refused, not attempted.
        let oob = Extent {
            dev: 0,
            offset: DEV,
            len: 4096,
        };
        assert!(
            matches!(
                store.write(oob, AlignedBuf::from_slice(b"x")).await,
                Err(ChunkError::BadChunk(_))
            ),
            "{name}"
        );
        let bad = Extent {
            dev: 7,
            offset: 0,
            len: 4096,
        };
        assert!(
            store.read(bad, AlignedBuf::from_slice(b"x")).await.is_err(),
            "{name}"
        );
        let too_long = Extent {
            dev: 0,
            offset: 0,
            len: 4096,
        };
        assert!(
            store
                .write(too_long, AlignedBuf::from_slice(&[0; 5000]))
                .await
                .is_err(),
            "{name}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn device_files_are_preallocated_and_persist() {
    let dir = tempfile::tempdir().unwrap();
    let devs = vec![(dir.path().join("p.img"), DEV)];
    let ext = Extent {
        dev: 0,
        offset: 8192,
        len: 4096,
    };
    {
        let s = UringChunkStore::open(&devs, 8).unwrap();
        s.write(ext, AlignedBuf::from_slice(b"persist me"))
            .await
            .unwrap();
        s.sync(0).await.unwrap();
    }
    let meta = std::fs::metadata(dir.path().join("p.img")).unwrap();
    assert_eq!(meta.len(), DEV);
    use std::os::unix::fs::MetadataExt;
    assert!(
        meta.blocks() * 512 >= DEV,
        "file is fully allocated, not sparse"
    );
    let s = UringChunkStore::open(&devs, 8).unwrap();
    let mut b = AlignedBuf::with_capacity(10);
    b.set_len(10);
    assert_eq!(&s.read(ext, b).await.unwrap()[..], b"persist me");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn datapath_detects_corruption() {
    let mem = Arc::new(MemChunkStore::new(&[DEV]));
    let dp = Arc::new(Datapath::new(mem.clone(), true));
    let mut alloc = lode_datapath::Allocation::empty(&dp);
    let ext = alloc.grow(10_000).unwrap();
    let (chunk, _) = dp
        .write_chunk(ext, AlignedBuf::from_slice(&pattern(10_000, 1)))
        .await
        .unwrap();
    alloc.commit();
    assert_eq!(
        &dp.read_chunk(&chunk).await.unwrap()[..],
        &pattern(10_000, 1)[..]
    );
    mem.corrupt(0, ext.offset + 9_999);
    match dp.read_chunk(&chunk).await {
        Err(ChunkError::Corrupt { chunk: id, .. }) => assert_eq!(id, ext.id()),
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_or_sync_errors_poison_writes_but_reads_go_on() {
    for fail_sync in [false, true] {
        let faulty = Arc::new(FaultyChunkStore::new(Arc::new(MemChunkStore::new(&[DEV]))));
        let dp = Arc::new(Datapath::new(faulty.clone(), true));
        let mut a = lode_datapath::Allocation::empty(&dp);
        let ext = a.grow(4096).unwrap();
        let (good, _) = dp
            .write_chunk(ext, AlignedBuf::from_slice(b"ok"))
            .await
            .unwrap();
        a.commit();
        if fail_sync {
            faulty.fail_syncs.store(true, Ordering::SeqCst);
            assert!(dp.sync([0]).await.is_err());
        } else {
            faulty.fail_writes.store(true, Ordering::SeqCst);
            let mut a = lode_datapath::Allocation::empty(&dp);
            let e = a.grow(4096).unwrap();
            assert!(
                dp.write_chunk(e, AlignedBuf::from_slice(b"x"))
                    .await
                    .is_err()
            );
        }
        assert!(dp.is_poisoned());
        // Even after the device "recovers", writes stay refused until restart; no fsync retry.
        faulty.fail_writes.store(false, Ordering::SeqCst);
        faulty.fail_syncs.store(false, Ordering::SeqCst);
        let mut a = lode_datapath::Allocation::empty(&dp);
        assert!(matches!(a.grow(4096), Err(ChunkError::Poisoned)));
        assert!(matches!(
            dp.write_chunk(ext, AlignedBuf::from_slice(b"x")).await,
            Err(ChunkError::Poisoned)
        ));
        assert_eq!(&dp.read_chunk(&good).await.unwrap()[..], b"ok");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uncommitted_allocations_and_deferred_frees_return_space() {
    let dp = Arc::new(Datapath::new(Arc::new(MemChunkStore::new(&[DEV])), true));
    let total = dp.space().0;
    {
        let mut a = lode_datapath::Allocation::empty(&dp);
        a.grow(1 << 20).unwrap();
        a.grow(1 << 20).unwrap();
        assert_eq!(dp.space().0, total - (2 << 20));
    } // dropped: request failed before commit
    assert_eq!(dp.space().0, total);
    let mut a = lode_datapath::Allocation::empty(&dp);
    let e = a.grow(4096).unwrap();
    a.commit();
    let reader = dp.read_guard();
    dp.free_committed(vec![e]);
    assert_eq!(
        dp.space().0,
        total - 4096,
        "a reader that started earlier still holds it"
    );
    drop(reader);
    assert_eq!(dp.space().0, total);
    // The whole device fills up with a clear error, and frees make room again.
    let mut a = lode_datapath::Allocation::empty(&dp);
    while a.grow(1 << 20).is_ok() {}
    assert!(matches!(a.grow(4096), Err(ChunkError::NoSpace)));
    drop(a);
    assert_eq!(dp.space().0, total);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_syncs_are_grouped_and_every_caller_is_covered() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn ChunkStore> =
        Arc::new(UringChunkStore::open(&[(dir.path().join("g.img"), DEV)], 64).unwrap());
    let dp = Arc::new(Datapath::new(store, true));
    let mut tasks = vec![];
    for i in 0..32u8 {
        let dp = Arc::clone(&dp);
        tasks.push(tokio::spawn(async move {
            let mut a = lode_datapath::Allocation::empty(&dp);
            let e = a.grow(4096).unwrap();
            dp.write_chunk(e, AlignedBuf::from_slice(&[i; 100]))
                .await
                .unwrap();
            dp.sync([e.dev]).await.unwrap();
            a.commit();
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let n = dp.syncs_issued();
    assert!(
        (1..32).contains(&n),
        "32 concurrent callers issued {n} syncs"
    );
    // A caller whose writes finished after the last sync still gets its own sync.
    let mut a = lode_datapath::Allocation::empty(&dp);
    let e = a.grow(4096).unwrap();
    dp.write_chunk(e, AlignedBuf::from_slice(b"late"))
        .await
        .unwrap();
    dp.sync([e.dev]).await.unwrap();
    assert_eq!(dp.syncs_issued(), n + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_on_a_blocking_thread_agree_with_async_reads() {
    let dir = tempfile::tempdir().unwrap();
    for store in backends(dir.path()) {
        let name = store.backend_name();
        let mut written = vec![];
        for i in 0..8u32 {
            let len = [1usize, 4096, 300_000, 512 << 10][i as usize % 4];
            let ext = Extent {
                dev: i % 2,
                offset: u64::from(i) * (512 << 10),
                len: 512 << 10,
            };
            let data = pattern(len, i as u8 + 100);
            store
                .write(ext, AlignedBuf::from_slice(&data))
                .await
                .unwrap();
            written.push((ext, data));
        }
        let s = Arc::clone(&store);
        std::thread::spawn(move || {
            for (ext, data) in written {
                let mut b = AlignedBuf::with_capacity(data.len());
                b.set_len(data.len());
                match s.read_blocking(ext, b) {
                    // The in-memory store has no blocking path; the caller falls back to `read`.
                    None => assert_eq!(s.backend_name(), "memory"),
                    Some(r) => assert_eq!(&r.unwrap()[..], &data[..], "{}", s.backend_name()),
                }
            }
            let oob = Extent {
                dev: 0,
                offset: DEV,
                len: 4096,
            };
            let mut b = AlignedBuf::with_capacity(10);
            b.set_len(10);
            if let Some(r) = s.read_blocking(oob, b) {
                assert!(
                    r.is_err(),
                    "{}: out-of-bounds read accepted",
                    s.backend_name()
                );
            }
        })
        .join()
        .unwrap_or_else(|_| panic!("{name}: blocking reads"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn datapath_reads_on_a_blocking_thread_check_crc32c() {
    let dir = tempfile::tempdir().unwrap();
    let devs = vec![(dir.path().join("u0.img"), DEV)];
    let store: Arc<dyn ChunkStore> = Arc::new(UringChunkStore::open(&devs, 8).unwrap());
    let dp = Arc::new(Datapath::new(Arc::clone(&store), true));
    let mut alloc = lode_datapath::Allocation::empty(&dp);
    let ext = alloc.grow(300_000).unwrap();
    let (chunk, _) = dp
        .write_chunk(ext, AlignedBuf::from_slice(&pattern(300_000, 7)))
        .await
        .unwrap();
    alloc.commit();
    let handle = tokio::runtime::Handle::current();
    let (dp2, h2) = (Arc::clone(&dp), handle.clone());
    let got = std::thread::spawn(move || {
        lode_datapath::allow_blocking_reads_on_this_thread();
        h2.block_on(dp2.read_chunk(&chunk))
    })
    .join()
    .unwrap()
    .unwrap();
    assert_eq!(&got[..], &pattern(300_000, 7)[..]);
    // Damage the chunk on the device: the blocking path checks the crc32c like the async one.
    let mut bad = pattern(300_000, 7);
    bad[123_456] ^= 0xff;
    store
        .write(ext, AlignedBuf::from_slice(&bad))
        .await
        .unwrap();
    let r = std::thread::spawn(move || {
        lode_datapath::allow_blocking_reads_on_this_thread();
        handle.block_on(dp.read_chunk(&chunk))
    })
    .join()
    .unwrap();
    assert!(matches!(r, Err(ChunkError::Corrupt { .. })), "{r:?}");
}

/// The blob boundary's suite on the local blob store over every chunk store backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_blob_store_conforms_on_every_backend() {
    let dir = tempfile::tempdir().unwrap();
    for store in backends(dir.path()) {
        let blobs = lode_datapath::LocalBlobStore::new(Arc::new(Datapath::new(store, true)));
        lode_blob::conformance::round_trip(&blobs).await;
        lode_blob::conformance::uncommitted_writes_give_space_back(&blobs).await;
    }
}

/// IOs longer than the ring's piece size (1 MiB) go to the kernel in pieces and come back whole,
/// through the ring thread and on a blocking thread, also on a ring too shallow for a piece each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_ios_round_trip_in_pieces() {
    let dir = tempfile::tempdir().unwrap();
    let devs = vec![(dir.path().join("big.img"), 64u64 << 20)];
    for depth in [64, 2] {
        let store: Arc<dyn ChunkStore> = Arc::new(UringChunkStore::open(&devs, depth).unwrap());
        let mut written = vec![];
        let mut at = 0u64;
        for (i, len) in [1usize << 20, (4 << 20) + 5000, (9 << 20) - 1, 3 << 20]
            .into_iter()
            .enumerate()
        {
            let ext = Extent {
                dev: 0,
                offset: at,
                len: (len as u32).next_multiple_of(4096),
            };
            at += u64::from(ext.len);
            let data = pattern(len, i as u8 + depth as u8);
            store
                .write(ext, AlignedBuf::from_slice(&data))
                .await
                .unwrap_or_else(|e| panic!("depth {depth}, write {len}: {e}"));
            written.push((ext, data));
        }
        store.sync(0).await.unwrap();
        for (ext, data) in &written {
            let mut b = AlignedBuf::with_capacity(data.len());
            b.set_len(data.len());
            let got = store.read(*ext, b).await.unwrap();
            assert!(
                got[..] == data[..],
                "depth {depth}: async read of {}",
                data.len()
            );
        }
        let s = Arc::clone(&store);
        std::thread::spawn(move || {
            for (ext, data) in written {
                let mut b = AlignedBuf::with_capacity(data.len());
                b.set_len(data.len());
                let got = s.read_blocking(ext, b).expect("uring reads here").unwrap();
                assert!(got[..] == data[..], "blocking read of {}", data.len());
            }
        })
        .join()
        .unwrap();
    }
}
