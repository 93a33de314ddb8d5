//! lode-rados against a real Ceph cluster (`LODE_CEPH_CONF`; see `common::conf_path`).
//!
//!     scripts/ceph-dev.sh start /tmp/c && LODE_CEPH_CONF=/tmp/c/ceph.conf cargo test -p lode-rados
//!
//! Errno semantics checked here (Ceph 16.2.15): a failed `cmpxattr`/`omap_cmp` guard is
//! `ECANCELED` and applies nothing; omap on an EC pool is `EOPNOTSUPP`; an op on an inactive
//! PG past `op_timeout` is `ETIMEDOUT`; a fenced client gets `ESHUTDOWN` and a watch error
//! `ENOTCONN`; a missing class method is `EOPNOTSUPP`, a class the
//! OSD does not load is `EPERM`.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use futures::future::join_all;
use lode_rados::{
    Cluster, ClusterConfig, CmpOp, PoolKind, PoolSpec, ReadOp, WatchEvent, WatchOptions, WriteOp,
};

fn errno_name(e: &lode_rados::RadosError) -> String {
    format!(
        "{e} (errno {}: {:?})",
        e.errno(),
        std::error::Error::source(e)
    )
}

// ---------------------------------------------------------------------------------------------
// Connection
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn connect_fails_on_a_missing_conf_file() {
    // Needs librados only, not a cluster.
    let conf = ClusterConfig {
        conf_path: "/nonexistent/lode/ceph.conf".into(),
        connect_timeout: Duration::from_secs(2),
        ..ClusterConfig::default()
    };
    let t0 = Instant::now();
    let err = Cluster::connect(&conf).await.unwrap_err();
    assert!(err.is_not_found(), "{}", errno_name(&err));
    assert!(t0.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn connect_to_an_unreachable_mon_times_out() {
    // Needs librados only: nothing listens on 127.0.0.1:1.
    let dir = std::env::temp_dir().join(common::unique("lode-rados-unreachable"));
    std::fs::create_dir_all(&dir).unwrap();
    let conf_path = dir.join("ceph.conf");
    std::fs::write(
        &conf_path,
        "[global]\nmon host = [v2:127.0.0.1:1]\nauth cluster required = none\n\
         auth service required = none\nauth client required = none\n",
    )
    .unwrap();
    let conf = ClusterConfig {
        conf_path: conf_path.clone(),
        connect_timeout: Duration::from_secs(2),
        op_timeout: Duration::from_secs(2),
        ..ClusterConfig::default()
    };
    let t0 = Instant::now();
    let err = Cluster::connect(&conf).await.unwrap_err();
    let took = t0.elapsed();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(err.is_timeout(), "{}", errno_name(&err));
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(5),
        "took {took:?}"
    );
}

#[tokio::test]
async fn librados_is_pacific() {
    let (major, minor, _) = Cluster::librados_version();
    assert_eq!(
        (major, minor),
        (3, 0),
        "librados 3.0.x ships with Ceph 16.2"
    );
}

// ---------------------------------------------------------------------------------------------
// Pools
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_create_lookup_info_delete() {
    let cluster = cluster_or_skip!();
    let name = common::unique("lode-rados-pool");
    assert_eq!(cluster.pool_lookup(&name).await.unwrap(), None);
    assert!(cluster.pool_info(&name).await.unwrap().is_none());

    let id = cluster
        .create_pool(&name, &PoolSpec::replicated(3))
        .await
        .unwrap();
    assert_eq!(cluster.pool_lookup(&name).await.unwrap(), Some(id));
    let info = cluster.pool_info(&name).await.unwrap().unwrap();
    assert_eq!(info.id, id);
    assert_eq!(info.kind, PoolKind::Replicated { size: 3 });
    assert_eq!((info.size, info.min_size, info.pg_num), (3, 2, 8));
    assert_eq!(info.applications, vec!["lode".to_owned()]);
    assert!(!cluster.pool_is_erasure(&name).await.unwrap());

    // Creating it again is accepted; as another kind the monitor refuses with EINVAL
    // ("cannot change to type erasure").
    let again = cluster
        .create_pool(&name, &PoolSpec::replicated(3))
        .await
        .unwrap();
    assert_eq!(again, id);
    let err = cluster
        .create_pool(&name, &PoolSpec::erasure("default"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, lode_rados::RadosError::MonCommand { errno, status, .. }
            if *errno == libc::EINVAL && status.contains("cannot change to type")),
        "{}",
        errno_name(&err)
    );
    assert!(!cluster.pool_is_erasure(&name).await.unwrap());

    // The pool takes I/O.
    let io = cluster.ioctx(&name).await.unwrap();
    assert_eq!(io.pool_id(), id);
    io.write_full("o", &b"x"[..]).await.unwrap();

    // delete_pool waits for the osdmap that no longer has it.
    cluster.delete_pool(&name).await.unwrap();
    assert_eq!(cluster.pool_lookup(&name).await.unwrap(), None);
    let err = cluster.ioctx(&name).await.unwrap_err();
    assert!(err.is_not_found(), "{}", errno_name(&err));
    let err = cluster.pool_is_erasure(&name).await.unwrap_err();
    assert!(err.is_not_found(), "{}", errno_name(&err));
    // A missing pool deletes fine.
    cluster.delete_pool(&name).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn erasure_pool_is_reported_and_refuses_omap() {
    let cluster = cluster_or_skip!();
    // The default profile wants 4 hosts; the test cluster has 3 OSDs on one host.
    cluster
        .set_erasure_code_profile(
            "lode-test-k2m1",
            &[("k", "2"), ("m", "1"), ("crush-failure-domain", "osd")],
        )
        .await
        .unwrap();
    let name = common::unique("lode-rados-ec");
    cluster
        .create_pool(&name, &PoolSpec::erasure("lode-test-k2m1"))
        .await
        .unwrap();
    assert!(cluster.pool_is_erasure(&name).await.unwrap());
    let info = cluster.pool_info(&name).await.unwrap().unwrap();
    assert_eq!(
        info.kind,
        PoolKind::Erasure {
            profile: "lode-test-k2m1".into()
        }
    );
    assert_eq!(info.size, 3, "k + m");
    common::pool(&cluster).await;
    assert!(!cluster.pool_is_erasure(common::POOL).await.unwrap());

    let io = cluster.ioctx(&name).await.unwrap();
    io.write_full("chunk", &b"written once"[..]).await.unwrap();
    assert_eq!(io.read_full("chunk").await.unwrap(), &b"written once"[..]);

    // Omap is not supported on EC pools in Pacific: EOPNOTSUPP, and the op applies nothing.
    let err = io
        .operate_write(
            "chunk",
            WriteOp::new()
                .write_full(&b"changed"[..])
                .omap_set(&[("k", "v")]),
        )
        .await
        .unwrap_err();
    assert_eq!(err.errno(), libc::EOPNOTSUPP, "{}", errno_name(&err));
    assert_eq!(io.read_full("chunk").await.unwrap(), &b"written once"[..]);
    let err = io
        .operate_write("fresh", WriteOp::new().omap_set(&[("k", "v")]))
        .await
        .unwrap_err();
    assert_eq!(err.errno(), libc::EOPNOTSUPP, "{}", errno_name(&err));

    // Partial writes need allow_ec_overwrites.
    let err = io
        .operate_write("chunk", WriteOp::new().append(&b"+"[..]))
        .await
        .unwrap_err();
    assert_eq!(err.errno(), libc::EOPNOTSUPP, "{}", errno_name(&err));

    drop(io);
    cluster.delete_pool(&name).await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// Objects
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_read_stat_remove_round_trip() {
    let cluster = cluster_or_skip!();
    let io = common::pool(&cluster).await;
    let oid = common::unique("rt");

    let err = io.read_full(&oid).await.unwrap_err();
    assert!(err.is_not_found(), "{}", errno_name(&err));
    let err = io.stat(&oid).await.unwrap_err();
    assert!(err.is_not_found(), "{}", errno_name(&err));

    let before = SystemTime::now() - Duration::from_secs(2);
    io.write_full(&oid, &b"hello rados"[..]).await.unwrap();
    assert_eq!(io.read_full(&oid).await.unwrap(), &b"hello rados"[..]);
    assert_eq!(io.read(&oid, 6, 100).await.unwrap(), &b"rados"[..]);
    let st = io.stat(&oid).await.unwrap();
    assert_eq!(st.size, 11);
    assert!(st.mtime >= before && st.mtime <= SystemTime::now() + Duration::from_secs(2));

    // Larger than read_full's first guess (64 KiB): a second, exact read.
    let big: Bytes = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    io.write_full(&oid, big.clone()).await.unwrap();
    assert_eq!(io.read_full(&oid).await.unwrap(), big);

    // Offsets, appends and truncation in one atomic op.
    io.operate_write(
        &oid,
        WriteOp::new()
            .write_full(&b"0123456789"[..])
            .write(&b"ab"[..], 2)
            .append(&b"XY"[..])
            .truncate(11),
    )
    .await
    .unwrap();
    assert_eq!(io.read_full(&oid).await.unwrap(), &b"01ab456789X"[..]);

    // xattrs.
    io.operate_write(&oid, WriteOp::new().setxattr("a", "1").setxattr("b", ""))
        .await
        .unwrap();
    assert_eq!(io.getxattr(&oid, "a").await.unwrap().unwrap(), &b"1"[..]);
    assert_eq!(io.getxattr(&oid, "b").await.unwrap().unwrap(), &b""[..]);
    assert!(io.getxattr(&oid, "zz").await.unwrap().is_none());
    io.operate_write(&oid, WriteOp::new().rmxattr("a"))
        .await
        .unwrap();
    assert!(io.getxattr(&oid, "a").await.unwrap().is_none());

    io.remove(&oid).await.unwrap();
    let err = io.read_full(&oid).await.unwrap_err();
    assert!(err.is_not_found(), "{}", errno_name(&err));
    let err = io.remove(&oid).await.unwrap_err();
    assert!(err.is_not_found(), "{}", errno_name(&err));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_create_twice_is_eexist() {
    let cluster = cluster_or_skip!();
    let io = common::pool(&cluster).await;
    let oid = common::unique("excl");
    io.operate_write(&oid, WriteOp::new().create(true).write_full(&b"first"[..]))
        .await
        .unwrap();
    let err = io
        .operate_write(&oid, WriteOp::new().create(true).write_full(&b"second"[..]))
        .await
        .unwrap_err();
    assert!(err.is_exists(), "{}", errno_name(&err));
    assert_eq!(io.read_full(&oid).await.unwrap(), &b"first"[..]);
    // Non-exclusive create of an existing object is fine.
    io.operate_write(&oid, WriteOp::new().create(false))
        .await
        .unwrap();
    // assert_exists on a missing object.
    let err = io
        .operate_write(
            &common::unique("missing"),
            WriteOp::new().assert_exists().write_full(&b"x"[..]),
        )
        .await
        .unwrap_err();
    assert!(err.is_not_found(), "{}", errno_name(&err));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cmpxattr_guard_is_atomic() {
    let cluster = cluster_or_skip!();
    let io = common::pool(&cluster).await;
    let oid = common::unique("epoch");
    io.operate_write(
        &oid,
        WriteOp::new()
            .create(true)
            .setxattr("epoch", "0001")
            .write_full(&b"v1"[..]),
    )
    .await
    .unwrap();

    // While the epoch matches, the guarded op applies.
    io.operate_write(
        &oid,
        WriteOp::new()
            .cmpxattr("epoch", CmpOp::Eq, "0001")
            .omap_set(&[("a", "1")]),
    )
    .await
    .unwrap();

    // The epoch moves on (a partition split, say).
    io.operate_write(&oid, WriteOp::new().setxattr("epoch", "0002"))
        .await
        .unwrap();

    // A writer still on epoch 0001 is refused with ECANCELED, and nothing of its op applies.
    let err = io
        .operate_write(
            &oid,
            WriteOp::new()
                .cmpxattr("epoch", CmpOp::Eq, "0001")
                .omap_set(&[("b", "2")])
                .write_full(&b"v2"[..])
                .setxattr("other", "x"),
        )
        .await
        .unwrap_err();
    assert!(
        err.is_canceled() && err.compare_failed(),
        "{}",
        errno_name(&err)
    );
    assert_eq!(err.errno(), libc::ECANCELED);
    let r = io
        .operate_read(
            &oid,
            ReadOp::new()
                .read(0, 100)
                .getxattrs()
                .omap_get_vals("", "", 100),
        )
        .await
        .unwrap();
    assert_eq!(r.data.as_ref().unwrap(), &b"v1"[..]);
    assert_eq!(r.xattr("epoch").unwrap(), &b"0002"[..]);
    assert!(r.xattr("other").is_none());
    let keys: Vec<_> = r
        .omap_vals
        .unwrap()
        .entries
        .into_iter()
        .map(|e| e.0)
        .collect();
    assert_eq!(keys, vec![b"a".to_vec()]);

    // String comparison, stored value on the left (the crate swaps the OSD's `given OP
    // stored` order): stored "0002" > "0001" and < "0010" (zero-padded epochs order right).
    for (op, given, holds) in [
        (CmpOp::Gt, "0001", true),
        (CmpOp::Gt, "0002", false),
        (CmpOp::Gt, "0003", false),
        (CmpOp::Gte, "0002", true),
        (CmpOp::Gte, "0003", false),
        (CmpOp::Lt, "0010", true),
        (CmpOp::Lt, "0002", false),
        (CmpOp::Lt, "0001", false),
        (CmpOp::Lte, "0002", true),
        (CmpOp::Lte, "0001", false),
        (CmpOp::Ne, "0001", true),
        (CmpOp::Ne, "0002", false),
        (CmpOp::Eq, "0002", true),
    ] {
        let r = io
            .operate_write(&oid, WriteOp::new().cmpxattr("epoch", op, given))
            .await;
        match (holds, r) {
            (true, Ok(_)) => {}
            (false, Err(e)) if e.is_canceled() => {}
            (holds, r) => panic!("stored 0002 {op:?} {given}: expected {holds}, got {r:?}"),
        }
    }
    // A missing xattr compares as the empty string.
    let err = io
        .operate_write(&oid, WriteOp::new().cmpxattr("nope", CmpOp::Eq, "0001"))
        .await
        .unwrap_err();
    eprintln!("cmpxattr on a missing xattr: {}", errno_name(&err));
    assert!(err.is_canceled(), "{}", errno_name(&err));
    io.operate_write(&oid, WriteOp::new().cmpxattr("nope", CmpOp::Eq, ""))
        .await
        .unwrap();

    // A read op guard fails the same way.
    let err = io
        .operate_read(
            &oid,
            ReadOp::new().cmpxattr("epoch", CmpOp::Eq, "0001").stat(),
        )
        .await
        .unwrap_err();
    assert!(err.is_canceled(), "{}", errno_name(&err));

    // assert_version: the version a write returns guards the next one.
    let v = io
        .operate_write(&oid, WriteOp::new().setxattr("n", "1"))
        .await
        .unwrap();
    assert!(v > 0);
    let v2 = io
        .operate_write(&oid, WriteOp::new().assert_version(v).setxattr("n", "2"))
        .await
        .unwrap();
    assert!(v2 > v);
    let err = io
        .operate_write(&oid, WriteOp::new().assert_version(v).setxattr("n", "3"))
        .await
        .unwrap_err();
    assert!(err.is_version_mismatch(), "{}", errno_name(&err));
    assert_eq!(err.errno(), libc::ERANGE, "object newer than asserted");
    assert_eq!(io.getxattr(&oid, "n").await.unwrap().unwrap(), &b"2"[..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn omap_paging_filters_and_removal() {
    let cluster = cluster_or_skip!();
    let io = common::pool(&cluster).await;
    let oid = common::unique("omap");
    let key = |i: usize| format!("k{i:05}");
    let entries: Vec<(String, String)> = (0..2500).map(|i| (key(i), format!("v{i}"))).collect();
    io.operate_write(&oid, WriteOp::new().omap_set(&entries))
        .await
        .unwrap();

    // Pages of 1000 with start_after and the `more` flag.
    let p1 = io.omap_get_vals(&oid, "", "", 1000).await.unwrap();
    assert_eq!(p1.entries.len(), 1000);
    assert!(p1.more);
    assert_eq!(p1.entries[0], (b"k00000".to_vec(), Bytes::from("v0")));
    let p2 = io
        .omap_get_vals(&oid, &p1.entries[999].0, "", 1000)
        .await
        .unwrap();
    assert_eq!(p2.entries.len(), 1000);
    assert!(p2.more);
    assert_eq!(p2.entries[0].0, key(1000).into_bytes());
    let p3 = io
        .omap_get_vals(&oid, &p2.entries[999].0, "", 1000)
        .await
        .unwrap();
    assert_eq!(p3.entries.len(), 500);
    assert!(!p3.more);
    assert_eq!(p3.entries[499].0, key(2499).into_bytes());

    // Two ranges in one op (one version of the object), each with its own filter and `more`.
    let r = io
        .operate_read(
            &oid,
            ReadOp::new()
                .omap_get_vals("", "k0000", 3)
                .omap_get_vals2(key(2497), "k024", 10),
        )
        .await
        .unwrap();
    let (a, b) = (r.omap_vals.unwrap(), r.omap_vals2.unwrap());
    assert_eq!(a.entries.len(), 3);
    assert!(a.more);
    assert_eq!(a.entries[2].0, key(2).into_bytes());
    let tail: Vec<Vec<u8>> = b.entries.into_iter().map(|e| e.0).collect();
    assert_eq!(tail, vec![key(2498).into_bytes(), key(2499).into_bytes()]);
    assert!(!b.more);

    // The OSD caps a page (osd_max_omap_entries_per_request = 1024).
    let big = io.omap_get_vals(&oid, "", "", 5000).await.unwrap();
    eprintln!(
        "omap_get_vals(max 5000) returned {} entries, more={}",
        big.entries.len(),
        big.more
    );
    assert!(big.entries.len() <= 1024);
    assert!(big.more);

    // Everything, paging internally.
    let all = io.omap_get_all(&oid).await.unwrap();
    assert_eq!(all.len(), 2500);
    assert!(all.windows(2).all(|w| w[0].0 < w[1].0));
    assert_eq!(all[1234], (key(1234).into_bytes(), Bytes::from("v1234")));

    // Filter prefix.
    let f = io.omap_get_vals(&oid, "", "k001", 1000).await.unwrap();
    assert_eq!(f.entries.len(), 100);
    assert!(f.entries.iter().all(|(k, _)| k.starts_with(b"k001")));
    assert_eq!(io.omap_get_prefix(&oid, "k024").await.unwrap().len(), 100);

    // Keys only.
    let r = io
        .operate_read(&oid, ReadOp::new().omap_get_keys("k02495", 10))
        .await
        .unwrap();
    let ks = r.omap_keys.unwrap();
    assert_eq!(
        ks.keys,
        (2496..2500)
            .map(|i| key(i).into_bytes())
            .collect::<Vec<_>>()
    );
    assert!(!ks.more);

    // By keys: only the existing ones come back.
    let r = io
        .operate_read(
            &oid,
            ReadOp::new().omap_get_vals_by_keys(&["k00005", "nope", "k02499"]),
        )
        .await
        .unwrap();
    assert_eq!(
        r.omap_vals_by_keys.unwrap(),
        vec![
            (b"k00005".to_vec(), Bytes::from("v5")),
            (b"k02499".to_vec(), Bytes::from("v2499")),
        ]
    );

    // rm_keys, rm_range [start, end).
    io.operate_write(
        &oid,
        WriteOp::new().omap_rm_keys(&["k00000", "k00001", "absent"]),
    )
    .await
    .unwrap();
    io.operate_write(&oid, WriteOp::new().omap_rm_range("k01000", "k02000"))
        .await
        .unwrap();
    let all = io.omap_get_all(&oid).await.unwrap();
    assert_eq!(all.len(), 2500 - 2 - 1000);
    let has = |k: &str| all.iter().any(|(x, _)| x == k.as_bytes());
    assert!(!has("k00000") && has("k00002") && has("k00999"));
    assert!(!has("k01000") && !has("k01999") && has("k02000"));

    // Binary keys and values (the *2 calls take lengths).
    let bin_key = b"bin\0key\xff".to_vec();
    io.operate_write(
        &oid,
        WriteOp::new().omap_set(&[(bin_key.clone(), vec![0u8, 1, 2])]),
    )
    .await
    .unwrap();
    let r = io
        .operate_read(
            &oid,
            ReadOp::new().omap_get_vals_by_keys(std::slice::from_ref(&bin_key)),
        )
        .await
        .unwrap();
    assert_eq!(
        r.omap_vals_by_keys.unwrap(),
        vec![(bin_key, Bytes::from_static(&[0, 1, 2]))]
    );
    // ... but start_after is a C string.
    let err = io.omap_get_vals(&oid, b"a\0b", "", 10).await.unwrap_err();
    assert_eq!(err.errno(), libc::EINVAL);

    // Clear.
    io.operate_write(&oid, WriteOp::new().omap_clear())
        .await
        .unwrap();
    assert!(io.omap_get_all(&oid).await.unwrap().is_empty());

    // Omap of a missing object.
    let err = io
        .omap_get_vals(&common::unique("nothing"), "", "", 10)
        .await
        .unwrap_err();
    assert!(err.is_not_found(), "{}", errno_name(&err));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn omap_cmp_guard_semantics() {
    let cluster = cluster_or_skip!();
    let io = common::pool(&cluster).await;
    let oid = common::unique("omapcmp");
    io.operate_write(&oid, WriteOp::new().omap_set(&[("x", "5")]))
        .await
        .unwrap();
    let get = |k: &'static str| {
        let io = io.clone();
        let oid = oid.clone();
        async move {
            io.operate_read(&oid, ReadOp::new().omap_get_vals_by_keys(&[k]))
                .await
                .unwrap()
                .omap_vals_by_keys
                .unwrap()
                .into_iter()
                .next()
                .map(|(_, v)| v)
        }
    };

    // Eq holds: the op applies.
    io.operate_write(
        &oid,
        WriteOp::new()
            .omap_cmp("x", CmpOp::Eq, "5")
            .omap_set(&[("y", "1")]),
    )
    .await
    .unwrap();
    assert_eq!(get("y").await.unwrap(), "1");

    // Eq fails: ECANCELED and nothing applies.
    let err = io
        .operate_write(
            &oid,
            WriteOp::new()
                .omap_cmp("x", CmpOp::Eq, "6")
                .omap_set(&[("y", "2")]),
        )
        .await
        .unwrap_err();
    assert!(err.is_canceled(), "{}", errno_name(&err));
    assert_eq!(get("y").await.unwrap(), "1");

    // A missing key compares as the empty value.
    io.operate_write(
        &oid,
        WriteOp::new()
            .omap_cmp("missing", CmpOp::Eq, "")
            .omap_set(&[("z", "1")]),
    )
    .await
    .unwrap();
    let err = io
        .operate_write(&oid, WriteOp::new().omap_cmp("missing", CmpOp::Eq, "a"))
        .await
        .unwrap_err();
    assert!(err.is_canceled(), "{}", errno_name(&err));
    // ... so "create if absent" is `omap_cmp(key, Eq, "")`.
    let err = io
        .operate_write(
            &oid,
            WriteOp::new()
                .omap_cmp("x", CmpOp::Eq, "")
                .omap_set(&[("x", "9")]),
        )
        .await
        .unwrap_err();
    assert!(err.is_canceled(), "{}", errno_name(&err));

    // Lt / Gt: stored value on the left.
    io.operate_write(&oid, WriteOp::new().omap_cmp("x", CmpOp::Lt, "6"))
        .await
        .unwrap();
    io.operate_write(&oid, WriteOp::new().omap_cmp("x", CmpOp::Gt, "4"))
        .await
        .unwrap();
    let err = io
        .operate_write(&oid, WriteOp::new().omap_cmp("x", CmpOp::Lt, "4"))
        .await
        .unwrap_err();
    assert!(err.is_canceled(), "{}", errno_name(&err));

    // Ne/Gte/Lte are not supported by the OSD's omap_cmp.
    let err = io
        .operate_write(&oid, WriteOp::new().omap_cmp("x", CmpOp::Ne, "4"))
        .await
        .unwrap_err();
    eprintln!("omap_cmp with Ne: {}", errno_name(&err));
    assert_eq!(err.errno(), libc::EINVAL, "{}", errno_name(&err));

    // A guard in a read op.
    let r = io
        .operate_read(&oid, ReadOp::new().omap_cmp("x", CmpOp::Eq, "5").stat())
        .await
        .unwrap();
    assert!(r.stat.is_some());
    let err = io
        .operate_read(&oid, ReadOp::new().omap_cmp("x", CmpOp::Eq, "7").stat())
        .await
        .unwrap_err();
    assert!(err.is_canceled(), "{}", errno_name(&err));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_object_class_methods() {
    let cluster = cluster_or_skip!();
    let io = common::pool(&cluster).await;
    let oid = common::unique("cls");

    // `version.set` (a writer method) through the read-op exec path, then `version.read`.
    let v5 = common::cls_version(5, "lode");
    let out = io.exec(&oid, "version", "set", &v5).await.unwrap();
    assert!(out.is_empty());
    let out = io.exec(&oid, "version", "read", b"").await.unwrap();
    assert_eq!(
        out, v5,
        "cls_version_read_ret encodes like cls_version_set_op"
    );

    // The same method inside an atomic write op.
    let v7 = common::cls_version(7, "t2");
    io.operate_write(
        &oid,
        WriteOp::new()
            .exec("version", "set", &v7)
            .setxattr("k", "v"),
    )
    .await
    .unwrap();
    let r = io
        .operate_read(&oid, ReadOp::new().exec("version", "read", b"").stat())
        .await
        .unwrap();
    assert_eq!(r.exec_out.unwrap(), v7);

    // Unknown method / class.
    let err = io
        .exec(&oid, "version", "no_such_method", b"")
        .await
        .unwrap_err();
    eprintln!("unknown cls method: {}", errno_name(&err));
    assert_eq!(err.errno(), libc::EOPNOTSUPP, "{}", errno_name(&err));
    // A class the OSD does not load (not in `osd_class_load_list`) is EPERM.
    let err = io.exec(&oid, "no_such_class", "x", b"").await.unwrap_err();
    assert_eq!(err.errno(), libc::EPERM, "{}", errno_name(&err));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_writes() {
    let cluster = cluster_or_skip!();
    let io = common::pool(&cluster).await;
    let ns = common::unique("conc");
    let io = io.with_namespace(&ns).await.unwrap();
    assert_eq!(io.namespace(), ns);
    let t0 = Instant::now();
    let results = join_all((0..200).map(|i| {
        let io = io.clone();
        async move {
            io.write_full(&format!("obj-{i:03}"), format!("payload {i}"))
                .await
        }
    }))
    .await;
    let took = t0.elapsed();
    assert_eq!(results.len(), 200);
    for r in results {
        r.unwrap();
    }
    eprintln!("200 concurrent write_full: {took:?}");
    let mut names = io.list_objects(Some("obj-")).await.unwrap();
    names.sort();
    assert_eq!(names.len(), 200);
    assert_eq!(names[0], "obj-000");
    let reads = join_all((0..200).map(|i| {
        let io = io.clone();
        async move { io.read_full(&format!("obj-{i:03}")).await }
    }))
    .await;
    for (i, r) in reads.into_iter().enumerate() {
        assert_eq!(r.unwrap(), format!("payload {i}"));
    }
    // Namespaces isolate: the default namespace does not see these.
    let mut default_ns = io.clone();
    default_ns.set_namespace("").await.unwrap();
    let err = default_ns.read_full("obj-000").await.unwrap_err();
    assert!(err.is_not_found());
    assert_eq!(io.namespace(), ns, "the clone kept its namespace");
    join_all((0..200).map(|i| {
        let io = io.clone();
        async move { io.remove(&format!("obj-{i:03}")).await.unwrap() }
    }))
    .await;
    assert!(io.list_objects(None).await.unwrap().is_empty());
}

// ---------------------------------------------------------------------------------------------
// Watch / notify
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_and_notify_between_two_clients() {
    let watcher_cluster = cluster_or_skip!();
    let notifier_cluster = common::connect().await.unwrap();
    let wio = common::pool(&watcher_cluster).await;
    let nio = common::pool(&notifier_cluster).await;
    let oid = common::unique("ctl");

    // Watching a missing object fails.
    let err = wio.watch(&oid).await.unwrap_err();
    assert!(err.is_not_found(), "{}", errno_name(&err));

    wio.write_full(&oid, &b""[..]).await.unwrap();
    let mut watch = wio.watch(&oid).await.unwrap();
    assert!(watch.cookie() != 0);
    assert!(watch.check().unwrap() < Duration::from_secs(30));

    let reply = nio
        .notify(&oid, &b"invalidate bucket-1"[..], Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(reply.acks.len(), 1, "{reply:?}");
    assert!(reply.timeouts.is_empty());
    assert_eq!(reply.acks[0].notifier_id, watcher_cluster.instance_id());
    assert_eq!(reply.acks[0].cookie, watch.cookie());

    let ev = tokio::time::timeout(Duration::from_secs(5), watch.recv())
        .await
        .unwrap()
        .unwrap();
    match ev {
        WatchEvent::Notify(n) => {
            assert_eq!(n.payload, &b"invalidate bucket-1"[..]);
            assert_eq!(n.notifier_id, notifier_cluster.instance_id());
            assert_eq!(n.cookie, watch.cookie());
        }
        other => panic!("unexpected {other:?}"),
    }

    // Manual ack with a reply payload.
    let mut manual = wio
        .watch_with(
            &oid,
            WatchOptions {
                auto_ack: false,
                ..WatchOptions::default()
            },
        )
        .await
        .unwrap();
    let responder = tokio::spawn(async move {
        if let Some(WatchEvent::Notify(n)) = manual.recv().await {
            manual.ack(&n, b"dropped").unwrap();
        }
        manual
    });
    let reply = nio
        .notify(&oid, &b"second"[..], Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(reply.acks.len(), 2, "{reply:?}");
    assert!(reply.acks.iter().any(|a| a.payload == b"dropped"[..]));
    let manual = responder.await.unwrap();

    // A watcher that never acks shows up in `timeouts`.
    let reply = nio
        .notify(&oid, &b"third"[..], Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(reply.acks.len(), 1, "{reply:?}");
    assert_eq!(
        reply.timeouts,
        vec![(watcher_cluster.instance_id(), manual.cookie())]
    );

    // After unwatching, nobody acks.
    manual.unwatch().await.unwrap();
    watch.unwatch().await.unwrap();
    let reply = nio
        .notify(&oid, &b"fourth"[..], Duration::from_secs(5))
        .await
        .unwrap();
    assert!(
        reply.acks.is_empty() && reply.timeouts.is_empty(),
        "{reply:?}"
    );

    // Dropping a watch unwatches in the background.
    let dropped = wio.watch(&oid).await.unwrap();
    drop(dropped);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let reply = nio
            .notify(&oid, &b"fifth"[..], Duration::from_secs(2))
            .await
            .unwrap();
        if reply.acks.is_empty() && reply.timeouts.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "dropped watch still registered");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// Locks
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_lock_lease() {
    let a = cluster_or_skip!();
    let b = common::connect().await.unwrap();
    let ioa = common::pool(&a).await;
    let iob = common::pool(&b).await;
    let oid = common::unique("lease");
    let lease = Some(Duration::from_secs(30));

    ioa.lock_exclusive(&oid, "lease", "a1", "gateway a", lease, false)
        .await
        .unwrap();
    let err = ioa
        .lock_exclusive(&oid, "lease", "a1", "gateway a", lease, false)
        .await
        .unwrap_err();
    assert!(err.is_exists(), "{}", errno_name(&err));
    ioa.lock_exclusive(&oid, "lease", "a1", "gateway a", lease, true)
        .await
        .unwrap();
    let err = iob
        .lock_exclusive(&oid, "lease", "b1", "gateway b", lease, false)
        .await
        .unwrap_err();
    assert!(err.is_busy(), "{}", errno_name(&err));

    let info = iob.list_lockers(&oid, "lease").await.unwrap();
    assert!(info.exclusive);
    assert_eq!(info.lockers.len(), 1);
    let holder = info.lockers[0].clone();
    assert_eq!(holder.cookie, "a1");
    assert_eq!(holder.client, format!("client.{}", a.instance_id()));
    assert!(!holder.address.is_empty());

    // b takes over: break a's lock, then lock.
    iob.break_lock(&oid, "lease", &holder.client, &holder.cookie)
        .await
        .unwrap();
    iob.lock_exclusive(&oid, "lease", "b1", "gateway b", lease, false)
        .await
        .unwrap();
    let err = ioa.unlock(&oid, "lease", "a1").await.unwrap_err();
    assert!(err.is_not_found(), "{}", errno_name(&err));
    iob.unlock(&oid, "lease", "b1").await.unwrap();
    assert!(
        iob.list_lockers(&oid, "lease")
            .await
            .unwrap()
            .lockers
            .is_empty()
    );

    // An expiring lease can be taken once expired.
    ioa.lock_exclusive(&oid, "short", "a1", "", Some(Duration::from_secs(1)), false)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    iob.lock_exclusive(&oid, "short", "b1", "", lease, false)
        .await
        .unwrap();
}

// ---------------------------------------------------------------------------------------------
// Lifetimes and timeouts
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ioctx_keeps_a_dropped_cluster_alive() {
    let cluster = cluster_or_skip!();
    let io = common::pool(&cluster).await;
    let weak = Arc::downgrade(&cluster);
    drop(cluster);
    assert!(weak.upgrade().is_some(), "the IoCtx holds the cluster");
    let oid = common::unique("alive");
    io.write_full(&oid, &b"still here"[..]).await.unwrap();
    let clone = io.clone();
    drop(io);
    assert_eq!(clone.read_full(&oid).await.unwrap(), &b"still here"[..]);
    clone.remove(&oid).await.unwrap();
    drop(clone);
    assert!(
        weak.upgrade().is_none(),
        "the last IoCtx shut the cluster down"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn op_timeout_on_an_inactive_pg_and_dropped_futures() {
    let Some(conf) = common::conf_path() else {
        return;
    };
    let cluster = Cluster::connect(&ClusterConfig {
        op_timeout: Duration::from_secs(3),
        ..common::config(conf)
    })
    .await
    .unwrap();
    // size 4 on 3 OSDs with min_size 4: every PG stays inactive, so I/O waits.
    let name = common::unique("lode-rados-inactive");
    let spec = PoolSpec {
        min_size: Some(4),
        ..PoolSpec::replicated(4)
    };
    cluster.create_pool(&name, &spec).await.unwrap();
    let io = cluster.ioctx(&name).await.unwrap();

    // A future dropped while its op is in flight: librados still owns the op's buffers.
    let early = tokio::time::timeout(
        Duration::from_millis(200),
        io.write_full("dropped", vec![7u8; 1 << 20]),
    )
    .await;
    assert!(
        early.is_err(),
        "the write cannot complete on an inactive PG"
    );

    let t0 = Instant::now();
    let err = io.write_full("stuck", &b"x"[..]).await.unwrap_err();
    let took = t0.elapsed();
    eprintln!(
        "write on an inactive PG: {} after {took:?}",
        errno_name(&err)
    );
    assert!(err.is_timeout(), "{}", errno_name(&err));
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(10),
        "{took:?}"
    );
    let err = io.read_full("stuck").await.unwrap_err();
    assert!(err.is_timeout(), "{}", errno_name(&err));

    cluster.delete_pool(&name).await.unwrap();
    // Drop everything while the dropped write may still be in flight: its completion then
    // runs with no receiver and the reaper thread releases the ioctx and the cluster.
    let weak = Arc::downgrade(&cluster);
    drop(io);
    drop(cluster);
    assert!(weak.upgrade().is_none());
    tokio::time::sleep(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_watcher_gets_a_watch_error() {
    let admin = cluster_or_skip!();
    let watcher = common::connect().await.unwrap();
    let aio = common::pool(&admin).await;
    let wio = common::pool(&watcher).await;
    let oid = common::unique("fence");
    aio.write_full(&oid, &b""[..]).await.unwrap();
    let mut watch = wio.watch(&oid).await.unwrap();
    assert!(watch.check().is_ok());

    // Fence the watcher (what a lease taker does to an expired holder).
    let addrs = watcher.addrs().await.unwrap();
    eprintln!("watcher addrs: {addrs}");
    let t0 = Instant::now();
    admin
        .blocklist_add(&addrs, Duration::from_secs(120))
        .await
        .unwrap();

    let ev = tokio::time::timeout(Duration::from_secs(60), watch.recv())
        .await
        .expect("a watch error within 60 s of the fence")
        .unwrap();
    eprintln!("after {:?}: {ev:?}", t0.elapsed());
    let WatchEvent::Error { cookie, error } = ev else {
        panic!("expected a watch error, got {ev:?}");
    };
    assert_eq!(cookie, watch.cookie());
    assert_eq!(error.errno(), libc::ENOTCONN, "{}", errno_name(&error));
    let err = watch.check().unwrap_err();
    assert_eq!(err.errno(), libc::ENOTCONN, "{}", errno_name(&err));
    // The fenced client's writes fail with EBLOCKLISTED (= ESHUTDOWN).
    let err = wio.write_full(&oid, &b"late"[..]).await.unwrap_err();
    assert!(err.is_blocklisted(), "{}", errno_name(&err));
    // Others are unaffected.
    aio.write_full(&oid, &b"by admin"[..]).await.unwrap();
}
