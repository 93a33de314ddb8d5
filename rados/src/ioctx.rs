//! I/O on the objects of one pool and namespace.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;

use crate::cluster::{Cluster, blocking};
use crate::error::{RadosError, Result, check};
use crate::op::{ObjectStat, OmapPage, ReadOp, ReadResult, WriteOp, cstring};
use crate::raw;
use crate::watch::{NotifyReply, Watch, WatchOptions};

/// Page size of [`IoCtx::omap_get_all`] (the OSD caps a page at
/// `osd_max_omap_entries_per_request` = 1024).
pub const OMAP_PAGE: u64 = 1000;

/// An I/O context: one pool, one namespace. Cheap to clone (an `Arc`), `Send + Sync`, and
/// keeps its [`Cluster`] alive. Every operation is async; blocking librados calls (listing,
/// locks, unwatch) run on tokio's blocking pool.
#[derive(Clone)]
pub struct IoCtx {
    inner: Arc<Inner>,
}

struct Inner {
    raw: Arc<raw::IoCtxHandle>,
    ops: Arc<crate::cluster::PoolOps>,
    cluster: Arc<Cluster>,
    pool_name: String,
    namespace: String,
}

impl std::fmt::Debug for IoCtx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IoCtx")
            .field("pool", &self.inner.pool_name)
            .field("namespace", &self.inner.namespace)
            .finish()
    }
}

/// Holders of an advisory lock.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LockInfo {
    /// Exclusive (vs shared) lock.
    pub exclusive: bool,
    /// Tag of a shared lock.
    pub tag: String,
    /// Current holders.
    pub lockers: Vec<Locker>,
}

/// One holder of an advisory lock.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Locker {
    /// The holder's entity name, e.g. `client.4123` (what [`IoCtx::break_lock`] takes).
    pub client: String,
    /// The holder's cookie.
    pub cookie: String,
    /// The holder's address (what [`Cluster::blocklist_add`] takes).
    pub address: String,
}

impl Cluster {
    /// An I/O context on `pool` (default namespace). `ENOENT` if the pool does not exist.
    pub async fn ioctx(self: &Arc<Self>, pool: &str) -> Result<IoCtx> {
        IoCtx::open(self.clone(), pool, "").await
    }
}

impl IoCtx {
    pub(crate) async fn open(cluster: Arc<Cluster>, pool: &str, namespace: &str) -> Result<Self> {
        let pool_c = cstring("pool name", pool)?;
        let ns_c = cstring("namespace", namespace)?;
        let raw_cluster = cluster.raw().clone();
        let handle =
            blocking(move || raw::IoCtxHandle::create(raw_cluster, &pool_c, &ns_c)).await?;
        Ok(Self {
            inner: Arc::new(Inner {
                raw: Arc::new(handle),
                ops: cluster.pool_ops(pool),
                cluster,
                pool_name: pool.to_owned(),
                namespace: namespace.to_owned(),
            }),
        })
    }

    /// The cluster this context belongs to.
    pub fn cluster(&self) -> &Arc<Cluster> {
        &self.inner.cluster
    }

    /// The pool's name.
    pub fn pool_name(&self) -> &str {
        &self.inner.pool_name
    }

    /// The pool's id.
    pub fn pool_id(&self) -> i64 {
        self.inner.raw.pool_id()
    }

    /// The namespace (empty: the default one).
    pub fn namespace(&self) -> &str {
        &self.inner.namespace
    }

    /// A new context on the same pool in namespace `ns`.
    pub async fn with_namespace(&self, ns: &str) -> Result<IoCtx> {
        IoCtx::open(self.inner.cluster.clone(), &self.inner.pool_name, ns).await
    }

    /// Switches this handle to namespace `ns`. Clones made before keep their namespace (a
    /// new librados ioctx is created: changing the namespace of one shared with in-flight
    /// I/O is a data race in librados).
    pub async fn set_namespace(&mut self, ns: &str) -> Result<()> {
        *self = self.with_namespace(ns).await?;
        Ok(())
    }

    fn oid(oid: &str) -> Result<std::ffi::CString> {
        cstring("object name", oid)
    }

    /// Runs an atomic write op. Returns the object version after the write.
    ///
    /// Every write is sent with `FULL_TRY`: librados would otherwise hold a write to a full
    /// pool (at its quota, or an OSD past its full ratio) until space returns or the op timeout
    /// ends it, removals included. With it the OSD decides at once: a write that would grow
    /// the pool fails with `EDQUOT`/`ENOSPC` ([`RadosError::is_full`]), and one that does not
    /// (a removal, an omap change of an existing object) is applied, so space can be freed.
    pub async fn operate_write(&self, oid: &str, op: WriteOp) -> Result<u64> {
        let WriteOp { raw, error, flags } = op;
        let flags = flags | crate::operation_flags::FULL_TRY;
        if let Some(e) = error {
            return Err(e);
        }
        let oid_c = Self::oid(oid)?;
        self.inner
            .ops
            .writes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let done = raw::submit_write(self.inner.raw.clone(), oid_c, raw, flags)?.await?;
        self.inner.cluster.note_completion(done.rval.into());
        check("operate_write", done.rval.into())?;
        Ok(done.version)
    }

    /// Runs a read op. The whole op fails with the first failing step's errno (`ENOENT` for
    /// a missing object, `ECANCELED` for a failed guard).
    pub async fn operate_read(&self, oid: &str, op: ReadOp) -> Result<ReadResult> {
        let ReadOp { raw, error, flags } = op;
        if let Some(e) = error {
            return Err(e);
        }
        let oid_c = Self::oid(oid)?;
        self.inner
            .ops
            .reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let done = raw::submit_read(self.inner.raw.clone(), oid_c, raw, flags)?.await?;
        let (rval, version) = (done.rval, done.version);
        self.inner.cluster.note_completion(rval.into());
        check("operate_read", rval.into())?;
        let outputs = done
            .outputs()
            .ok_or_else(|| RadosError::from_rc("operate_read", rval.into()))?;
        ReadResult::from_outputs(version, outputs)
    }

    /// Replaces the object's data (creating it).
    pub async fn write_full(&self, oid: &str, data: impl Into<Bytes>) -> Result<()> {
        self.operate_write(oid, WriteOp::new().write_full(data))
            .await
            .map(drop)
    }

    /// Removes the object (`ENOENT` if missing).
    pub async fn remove(&self, oid: &str) -> Result<()> {
        self.operate_write(oid, WriteOp::new().remove())
            .await
            .map(drop)
    }

    /// Size and mtime.
    pub async fn stat(&self, oid: &str) -> Result<ObjectStat> {
        let r = self.operate_read(oid, ReadOp::new().stat()).await?;
        r.stat
            .ok_or_else(|| RadosError::decode("stat", "no stat in the reply"))
    }

    /// Up to `len` bytes at `offset`.
    pub async fn read(&self, oid: &str, offset: u64, len: usize) -> Result<Bytes> {
        let r = self
            .operate_read(oid, ReadOp::new().read(offset, len))
            .await?;
        Ok(r.data.unwrap_or_default())
    }

    /// The whole object: a stat and a read in one op (one view), re-read once larger if the
    /// object exceeds the first guess.
    pub async fn read_full(&self, oid: &str) -> Result<Bytes> {
        let mut want: usize = 64 * 1024;
        loop {
            let r = self
                .operate_read(oid, ReadOp::new().stat().read(0, want))
                .await?;
            let size = r.stat.map_or(0, |s| s.size);
            let data = r.data.unwrap_or_default();
            if data.len() as u64 >= size {
                return Ok(data);
            }
            want = usize::try_from(size)
                .ok()
                .filter(|&n| n <= raw::MAX_READ)
                .ok_or_else(|| RadosError::invalid(format!("object of {size} bytes")))?;
        }
    }

    /// One xattr, `None` if the object lacks it (`ENOENT` if the object is missing).
    pub async fn getxattr(&self, oid: &str, name: &str) -> Result<Option<Bytes>> {
        let r = self.operate_read(oid, ReadOp::new().getxattrs()).await?;
        Ok(r.xattr(name).cloned())
    }

    /// Calls object-class method `cls.method` and returns its output. Runs as a read op; the
    /// OSD still treats methods flagged as writers as writes (e.g. `version.set`).
    pub async fn exec(
        &self,
        oid: &str,
        cls: &str,
        method: &str,
        input: impl AsRef<[u8]>,
    ) -> Result<Bytes> {
        let r = self
            .operate_read(oid, ReadOp::new().exec(cls, method, input))
            .await?;
        Ok(r.exec_out.unwrap_or_default())
    }

    /// One page of omap entries (see [`ReadOp::omap_get_vals`]).
    pub async fn omap_get_vals(
        &self,
        oid: &str,
        start_after: impl AsRef<[u8]>,
        filter_prefix: impl AsRef<[u8]>,
        max: u64,
    ) -> Result<OmapPage> {
        let r = self
            .operate_read(
                oid,
                ReadOp::new().omap_get_vals(start_after, filter_prefix, max),
            )
            .await?;
        Ok(r.omap_vals.unwrap_or_default())
    }

    /// Every omap entry, paging by [`OMAP_PAGE`]. Keys must not contain NUL bytes (the C API
    /// takes `start_after` as a C string).
    pub async fn omap_get_all(&self, oid: &str) -> Result<Vec<(Vec<u8>, Bytes)>> {
        self.omap_get_prefix(oid, b"").await
    }

    /// Every omap entry whose key starts with `prefix`, paging by [`OMAP_PAGE`].
    pub async fn omap_get_prefix(
        &self,
        oid: &str,
        prefix: impl AsRef<[u8]>,
    ) -> Result<Vec<(Vec<u8>, Bytes)>> {
        let prefix = prefix.as_ref();
        let mut all = Vec::new();
        let mut after: Vec<u8> = Vec::new();
        loop {
            let page = self.omap_get_vals(oid, &after, prefix, OMAP_PAGE).await?;
            let more = page.more;
            if let Some((k, _)) = page.entries.last() {
                after = k.clone();
            }
            let empty = page.entries.is_empty();
            all.extend(page.entries);
            if !more || empty {
                return Ok(all);
            }
        }
    }

    /// Every object name in this namespace (client-side `prefix` filter). Walks the whole
    /// pool's PGs: for reconciliation, not for a request path.
    pub async fn list_objects(&self, prefix: Option<&str>) -> Result<Vec<String>> {
        let raw = self.inner.raw.clone();
        let mut names = blocking(move || raw::list_objects(&raw)).await?;
        if let Some(p) = prefix {
            names.retain(|n| n.starts_with(p));
        }
        Ok(names)
    }

    /// Watches `oid` with auto-ack (see [`IoCtx::watch_with`]).
    pub async fn watch(&self, oid: &str) -> Result<Watch> {
        self.watch_with(oid, WatchOptions::default()).await
    }

    /// Registers a watch on `oid` (`ENOENT` if the object does not exist).
    pub async fn watch_with(&self, oid: &str, opts: WatchOptions) -> Result<Watch> {
        let oid_c = Self::oid(oid)?;
        let (tx, rx) = mpsc::unbounded_channel();
        let raw = self.inner.raw.clone();
        let secs = u32::try_from(opts.timeout.as_secs()).unwrap_or(u32::MAX);
        let auto_ack = opts.auto_ack;
        let guard =
            blocking(move || raw::WatchGuard::watch(raw, oid_c, secs, auto_ack, tx)).await?;
        Ok(Watch::new(rx, guard, oid.to_owned()))
    }

    /// Notifies every watcher of `oid` and waits for their acks, at most `timeout` (zero:
    /// `osd_default_notify_timeout`, 30 s). Watchers that did not ack in time are listed in
    /// [`NotifyReply::timeouts`] (librados reports `ETIMEDOUT`; this returns the reply so the
    /// caller sees who did ack).
    pub async fn notify(
        &self,
        oid: &str,
        payload: impl Into<Bytes>,
        timeout: Duration,
    ) -> Result<NotifyReply> {
        let oid_c = Self::oid(oid)?;
        let ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        let done = raw::submit_notify(self.inner.raw.clone(), oid_c, payload.into(), ms)?.await?;
        let rval = done.rval;
        let reply = done.take_reply();
        if rval == -libc::ETIMEDOUT && !reply.is_empty() {
            let decoded = NotifyReply::decode(&reply)?;
            if !decoded.timeouts.is_empty() {
                return Ok(decoded);
            }
        }
        check("rados_aio_notify", rval.into())?;
        NotifyReply::decode(&reply)
    }

    /// Takes (or, with `may_renew`, renews) the exclusive advisory lock `name` on `oid` for
    /// `duration` (`None`: until unlocked). `EBUSY` if another cookie holds it; `EEXIST` if
    /// this cookie holds it and `may_renew` is false.
    pub async fn lock_exclusive(
        &self,
        oid: &str,
        name: &str,
        cookie: &str,
        desc: &str,
        duration: Option<Duration>,
        may_renew: bool,
    ) -> Result<()> {
        let (o, n, c, d) = (
            Self::oid(oid)?,
            cstring("lock name", name)?,
            cstring("lock cookie", cookie)?,
            cstring("lock description", desc)?,
        );
        let raw = self.inner.raw.clone();
        blocking(move || raw::lock_exclusive(&raw, &o, &n, &c, &d, duration, may_renew)).await
    }

    /// Releases the lock (`ENOENT` if this cookie does not hold it).
    pub async fn unlock(&self, oid: &str, name: &str, cookie: &str) -> Result<()> {
        let (o, n, c) = (
            Self::oid(oid)?,
            cstring("lock name", name)?,
            cstring("lock cookie", cookie)?,
        );
        let raw = self.inner.raw.clone();
        blocking(move || raw::unlock(&raw, &o, &n, &c)).await
    }

    /// Breaks another client's lock (`client` and `cookie` from [`IoCtx::list_lockers`]).
    pub async fn break_lock(
        &self,
        oid: &str,
        name: &str,
        client: &str,
        cookie: &str,
    ) -> Result<()> {
        let (o, n, cl, c) = (
            Self::oid(oid)?,
            cstring("lock name", name)?,
            cstring("lock client", client)?,
            cstring("lock cookie", cookie)?,
        );
        let raw = self.inner.raw.clone();
        blocking(move || raw::break_lock(&raw, &o, &n, &cl, &c)).await
    }

    /// The holders of lock `name` on `oid`.
    pub async fn list_lockers(&self, oid: &str, name: &str) -> Result<LockInfo> {
        let (o, n) = (Self::oid(oid)?, cstring("lock name", name)?);
        let raw = self.inner.raw.clone();
        let r = blocking(move || raw::list_lockers(&raw, &o, &n)).await?;
        Ok(LockInfo {
            exclusive: r.exclusive,
            tag: r.tag,
            lockers: r
                .lockers
                .into_iter()
                .map(|(client, cookie, address)| Locker {
                    client,
                    cookie,
                    address,
                })
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Cluster, Watch};

    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>(_: T) {}

    #[test]
    fn handles_are_send_and_sync() {
        send_sync::<IoCtx>();
        send_sync::<Cluster>();
        send_sync::<Watch>();
        send::<WriteOp>(WriteOp::new());
        send::<ReadOp>(ReadOp::new());
    }

    /// Never run: checks that the futures can move between tokio workers.
    #[allow(dead_code)]
    fn futures_are_send(io: &IoCtx, cluster: &Arc<Cluster>) {
        send(io.operate_write("o", WriteOp::new()));
        send(io.operate_read("o", ReadOp::new()));
        send(io.read_full("o"));
        send(io.notify("o", Bytes::new(), Duration::ZERO));
        send(io.watch("o"));
        send(io.list_objects(None));
        send(io.lock_exclusive("o", "n", "c", "d", None, false));
        send(cluster.ioctx("p"));
        send(cluster.create_pool("p", &crate::PoolSpec::replicated(3)));
        send(Cluster::connect(&crate::ClusterConfig::default()));
    }
}
