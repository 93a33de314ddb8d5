//! Shared helpers of the cluster tests: connection from `LODE_CEPH_CONF`, a shared test pool
//! and unique object names.

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lode_rados::{Cluster, ClusterConfig, IoCtx, PoolSpec};

/// The replicated (size 3) pool the tests share.
pub const POOL: &str = "lode-rados-test";

/// The conf path from `LODE_CEPH_CONF`. Without it the test fails, unless
/// `LODE_SKIP_CLUSTER_TESTS=1`, in which case it prints "skipped: no cluster" and the caller
/// returns.
pub fn conf_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("LODE_CEPH_CONF") {
        return Some(PathBuf::from(p));
    }
    if std::env::var("LODE_SKIP_CLUSTER_TESTS").as_deref() == Ok("1") {
        eprintln!("skipped: no cluster");
        return None;
    }
    panic!(
        "LODE_CEPH_CONF is not set: these tests need a Ceph cluster. Start one with \
         `scripts/ceph-dev.sh start DIR` and set LODE_CEPH_CONF=DIR/ceph.conf, or set \
         LODE_SKIP_CLUSTER_TESTS=1 to skip them"
    );
}

/// The test config for `conf`: bounded timeouts so that a broken cluster fails fast.
pub fn config(conf: PathBuf) -> ClusterConfig {
    ClusterConfig {
        conf_path: conf,
        op_timeout: Duration::from_secs(30),
        connect_timeout: Duration::from_secs(10),
        ..ClusterConfig::default()
    }
}

/// A connected cluster, or `None` when skipping.
pub async fn connect() -> Option<Arc<Cluster>> {
    let conf = conf_path()?;
    Some(
        Cluster::connect(&config(conf))
            .await
            .expect("connect to LODE_CEPH_CONF's cluster"),
    )
}

/// An ioctx on the shared replicated test pool (created if needed).
pub async fn pool(cluster: &Arc<Cluster>) -> IoCtx {
    cluster
        .create_pool(POOL, &PoolSpec::replicated(3))
        .await
        .expect("create the test pool");
    cluster.ioctx(POOL).await.expect("ioctx on the test pool")
}

/// A name unique to this process and call.
pub fn unique(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    format!(
        "{prefix}-{}-{nanos}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Connects, or returns from the test when skipping.
#[macro_export]
macro_rules! cluster_or_skip {
    () => {
        match common::connect().await {
            Some(c) => c,
            None => return,
        }
    };
}

/// Ceph's `ENCODE_START(1, 1)` framing around `body`.
pub fn encode_v1(body: &[u8]) -> Vec<u8> {
    let mut out = vec![1u8, 1u8];
    out.extend_from_slice(&u32::try_from(body.len()).unwrap().to_le_bytes());
    out.extend_from_slice(body);
    out
}

/// `cls_version_set_op { obj_version { ver, tag } }`, which has the same encoding as
/// `cls_version_read_ret`.
pub fn cls_version(ver: u64, tag: &str) -> Vec<u8> {
    let mut objv = ver.to_le_bytes().to_vec();
    objv.extend_from_slice(&u32::try_from(tag.len()).unwrap().to_le_bytes());
    objv.extend_from_slice(tag.as_bytes());
    encode_v1(&encode_v1(&objv))
}
