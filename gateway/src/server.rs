//! Wiring: config -> metadata store + chunk store -> object service -> S3 door on hyper.
//! The only module that picks concrete backends.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use lode_config::{Durability, IoBackend, LodeConfig};
use lode_datapath::{Backend, Datapath};
use lode_metadata::MetadataStore;
use lode_metadata_rocks::{RocksConfig, RocksMetadataStore};
use s3s::service::S3ServiceBuilder;
use tokio::net::TcpListener;

use crate::access::KeyStore;
use crate::auth::{Credentials, Source};

use lode_objects::{ObjectService, ServiceConfig};

/// The largest browser-form upload (s3s reads the file into memory before the object service
/// sees it; AWS allows 5 GiB).
pub const POST_OBJECT_MAX: u64 = 256 << 20;

/// What a started server tells its caller (and prints in the banner).
pub struct Started {
    pub addr: SocketAddr,
    /// `http` or `https`.
    pub scheme: &'static str,
    pub admin_addr: Option<SocketAddr>,
    pub data_dir: PathBuf,
    pub creds: Credentials,
    pub creds_source: Source,
    pub backend: String,
    pub free_bytes: u64,
    pub total_bytes: u64,
    pub devices: usize,
    pub mount: Option<PathBuf>,
}

impl Started {
    pub fn banner(&self, region: &str) -> String {
        let size = |b: u64| {
            if b >= 1 << 30 {
                format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64)
            } else {
                format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64)
            }
        };
        format!(
            "Lode {ver} is serving S3\n\
             \x20 S3 endpoint : {scheme}://{addr}\n\
             \x20 admin       : {admin}\n\
             \x20 data dir    : {dir}\n\
             \x20 datapath    : {backend}, {devs} device(s), {total} ({free} free)\n\
             \x20 POSIX mount : {mount}\n\
             \x20 credentials : {how}\n\
             \n\
             Paste into a shell to use aws-cli / boto3:\n\
             \x20 export AWS_ACCESS_KEY_ID={ak}\n\
             \x20 export AWS_SECRET_ACCESS_KEY={sk}\n\
             \x20 export AWS_ENDPOINT_URL={scheme}://{addr}\n\
             \x20 export AWS_DEFAULT_REGION={region}\n",
            ver = env!("CARGO_PKG_VERSION"),
            addr = self.addr,
            scheme = self.scheme,
            admin = match self.admin_addr {
                Some(a) => format!("http://{a}/healthz, http://{a}/metrics, dashboard http://{a}/"),
                None => "disabled".to_owned(),
            },
            dir = self.data_dir.display(),
            mount = match &self.mount {
                Some(m) => m.display().to_string(),
                None => "off (--mount DIR or [posix] mount)".to_owned(),
            },
            backend = self.backend,
            devs = self.devices,
            total = size(self.total_bytes),
            free = size(self.free_bytes),
            how = match self.creds_source {
                Source::Generated => format!(
                    "generated on first start, kept in {}",
                    self.data_dir.join("credentials").display()
                ),
                Source::Stored =>
                    format!("kept in {}", self.data_dir.join("credentials").display()),
                Source::Given =>
                    "from LODE_ACCESS_KEY/LODE_SECRET_KEY or [auth] in the config".to_owned(),
            },
            ak = self.creds.access_key,
            sk = self.creds.secret_key,
        )
    }
}

/// Connects to the configured cluster (bounded by the connect timeout), makes sure the pools
/// are usable, creating missing ones when `create` (else a missing pool is an error), and
/// opens the index and the data pool's namespace.
async fn open_cluster(
    c: &lode_config::ClusterConfig,
    create: bool,
) -> anyhow::Result<(
    lode_catalog_rados::RadosCatalog,
    lode_rados::IoCtx,
    lode_rados::IoCtx,
)> {
    use lode_rados::{Cluster, PoolSpec};
    if !c.ceph_conf.is_file() {
        bail!(
            "cluster.ceph_conf: {} is not a readable file",
            c.ceph_conf.display()
        );
    }
    let user = if c.client_name.contains('.') {
        c.client_name.clone()
    } else {
        format!("client.{}", c.client_name)
    };
    let mut conf_overrides = vec![];
    if c.ms_mode == "secure" {
        for k in ["ms_client_mode", "ms_mon_client_mode"] {
            conf_overrides.push((k.to_owned(), "secure".to_owned()));
        }
    }
    let rc = lode_rados::ClusterConfig {
        conf_path: c.ceph_conf.clone(),
        client_name: user.clone(),
        keyring: (!c.keyring.as_os_str().is_empty()).then(|| c.keyring.clone()),
        op_timeout: Duration::from_secs(c.op_timeout_secs),
        connect_timeout: Duration::from_secs(c.connect_timeout_secs),
        conf_overrides,
    };
    let cluster = Cluster::connect(&rc).await.map_err(|e| {
        let why = if e.is_refused() {
            format!(
                ": the cluster refused {user} (cephx: no such user, or the key in its keyring \
                 is not the cluster's; `ceph auth get {user}` shows the key to use)"
            )
        } else {
            String::new()
        };
        anyhow::Error::new(e).context(format!(
            "connecting to the Ceph cluster of {} as {user} (within {} s){why}",
            c.ceph_conf.display(),
            c.connect_timeout_secs
        ))
    })?;
    let min_size = (c.pool_size.saturating_sub(1)).max(1);
    let index_info = cluster.pool_info(&c.index_pool).await.map_err(|e| {
        let why = if e.is_refused() {
            format!(": {user} may not read the cluster maps (it needs mon 'allow r')")
        } else {
            String::new()
        };
        anyhow::Error::new(e).context(format!("reading the osdmap as {user}{why}"))
    })?;
    let may_not_create = |pool: &str, e: lode_rados::RadosError| {
        let why = if e.is_refused() {
            format!(
                ": {user} may not create pools; create {pool:?} beforehand (README \
                 \"Deploying against your Ceph cluster\"), or give it the mon caps to"
            )
        } else {
            String::new()
        };
        anyhow::Error::new(e).context(format!("creating the pool {pool:?}{why}"))
    };
    match index_info {
        Some(info) if info.is_erasure() => bail!(
            "cluster.index_pool: {:?} is an erasure-coded pool; the index needs omap, which only a \
             replicated pool holds",
            c.index_pool
        ),
        Some(_) => {}
        None if !create => bail!("cluster.index_pool: {:?} does not exist", c.index_pool),
        None => {
            let mut spec = PoolSpec::replicated(c.pool_size);
            spec.min_size = Some(min_size);
            spec.application = "lode".into();
            cluster
                .create_pool(&c.index_pool, &spec)
                .await
                .map_err(|e| may_not_create(&c.index_pool, e))?;
            tracing::info!(pool = %c.index_pool, "created the index pool");
        }
    }
    if cluster.pool_info(&c.data_pool).await?.is_none() {
        if !create {
            bail!("cluster.data_pool: {:?} does not exist", c.data_pool);
        }
        let mut spec = if c.data_pool_type == "erasure" {
            let profile = if c.erasure_profile.is_empty() {
                cluster
                    .set_erasure_code_profile(
                        "lode-k2m1",
                        &[("k", "2"), ("m", "1"), ("crush-failure-domain", "osd")],
                    )
                    .await?;
                "lode-k2m1".to_owned()
            } else {
                c.erasure_profile.clone()
            };
            PoolSpec::erasure(profile)
        } else {
            let mut s = PoolSpec::replicated(c.pool_size);
            s.min_size = Some(min_size);
            s
        };
        spec.application = "lode".into();
        cluster
            .create_pool(&c.data_pool, &spec)
            .await
            .map_err(|e| may_not_create(&c.data_pool, e))?;
        tracing::info!(pool = %c.data_pool, "created the data pool");
    }
    // The GC queue of released chunks lives beside the index (a replicated pool).
    let gc = cluster
        .ioctx(&c.index_pool)
        .await?
        .with_namespace(&c.namespace)
        .await?;
    // Caps that do not allow writing a pool make its writes wait (the OSDs do not answer
    // them), so they are checked now, with a clear message, not found as timeouts under load.
    probe_pool(&gc, &c.index_pool, &user, c.op_timeout_secs).await?;
    let partitions = lode_catalog_rados::PartitionConfig {
        split_keys: c.index_split_keys,
        ..Default::default()
    };
    let catalog = lode_catalog_rados::RadosCatalog::open_with(
        &cluster,
        &c.index_pool,
        &c.namespace,
        partitions,
    )
    .await
    .context("opening the index")?;
    // Chunks go through a connection of their own: librados throttles the bytes and ops in
    // flight per connection, so checkpoint and stream transfers queued there do not hold up
    // the index ops of small requests (which, on one connection, waited behind them).
    let data_cluster = Cluster::connect(&rc)
        .await
        .context("connecting to the Ceph cluster for data")?;
    let data = data_cluster
        .ioctx(&c.data_pool)
        .await?
        .with_namespace(&c.namespace)
        .await?;
    probe_pool(&data, &c.data_pool, &user, c.op_timeout_secs).await?;
    Ok((catalog, data, gc))
}

/// Writes and removes a probe object in `pool` (the namespace's), to check `user`'s caps.
async fn probe_pool(
    io: &lode_rados::IoCtx,
    pool: &str,
    user: &str,
    op_timeout_secs: u64,
) -> anyhow::Result<()> {
    let oid = format!("lode.probe.{}", io.cluster().instance_id());
    let r = match io.write_full(&oid, bytes::Bytes::new()).await {
        Ok(()) => io.remove(&oid).await,
        Err(e) => Err(e),
    };
    r.map_err(|e| {
        let why = if e.is_timeout() {
            format!(
                ": no answer within {op_timeout_secs} s: {user} lacks caps on the pool (it \
                 needs osd 'allow rw pool={pool}'), or the pool's placement groups are inactive \
                 (`ceph health detail`)"
            )
        } else if e.is_refused() {
            format!(": {user} needs osd 'allow rw pool={pool}'")
        } else {
            String::new()
        };
        anyhow::Error::new(e).context(format!(
            "writing a probe object to pool {pool:?} as {user}{why}"
        ))
    })
}

/// The cluster-mode object service: the RADOS catalog and blob store on the configured
/// cluster. Creates missing pools, and refuses an unusable setup (an erasure-coded index pool,
/// an unreachable cluster) with a clear error before anything is written. Also returns the
/// index pool's I/O context (the namespace's), which the gateways' registry shares.
pub async fn cluster_service(
    c: &lode_config::ClusterConfig,
    service_cfg: ServiceConfig,
) -> anyhow::Result<(ObjectService, lode_rados::IoCtx, Arc<lode_rados::Cluster>)> {
    let (catalog, data, gc) = open_cluster(c, true).await?;
    let index = gc.clone();
    let data_cluster = Arc::clone(data.cluster());
    let blobs = rados_blobs(c, data, gc);
    // Every gateway collects released chunks, those of gateways that are gone included.
    blobs.start_collector();
    let svc = ObjectService::open(Arc::new(catalog), Arc::new(blobs), service_cfg)?;
    // Every change this gateway commits goes to the other gateways' mounts.
    svc.add_listener(crate::cluster::feed::publisher(index.clone()));
    // A bucket's settings (its versioning state) changed through any gateway reach every
    // gateway's cache before the change is acknowledged.
    svc.set_announcer(Arc::new(crate::cluster::feed::Announcer::new(
        index.clone(),
    )));
    crate::cluster::feed::watch_settings(index.clone(), svc.settings_listener());
    Ok((svc, index, data_cluster))
}

/// The RADOS operations this gateway sent, per pool and kind, for `/metrics`.
fn rados_metrics(clusters: &[Arc<lode_rados::Cluster>]) -> String {
    let name = crate::admin::METRIC_RADOS_OPS;
    let mut out = format!(
        "# HELP {name} RADOS operations this gateway sent (a compound op counts once).\n# TYPE {name} counter\n"
    );
    let mut pools: std::collections::BTreeMap<String, (u64, u64)> = Default::default();
    for (pool, reads, writes) in clusters.iter().flat_map(|c| c.op_counts()) {
        let p = pools.entry(pool).or_default();
        p.0 += reads;
        p.1 += writes;
    }
    for (pool, (reads, writes)) in pools {
        out += &format!("{name}{{pool=\"{pool}\",kind=\"read\"}} {reads}\n");
        out += &format!("{name}{{pool=\"{pool}\",kind=\"write\"}} {writes}\n");
    }
    out
}

/// What `lode fsck --cluster` found: chunk objects in the data pool that no index entry names
/// (orphans, older than the minimum age) and chunks an index entry names that the pool lacks
/// (gaps).
#[derive(Debug, Default, serde::Serialize)]
pub struct ClusterFsckReport {
    pub buckets: u64,
    pub objects: u64,
    /// Noncurrent versions (delete markers not counted).
    pub noncurrent_versions: u64,
    pub parts: u64,
    pub chunks_referenced: u64,
    pub chunks_in_pool: u64,
    /// Unreferenced but younger than the minimum age (writes in flight): left alone.
    pub young_unreferenced: u64,
    /// Released and waiting in the GC queue for their grace to pass: not orphans.
    pub queued_for_gc: u64,
    pub orphans: Vec<String>,
    pub gaps: Vec<String>,
    pub removed: u64,
}

impl ClusterFsckReport {
    pub fn is_clean(&self) -> bool {
        self.orphans.is_empty() && self.gaps.is_empty()
    }
}

/// `lode fsck` in cluster mode: reconciles every bucket's index (objects, their noncurrent
/// versions and multipart parts) against the chunk objects of the data pool, both ways;
/// `repair` removes the orphans.
pub async fn fsck_cluster(
    cfg: &LodeConfig,
    repair: bool,
    min_age: Duration,
) -> anyhow::Result<ClusterFsckReport> {
    use lode_catalog::{Catalog, UploadQuery, VersionQuery};
    let c = &cfg.cluster;
    let (catalog, data, gc) = open_cluster(c, false).await?;
    let mut rep = ClusterFsckReport::default();
    let mut referenced = std::collections::BTreeSet::new();
    let mut note = |segs: &[lode_metadata::records::Segment]| {
        for s in segs {
            if let lode_metadata::records::Segment::Chunk(ch) = s {
                referenced.insert(lode_blob_rados::chunk_oid(&lode_objects::chunk_ref(ch).id));
            }
        }
    };
    for (bucket, _) in catalog.list_buckets().await? {
        rep.buckets += 1;
        // Every version (current and noncurrent; delete markers hold nothing).
        let mut q = VersionQuery {
            max: 1000,
            ..Default::default()
        };
        loop {
            let page = catalog.list_versions(&bucket, &q).await?;
            for e in &page.entries {
                if e.record.delete_marker {
                    continue;
                }
                if e.is_latest {
                    rep.objects += 1;
                } else {
                    rep.noncurrent_versions += 1;
                }
                note(&e.record.segments);
            }
            match page.next {
                Some((k, v)) if page.truncated => (q.key_marker, q.version_marker) = (Some(k), v),
                _ => break,
            }
        }
        let uploads = catalog
            .list_uploads(
                &bucket,
                &UploadQuery {
                    max: usize::MAX / 2,
                    ..Default::default()
                },
            )
            .await?;
        for (key, id, _) in &uploads.uploads {
            let (parts, _) = catalog.list_parts(&bucket, key, id, 0, 10_000).await?;
            for (_, p) in &parts {
                rep.parts += 1;
                note(&p.segments);
            }
        }
    }
    rep.chunks_referenced = referenced.len() as u64;
    // Released chunks waiting in the GC queue are not orphans: the collector removes them once
    // their grace is over. The queue is read after the index and before the pool, so a chunk
    // released meanwhile is referenced or queued, and one collected meanwhile is not listed.
    let queued = lode_blob_rados::queued_chunks(&gc).await?;
    let in_pool: std::collections::BTreeSet<String> = data
        .list_objects(Some("lode.c."))
        .await?
        .into_iter()
        .collect();
    rep.chunks_in_pool = in_pool.len() as u64;
    let now_ms = lode_objects::now_ms().max(0) as u64;
    for name in in_pool.difference(&referenced) {
        if queued.contains(name) {
            rep.queued_for_gc += 1;
            continue;
        }
        // `lode.c.<incarnation>.<ms << 20 | seq>`: the chunk's age is in its name.
        let born_ms = name
            .rsplit('.')
            .next()
            .and_then(|h| u64::from_str_radix(h, 16).ok())
            .map_or(0, |o| o >> 20);
        if now_ms.saturating_sub(born_ms) < min_age.as_millis() as u64 {
            rep.young_unreferenced += 1;
            continue;
        }
        rep.orphans.push(name.clone());
    }
    rep.gaps = referenced.difference(&in_pool).cloned().collect();
    if repair {
        for o in &rep.orphans {
            match data.remove(o).await {
                Ok(()) => rep.removed += 1,
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e).with_context(|| format!("removing orphan {o}")),
            }
        }
    }
    Ok(rep)
}

/// The single-node object service: the KV catalog over the node's metadata store and the
/// local blob store over its datapath, whose allocator is rebuilt from the extents table.
pub fn local_service(
    meta: Arc<dyn MetadataStore>,
    dp: Arc<Datapath>,
    cfg: ServiceConfig,
) -> anyhow::Result<ObjectService> {
    rebuild_allocator(&*meta, &dp).context("rebuilding the datapath's allocator")?;
    let catalog = Arc::new(lode_catalog_kv::KvCatalog::new(meta));
    let blobs = Arc::new(lode_datapath::LocalBlobStore::new(dp));
    Ok(ObjectService::open(catalog, blobs, cfg)?)
}

/// Marks every extent the metadata records as used in the datapath's allocator.
fn rebuild_allocator(meta: &dyn MetadataStore, dp: &Datapath) -> anyhow::Result<()> {
    use lode_metadata::{MetaError, Table, keys, records};
    let mut c = meta.cursor(Table::Extents)?;
    c.seek(&[]);
    let mut n = 0u64;
    while let Some((k, v)) = c.current() {
        let (dev, offset) =
            keys::parse_extent(k).ok_or_else(|| MetaError::Corrupt("bad extent key".into()))?;
        let r: records::ExtentRecord = records::decode(v)?;
        dp.mark_used(lode_datapath::Extent {
            dev,
            offset,
            len: r.len,
        })?;
        n += 1;
        c.next();
    }
    c.status()?;
    let (free, total) = dp.space();
    tracing::info!(
        extents = n,
        free_bytes = free,
        total_bytes = total,
        "datapath space rebuilt from metadata"
    );
    Ok(())
}

/// Opens the metadata store and the datapath as configured (the only place that picks
/// concrete backends).
pub fn open_stores(cfg: &LodeConfig) -> anyhow::Result<(Arc<dyn MetadataStore>, Arc<Datapath>)> {
    let sync = cfg.datapath.durability == Durability::Sync;
    let mut rc = RocksConfig::new(cfg.resolve(&cfg.metadata.path));
    rc.sync = sync;
    rc.block_cache_bytes = cfg.metadata.block_cache.0 as usize;
    rc.write_buffer_bytes = cfg.metadata.write_buffers.0 as usize;
    let meta = RocksMetadataStore::open(&rc)
        .context("opening the metadata store (is another lode process using this data dir?)")?;
    let devices: Vec<(PathBuf, u64)> = cfg
        .datapath
        .devices
        .iter()
        .map(|d| (cfg.resolve(&d.path), d.size.0))
        .collect();
    let backend = match cfg.datapath.io_backend {
        IoBackend::Auto => Backend::Auto,
        IoBackend::Uring => Backend::Uring,
        IoBackend::File => Backend::File,
    };
    let store = lode_datapath::open_store(&devices, backend, cfg.datapath.queue_depth)
        .context("opening the datapath devices")?;
    Ok((Arc::new(meta), Arc::new(Datapath::new(store, sync))))
}

/// RocksDB finds its files by path. If the metadata directory is removed or replaced under a
/// running lode (an `rm -rf` of the data dir and a new lode started on the same path), this
/// process would go on writing flushes, manifests and deletions by name into the new
/// directory, destroying the new server's data. So a watchdog stops this process at once,
/// without flushing anything, when the directory's identity changes.
fn watch_metadata_dir(dir: PathBuf) -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let id = |p: &std::path::Path| std::fs::metadata(p).map(|m| (m.dev(), m.ino()));
    let want = id(&dir).with_context(|| format!("reading {}", dir.display()))?;
    std::thread::Builder::new()
        .name("lode-dirwatch".into())
        .spawn(move || {
            loop {
                std::thread::sleep(Duration::from_millis(250));
                match id(&dir) {
                    Ok(now) if now == want => {}
                    found => {
                        tracing::error!(
                            dir = %dir.display(),
                            found = if found.is_ok() { "another directory" } else { "nothing" },
                            "the metadata directory was removed or replaced under this process: \
                             aborting without a flush, so nothing is written into what now has \
                             its path"
                        );
                        std::process::abort();
                    }
                }
            }
        })?;
    Ok(())
}

/// The chunk store over the data pool `data`, its GC logs in `gc`, as `[cluster]` says.
fn rados_blobs(
    c: &lode_config::ClusterConfig,
    data: lode_rados::IoCtx,
    gc: lode_rados::IoCtx,
) -> lode_blob_rados::RadosBlobStore {
    lode_blob_rados::RadosBlobStore::new(
        data,
        gc,
        lode_blob_rados::RadosBlobConfig {
            release_grace: Duration::from_secs(c.release_grace_secs),
            dead_after: Duration::from_secs(c.gateway_dead_secs),
        },
    )
}

/// `lode scrub`: one offline pass over every chunk, unpaced (cluster mode: over the
/// namespace's objects, while its gateways serve).
pub async fn scrub_once(cfg: &LodeConfig) -> anyhow::Result<lode_objects::scrub::PassReport> {
    let svc = if cfg.cluster.backend == "ceph" {
        let c = &cfg.cluster;
        let (catalog, data, gc) = open_cluster(c, false).await?;
        // No collector: this process only reads.
        let blobs = rados_blobs(c, data, gc);
        ObjectService::open(Arc::new(catalog), Arc::new(blobs), ServiceConfig::default())?
    } else {
        let (meta, dp) = open_stores(cfg)?;
        local_service(meta, dp, ServiceConfig::default())?
    };
    let stats = lode_objects::scrub::ScrubStats::default();
    Ok(lode_objects::scrub::pass(&svc, 0, &stats).await?)
}

/// `lode fsck`: offline consistency check (and repair) of metadata against the allocator.
pub async fn fsck(
    cfg: &LodeConfig,
    repair: bool,
    verify_data: bool,
) -> anyhow::Result<crate::fsck::Report> {
    let (meta, dp) = open_stores(cfg)?;
    let sizes: Vec<u64> = dp.store().devices().iter().map(|d| d.size).collect();
    let rep = crate::fsck::run(meta, &sizes, verify_data.then_some(dp), repair).await?;
    Ok(rep)
}

/// Turns encryption at rest on: the master key versions, kept in the catalog under a root key
/// derived from the master key (a master key that does not open them stops the start: Lode
/// never serves what it cannot decrypt), and the key ring over the catalog.
async fn enable_encryption(
    svc: &Arc<ObjectService>,
    master: &[u8; 32],
    cfg: &lode_config::EncryptionConfig,
) -> anyhow::Result<Arc<lode_objects::encryption::MasterStore>> {
    use lode_objects::encryption::{Encryption, MasterStore, root_from_master};
    let store = Arc::new(
        MasterStore::open(Arc::clone(svc.catalog()), root_from_master(master))
            .await
            .context("loading the encryption master keys")?,
    );
    let ring = Arc::new(lode_objects::kms::LocalKeyRing::new(
        Arc::clone(svc.catalog()),
        Arc::clone(&store),
    ));
    svc.set_encryption(Arc::new(Encryption {
        masters: Arc::clone(&store),
        ring,
        default_on: cfg.default,
    }));
    Ok(store)
}

/// What opening the backends gives the doors: the object service over them, the users, and in
/// cluster mode what the cluster wiring adds.
struct Opened {
    svc: Arc<ObjectService>,
    data_dir: PathBuf,
    backend_name: String,
    ndev: usize,
    creds: Credentials,
    creds_source: Source,
    users: Arc<crate::users::Users>,
    cluster: Option<ClusterParts>,
}

/// Cluster mode: the index pool (the change feed and the gateway registry live there), the
/// request watchdog, and the RADOS metrics of the admin endpoint.
struct ClusterParts {
    index: lode_rados::IoCtx,
    watchdog: Arc<Watchdog>,
    metrics: crate::admin::MetricsFn,
}

/// The object service's settings from the config.
fn service_config(
    cfg: &LodeConfig,
    failpoints: lode_objects::failpoint::Failpoints,
) -> ServiceConfig {
    ServiceConfig {
        inline_threshold: cfg.datapath.inline_threshold.0 as usize,
        chunk_size: cfg.datapath.chunk_size.0 as usize,
        max_object_size: cfg.server.max_object_size.0,
        write_depth: 4,
        body_idle_timeout: Duration::from_secs(cfg.server.body_idle_timeout_secs),
        failpoints,
        lifecycle_day_ms: i64::try_from(cfg.lifecycle.day_secs.saturating_mul(1000))
            .unwrap_or(i64::MAX),
        public_access_block: lode_objects::policy::PublicAccessBlock {
            block_public_acls: cfg.access.block_public_acls,
            ignore_public_acls: cfg.access.ignore_public_acls,
            block_public_policy: cfg.access.block_public_policy,
            restrict_public_buckets: cfg.access.restrict_public_buckets,
        },
    }
}

/// Cluster mode's backends: the RADOS catalog and blob store, users and master keys in the
/// cluster (reloaded for changes made through other gateways), the watchdog.
async fn open_cluster_backends(
    cfg: &LodeConfig,
    given: Option<Credentials>,
    master_key_env: Option<&str>,
    service_cfg: ServiceConfig,
) -> anyhow::Result<Opened> {
    let Some(creds) = given else {
        bail!(
            "cluster mode needs the root credentials in LODE_ACCESS_KEY/LODE_SECRET_KEY or [auth] \
             (every gateway of a cluster uses the same)"
        );
    };
    let Some(master_hex) = master_key_env else {
        bail!(
            "cluster mode needs LODE_MASTER_KEY (64 hex digits, the same on every gateway): it \
             seals the users' secrets, which live in the cluster"
        );
    };
    let master = crate::users::master_key(std::path::Path::new(""), Some(master_hex))?;
    let (svc, index, data_cluster) = cluster_service(&cfg.cluster, service_cfg).await?;
    let svc = Arc::new(svc);
    let clusters = [Arc::clone(index.cluster()), data_cluster];
    let watchdog = Arc::new(Watchdog {
        after: Duration::from_secs(cfg.cluster.op_timeout_secs.max(1)),
        clusters: clusters.to_vec(),
    });
    let metrics: crate::admin::MetricsFn = Arc::new(move || rados_metrics(&clusters));
    let users = Arc::new(
        crate::users::Users::open(Arc::clone(svc.catalog()), master, creds.clone())
            .await
            .context("loading users")?,
    );
    // Users and grants changed through other gateways.
    users.spawn_refresh(Duration::from_secs(2));
    let masters = enable_encryption(&svc, &master, &cfg.encryption).await?;
    // Master key versions added through other gateways: new objects use them soon.
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(10)).await;
            if let Err(e) = masters.reload().await {
                tracing::warn!(error = %e, "reloading the master key versions failed");
            }
        }
    });
    let backend_name = format!(
        "rados (index pool {}, data pool {})",
        cfg.cluster.index_pool, cfg.cluster.data_pool
    );
    // The gateway keeps nothing but the mount's staging files (anonymous: nothing to clean)
    // in its data dir.
    if !cfg.posix.mount.as_os_str().is_empty() {
        std::fs::create_dir_all(&cfg.data_dir)
            .with_context(|| format!("creating data dir {}", cfg.data_dir.display()))?;
    }
    Ok(Opened {
        svc,
        data_dir: std::path::absolute(&cfg.data_dir)?,
        backend_name,
        ndev: 0,
        creds,
        creds_source: Source::Given,
        users,
        cluster: Some(ClusterParts {
            index,
            watchdog,
            metrics,
        }),
    })
}

/// One node's backends: RocksDB and the datapath in the data dir, the root credentials and
/// master key kept there.
async fn open_local_backends(
    cfg: &LodeConfig,
    given: Option<Credentials>,
    master_key_env: Option<&str>,
    service_cfg: ServiceConfig,
) -> anyhow::Result<Opened> {
    std::fs::create_dir_all(&cfg.data_dir)
        .with_context(|| format!("creating data dir {}", cfg.data_dir.display()))?;
    let data_dir = std::fs::canonicalize(&cfg.data_dir)?;
    let (meta, dp) = open_stores(cfg)?;
    watch_metadata_dir(cfg.resolve(&cfg.metadata.path))?;
    let backend_name = dp.store().backend_name().to_owned();
    let ndev = dp.store().devices().len();
    let svc = Arc::new(local_service(meta, dp, service_cfg)?);
    let (creds, creds_source) = crate::auth::load_or_create(&data_dir, given)?;
    let master = crate::users::master_key(&data_dir, master_key_env)?;
    let users = Arc::new(
        crate::users::Users::open(Arc::clone(svc.catalog()), master, creds.clone())
            .await
            .context("loading users")?,
    );
    enable_encryption(&svc, &master, &cfg.encryption).await?;
    Ok(Opened {
        svc,
        data_dir,
        backend_name,
        ndev,
        creds,
        creds_source,
        users,
        cluster: None,
    })
}

/// The S3 door: s3s over the object service, with the users' keys, authorization, virtual
/// hosts and the RenameObject route.
fn s3_door(
    cfg: &LodeConfig,
    svc: &Arc<ObjectService>,
    users: &Arc<crate::users::Users>,
) -> s3s::service::S3Service {
    let authz = crate::access::Authz {
        users: Arc::clone(users),
        svc: Arc::clone(svc),
    };
    let mut builder = S3ServiceBuilder::new(
        crate::s3::LodeS3::new(authz.clone(), cfg.server.region.clone())
            .allow_sse_c_over_http(cfg.encryption.allow_sse_c_over_http),
    );
    builder.set_auth(KeyStore::new(Arc::clone(users)));
    builder.set_access(authz.clone());
    if !cfg.server.domain.is_empty() {
        builder.set_host(crate::host::VirtualHosts::new(&cfg.server.domain));
    }
    // RenameObject, which s3s does not model (after s3s checks the signature).
    builder.set_route(crate::rename::RenameRoute {
        authz: Arc::new(authz),
        hosts: (!cfg.server.domain.is_empty())
            .then(|| crate::host::VirtualHosts::new(&cfg.server.domain)),
    });
    // s3s holds a form upload's file in memory: bound it (SEMANTICS.md rule 16).
    let mut s3s_cfg = s3s::config::S3Config::default();
    s3s_cfg.post_object_max_file_size = cfg.server.max_object_size.0.min(POST_OBJECT_MAX);
    builder.set_config(Arc::new(s3s::config::StaticConfigProvider::new(Arc::new(
        s3s_cfg,
    ))));
    builder.build()
}

/// The POSIX door, when `posix.mount` names a mount point; in cluster mode it also takes the
/// other gateways' changes from the cluster's change feed.
fn posix_door(
    cfg: &LodeConfig,
    svc: &Arc<ObjectService>,
    profile: &Arc<crate::profile::Profile>,
    data_dir: &std::path::Path,
    users: &Arc<crate::users::Users>,
    cluster: Option<&ClusterParts>,
) -> anyhow::Result<Option<crate::posix::PosixMount>> {
    if cfg.posix.mount.as_os_str().is_empty() {
        return Ok(None);
    }
    let mount = crate::posix::mount(
        Arc::clone(svc),
        Arc::clone(profile),
        &cfg.posix,
        data_dir,
        Arc::clone(users),
        tokio::runtime::Handle::current(),
        cluster.map(|c| {
            Arc::new(crate::cluster::feed::RadosChanges(c.index.clone()))
                as Arc<dyn lode_objects::RemoteChanges>
        }),
    )
    .context("starting the POSIX door")?;
    Ok(Some(mount))
}

/// The background passes one gateway at a time runs (leases in the catalog): scrub and
/// lifecycle.
fn start_background(
    cfg: &LodeConfig,
    svc: &Arc<ObjectService>,
    scrub_stats: &Arc<lode_objects::scrub::ScrubStats>,
    lifecycle_stats: &Arc<lode_objects::lifecycle_run::LifecycleStats>,
    clustered: bool,
) {
    // The passes' lease holder: it tells gateways apart, restarts of one included.
    let holder = format!(
        "{}:{}:{:08x}",
        std::env::var("HOSTNAME").unwrap_or_default(),
        std::process::id(),
        rand::random::<u32>()
    );
    if cfg.scrub.enabled {
        tokio::spawn(lode_objects::scrub::run(
            Arc::clone(svc),
            Arc::clone(scrub_stats),
            cfg.scrub.rate.0,
            Duration::from_secs(cfg.scrub.start_delay_secs),
            Duration::from_secs(cfg.scrub.interval_secs),
            clustered.then(|| holder.clone()),
        ));
    }
    if cfg.lifecycle.enabled {
        tokio::spawn(lode_objects::lifecycle_run::run(
            Arc::clone(svc),
            Arc::clone(lifecycle_stats),
            lode_objects::lifecycle_run::RunConfig {
                interval: Duration::from_secs(cfg.lifecycle.interval_secs),
                day_ms: svc.config().lifecycle_day_ms,
                max_actions_per_sec: cfg.lifecycle.max_actions_per_sec,
                holder,
            },
        ));
    }
}

/// The event notification destinations of `[notify.*]` (checked with the configuration).
fn event_destinations(
    cfg: &LodeConfig,
) -> anyhow::Result<lode_objects::event_delivery::Deliveries> {
    let mut dests = vec![];
    for (name, t) in &cfg.notify {
        let secret = if t.hmac_secret_file.as_os_str().is_empty() {
            None
        } else {
            let path = cfg.resolve(&t.hmac_secret_file);
            let s = std::fs::read_to_string(&path).with_context(|| {
                format!("reading notify.{name}.hmac_secret_file {}", path.display())
            })?;
            Some(s.trim().as_bytes().to_vec())
        };
        let tls = if t.uses_tls() {
            let ca = if t.ca_file.as_os_str().is_empty() {
                t.ca_file.clone()
            } else {
                cfg.resolve(&t.ca_file)
            };
            Some(crate::tls_client::client_config(&ca).with_context(|| format!("notify.{name}"))?)
        } else {
            None
        };
        let target: Arc<dyn lode_objects::event_delivery::EventTarget> = match t.kind.as_str() {
            "nats" => Arc::new(crate::nats::Nats::new(&t.url, &t.subject, t.jetstream, tls)),
            "amqp" => Arc::new(
                crate::amqp::Amqp::new(&t.url, &t.exchange, &t.routing_key, tls)
                    .map_err(|e| anyhow::anyhow!("notify.{name}: {e}"))?,
            ),
            _ => Arc::new(
                crate::webhook::Webhook::new(&t.url, secret.as_deref(), tls)
                    .with_context(|| format!("notify.{name}"))?,
            ),
        };
        dests.push(lode_objects::event_delivery::DestinationConfig {
            name: name.clone(),
            kind: t.kind.clone(),
            target,
            max_backlog: t.max_backlog,
            refuse_when_full: t.when_full == "refuse",
            timeout: Duration::from_secs(t.timeout_secs),
        });
    }
    Ok(lode_objects::event_delivery::Deliveries::new(
        dests,
        &cfg.server.region,
    ))
}

/// A topic's destination (SNS-compatible API), from RGW's attributes: `push-endpoint`
/// (`http[s]://` a webhook; `amqp[s]://` an AMQP broker, with `amqp-exchange` and the topic's
/// name as routing key; `nats://`/`tls://` a NATS subject named as the topic), `ca-location`
/// (the CA certificates for TLS, else the system's), `verify-ssl` (only `true`).
fn topic_destination(
    t: &lode_objects::topics::Topic,
) -> Result<lode_objects::event_delivery::DestinationConfig, String> {
    let url = t.endpoint();
    let attr = |k: &str| t.attributes.get(k).map_or("", String::as_str);
    if attr("verify-ssl") == "false" {
        return Err("verify-ssl=false is not supported: name the CA with ca-location".into());
    }
    let tls = if lode_config::url_uses_tls(url) {
        Some(
            crate::tls_client::client_config(std::path::Path::new(attr("ca-location")))
                .map_err(|e| format!("{e:#}"))?,
        )
    } else {
        None
    };
    let (kind, target): (&str, Arc<dyn lode_objects::event_delivery::EventTarget>) =
        if url.starts_with("http://") || url.starts_with("https://") {
            let w = crate::webhook::Webhook::new(url, None, tls).map_err(|e| format!("{e:#}"))?;
            ("webhook", Arc::new(w))
        } else if url.starts_with("amqp://") || url.starts_with("amqps://") {
            let exchange = attr("amqp-exchange");
            let a = crate::amqp::Amqp::new(url, exchange, &t.name, tls)?;
            ("amqp", Arc::new(a))
        } else if url.starts_with("nats://") || url.starts_with("tls://") {
            (
                "nats",
                Arc::new(crate::nats::Nats::new(url, &t.name, false, tls)),
            )
        } else if url.starts_with("kafka://") {
            return Err("kafka endpoints are not built (webhook, AMQP and NATS are)".into());
        } else {
            return Err(
                "push-endpoint must be an http(s)://, amqp(s)://, nats:// or tls:// URL".into(),
            );
        };
    // A topic's backlog and timeout are a [notify.<name>]'s defaults.
    let defaults = lode_config::NotifyTarget::default();
    Ok(lode_objects::event_delivery::DestinationConfig {
        name: t.name.clone(),
        kind: kind.into(),
        target,
        max_backlog: defaults.max_backlog,
        refuse_when_full: false,
        timeout: Duration::from_secs(defaults.timeout_secs),
    })
}

/// What every request of the S3 port shares.
struct Requests {
    s3: s3s::service::S3Service,
    objects: Arc<ObjectService>,
    /// Keys for the topic API's signatures (s3s checks only S3's and STS's).
    users: Arc<crate::users::Users>,
    profile: Arc<crate::profile::Profile>,
    domain: String,
    watchdog: Option<Arc<Watchdog>>,
    /// `server.max_requests` slots, waited for up to `request_wait`.
    inflight: Arc<tokio::sync::Semaphore>,
    request_wait: Duration,
    ids: AtomicU64,
    /// A request's headers (and a TLS handshake) must arrive within this many seconds.
    header_timeout: u64,
    max_header: usize,
}

/// One request of the S3 port, end to end: a slot of `max_requests` (or `503 SlowDown`), CORS,
/// the HTTP-layer fix-ups, s3s under the watchdog, the IO profile, the request id headers.
async fn handle(
    rq: Arc<Requests>,
    req: http::Request<hyper::body::Incoming>,
    peer: SocketAddr,
    secure: bool,
) -> Result<http::Response<s3s::Body>, s3s::HttpError> {
    let mut req = req.map(s3s::Body::from);
    req.extensions_mut().insert(crate::access::Peer {
        ip: peer.ip(),
        secure,
    });
    let form_upload = crate::wire::is_form_upload(&req);
    let attributes = crate::wire::is_object_attributes(&req);
    let encryption =
        req.method() == http::Method::GET && crate::wire::is_bucket_encryption(req.uri());
    let has_body = crate::wire::has_body(&req);
    let body_limits = (
        rq.objects.config().max_object_size,
        rq.objects.config().body_idle_timeout,
    );
    let id = rq.ids.fetch_add(1, Ordering::Relaxed);
    let (class, bucket, in_bytes) = classify(&req, &rq.domain);
    // CORS: a preflight is answered from the bucket's rules; a browser's request (it carries
    // Origin) gets the allowing rule's headers on its answer.
    let browser = crate::cors::Browser::of(&req);
    let rid = format!("{id:016X}");
    // Who the request's changes come from (their events say so).
    let origin = lode_objects::bucket_events::Origin {
        door: lode_objects::bucket_events::Door::S3,
        principal: None,
        source_ip: Some(peer.ip().to_string()),
        request_id: rid.clone(),
        post: form_upload,
    };
    let t0 = std::time::Instant::now();
    let preflight = crate::cors::is_preflight(req.method());
    // A slot of max_requests, waited for in turn for up to request_wait.
    let permit = match rq.inflight.clone().try_acquire_owned() {
        Ok(p) => Ok(p),
        Err(_) if rq.request_wait.is_zero() => Err(()),
        Err(_) => tokio::time::timeout(rq.request_wait, rq.inflight.clone().acquire_owned())
            .await
            .map_err(|_| ())
            .and_then(|p| p.map_err(|_| ())),
    };
    let mut resp = match permit {
        Ok(_permit) if preflight => {
            crate::cors::preflight(&rq.objects, bucket.as_deref(), req.headers(), &rid).await
        }
        Ok(_permit) if crate::sns::is_sns(req.method(), req.uri(), req.headers()) => {
            crate::sns::serve(&rq.objects, &rq.users, req, &rid).await
        }
        Ok(_permit) => match prepare(req, body_limits, &rid).await {
            Ok(req) => match &rq.watchdog {
                None => origin.scope(rq.s3.call(req)).await?,
                Some(w) => match w.guard(origin.scope(rq.s3.call(req))).await {
                    Some(r) => r?,
                    None => cut_off(&rid),
                },
            },
            Err(refusal) => refusal,
        },
        Err(_) => slow_down(&rid),
    };
    if !preflight && let (Some(b), Some(name)) = (&browser, &bucket) {
        b.decorate(&rq.objects, name, &mut resp).await;
    }
    if form_upload {
        crate::wire::fix_policy_refusal(&mut resp, &rid);
    }
    if attributes {
        crate::wire::unquote_attributes_etag(&mut resp);
    }
    if encryption {
        crate::wire::show_blocked_encryption(&mut resp);
    }
    crate::wire::add_request_id(&mut resp, &rid);
    if has_body && resp.status().as_u16() >= 400 {
        // The body may be unread (an early refusal); a client that held it back
        // (Expect: 100-continue) must not reuse the connection.
        resp.headers_mut().insert(
            http::header::CONNECTION,
            http::HeaderValue::from_static("close"),
        );
    }
    let bytes = match class {
        crate::profile::Class::Read => resp
            .headers()
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse().ok())
            .unwrap_or(0),
        _ => in_bytes,
    };
    rq.profile.record(
        crate::profile::Door::S3,
        class,
        bucket.as_deref(),
        bytes,
        t0.elapsed(),
    );
    if let Ok(v) = http::HeaderValue::from_str(&rid) {
        resp.headers_mut().insert("x-amz-request-id", v.clone());
        resp.headers_mut().insert("x-amz-id-2", v);
    }
    resp.headers_mut()
        .insert(http::header::SERVER, http::HeaderValue::from_static("Lode"));
    Ok(resp)
}

/// Serves one accepted connection (after its TLS handshake, bounded by the header timeout) until
/// it closes; `permit` (its `max_connections` slot) goes with it.
async fn serve_connection(
    stream: tokio::net::TcpStream,
    tls: Option<tokio_rustls::TlsAcceptor>,
    rq: Arc<Requests>,
    peer: SocketAddr,
    watcher: hyper_util::server::graceful::Watcher,
    permit: tokio::sync::OwnedSemaphorePermit,
) {
    let secure = tls.is_some();
    let (header_timeout, max_header) = (rq.header_timeout, rq.max_header);
    let svc = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
        handle(Arc::clone(&rq), req, peer, secure)
    });
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(header_timeout))
        .max_buf_size(max_header.max(64 * 1024))
        .keep_alive(true);
    let r = match tls {
        None => {
            watcher
                .watch(http.serve_connection(TokioIo::new(stream), svc))
                .await
        }
        Some(acceptor) => {
            // The handshake counts against the header timeout (slowloris on TLS).
            let hs =
                tokio::time::timeout(Duration::from_secs(header_timeout), acceptor.accept(stream))
                    .await;
            match hs {
                Ok(Ok(tls_stream)) => {
                    watcher
                        .watch(http.serve_connection(TokioIo::new(tls_stream), svc))
                        .await
                }
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "TLS handshake failed");
                    Ok(())
                }
                Err(_) => {
                    tracing::debug!("TLS handshake timed out");
                    Ok(())
                }
            }
        }
    };
    if let Err(e) = r {
        tracing::debug!(error = %e, "connection ended with an error");
    }
    drop(permit);
}

/// Opens everything, binds the listener, and serves until `shutdown` resolves: the backends
/// (one node or cluster), then the doors over the object service.
pub async fn serve(
    cfg: LodeConfig,
    master_key_env: Option<String>,
    failpoints: lode_objects::failpoint::Failpoints,
    on_start: impl FnOnce(&Started),
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    cfg.validate()?;
    // First: the metadata store and the devices open their files under the raised limit too.
    let max_connections = fit_open_files(cfg.server.max_connections);
    let service_cfg = service_config(&cfg, failpoints);
    let given = (!cfg.auth.access_key.is_empty()).then(|| Credentials {
        access_key: cfg.auth.access_key.clone(),
        secret_key: cfg.auth.secret_key.clone(),
    });
    let clustered = cfg.cluster.backend == "ceph";
    let Opened {
        svc,
        data_dir,
        backend_name,
        ndev,
        creds,
        creds_source,
        users,
        cluster,
    } = if clustered {
        open_cluster_backends(&cfg, given, master_key_env.as_deref(), service_cfg).await?
    } else {
        open_local_backends(&cfg, given, master_key_env.as_deref(), service_cfg).await?
    };
    // The IO profile both doors record into, and the scrubber's totals (served by the admin
    // endpoint).
    let profile = Arc::new(crate::profile::Profile::default());
    profile.enabled.store(cfg.server.profile, Ordering::Relaxed);
    let scrub_stats = Arc::new(lode_objects::scrub::ScrubStats::default());
    let lifecycle_stats = Arc::new(lode_objects::lifecycle_run::LifecycleStats::default());
    let s3 = s3_door(&cfg, &svc, &users);

    let tls = if cfg.server.tls_cert.as_os_str().is_empty() {
        None
    } else {
        Some(tls_acceptor(
            &cfg.resolve(&cfg.server.tls_cert),
            &cfg.resolve(&cfg.server.tls_key),
        )?)
    };
    let listener = TcpListener::bind(&cfg.server.listen)
        .await
        .with_context(|| format!("binding {}", cfg.server.listen))?;
    let addr = listener.local_addr()?;
    let admin_listener = if cfg.server.admin_listen.is_empty() {
        None
    } else {
        Some(
            TcpListener::bind(&cfg.server.admin_listen)
                .await
                .with_context(|| {
                    format!("binding the admin endpoint {}", cfg.server.admin_listen)
                })?,
        )
    };
    // Cluster mode: this gateway registers in the cluster (with a lease) and publishes its
    // profile there, so any gateway can show the whole cluster's.
    let registry = match &cluster {
        Some(c) => {
            let admin = match &admin_listener {
                Some(l) => l.local_addr()?.to_string(),
                None => String::new(),
            };
            let r = Arc::new(crate::cluster::profile::Registry::new(
                c.index.clone(),
                addr.to_string(),
                admin,
                Arc::clone(&profile),
            ));
            r.spawn();
            Some(r as Arc<dyn crate::profile::ClusterProfile>)
        }
        None => None,
    };
    let admin_addr = if let Some(l) = admin_listener {
        let a = l.local_addr()?;
        tokio::spawn(crate::admin::serve(
            l,
            crate::admin::Admin {
                svc: Arc::clone(&svc),
                users: Arc::clone(&users),
                profile: Arc::clone(&profile),
                scrub: Arc::clone(&scrub_stats),
                lifecycle: Arc::clone(&lifecycle_stats),
                root_secret: creds.secret_key.clone(),
                extra_metrics: cluster.as_ref().map(|c| Arc::clone(&c.metrics)),
                cluster: registry,
            },
        ));
        Some(a)
    } else {
        None
    };
    let mount = posix_door(&cfg, &svc, &profile, &data_dir, &users, cluster.as_ref())?;
    let deliveries = Arc::new(event_destinations(&cfg)?);
    deliveries.set_topic_targets(Box::new(topic_destination));
    svc.set_deliveries(deliveries);
    start_background(&cfg, &svc, &scrub_stats, &lifecycle_stats, clustered);
    let (free, total) = svc.space();
    on_start(&Started {
        addr,
        admin_addr,
        data_dir: data_dir.clone(),
        creds,
        creds_source,
        backend: backend_name.clone(),
        free_bytes: free,
        total_bytes: total,
        devices: ndev,
        scheme: if tls.is_some() { "https" } else { "http" },
        mount: mount.as_ref().map(|m| m.path().to_owned()),
    });
    tracing::info!(%addr, backend = %backend_name, "serving S3");

    let rq = Arc::new(Requests {
        s3,
        objects: Arc::clone(&svc),
        users: Arc::clone(&users),
        profile: Arc::clone(&profile),
        domain: cfg.server.domain.to_ascii_lowercase(),
        watchdog: cluster.as_ref().map(|c| Arc::clone(&c.watchdog)),
        inflight: Arc::new(tokio::sync::Semaphore::new(cfg.server.max_requests)),
        request_wait: Duration::from_millis(cfg.server.request_wait_ms),
        ids: AtomicU64::new(rand::random::<u32>() as u64),
        header_timeout: cfg.server.header_timeout_secs,
        max_header: (cfg.server.max_header_size.0 as usize).max(8192),
    });
    let conns = Arc::new(tokio::sync::Semaphore::new(max_connections));
    // Connections past the limit get one 503 each; this many at once, the rest are closed.
    let refusing = Arc::new(tokio::sync::Semaphore::new(REFUSING_AT_ONCE));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        // Without this, Nagle + delayed ACK add ~40 ms to small responses.
        let _ = stream.set_nodelay(true);
        let Ok(permit) = Arc::clone(&conns).try_acquire_owned() else {
            // Past max_connections: a fast answer, never a wait in the accept queue.
            match Arc::clone(&refusing).try_acquire_owned() {
                Ok(slot) => {
                    tokio::spawn(refuse_connection(stream, tls.clone(), slot));
                }
                Err(_) => drop(stream),
            }
            continue;
        };
        tokio::spawn(serve_connection(
            stream,
            tls.clone(),
            Arc::clone(&rq),
            peer,
            graceful.watcher(),
            permit,
        ));
    }
    drop(listener);
    tracing::info!("shutting down: finishing requests in flight");
    if tokio::time::timeout(Duration::from_secs(10), graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("requests still running after 10s; stopping anyway");
    }
    if let Some(m) = mount {
        tokio::task::spawn_blocking(move || m.unmount()).await?;
    }
    svc.stop().await;
    let _ = TokioExecutor::new();
    Ok(())
}

/// A TLS acceptor for the S3 port from PEM files (HTTP/1.1 only, TLS 1.2 and 1.3, ring).
fn tls_acceptor(
    cert: &std::path::Path,
    key: &std::path::Path,
) -> anyhow::Result<tokio_rustls::TlsAcceptor> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_file_iter(cert)
        .with_context(|| format!("reading TLS certificate {}", cert.display()))?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("parsing TLS certificate {}", cert.display()))?;
    if certs.is_empty() {
        bail!("no certificate in {}", cert.display());
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .with_context(|| format!("reading TLS private key {}", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut sc = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .context("the TLS certificate and key do not match or are unsupported")?;
    sc.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(sc)))
}

/// The IO-profile class, bucket and request body size of an S3 request, from its method, path,
/// query and headers (path-style, or virtual-hosted under `domain`).
fn classify<B>(
    req: &http::Request<B>,
    domain: &str,
) -> (crate::profile::Class, Option<String>, u64) {
    use crate::profile::Class;
    let path = req.uri().path().trim_start_matches('/');
    let host_bucket = (!domain.is_empty())
        .then(|| req.headers().get(http::header::HOST)?.to_str().ok())
        .flatten()
        .map(|h| h.split(':').next().unwrap_or(h).to_ascii_lowercase())
        .and_then(|h| h.strip_suffix(domain)?.strip_suffix('.').map(str::to_owned));
    let (bucket, key) = match host_bucket {
        Some(b) => (Some(b), !path.is_empty()),
        None => {
            let mut it = path.splitn(2, '/');
            let b = it.next().filter(|b| !b.is_empty()).map(str::to_owned);
            (b, it.next().is_some_and(|k| !k.is_empty()))
        }
    };
    let q = req.uri().query().unwrap_or("");
    let multipart_admin =
        q.contains("uploadId") && !q.contains("partNumber") || q.contains("uploads");
    let header = |n: &str| {
        req.headers()
            .get(n)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
    };
    let in_bytes = header("x-amz-decoded-content-length")
        .or_else(|| header("content-length"))
        .unwrap_or(0);
    let class = match *req.method() {
        http::Method::HEAD => Class::Meta,
        http::Method::GET if key && !multipart_admin => Class::Read,
        http::Method::GET => Class::Meta,
        http::Method::PUT if key && !req.headers().contains_key("x-amz-copy-source") => {
            Class::Write
        }
        _ => Class::Other,
    };
    (class, bucket, in_bytes)
}

/// How many connections past `server.max_connections` are answered at once; further ones are
/// closed as they come (a client sees the connection end, at once either way).
const REFUSING_AT_ONCE: usize = 1024;
/// Open files kept for what is not a connection: the metadata store's files, devices, rings,
/// the refused connections being answered, logs.
const FILES_NOT_CONNECTIONS: u64 = 2048 + REFUSING_AT_ONCE as u64;

/// Raises the soft open-file limit to the hard one (a server and a benchmark client hold a file
/// per connection); returns the limit now (`None`: unlimited).
pub fn raise_open_files() -> Option<u64> {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let cur = getrlimit(Resource::Nofile);
    if cur.current != cur.maximum {
        let raised = Rlimit {
            current: cur.maximum,
            maximum: cur.maximum,
        };
        if let Err(e) = setrlimit(Resource::Nofile, raised) {
            tracing::warn!(error = %e, "raising the open-file limit failed");
        }
    }
    getrlimit(Resource::Nofile).current
}

/// Raises the open-file limit to its hard limit, and returns how many connections fit in it:
/// `want`, or fewer (with a warning that says what limit `want` needs).
fn fit_open_files(want: usize) -> usize {
    let Some(limit) = raise_open_files() else {
        return want; // unlimited
    };
    let fits = usize::try_from(limit.saturating_sub(FILES_NOT_CONNECTIONS)).unwrap_or(usize::MAX);
    if fits < want {
        tracing::warn!(
            open_file_limit = limit,
            needed = want as u64 + FILES_NOT_CONNECTIONS,
            serving = fits.max(1),
            "the open-file limit is too low for server.max_connections: serving fewer \
             connections (raise `ulimit -n`, or LimitNOFILE= under systemd)"
        );
        return fits.max(1);
    }
    tracing::info!(
        open_file_limit = limit,
        max_connections = want,
        "connections"
    );
    want
}

/// A connection past `server.max_connections`: its first request is answered `503 SlowDown`
/// with `Connection: close` (within a short header timeout), and it is closed. `slot` bounds
/// how many are answered at once.
async fn refuse_connection(
    stream: tokio::net::TcpStream,
    tls: Option<tokio_rustls::TlsAcceptor>,
    slot: tokio::sync::OwnedSemaphorePermit,
) {
    const WAIT: Duration = Duration::from_secs(2);
    tracing::debug!("connection limit reached: answering 503 SlowDown");
    let svc = hyper::service::service_fn(|_req: http::Request<hyper::body::Incoming>| async {
        let mut resp = crate::wire::error_response(
            http::StatusCode::SERVICE_UNAVAILABLE,
            "SlowDown",
            "Please reduce your request rate: the server has no free connection slot.",
            "0000000000000000",
        );
        resp.headers_mut().insert(
            http::header::CONNECTION,
            http::HeaderValue::from_static("close"),
        );
        Ok::<_, std::convert::Infallible>(resp)
    });
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(WAIT)
        .keep_alive(false);
    let _ = tokio::time::timeout(WAIT * 2, async {
        match tls {
            None => {
                let _ = http.serve_connection(TokioIo::new(stream), svc).await;
            }
            Some(acceptor) => {
                if let Ok(Ok(s)) = tokio::time::timeout(WAIT, acceptor.accept(stream)).await {
                    let _ = http.serve_connection(TokioIo::new(s), svc).await;
                }
            }
        }
    })
    .await;
    drop(slot);
}

/// The answer to a request that found no free slot of `server.max_requests` within
/// `server.request_wait_ms`: S3's `503 SlowDown`, which every SDK retries with backoff.
/// Cluster mode: a request ends within the op timeout while the cluster does not answer this
/// gateway (cut off, or every OSD it needs down). One RADOS op times out after the op timeout,
/// but a request makes several in turn (or waits behind others in a journal or a lock), so
/// alone they could hold it for several op timeouts. The watchdog ends a request that has run
/// the op timeout while no op of this gateway was answered for as long: its future is dropped
/// (as when a client disconnects: nothing half-done becomes visible) and it gets `503
/// SlowDown`. A healthy gateway's background ops (profile, users, GC) keep the cluster's
/// silence to seconds, so a long request that makes progress is never cut.
struct Watchdog {
    after: Duration,
    clusters: Vec<Arc<lode_rados::Cluster>>,
}

impl Watchdog {
    fn silent_for(&self) -> Duration {
        self.clusters
            .iter()
            .map(|c| c.silent_for())
            .min()
            .unwrap_or_default()
    }

    /// `fut`'s output, or `None` if the watchdog ended it.
    async fn guard<F: std::future::Future>(&self, fut: F) -> Option<F::Output> {
        let t0 = std::time::Instant::now();
        tokio::pin!(fut);
        loop {
            let next = self
                .after
                .saturating_sub(t0.elapsed())
                .max(Duration::from_millis(250));
            tokio::select! {
                out = &mut fut => return Some(out),
                _ = tokio::time::sleep(next) => {
                    if t0.elapsed() >= self.after && self.silent_for() >= self.after {
                        return None;
                    }
                }
            }
        }
    }
}

/// The answer to a request the [`Watchdog`] ended.
fn cut_off(request_id: &str) -> http::Response<s3s::Body> {
    tracing::warn!(
        "the cluster has not answered this gateway for the op timeout (unreachable, or the \
         placement groups it needs inactive): answering 503 SlowDown"
    );
    crate::wire::error_response(
        http::StatusCode::SERVICE_UNAVAILABLE,
        "SlowDown",
        "Please reduce your request rate.",
        request_id,
    )
}

fn slow_down(request_id: &str) -> http::Response<s3s::Body> {
    tracing::debug!("request limit reached: answering 503 SlowDown");
    crate::wire::error_response(
        http::StatusCode::SERVICE_UNAVAILABLE,
        "SlowDown",
        "Please reduce your request rate.",
        request_id,
    )
}

/// The HTTP-layer fix-ups of `crate::wire` before s3s sees a request: a refused presigned
/// expiry, a plain chunked body spooled to a known length, a form upload's `${filename}` and
/// `acl` field.
/// `(max body, idle timeout)` bound the spool.
async fn prepare(
    req: http::Request<s3s::Body>,
    (max, idle): (u64, Duration),
    request_id: &str,
) -> Result<http::Request<s3s::Body>, http::Response<s3s::Body>> {
    if let Some((code, msg)) = crate::wire::presign_expiry_error(req.uri()) {
        return Err(crate::wire::error_response(
            http::StatusCode::FORBIDDEN,
            code,
            &msg,
            request_id,
        ));
    }
    if crate::wire::is_plain_chunked(&req) && req.method() == http::Method::PUT {
        return crate::wire::spool_chunked(req, max, idle)
            .await
            .map_err(|e| e.response(request_id));
    }
    let mut req = req;
    req.headers_mut().remove(crate::wire::FORM_ACL);
    if crate::wire::is_form_upload(&req) {
        let req = crate::wire::hoist_form_acl(req).await;
        return Ok(req.map(crate::wire::post_filename));
    }
    Ok(req)
}

/// Resolves when SIGINT or SIGTERM arrives.
pub async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = term => {},
    }
}

/// Fails unless `cfg` can start (used by `lode check-config`).
pub fn check(cfg: &LodeConfig) -> anyhow::Result<()> {
    if let Err(e) = cfg.validate() {
        bail!("{e}");
    }
    Ok(())
}
