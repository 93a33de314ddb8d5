//! `lode-config`: Lode's configuration schema, its defaults and its validation.
//!
//! This crate owns the *shape* of `lode.toml`. It never reads files or the environment itself:
//! the `lode` binary reads TOML, `LODE_*` variables and flags and hands the text or values here.
//! It must never depend on any other Lode crate.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Deserializer, Serialize};

/// The commented template shipped with Lode. A test checks that it parses to [`LodeConfig::default`].
pub const TEMPLATE: &str = include_str!("../lode.toml");

/// Errors from parsing or validating a configuration.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The TOML text does not match the schema (unknown key, wrong type, bad size string...).
    #[error("invalid config: {0}")]
    Parse(#[source] toml::de::Error),
    /// A value parsed but is not acceptable. `key` is the dotted TOML path, e.g. `datapath.chunk_size`.
    #[error("invalid config value for `{key}`: {reason}")]
    Invalid { key: String, reason: String },
}

fn invalid(key: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: key.to_owned(),
        reason: reason.into(),
    }
}

/// A byte size, written in TOML as an integer or a string such as `"4GiB"`, `"64 KiB"`, `"512MB"`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct ByteSize(pub u64);

impl ByteSize {
    pub const KIB: u64 = 1024;
    pub const MIB: u64 = 1024 * 1024;
    pub const GIB: u64 = 1024 * 1024 * 1024;

    /// Parses `"4GiB"`, `"64 KiB"`, `"1000"`, `"10MB"` (decimal units) and the like.
    pub fn parse(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let (num, unit) = s.split_at(split);
        let num: u64 = num.parse().map_err(|_| {
            format!("`{s}` is not a size (expected e.g. 4096, \"64KiB\", \"4GiB\")")
        })?;
        let mul = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "k" | "kib" => Self::KIB,
            "m" | "mib" => Self::MIB,
            "g" | "gib" => Self::GIB,
            "t" | "tib" => Self::GIB * 1024,
            "kb" => 1000,
            "mb" => 1000 * 1000,
            "gb" => 1000 * 1000 * 1000,
            "tb" => 1000 * 1000 * 1000 * 1000,
            other => return Err(format!("unknown size unit `{other}` in `{s}`")),
        };
        num.checked_mul(mul)
            .map(ByteSize)
            .ok_or_else(|| format!("size `{s}` overflows"))
    }
}

impl fmt::Debug for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.0;
        for (unit, size) in [
            ("TiB", Self::GIB * 1024),
            ("GiB", Self::GIB),
            ("MiB", Self::MIB),
            ("KiB", Self::KIB),
        ] {
            if v >= size && v.is_multiple_of(size) {
                return write!(f, "{}{unit}", v / size);
            }
        }
        write!(f, "{v}B")
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(u64),
            Str(String),
        }
        match Raw::deserialize(d)? {
            Raw::Int(n) => Ok(ByteSize(n)),
            Raw::Str(s) => ByteSize::parse(&s).map_err(serde::de::Error::custom),
        }
    }
}

/// The whole configuration of one `lode` process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LodeConfig {
    /// Where RocksDB, the default device file and the generated credentials live.
    pub data_dir: PathBuf,
    pub server: ServerConfig,
    pub auth: AuthConfig,
    pub metadata: MetadataConfig,
    pub datapath: DatapathConfig,
    pub posix: PosixConfig,
    pub scrub: ScrubConfig,
    pub lifecycle: LifecycleConfig,
    pub access: AccessConfig,
    pub encryption: EncryptionConfig,
    pub cluster: ClusterConfig,
    /// Event notification destinations, by name (`[notify.<name>]`): what buckets'
    /// notification configurations may name (README "Pipelines and events").
    pub notify: BTreeMap<String, NotifyTarget>,
}

impl Default for LodeConfig {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from("./lode-data"),
            server: ServerConfig::default(),
            auth: AuthConfig::default(),
            metadata: MetadataConfig::default(),
            datapath: DatapathConfig::default(),
            posix: PosixConfig::default(),
            scrub: ScrubConfig::default(),
            lifecycle: LifecycleConfig::default(),
            access: AccessConfig::default(),
            encryption: EncryptionConfig::default(),
            cluster: ClusterConfig::default(),
            notify: BTreeMap::new(),
        }
    }
}

/// Cluster mode: a stateless gateway over Ceph RADOS (no local metadata, no local data).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterConfig {
    /// `""`: single node (the default); `"ceph"`: cluster mode over RADOS.
    pub backend: String,
    /// The cluster's ceph.conf.
    pub ceph_conf: PathBuf,
    /// The RADOS user Lode connects as (`client.lode`: its own, with the caps README
    /// "Deploying against your Ceph cluster" gives; a bare name gets `client.`).
    pub client_name: String,
    /// Its keyring (`""`: what ceph.conf says).
    pub keyring: PathBuf,
    /// The pool of the index (replicated: an index needs omap); created if missing.
    pub index_pool: String,
    /// The pool of the chunks; created if missing.
    pub data_pool: String,
    /// `"replicated"` or `"erasure"` (for a data pool created by Lode).
    pub data_pool_type: String,
    /// Replica count of pools created by Lode (`min_size` is one less, at least 1).
    pub pool_size: u32,
    /// The erasure-code profile of an erasure data pool created by Lode (`k=2 m=1` over OSDs
    /// when empty).
    pub erasure_profile: String,
    /// RADOS namespace inside both pools (several independent Lode namespaces per cluster).
    pub namespace: String,
    /// A RADOS operation that takes longer fails (clients get 503 SlowDown), seconds.
    pub op_timeout_secs: u64,
    /// Connecting to the monitors at start gives up after this long, seconds.
    pub connect_timeout_secs: u64,
    /// msgr2 mode of this gateway's connections: `"crc"` (integrity only, Ceph's default for
    /// clients) or `"secure"` (AES-GCM on the wire; the cluster must allow it, as Ceph does by
    /// default).
    pub ms_mode: String,
    /// A released chunk stays readable this long (readers on other gateways), seconds.
    pub release_grace_secs: u64,
    /// A bucket's index partition is split (in the background, writes go on) when it holds
    /// this many keys.
    pub index_split_keys: u64,
    /// A gateway run silent this long is dead: the chunks of its unfinished writes are
    /// removed by the other gateways (from its intent journal), seconds.
    pub gateway_dead_secs: u64,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        Self {
            backend: String::new(),
            ceph_conf: PathBuf::from("/etc/ceph/ceph.conf"),
            client_name: "client.lode".into(),
            keyring: PathBuf::new(),
            index_pool: "lode-index".into(),
            data_pool: "lode-data".into(),
            data_pool_type: "replicated".into(),
            pool_size: 3,
            erasure_profile: String::new(),
            namespace: String::new(),
            op_timeout_secs: 30,
            connect_timeout_secs: 10,
            ms_mode: "crc".into(),
            release_grace_secs: 300,
            index_split_keys: 50_000,
            gateway_dead_secs: 180,
        }
    }
}

/// Background scrub: re-reads every chunk and checks its crc32c.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ScrubConfig {
    pub enabled: bool,
    /// Most bytes read per second by the scrubber.
    pub rate: ByteSize,
    /// A pass starts this long after the previous one started.
    pub interval_secs: u64,
    /// The first pass starts this long after `lode serve` starts.
    pub start_delay_secs: u64,
}

impl Default for ScrubConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            rate: ByteSize(64 * ByteSize::MIB),
            interval_secs: 86_400,
            start_delay_secs: 600,
        }
    }
}

/// Encryption at rest (README "Encryption at rest").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EncryptionConfig {
    /// New objects are encrypted (SSE-S3) unless their bucket or request says otherwise, as on
    /// AWS. Off: objects without their own encryption are stored in clear (for a deployment
    /// that encrypts below Lode: dm-crypt devices, encrypted OSDs).
    pub default: bool,
    /// Take SSE-C keys over plain HTTP (AWS refuses them: the key crosses the wire).
    pub allow_sse_c_over_http: bool,
}

impl Default for EncryptionConfig {
    fn default() -> Self {
        EncryptionConfig {
            default: true,
            allow_sse_c_over_http: false,
        }
    }
}

/// One event notification destination (`[notify.<name>]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NotifyTarget {
    /// `webhook` (an HTTP POST of each event's JSON), `nats` (a publish on `subject`) or
    /// `amqp` (a persistent publish to `exchange` with `routing_key`, broker-confirmed).
    #[serde(rename = "type")]
    pub kind: String,
    /// The webhook's URL (`http://host:port/path`), the NATS server's
    /// (`nats://[user:password@]host:port`) or the AMQP broker's
    /// (`amqp://[user:password@]host[:port][/vhost]`).
    pub url: String,
    /// AMQP: the exchange (`""`: the default exchange, which routes to the queue named by the
    /// routing key).
    pub exchange: String,
    /// AMQP: the routing key of every event.
    pub routing_key: String,
    /// NATS: the subject events are published on.
    pub subject: String,
    /// NATS: publish to JetStream and count a delivery once a stream stored it (its ack);
    /// without, once the server took it (core NATS keeps nothing for an absent subscriber).
    pub jetstream: bool,
    /// A file holding a secret: each POST then carries `X-Lode-Signature: sha256=<hex>`, the
    /// HMAC-SHA256 of its body under the secret (surrounding whitespace trimmed).
    pub hmac_secret_file: PathBuf,
    /// Most events waiting for this destination (it is down or slow).
    pub max_backlog: u64,
    /// When the backlog is full: `drop_oldest` (counted in `lode_events_dropped_total`) or
    /// `refuse` (writes that would add an event fail with 503 SlowDown).
    pub when_full: String,
    /// A delivery that gets no answer in this long is retried, seconds.
    pub timeout_secs: u64,
    /// TLS (`https://`, `tls://`, `amqps://` urls): the PEM file of the CA certificates that
    /// the destination's certificate must chain to (empty: the system's trust store).
    pub ca_file: PathBuf,
}

/// Whether an event destination's url asks for TLS (`https://`, NATS `tls://`, `amqps://`).
pub fn url_uses_tls(url: &str) -> bool {
    ["https://", "tls://", "amqps://"]
        .iter()
        .any(|s| url.starts_with(s))
}

impl NotifyTarget {
    /// Whether the url asks for TLS.
    pub fn uses_tls(&self) -> bool {
        url_uses_tls(&self.url)
    }
}

impl Default for NotifyTarget {
    fn default() -> Self {
        NotifyTarget {
            kind: String::new(),
            url: String::new(),
            subject: String::new(),
            jetstream: false,
            exchange: String::new(),
            routing_key: String::new(),
            hmac_secret_file: PathBuf::new(),
            max_backlog: 1_000_000,
            when_full: "drop_oldest".into(),
            timeout_secs: 10,
            ca_file: PathBuf::new(),
        }
    }
}

/// Block Public Access for the whole account (every bucket), combined with each bucket's own
/// PutPublicAccessBlock: a setting holds where either has it on.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AccessConfig {
    pub block_public_acls: bool,
    pub ignore_public_acls: bool,
    pub block_public_policy: bool,
    pub restrict_public_buckets: bool,
}

/// The lifecycle worker: applies buckets' lifecycle rules (expiry, abort of incomplete
/// multipart uploads), on one gateway at a time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LifecycleConfig {
    pub enabled: bool,
    /// A pass starts this long after the previous one started.
    pub interval_secs: u64,
    /// The length of a lifecycle "day" in seconds: 86400. Shorter only to test rules without
    /// waiting days.
    pub day_secs: u64,
    /// Most objects removed plus uploads aborted per second.
    pub max_actions_per_sec: u32,
}

impl Default for LifecycleConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            interval_secs: 3_600,
            day_secs: 86_400,
            max_actions_per_sec: 100,
        }
    }
}

/// The POSIX door: a FUSE mount of the whole namespace (`<mount>/<bucket>/<key path>`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PosixConfig {
    /// Mount point; empty: no mount.
    pub mount: PathBuf,
    /// Let users other than the one running lode use the mount (FUSE `allow_other`).
    pub allow_other: bool,
    /// `mkdir` at the top of the mount creates a bucket, `rmdir` there deletes an empty one.
    pub allow_bucket_create: bool,
    /// Threads serving FUSE requests. A file read blocks its thread for the device read (no hop
    /// to another thread), so this is also how many mount reads reach the device at once.
    pub threads: usize,
    /// How long the kernel may cache names and attributes (ms). Changes made through S3
    /// invalidate the kernel's caches at once whatever this is, so it only bounds how long a
    /// missed invalidation could last; longer keeps stat storms in the kernel.
    pub attr_ttl_ms: u64,
    /// Owner, group and permission bits of objects and directories that carry none.
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub file_mode: u32,
    pub dir_mode: u32,
    /// Where files open for writing are staged until close/fsync; relative to data_dir.
    pub staging_dir: PathBuf,
    /// The Lode user the mount acts as for bucket policies: an explicit Deny for this user
    /// refuses the operation on the mount (EACCES). `root` (the default) is bound by no
    /// policy, as through S3.
    pub user: String,
}

impl Default for PosixConfig {
    fn default() -> Self {
        Self {
            mount: PathBuf::new(),
            allow_other: false,
            allow_bucket_create: true,
            threads: 8,
            attr_ttl_ms: 30_000,
            uid: None,
            gid: None,
            file_mode: 0o644,
            dir_mode: 0o755,
            staging_dir: PathBuf::from("staging"),
            user: "root".to_owned(),
        }
    }
}

/// The S3 listener and its request limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Address of the S3 endpoint.
    pub listen: String,
    /// Address of the admin endpoint (`/healthz`, `/metrics`); empty disables it.
    pub admin_listen: String,
    /// Region reported by GetBucketLocation and accepted in signatures.
    pub region: String,
    /// Base domain for virtual-hosted-style requests (`<bucket>.<domain>`). Empty: path-style only.
    pub domain: String,
    /// Largest single PutObject / UploadPart body.
    pub max_object_size: ByteSize,
    /// Largest total size of request headers.
    pub max_header_size: ByteSize,
    /// Most connections served at once; a further connection gets one `503 SlowDown` answer
    /// and is closed (never a silent wait in the accept queue). Lode raises its open-file
    /// limit to fit it at start, or serves fewer and says so.
    pub max_connections: usize,
    /// Most requests handled at once; a further request waits its turn (first come, first
    /// served) for up to `request_wait_ms`, then gets `503 SlowDown`.
    pub max_requests: usize,
    /// How long a request may wait for one of the `max_requests` slots (0: not at all).
    pub request_wait_ms: u64,
    /// Seconds a request may take to send its headers.
    pub header_timeout_secs: u64,
    /// Seconds a request body may stay silent before the request fails with RequestTimeout.
    pub body_idle_timeout_secs: u64,
    /// PEM certificate chain for TLS on the S3 port (with `tls_key`); empty: plain HTTP.
    pub tls_cert: PathBuf,
    /// PEM private key for `tls_cert`.
    pub tls_key: PathBuf,
    /// Record the IO profile (`/api/profile`, op metrics).
    pub profile: bool,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:9000".to_owned(),
            admin_listen: "127.0.0.1:9001".to_owned(),
            region: "us-east-1".to_owned(),
            domain: String::new(),
            max_object_size: ByteSize(5 * ByteSize::GIB),
            max_header_size: ByteSize(64 * ByteSize::KIB),
            max_connections: 10_000,
            max_requests: 512,
            request_wait_ms: 2_000,
            header_timeout_secs: 30,
            body_idle_timeout_secs: 60,
            tls_cert: PathBuf::new(),
            tls_key: PathBuf::new(),
            profile: true,
        }
    }
}

/// Root credentials. Empty means: generate them on first start and keep them in the data dir.
#[derive(Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    pub access_key: String,
    pub secret_key: String,
}

impl fmt::Debug for AuthConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuthConfig")
            .field("access_key", &self.access_key)
            .field("secret_key", &"<redacted>")
            .finish()
    }
}

/// When an acknowledged write is durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// Data and metadata are on stable storage before the reply (survives power loss).
    Sync,
    /// The reply may precede the flush: survives a process crash, not power loss.
    Async,
}

/// The metadata store (RocksDB).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetadataConfig {
    /// Directory of the RocksDB database; relative paths are under `data_dir`.
    pub path: PathBuf,
    /// RocksDB block cache size.
    pub block_cache: ByteSize,
    /// Memory for RocksDB memtables, shared by all column families: when their total nears it,
    /// the largest one is flushed. With the block cache it bounds the metadata store's memory.
    pub write_buffers: ByteSize,
}

impl Default for MetadataConfig {
    fn default() -> Self {
        Self {
            path: PathBuf::from("meta"),
            block_cache: ByteSize(256 * ByteSize::MIB),
            write_buffers: ByteSize(64 * ByteSize::MIB),
        }
    }
}

/// Which IO engine drives the devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IoBackend {
    /// io_uring when the kernel allows it, else the portable file backend (with a warning).
    Auto,
    /// io_uring + O_DIRECT; refuse to start without it.
    Uring,
    /// Portable pread/pwrite + O_DIRECT on a thread pool.
    File,
}

/// One device: a preallocated file or a raw block device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceConfig {
    /// Path of the file or block device; relative paths are under `data_dir`.
    pub path: PathBuf,
    /// Size to preallocate for a file (ignored for a block device, whose size is read).
    pub size: ByteSize,
}

/// The NVMe datapath.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DatapathConfig {
    pub devices: Vec<DeviceConfig>,
    /// Objects up to this size live inside their metadata record (no extent, one IO).
    pub inline_threshold: ByteSize,
    /// Large objects are cut into chunks of this size, each with its own crc32c.
    pub chunk_size: ByteSize,
    pub durability: Durability,
    pub io_backend: IoBackend,
    /// io_uring submission queue depth.
    pub queue_depth: u32,
}

impl Default for DatapathConfig {
    fn default() -> Self {
        Self {
            devices: vec![DeviceConfig {
                path: PathBuf::from("dev0.img"),
                size: ByteSize(8 * ByteSize::GIB),
            }],
            inline_threshold: ByteSize(16 * ByteSize::KIB),
            chunk_size: ByteSize(4 * ByteSize::MIB),
            durability: Durability::Sync,
            io_backend: IoBackend::Auto,
            queue_depth: 128,
        }
    }
}

impl LodeConfig {
    /// Parses TOML text; unknown keys are errors that name the key.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        toml::from_str(text).map_err(ConfigError::Parse)
    }

    /// Resolves a path that may be relative to `data_dir`.
    pub fn resolve(&self, p: &std::path::Path) -> PathBuf {
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.data_dir.join(p)
        }
    }

    /// Checks every value; the error names the offending key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let c = &self.cluster;
        match c.backend.as_str() {
            "" => {}
            "ceph" => {
                if c.index_pool.is_empty() || c.data_pool.is_empty() {
                    return Err(invalid(
                        "cluster.index_pool",
                        "pool names must not be empty",
                    ));
                }
                if !matches!(c.data_pool_type.as_str(), "replicated" | "erasure") {
                    return Err(invalid(
                        "cluster.data_pool_type",
                        format!("`{}` is not replicated or erasure", c.data_pool_type),
                    ));
                }
                if c.pool_size == 0 {
                    return Err(invalid("cluster.pool_size", "must be at least 1"));
                }
                if c.gateway_dead_secs < 3 {
                    return Err(invalid(
                        "cluster.gateway_dead_secs",
                        "must be at least 3 (a live gateway proves it every few seconds)",
                    ));
                }
                if !(2..=190_000).contains(&c.index_split_keys) {
                    return Err(invalid(
                        "cluster.index_split_keys",
                        "must be 2 to 190000 (deep scrub warns at 200000 keys in one object)",
                    ));
                }
                if c.ms_mode != "crc" && c.ms_mode != "secure" {
                    return Err(invalid(
                        "cluster.ms_mode",
                        format!(
                            "`{}` is not a msgr2 mode (\"crc\" or \"secure\")",
                            c.ms_mode
                        ),
                    ));
                }
                if c.op_timeout_secs == 0 || c.connect_timeout_secs == 0 {
                    return Err(invalid(
                        "cluster.op_timeout_secs",
                        "timeouts must be above 0 (an op must never wait forever)",
                    ));
                }
            }
            other => {
                return Err(invalid(
                    "cluster.backend",
                    format!("`{other}` is not a cluster backend (\"ceph\", or empty for one node)"),
                ));
            }
        }
        if self.data_dir.as_os_str().is_empty() {
            return Err(invalid("data_dir", "must not be empty"));
        }
        if self.server.listen.parse::<std::net::SocketAddr>().is_err() {
            return Err(invalid(
                "server.listen",
                format!(
                    "`{}` is not an address like 127.0.0.1:9000",
                    self.server.listen
                ),
            ));
        }
        if !self.server.admin_listen.is_empty()
            && self
                .server
                .admin_listen
                .parse::<std::net::SocketAddr>()
                .is_err()
        {
            return Err(invalid(
                "server.admin_listen",
                format!(
                    "`{}` is not an address like 127.0.0.1:9001 (or empty to disable)",
                    self.server.admin_listen
                ),
            ));
        }
        if self.server.region.is_empty() {
            return Err(invalid("server.region", "must not be empty"));
        }
        let d = &self.server.domain;
        if !d.is_empty()
            && !d
                .split('.')
                .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
        {
            return Err(invalid(
                "server.domain",
                format!("`{d}` is not a domain name"),
            ));
        }
        if self.server.max_object_size.0 == 0 {
            return Err(invalid("server.max_object_size", "must be above 0"));
        }
        if self.server.tls_cert.as_os_str().is_empty() != self.server.tls_key.as_os_str().is_empty()
        {
            return Err(invalid(
                "server.tls_cert",
                "set both tls_cert and tls_key, or neither",
            ));
        }
        if self.server.max_header_size.0 < 8 * ByteSize::KIB {
            return Err(invalid("server.max_header_size", "must be at least 8KiB"));
        }
        if self.server.max_requests == 0 {
            return Err(invalid("server.max_requests", "must be above 0"));
        }
        if self.server.header_timeout_secs == 0 {
            return Err(invalid("server.header_timeout_secs", "must be above 0"));
        }
        if self.server.body_idle_timeout_secs == 0 {
            return Err(invalid("server.body_idle_timeout_secs", "must be above 0"));
        }
        if self.server.max_connections == 0 {
            return Err(invalid("server.max_connections", "must be above 0"));
        }
        let a = &self.auth;
        if a.access_key.is_empty() != a.secret_key.is_empty() {
            return Err(invalid(
                "auth",
                "set both access_key and secret_key, or neither",
            ));
        }
        if !a.access_key.is_empty()
            && (a.access_key.len() < 3 || a.access_key.contains(['/', ' ', ':']))
        {
            return Err(invalid(
                "auth.access_key",
                "must be 3+ characters without '/', ':' or spaces",
            ));
        }
        if !a.secret_key.is_empty() && a.secret_key.len() < 8 {
            return Err(invalid("auth.secret_key", "must be at least 8 characters"));
        }
        let dp = &self.datapath;
        if dp.devices.is_empty() {
            return Err(invalid("datapath.devices", "at least one device is needed"));
        }
        for (i, dev) in dp.devices.iter().enumerate() {
            if dev.path.as_os_str().is_empty() {
                return Err(invalid(
                    &format!("datapath.devices[{i}].path"),
                    "must not be empty",
                ));
            }
            if dev.size.0 < 16 * ByteSize::MIB || !dev.size.0.is_multiple_of(4096) {
                return Err(invalid(
                    &format!("datapath.devices[{i}].size"),
                    "must be at least 16MiB and a multiple of 4KiB",
                ));
            }
        }
        let cs = dp.chunk_size.0;
        if !(64 * ByteSize::KIB..=64 * ByteSize::MIB).contains(&cs) || !cs.is_multiple_of(4096) {
            return Err(invalid(
                "datapath.chunk_size",
                "must be a multiple of 4KiB between 64KiB and 64MiB",
            ));
        }
        if dp.inline_threshold.0 > ByteSize::MIB {
            return Err(invalid("datapath.inline_threshold", "must be at most 1MiB"));
        }
        if !(2..=4096).contains(&dp.queue_depth) || !dp.queue_depth.is_power_of_two() {
            return Err(invalid(
                "datapath.queue_depth",
                "must be a power of two from 2 to 4096",
            ));
        }
        if self.scrub.enabled && self.scrub.rate.0 < ByteSize::MIB {
            return Err(invalid("scrub.rate", "must be at least 1MiB (per second)"));
        }
        if self.lifecycle.interval_secs == 0 {
            return Err(invalid("lifecycle.interval_secs", "must be above 0"));
        }
        if self.lifecycle.day_secs == 0 {
            return Err(invalid("lifecycle.day_secs", "must be above 0"));
        }
        if self.lifecycle.max_actions_per_sec == 0 {
            return Err(invalid("lifecycle.max_actions_per_sec", "must be above 0"));
        }
        if self.scrub.interval_secs == 0 {
            return Err(invalid("scrub.interval_secs", "must be above 0"));
        }
        let px = &self.posix;
        if !(1..=64).contains(&px.threads) {
            return Err(invalid("posix.threads", "must be from 1 to 64"));
        }
        if px.file_mode > 0o7777 || px.dir_mode > 0o7777 {
            return Err(invalid(
                "posix.file_mode",
                "file_mode and dir_mode are permission bits (at most 0o7777)",
            ));
        }
        if px.staging_dir.as_os_str().is_empty() {
            return Err(invalid("posix.staging_dir", "must not be empty"));
        }
        if px.user.is_empty() {
            return Err(invalid(
                "posix.user",
                "must name a Lode user (root by default)",
            ));
        }
        if self.metadata.block_cache.0 < ByteSize::MIB {
            return Err(invalid("metadata.block_cache", "must be at least 1MiB"));
        }
        if self.metadata.write_buffers.0 < 4 * ByteSize::MIB {
            return Err(invalid("metadata.write_buffers", "must be at least 4MiB"));
        }
        self.validate_notify()
    }

    fn validate_notify(&self) -> Result<(), ConfigError> {
        for (name, t) in &self.notify {
            let key = |k: &str| format!("notify.{name}.{k}");
            if name.is_empty()
                || name.len() > 64
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            {
                return Err(invalid(
                    &format!("notify.{name}"),
                    "a destination's name is 1-64 letters, digits, `-` or `_`",
                ));
            }
            match t.kind.as_str() {
                "webhook" => {
                    if !t.url.starts_with("http://") && !t.url.starts_with("https://") {
                        return Err(invalid(
                            &key("url"),
                            "a webhook's url is http[s]://host[:port][/path]",
                        ));
                    }
                }
                "nats" => {
                    if !t.url.starts_with("nats://") && !t.url.starts_with("tls://") {
                        return Err(invalid(
                            &key("url"),
                            "a NATS url is nats://[user:password@]host:port (tls:// for TLS)",
                        ));
                    }
                    if t.subject.is_empty() || t.subject.contains([' ', '*', '>']) {
                        return Err(invalid(
                            &key("subject"),
                            "a NATS subject to publish on (no spaces or wildcards)",
                        ));
                    }
                }
                "amqp" => {
                    if !t.url.starts_with("amqp://") && !t.url.starts_with("amqps://") {
                        return Err(invalid(
                            &key("url"),
                            "an AMQP url is amqp[s]://[user:password@]host[:port][/vhost]",
                        ));
                    }
                    if t.routing_key.is_empty() {
                        return Err(invalid(
                            &key("routing_key"),
                            "an AMQP destination needs a routing key",
                        ));
                    }
                }
                "kafka" => {
                    return Err(invalid(
                        &key("type"),
                        format!(
                            "`{}` destinations are not built yet (webhook, nats and amqp are)",
                            t.kind
                        ),
                    ));
                }
                other => {
                    return Err(invalid(
                        &key("type"),
                        format!("`{other}` is not a destination type (webhook, nats, amqp)"),
                    ));
                }
            }
            if !t.ca_file.as_os_str().is_empty() && !t.uses_tls() {
                return Err(invalid(
                    &key("ca_file"),
                    "is for a TLS url (https://, tls://, amqps://)",
                ));
            }
            if !matches!(t.when_full.as_str(), "drop_oldest" | "refuse") {
                return Err(invalid(&key("when_full"), "is drop_oldest or refuse"));
            }
            if t.max_backlog == 0 {
                return Err(invalid(&key("max_backlog"), "must be above 0"));
            }
            if t.timeout_secs == 0 {
                return Err(invalid(&key("timeout_secs"), "must be above 0"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_parses_to_defaults() {
        let parsed = LodeConfig::from_toml(TEMPLATE).expect("template parses");
        assert_eq!(parsed, LodeConfig::default());
        parsed.validate().expect("defaults are valid");
    }

    #[test]
    fn template_mentions_every_key() {
        // Every leaf key of the default config must appear (commented or not) in the template.
        let v = toml::Value::try_from(LodeConfig::default()).unwrap();
        fn walk(prefix: &str, v: &toml::Value, out: &mut Vec<String>) {
            if let toml::Value::Table(t) = v {
                for (k, v) in t {
                    let p = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    walk(&p, v, out);
                    out.push(k.clone());
                }
            }
        }
        let mut keys = vec![];
        walk("", &v, &mut keys);
        for k in keys {
            assert!(TEMPLATE.contains(&k), "template lacks `{k}`");
        }
    }

    #[test]
    fn unknown_key_is_named() {
        let err =
            LodeConfig::from_toml("[server]\nlisten = \"127.0.0.1:1\"\nlisen = 3\n").unwrap_err();
        assert!(err.to_string().contains("lisen"), "{err}");
    }

    #[test]
    fn bad_values_name_their_key() {
        let cases = [
            ("[server]\nlisten = \"nope\"", "server.listen"),
            ("[datapath]\nchunk_size = \"3KiB\"", "datapath.chunk_size"),
            ("[datapath]\nqueue_depth = 3", "datapath.queue_depth"),
            ("[auth]\naccess_key = \"abc\"", "auth"),
            ("[datapath]\ndevices = []", "datapath.devices"),
            (
                "[[datapath.devices]]\npath = \"d\"\nsize = \"1MiB\"",
                "datapath.devices[0].size",
            ),
            ("[server]\ndomain = \"a..b\"", "server.domain"),
        ];
        for (text, key) in cases {
            let cfg = LodeConfig::from_toml(text).expect(text);
            let err = cfg.validate().expect_err(text).to_string();
            assert!(err.contains(&format!("`{key}`")), "{text}: {err}");
        }
    }

    #[test]
    fn bad_size_string_is_a_parse_error() {
        let err = LodeConfig::from_toml("[datapath]\nchunk_size = \"4 parsecs\"").unwrap_err();
        assert!(err.to_string().contains("parsecs"), "{err}");
    }

    #[test]
    fn sizes_parse_and_print() {
        assert_eq!(ByteSize::parse("4GiB").unwrap().0, 4 << 30);
        assert_eq!(ByteSize::parse("64 KiB").unwrap().0, 64 << 10);
        assert_eq!(ByteSize::parse("10MB").unwrap().0, 10_000_000);
        assert_eq!(ByteSize::parse("123").unwrap().0, 123);
        assert!(ByteSize::parse("GiB").is_err());
        assert!(ByteSize::parse("99999999999999TiB").is_err());
        assert_eq!(ByteSize(4 << 20).to_string(), "4MiB");
        assert_eq!(ByteSize(1000).to_string(), "1000B");
    }

    #[test]
    fn secret_is_not_debug_printed() {
        let a = AuthConfig {
            access_key: "ak".into(),
            secret_key: "supersecret".into(),
        };
        assert!(!format!("{a:?}").contains("supersecret"));
    }
}
