//! The cluster connection, pools and monitor commands.

use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::error::{RadosError, Result};
use crate::op::cstring;
use crate::raw;

/// How to reach the cluster. Plain data: the binary maps its config onto it.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// The `ceph.conf` to read (`mon host`, auth settings, ...).
    pub conf_path: PathBuf,
    /// Full entity name, e.g. `client.admin` or `client.lode`.
    pub client_name: String,
    /// Keyring file (`keyring` option); `None` keeps the conf file's setting.
    pub keyring: Option<PathBuf>,
    /// Bound on every OSD and monitor operation (`rados_osd_op_timeout`,
    /// `rados_mon_op_timeout`, whole seconds rounded up). An operation past it fails with
    /// `ETIMEDOUT` (a timed-out write may still have been applied). Zero waits forever
    /// (librados' default: an op waits while its PG is inactive).
    pub op_timeout: Duration,
    /// Bound on `connect` (`client_mount_timeout`, whole seconds rounded up, and a tokio
    /// timeout slightly longer as a backstop).
    pub connect_timeout: Duration,
    /// Further options set with `rados_conf_set` after the conf file, in order.
    pub conf_overrides: Vec<(String, String)>,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        Self {
            conf_path: PathBuf::from("/etc/ceph/ceph.conf"),
            client_name: "client.admin".to_owned(),
            keyring: None,
            op_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            conf_overrides: Vec::new(),
        }
    }
}

/// Replication scheme of a pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PoolKind {
    /// `size` full copies. The only kind that can hold omap (indexes, intents).
    Replicated {
        /// Number of copies.
        size: u32,
    },
    /// Erasure-coded with the named profile. No omap in Pacific (`EOPNOTSUPP`); no partial
    /// overwrites unless `allow_ec_overwrites`.
    Erasure {
        /// The erasure-code profile.
        profile: String,
    },
}

/// What [`Cluster::create_pool`] creates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolSpec {
    /// Replicated or erasure-coded.
    pub kind: PoolKind,
    /// Placement groups (`pg_num` = `pgp_num`).
    pub pg_num: u32,
    /// `min_size`; `None` keeps Ceph's default (size - size/2, or k+1 for EC).
    pub min_size: Option<u32>,
    /// Application tag (`osd pool application enable`), which silences the health warning.
    pub application: String,
    /// `allow_ec_overwrites` (EC pools only; needed for partial writes and appends).
    pub ec_overwrites: bool,
}

impl PoolSpec {
    /// A replicated pool of `size` copies, 8 PGs, application `lode`.
    pub fn replicated(size: u32) -> Self {
        Self {
            kind: PoolKind::Replicated { size },
            pg_num: 8,
            min_size: None,
            application: "lode".to_owned(),
            ec_overwrites: false,
        }
    }

    /// An erasure-coded pool with `profile`, 8 PGs, application `lode`.
    pub fn erasure(profile: impl Into<String>) -> Self {
        Self {
            kind: PoolKind::Erasure {
                profile: profile.into(),
            },
            ..Self::replicated(0)
        }
    }
}

/// A pool as the osdmap describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolInfo {
    /// Pool id.
    pub id: i64,
    /// Pool name.
    pub name: String,
    /// Replication scheme (`size` for replicated; the profile for EC).
    pub kind: PoolKind,
    /// Copies (replicated) or k+m (EC).
    pub size: u32,
    /// Minimum copies/chunks for I/O.
    pub min_size: u32,
    /// Placement groups.
    pub pg_num: u32,
    /// Enabled application tags.
    pub applications: Vec<String>,
}

impl PoolInfo {
    /// Whether the pool is erasure-coded (and so cannot hold omap).
    pub fn is_erasure(&self) -> bool {
        matches!(self.kind, PoolKind::Erasure { .. })
    }
}

/// The reply of a monitor command.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MonReply {
    /// The output buffer (JSON when the command asked for `"format": "json"`).
    pub out: Vec<u8>,
    /// The status string.
    pub status: String,
}

/// A pool's usage as `ceph df` reports it, in bytes of user data (replication and the full
/// ratio already taken out of `max_avail`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolSpace {
    /// Bytes stored (before replication).
    pub stored: u64,
    /// Bytes the pool may still take before its fullest OSD reaches the full ratio.
    pub max_avail: u64,
}

/// The pool's figures from `df`'s JSON; `None` without usage figures (no mgr yet) or pool.
fn parse_pool_space(df: &Value, name: &str) -> Option<PoolSpace> {
    let total = df.pointer("/stats/total_bytes").and_then(Value::as_u64)?;
    if total == 0 {
        return None;
    }
    let p = df
        .get("pools")?
        .as_array()?
        .iter()
        .find(|p| p.get("name").and_then(Value::as_str) == Some(name))?;
    let num = |k: &str| p.pointer(&format!("/stats/{k}")).and_then(Value::as_u64);
    Some(PoolSpace {
        stored: num("stored").or_else(|| num("bytes_used"))?,
        max_avail: num("max_avail")?,
    })
}

/// A connected cluster handle. Shared as `Arc<Cluster>`; librados shuts down when the last
/// `Arc` *and* the last [`IoCtx`](crate::IoCtx) (each holds the handle) are gone. That shutdown blocks for
/// a moment (it joins librados' threads).
pub struct Cluster {
    raw: Arc<raw::ClusterHandle>,
    client_name: String,
    /// Operations sent, per pool (see [`Cluster::op_counts`]).
    counters: std::sync::Mutex<Vec<Arc<PoolOps>>>,
    /// When an OSD last answered an op of this client (anything but a timeout), as
    /// milliseconds since `born`.
    answered_ms: std::sync::atomic::AtomicU64,
    born: std::time::Instant,
}

/// Operations this client sent to one pool: each `operate_read` / `operate_write` (a compound
/// op is one) counts once, whatever it does.
#[derive(Debug, Default)]
pub struct PoolOps {
    pub pool: String,
    pub reads: std::sync::atomic::AtomicU64,
    pub writes: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("client_name", &self.client_name)
            .field("instance_id", &self.instance_id())
            .finish()
    }
}

/// Runs a blocking librados call on tokio's blocking pool.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(RadosError::Task)?
}

fn secs_ceil(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

fn connect_blocking(conf: ClusterConfig) -> Result<raw::ClusterHandle> {
    let name = cstring("client name", conf.client_name.as_str())?;
    let handle = raw::ClusterHandle::create(&name)?;
    let path = cstring("conf path", conf.conf_path.as_os_str().as_bytes())?;
    handle.conf_read_file(&path)?;
    let set =
        |k: &str, v: &str| handle.conf_set(&cstring("conf option", k)?, &cstring("conf value", v)?);
    if let Some(keyring) = &conf.keyring {
        set("keyring", &keyring.to_string_lossy())?;
    }
    let op_secs = secs_ceil(conf.op_timeout).to_string();
    set("rados_osd_op_timeout", &op_secs)?;
    set("rados_mon_op_timeout", &op_secs)?;
    set(
        "client_mount_timeout",
        &secs_ceil(conf.connect_timeout).max(1).to_string(),
    )?;
    for (k, v) in &conf.conf_overrides {
        set(k, v)?;
    }
    handle.connect()?;
    Ok(handle)
}

fn prefix_of(cmd: &str) -> String {
    serde_json::from_str::<Value>(cmd)
        .ok()
        .and_then(|v| v.get("prefix").and_then(Value::as_str).map(str::to_owned))
        .unwrap_or_else(|| "?".to_owned())
}

impl Cluster {
    /// Creates a handle, reads the conf file, applies the timeouts and connects. The connect
    /// runs on the blocking pool, bounded by `connect_timeout`: an unreachable monitor fails
    /// with `ETIMEDOUT` ([`RadosError::is_timeout`]) rather than hanging.
    pub async fn connect(conf: &ClusterConfig) -> Result<Arc<Cluster>> {
        let client_name = conf.client_name.clone();
        let after = conf.connect_timeout;
        let task = tokio::task::spawn_blocking({
            let conf = conf.clone();
            // If the tokio timeout fires first, the task still finishes and drops (shuts
            // down) the handle on the blocking thread.
            move || connect_blocking(conf)
        });
        let handle = match tokio::time::timeout(after + Duration::from_secs(1), task).await {
            Err(_) => return Err(RadosError::ConnectTimeout { after }),
            Ok(joined) => joined.map_err(RadosError::Task)??,
        };
        let cluster = Cluster {
            raw: Arc::new(handle),
            client_name,
            counters: Default::default(),
            answered_ms: Default::default(),
            born: std::time::Instant::now(),
        };
        tracing::debug!(
            client = %cluster.client_name,
            instance_id = cluster.instance_id(),
            "connected to the ceph cluster"
        );
        Ok(Arc::new(cluster))
    }

    /// The op counters of `pool` (shared by every I/O context on it).
    pub(crate) fn pool_ops(&self, pool: &str) -> Arc<PoolOps> {
        let mut all = self.counters.lock().expect("op counters");
        if let Some(c) = all.iter().find(|c| c.pool == pool) {
            return Arc::clone(c);
        }
        let c = Arc::new(PoolOps {
            pool: pool.to_owned(),
            ..Default::default()
        });
        all.push(Arc::clone(&c));
        c
    }

    /// Records that an op completed with `rval` (a timeout is no answer).
    pub(crate) fn note_completion(&self, rval: i64) {
        if rval != -i64::from(libc::ETIMEDOUT) {
            let ms = self.born.elapsed().as_millis() as u64;
            self.answered_ms
                .fetch_max(ms, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// How long since the cluster last answered one of this client's ops (since the connect,
    /// if none yet). A gateway cut off the cluster sees it grow past the op timeout; a healthy
    /// one's background ops keep it within seconds.
    pub fn silent_for(&self) -> Duration {
        let ms = self.answered_ms.load(std::sync::atomic::Ordering::Relaxed);
        self.born
            .elapsed()
            .saturating_sub(Duration::from_millis(ms))
    }

    /// (pool, read ops, write ops) this client sent since it connected, per pool: what an S3
    /// operation costs in RADOS operations, measured.
    pub fn op_counts(&self) -> Vec<(String, u64, u64)> {
        use std::sync::atomic::Ordering::Relaxed;
        self.counters
            .lock()
            .expect("op counters")
            .iter()
            .map(|c| {
                (
                    c.pool.clone(),
                    c.reads.load(Relaxed),
                    c.writes.load(Relaxed),
                )
            })
            .collect()
    }

    /// librados' version (major, minor, extra): 3.0.0 for Pacific.
    pub fn librados_version() -> (i32, i32, i32) {
        raw::librados_version()
    }

    /// This client's instance id (the `notifier_id` its notifies carry).
    pub fn instance_id(&self) -> u64 {
        self.raw.instance_id()
    }

    /// The entity name this handle authenticated as.
    pub fn client_name(&self) -> &str {
        &self.client_name
    }

    /// This session's addresses, as [`Cluster::blocklist_add`] takes them (fencing).
    pub async fn addrs(&self) -> Result<String> {
        let raw = self.raw.clone();
        blocking(move || raw.addrs()).await
    }

    /// Blocklists (fences) a client address for `expire` (zero: the monitor's default, 1 h).
    pub async fn blocklist_add(&self, addr: &str, expire: Duration) -> Result<()> {
        let addr = cstring("address", addr)?;
        let secs = u32::try_from(secs_ceil(expire)).unwrap_or(u32::MAX);
        let raw = self.raw.clone();
        blocking(move || raw.blocklist_add(&addr, secs)).await
    }

    /// Fetches the latest osdmap from the monitors. Pool creation and deletion through this
    /// handle already do.
    pub async fn wait_for_latest_osdmap(&self) -> Result<()> {
        let raw = self.raw.clone();
        blocking(move || raw.wait_for_latest_osdmap()).await
    }

    /// The pool's id, or `None` if it does not exist. Answers from this client's osdmap: a
    /// pool deleted by another client may still be listed until
    /// [`Cluster::wait_for_latest_osdmap`].
    pub async fn pool_lookup(&self, name: &str) -> Result<Option<i64>> {
        let name = cstring("pool name", name)?;
        let raw = self.raw.clone();
        blocking(move || raw.pool_lookup(&name)).await
    }

    /// Sends a JSON monitor command (`{"prefix": ..., ...}`) with an input buffer. A
    /// negative return fails with [`RadosError::MonCommand`] carrying the monitor's status.
    pub async fn mon_command(&self, cmd: &str, input: &[u8]) -> Result<MonReply> {
        let prefix = prefix_of(cmd);
        let cmd = cstring("mon command", cmd)?;
        let input = input.to_vec();
        let raw = self.raw.clone();
        let (rc, out, status) = blocking(move || Ok(raw.mon_command(&cmd, &input))).await?;
        if rc < 0 {
            let errno = rc.saturating_neg();
            return Err(RadosError::MonCommand {
                prefix,
                errno,
                status,
                source: std::io::Error::from_raw_os_error(errno),
            });
        }
        Ok(MonReply { out, status })
    }

    async fn mon_json(&self, cmd: Value) -> Result<MonReply> {
        self.mon_command(&cmd.to_string(), &[]).await
    }

    /// Sets an erasure-code profile, e.g. `[("k","2"), ("m","1"),
    /// ("crush-failure-domain","osd")]`. Fails with `EPERM` if it exists with other values.
    pub async fn set_erasure_code_profile(
        &self,
        name: &str,
        params: &[(&str, &str)],
    ) -> Result<()> {
        let profile: Vec<String> = params.iter().map(|(k, v)| format!("{k}={v}")).collect();
        self.mon_json(json!({
            "prefix": "osd erasure-code-profile set",
            "name": name,
            "profile": profile,
        }))
        .await
        .map(drop)
    }

    /// Creates a pool (and tags its application) and returns its id once this client sees
    /// it. An existing pool of the same kind is accepted as is (its size is not changed);
    /// one of another kind fails: the monitor refuses a type change with `EINVAL` ("cannot
    /// change to type ..."), and an EC pool with another profile fails here with `EEXIST`.
    pub async fn create_pool(&self, name: &str, spec: &PoolSpec) -> Result<i64> {
        let mut cmd = json!({
            "prefix": "osd pool create",
            "pool": name,
            "pg_num": spec.pg_num,
            "pgp_num": spec.pg_num,
        });
        match &spec.kind {
            PoolKind::Replicated { size } => {
                cmd["pool_type"] = json!("replicated");
                cmd["size"] = json!(size);
            }
            PoolKind::Erasure { profile } => {
                cmd["pool_type"] = json!("erasure");
                cmd["erasure_code_profile"] = json!(profile);
            }
        }
        let reply = self.mon_json(cmd).await?;
        if reply.status.contains("already exists") {
            let info = self.pool_info(name).await?;
            let same = match (&info, &spec.kind) {
                (Some(i), PoolKind::Replicated { .. }) => !i.is_erasure(),
                (Some(i), PoolKind::Erasure { profile }) => {
                    i.kind
                        == PoolKind::Erasure {
                            profile: profile.clone(),
                        }
                }
                (None, _) => false,
            };
            if !same {
                return Err(RadosError::MonCommand {
                    prefix: "osd pool create".to_owned(),
                    errno: libc::EEXIST,
                    status: format!("pool '{name}' exists with another kind: {info:?}"),
                    source: std::io::Error::from_raw_os_error(libc::EEXIST),
                });
            }
        }
        if let Some(min_size) = spec.min_size {
            self.pool_set(name, "min_size", &min_size.to_string())
                .await?;
        }
        if spec.ec_overwrites && matches!(spec.kind, PoolKind::Erasure { .. }) {
            self.pool_set(name, "allow_ec_overwrites", "true").await?;
        }
        if !spec.application.is_empty() {
            self.mon_json(json!({
                "prefix": "osd pool application enable",
                "pool": name,
                "app": spec.application,
            }))
            .await?;
        }
        self.wait_for_latest_osdmap().await?;
        self.pool_lookup(name).await?.ok_or_else(|| {
            RadosError::from_rc("create_pool: lookup after create", -i64::from(libc::ENOENT))
        })
    }

    /// `osd pool set <pool> <var> <val>`.
    pub async fn pool_set(&self, pool: &str, var: &str, val: &str) -> Result<()> {
        self.mon_json(json!({
            "prefix": "osd pool set",
            "pool": pool,
            "var": var,
            "val": val,
        }))
        .await
        .map(drop)
    }

    /// Deletes a pool and all its objects (needs `mon allow pool delete = true`). A missing
    /// pool is not an error.
    pub async fn delete_pool(&self, name: &str) -> Result<()> {
        self.mon_json(json!({
            "prefix": "osd pool rm",
            "pool": name,
            "pool2": name,
            "yes_i_really_really_mean_it": true,
        }))
        .await?;
        self.wait_for_latest_osdmap().await
    }

    /// The pool as the current osdmap describes it (`osd dump`), or `None`.
    pub async fn pool_info(&self, name: &str) -> Result<Option<PoolInfo>> {
        let reply = self
            .mon_json(json!({"prefix": "osd dump", "format": "json"}))
            .await?;
        let dump: Value =
            serde_json::from_slice(&reply.out).map_err(|e| RadosError::decode("osd dump", e))?;
        let pools = dump
            .get("pools")
            .and_then(Value::as_array)
            .ok_or_else(|| RadosError::decode("osd dump", "no pools array"))?;
        let Some(p) = pools
            .iter()
            .find(|p| p.get("pool_name").and_then(Value::as_str) == Some(name))
        else {
            return Ok(None);
        };
        let num = |k: &str| p.get(k).and_then(Value::as_i64).unwrap_or(0);
        let small = |k: &str| u32::try_from(num(k)).unwrap_or(0);
        // pg_pool_t::TYPE_REPLICATED = 1, TYPE_ERASURE = 3.
        let kind = match num("type") {
            3 => PoolKind::Erasure {
                profile: p
                    .get("erasure_code_profile")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
            },
            1 => PoolKind::Replicated {
                size: small("size"),
            },
            t => return Err(RadosError::decode("osd dump", format!("pool type {t}"))),
        };
        let applications = p
            .get("application_metadata")
            .and_then(Value::as_object)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        Ok(Some(PoolInfo {
            id: num("pool"),
            name: name.to_owned(),
            kind,
            size: small("size"),
            min_size: small("min_size"),
            pg_num: small("pg_num"),
            applications,
        }))
    }

    /// What the pool stores and may still take (`ceph df`): `None` while the cluster has no
    /// usage figures (they come from the active ceph-mgr: without one, `df` is all zeros) or
    /// the pool does not exist.
    pub async fn pool_space(&self, name: &str) -> Result<Option<PoolSpace>> {
        let reply = self
            .mon_json(json!({"prefix": "df", "format": "json"}))
            .await?;
        let df: Value =
            serde_json::from_slice(&reply.out).map_err(|e| RadosError::decode("df", e))?;
        Ok(parse_pool_space(&df, name))
    }

    /// Whether the pool is erasure-coded (`ENOENT` if it does not exist). Lode refuses an EC
    /// pool for anything that needs omap.
    pub async fn pool_is_erasure(&self, name: &str) -> Result<bool> {
        match self.pool_info(name).await? {
            Some(info) => Ok(info.is_erasure()),
            None => Err(RadosError::from_rc(
                "pool_is_erasure",
                -i64::from(libc::ENOENT),
            )),
        }
    }

    pub(crate) fn raw(&self) -> &Arc<raw::ClusterHandle> {
        &self.raw
    }
}

#[cfg(test)]
mod space_tests {
    use super::*;

    #[test]
    fn df_without_a_mgr_has_no_figures_and_a_pool_has_its_own() {
        let none = json!({"stats": {"total_bytes": 0}, "pools": [{"name": "d", "stats": {"stored": 0, "max_avail": 0}}]});
        assert_eq!(parse_pool_space(&none, "d"), None);
        let df = json!({"stats": {"total_bytes": 3u64 << 33},
            "pools": [{"name": "i", "stats": {"stored": 5, "max_avail": 7}},
                      {"name": "d", "stats": {"stored": 1000, "max_avail": 2u64 << 30}}]});
        assert_eq!(
            parse_pool_space(&df, "d"),
            Some(PoolSpace {
                stored: 1000,
                max_avail: 2 << 30
            })
        );
        assert_eq!(parse_pool_space(&df, "x"), None);
    }
}
