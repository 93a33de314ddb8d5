//! The object service's commit protocol over the real stores (RocksDB + io_uring on device
//! files): nothing partial is visible, no extent leaks, shared extents are refcounted, corrupt
//! chunks are errors, a full datapath is a clear error, and a reopen finds everything.

use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use lode_blob::ChunkError;
use lode_datapath::{Backend, Datapath};
use lode_metadata_rocks::{RocksConfig, RocksMetadataStore};
use lode_objects::{Integrity, ObjError, ObjectMeta, ObjectService, ServiceConfig, WriteCond};

const DEV: u64 = 64 << 20;

fn open(dir: &std::path::Path, dev_size: u64) -> Arc<ObjectService> {
    let meta = RocksMetadataStore::open(&RocksConfig::new(dir.join("meta"))).unwrap();
    let store =
        lode_datapath::open_store(&[(dir.join("dev0.img"), dev_size)], Backend::Uring, 32).unwrap();
    let dp = Arc::new(Datapath::new(store, true));
    let cfg = ServiceConfig {
        inline_threshold: 4096,
        chunk_size: 1 << 20,
        max_object_size: 1 << 30,
        write_depth: 4,
        body_idle_timeout: std::time::Duration::from_secs(5),
        ..Default::default()
    };
    Arc::new(lode_gateway::server::local_service(Arc::new(meta), dp, cfg).unwrap())
}

fn body(
    data: &[u8],
    piece: usize,
) -> impl futures::Stream<Item = Result<Bytes, std::io::Error>> + Unpin {
    let pieces: Vec<Result<Bytes, std::io::Error>> = data
        .chunks(piece.max(1))
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    futures::stream::iter(pieces)
}

fn data(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
        .collect()
}

async fn put(svc: &ObjectService, b: &str, k: &str, d: &[u8]) -> Result<String, ObjError> {
    svc.put_object(
        b,
        k,
        ObjectMeta::default(),
        body(d, 70_000),
        Some(d.len() as i64),
        Integrity::default(),
        WriteCond::default(),
    )
    .await
    .map(|r| r.etag)
}

async fn get(svc: &ObjectService, b: &str, k: &str) -> Result<Vec<u8>, ObjError> {
    let h = svc.open_object(b, k).await?;
    let size = h.record.size;
    let mut s = Box::pin(svc.read_range(h, 0, size));
    let mut out = vec![];
    while let Some(p) = s.next().await {
        out.extend_from_slice(&p?);
    }
    Ok(out)
}

fn free(svc: &ObjectService) -> u64 {
    svc.blobs().space().0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overwrite_delete_and_copy_account_for_every_extent() {
    let dir = tempfile::tempdir().unwrap();
    let svc = open(dir.path(), DEV);
    svc.create_bucket("bk1", "me").await.unwrap();
    let empty = free(&svc);
    let d1 = data(3 << 20 | 5, 1);
    put(&svc, "bk1", "k", &d1).await.unwrap();
    assert_eq!(get(&svc, "bk1", "k").await.unwrap(), d1);
    assert_eq!(
        free(&svc),
        empty - (3 << 20) - 4096,
        "3 full 1 MiB chunks + a 5-byte tail in one 4 KiB block"
    );
    // Overwrite with an inline object: the old extents come back.
    put(&svc, "bk1", "k", b"tiny").await.unwrap();
    assert_eq!(free(&svc), empty);
    // Copies share extents: deleting the source keeps the copy whole.
    put(&svc, "bk1", "src", &d1).await.unwrap();
    let used = empty - free(&svc);
    svc.copy_object(
        ("bk1", "src"),
        None,
        ("bk1", "dst"),
        Default::default(),
        |_| Ok(()),
    )
    .await
    .unwrap();
    assert_eq!(empty - free(&svc), used, "a copy allocates nothing");
    svc.delete_object("bk1", "src").await.unwrap();
    assert_eq!(
        empty - free(&svc),
        used,
        "the copy still references the extents"
    );
    assert_eq!(get(&svc, "bk1", "dst").await.unwrap(), d1);
    svc.delete_object("bk1", "dst").await.unwrap();
    assert_eq!(free(&svc), empty);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_or_dropped_uploads_leave_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let svc = open(dir.path(), DEV);
    svc.create_bucket("bk1", "me").await.unwrap();
    let empty = free(&svc);
    // The client vanishes after 2.5 MiB.
    let d = data(5 << 20, 2);
    let mut pieces: Vec<Result<Bytes, std::io::Error>> = d[..(5 << 19)]
        .chunks(1 << 16)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    pieces.push(Err(std::io::Error::new(
        std::io::ErrorKind::ConnectionReset,
        "client went away",
    )));
    let r = svc
        .put_object(
            "bk1",
            "k",
            ObjectMeta::default(),
            futures::stream::iter(pieces),
            None,
            Integrity::default(),
            WriteCond::default(),
        )
        .await;
    assert!(matches!(r, Err(ObjError::Body(_))), "{:?}", r.err());
    // Content-Length larger than the body: IncompleteBody.
    let r = svc
        .put_object(
            "bk1",
            "k",
            ObjectMeta::default(),
            body(&d, 1 << 16),
            Some(d.len() as i64 + 1),
            Integrity::default(),
            WriteCond::default(),
        )
        .await;
    assert!(matches!(r, Err(ObjError::IncompleteBody)));
    // Wrong Content-MD5 after all data was written: BadDigest.
    let integrity = Integrity {
        content_md5: Some("AAAAAAAAAAAAAAAAAAAAAA==".into()),
        ..Default::default()
    };
    let r = svc
        .put_object(
            "bk1",
            "k",
            ObjectMeta::default(),
            body(&d, 1 << 16),
            None,
            integrity,
            WriteCond::default(),
        )
        .await;
    assert!(matches!(r, Err(ObjError::BadDigest(_))));
    // A request future dropped mid-upload (the connection closed).
    let slow = futures::stream::iter(
        d.chunks(1 << 16)
            .map(|c| Ok::<_, std::io::Error>(Bytes::copy_from_slice(c)))
            .collect::<Vec<_>>(),
    )
    .then(|x: Result<Bytes, std::io::Error>| async move {
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        x
    });
    let fut = svc.put_object(
        "bk1",
        "k",
        ObjectMeta::default(),
        Box::pin(slow),
        None,
        Integrity::default(),
        WriteCond::default(),
    );
    let _ = tokio::time::timeout(std::time::Duration::from_millis(60), fut).await;
    assert!(matches!(
        svc.open_object("bk1", "k").await,
        Err(ObjError::NoSuchKey)
    ));
    // In-flight writes of the dropped request finish before their space is given back.
    for _ in 0..100 {
        if free(&svc) == empty {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(free(&svc), empty, "no extent leaked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multipart_complete_references_parts_and_abort_frees_them() {
    let dir = tempfile::tempdir().unwrap();
    let svc = open(dir.path(), DEV);
    svc.create_bucket("bk1", "me").await.unwrap();
    let empty = free(&svc);
    let rec = lode_objects::UploadRecord {
        initiated_ms: 0,
        meta: ObjectMeta::default(),
        checksum_algorithm: None,
        checksum_type: None,
        owner: "me".into(),
    };
    let id = svc
        .create_upload("bk1", "mp", rec.clone(), &Default::default())
        .await
        .unwrap()
        .0;
    let p1 = data(5 << 20, 3);
    let p2 = data(100_000, 4);
    let e1 = svc
        .upload_part(
            "bk1",
            "mp",
            &id,
            1,
            body(&p1, 1 << 16),
            None,
            Integrity::default(),
        )
        .await
        .unwrap();
    let e2 = svc
        .upload_part(
            "bk1",
            "mp",
            &id,
            2,
            body(&p2, 1 << 16),
            None,
            Integrity::default(),
        )
        .await
        .unwrap();
    let e3 = svc
        .upload_part(
            "bk1",
            "mp",
            &id,
            3,
            body(&p2, 1 << 16),
            None,
            Integrity::default(),
        )
        .await
        .unwrap();
    let used = empty - free(&svc);
    let parts = vec![
        (1, e1.etag, Default::default()),
        (2, e2.etag, Default::default()),
    ];
    let obj = svc
        .complete_upload(
            "bk1",
            "mp",
            &id,
            parts,
            Default::default(),
            WriteCond::default(),
        )
        .await
        .unwrap();
    assert!(obj.etag.ends_with("-2"));
    let mut want = p1.clone();
    want.extend_from_slice(&p2);
    assert_eq!(get(&svc, "bk1", "mp").await.unwrap(), want);
    assert!(
        empty - free(&svc) < used,
        "part 3, not chosen, was released"
    );
    drop(e3);
    let id2 = svc
        .create_upload("bk1", "mp2", rec, &Default::default())
        .await
        .unwrap()
        .0;
    svc.upload_part(
        "bk1",
        "mp2",
        &id2,
        1,
        body(&p1, 1 << 16),
        None,
        Integrity::default(),
    )
    .await
    .unwrap();
    svc.abort_upload("bk1", "mp2", &id2).await.unwrap();
    svc.delete_object("bk1", "mp").await.unwrap();
    assert_eq!(free(&svc), empty);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_chunk_is_an_error_not_bad_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let svc = open(dir.path(), DEV);
    svc.create_bucket("bk1", "me").await.unwrap();
    put(&svc, "bk1", "k", &data(100_000, 5)).await.unwrap();
    let h = svc.open_object("bk1", "k").await.unwrap();
    let lode_objects::Segment::Chunk(c) = h.record.segments[0].clone() else {
        panic!("chunked")
    };
    drop(h);
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(dir.path().join("dev0.img"))
            .unwrap();
        let mut b = [0u8; 1];
        f.read_exact_at(&mut b, c.offset + 777).unwrap();
        b[0] ^= 0x40;
        f.write_all_at(&b, c.offset + 777).unwrap();
        f.sync_all().unwrap();
    }
    let r = get(&svc, "bk1", "k").await;
    assert!(
        matches!(r, Err(ObjError::Chunk(ChunkError::Corrupt { .. }))),
        "{:?}",
        r.map(|v| v.len())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_datapath_is_a_clear_error_and_recovers_after_delete() {
    let dir = tempfile::tempdir().unwrap();
    let svc = open(dir.path(), 16 << 20);
    svc.create_bucket("bk1", "me").await.unwrap();
    let d = data(6 << 20, 6);
    put(&svc, "bk1", "a", &d).await.unwrap();
    put(&svc, "bk1", "b", &d).await.unwrap();
    let r = put(&svc, "bk1", "c", &d).await;
    assert!(
        matches!(r, Err(ObjError::Chunk(ChunkError::NoSpace))),
        "{r:?}"
    );
    assert!(matches!(
        svc.open_object("bk1", "c").await,
        Err(ObjError::NoSuchKey)
    ));
    assert_eq!(
        get(&svc, "bk1", "a").await.unwrap(),
        d,
        "stored data unharmed"
    );
    // Inline objects still fit.
    put(&svc, "bk1", "small", b"x").await.unwrap();
    svc.delete_object("bk1", "a").await.unwrap();
    put(&svc, "bk1", "c", &d).await.unwrap();
    assert_eq!(get(&svc, "bk1", "c").await.unwrap(), d);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reopen_rebuilds_the_allocator_from_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let (free_before, d) = {
        let svc = open(dir.path(), DEV);
        svc.create_bucket("bk1", "me").await.unwrap();
        let d = data(2 << 20, 7);
        put(&svc, "bk1", "k", &d).await.unwrap();
        svc.copy_object(
            ("bk1", "k"),
            None,
            ("bk1", "k2"),
            Default::default(),
            |_| Ok(()),
        )
        .await
        .unwrap();
        (free(&svc), d)
    };
    let svc = open(dir.path(), DEV);
    assert_eq!(free(&svc), free_before);
    assert_eq!(get(&svc, "bk1", "k2").await.unwrap(), d);
    svc.delete_object("bk1", "k").await.unwrap();
    svc.delete_object("bk1", "k2").await.unwrap();
    assert_eq!(free(&svc), DEV);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_metadata_commit_leaves_nothing_and_returns_the_space() {
    use lode_metadata::FaultyMetadataStore;
    use std::sync::atomic::Ordering;

    let dir = tempfile::tempdir().unwrap();
    let meta = Arc::new(FaultyMetadataStore::new(
        RocksMetadataStore::open(&RocksConfig::new(dir.path().join("meta"))).unwrap(),
    ));
    let store =
        lode_datapath::open_store(&[(dir.path().join("dev0.img"), DEV)], Backend::Uring, 32)
            .unwrap();
    let dp = Arc::new(Datapath::new(store, true));
    let svc = lode_gateway::server::local_service(
        meta.clone(),
        dp,
        ServiceConfig {
            chunk_size: 1 << 20,
            ..Default::default()
        },
    )
    .unwrap();
    svc.create_bucket("bk1", "me").await.unwrap();
    put(&svc, "bk1", "old", &data(2 << 20, 1)).await.unwrap();
    let before = free(&svc);
    meta.fail_commits.store(true, Ordering::SeqCst);
    // The data is written and synced, then the commit fails: the client gets an error...
    let r = put(&svc, "bk1", "new", &data(3 << 20, 2)).await;
    // The store's failure, reported as a catalog failure (500), not as a client error.
    assert!(matches!(r, Err(ObjError::Catalog(_))), "{r:?}");
    let r = put(&svc, "bk1", "old", &data(3 << 20, 3)).await;
    assert!(r.is_err());
    meta.fail_commits.store(false, Ordering::SeqCst);
    // ...nothing new is visible, the old version is intact, and no space leaked.
    assert!(matches!(
        svc.open_object("bk1", "new").await,
        Err(ObjError::NoSuchKey)
    ));
    assert_eq!(get(&svc, "bk1", "old").await.unwrap(), data(2 << 20, 1));
    assert_eq!(free(&svc), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_part_committed_during_abort_or_complete_is_never_orphaned() {
    use lode_metadata::FaultyMetadataStore;

    for complete in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let meta = Arc::new(FaultyMetadataStore::new(
            RocksMetadataStore::open(&RocksConfig::new(dir.path().join("meta"))).unwrap(),
        ));
        let store =
            lode_datapath::open_store(&[(dir.path().join("dev0.img"), DEV)], Backend::Uring, 32)
                .unwrap();
        let dp = Arc::new(Datapath::new(store, true));
        let cfg = ServiceConfig {
            inline_threshold: 4096,
            chunk_size: 1 << 20,
            ..Default::default()
        };
        let svc = Arc::new(lode_gateway::server::local_service(meta.clone(), dp, cfg).unwrap());
        svc.create_bucket("bk1", "me").await.unwrap();
        let empty = free(&svc);
        let rec = lode_objects::UploadRecord {
            initiated_ms: 0,
            meta: ObjectMeta::default(),
            checksum_algorithm: None,
            checksum_type: None,
            owner: "me".into(),
        };
        let id = svc
            .create_upload("bk1", "race", rec, &Default::default())
            .await
            .unwrap()
            .0;
        let p1 = svc
            .upload_part(
                "bk1",
                "race",
                &id,
                1,
                body(&data(100_000, 1), 1 << 16),
                None,
                Integrity::default(),
            )
            .await
            .unwrap();
        // Part 2 commits after Abort/Complete scanned the parts and before it commits.
        let (svc2, id2, rt) = (
            Arc::clone(&svc),
            id.clone(),
            tokio::runtime::Handle::current(),
        );
        meta.before_next_commit(move || {
            rt.block_on(svc2.upload_part(
                "bk1",
                "race",
                &id2,
                2,
                body(&data(200_000, 2), 1 << 16),
                None,
                Integrity::default(),
            ))
            .expect("part 2 commits while the upload still exists");
        });
        if complete {
            let parts = vec![(1, p1.etag, Default::default())];
            svc.complete_upload(
                "bk1",
                "race",
                &id,
                parts,
                Default::default(),
                WriteCond::default(),
            )
            .await
            .unwrap();
            svc.delete_object("bk1", "race").await.unwrap();
        } else {
            svc.abort_upload("bk1", "race", &id).await.unwrap();
        }
        assert_eq!(
            free(&svc),
            empty,
            "complete={complete}: part 2 leaked its extents"
        );
        let rep = lode_gateway::fsck::run(meta.clone(), &[DEV], None, false)
            .await
            .unwrap();
        assert!(
            rep.is_clean() && rep.parts == 0 && rep.extents_recorded == 0,
            "complete={complete}: {rep:?}"
        );
    }
}
