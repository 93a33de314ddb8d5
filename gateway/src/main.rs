//! The `lode` command line. Reads the config file, `LODE_*` variables and flags (in that order of
//! precedence, flags last) and starts the server.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use lode_config::LodeConfig;

/// jemalloc serves every allocation of the process: Rust's, and (its symbols unprefixed)
/// RocksDB's and librados's C/C++ `malloc` too. Under glibc's allocator the memory that
/// RocksDB's flushed memtables gave back stayed in its per-thread arenas, and a server's RSS
/// climbed by about 4 MiB a minute for hours (README "Hours of load").
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Parser)]
#[command(
    name = "lode",
    version,
    about = "Lode: one namespace, an S3 door and a POSIX door, over NVMe"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Serve S3 (defaults: 127.0.0.1:9000, data in ./lode-data).
    Serve(ServeArgs),
    /// Validate a config file and print the effective configuration.
    CheckConfig(ServeArgs),
    /// Print the commented config template (all defaults).
    ConfigTemplate,
    /// Check (offline) that used extents match what objects reference; exit 1 on problems.
    Fsck(FsckArgs),
    /// Read every stored chunk once and check its crc32c (offline); exit 1 if any is bad.
    Scrub(ServeArgs),
    /// Print the IO profile of a running lode (from its admin endpoint), for a ticket.
    Profile {
        /// The admin endpoint of the running lode.
        #[arg(long, env = "LODE_ADMIN_URL", default_value = "http://127.0.0.1:9001")]
        endpoint: String,
        /// Print the raw JSON instead.
        #[arg(long)]
        json: bool,
        /// The whole cluster's profile (every live gateway's, added up; cluster mode).
        #[arg(long)]
        cluster: bool,
    },
    /// Manage users and grants of a running lode (through its admin endpoint).
    Admin(AdminArgs),
    /// Run a benchmark workload against any S3 endpoint (see `lode bench --help`).
    Bench(lode_bench::BenchArgs),
    /// Serve a bare in-memory S3 handler (no auth, hashing or disk): the ceiling of the HTTP
    /// stack, to run `lode bench` against beside Lode. With --fuse-source and --fuse-mount, a
    /// bare FUSE mount of an in-memory copy of a directory instead: the ceiling of FUSE.
    BenchCeiling {
        #[arg(long, default_value = "127.0.0.1:9500")]
        listen: std::net::SocketAddr,
        /// Directory to load into memory and serve over FUSE (needs --fuse-mount).
        #[arg(long, requires = "fuse_mount")]
        fuse_source: Option<PathBuf>,
        /// Where to mount it.
        #[arg(long, requires = "fuse_source")]
        fuse_mount: Option<PathBuf>,
        /// FUSE threads (Lode's default is 8).
        #[arg(long, default_value_t = 8)]
        fuse_threads: usize,
    },
}

#[derive(clap::Args)]
struct ServeArgs {
    /// A lode.toml file.
    #[arg(long, env = "LODE_CONFIG")]
    config: Option<PathBuf>,
    /// Address of the S3 endpoint.
    #[arg(long, env = "LODE_LISTEN")]
    listen: Option<String>,
    /// Address of the admin endpoint (/healthz, /metrics, /api/profile, the dashboard at /); empty disables it.
    #[arg(long, env = "LODE_ADMIN_LISTEN")]
    admin_listen: Option<String>,
    /// Data directory (RocksDB, device files, credentials).
    #[arg(long, env = "LODE_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Base domain for virtual-hosted-style requests.
    #[arg(long, env = "LODE_DOMAIN")]
    domain: Option<String>,
    /// Mount the namespace here through FUSE (the POSIX door).
    #[arg(long, env = "LODE_MOUNT")]
    mount: Option<PathBuf>,
    /// The Lode user the mount acts as for bucket policies (posix.user; default root).
    #[arg(long, env = "LODE_POSIX_USER")]
    posix_user: Option<String>,
    /// PEM certificate chain: serve S3 over TLS (with --tls-key).
    #[arg(long, env = "LODE_TLS_CERT")]
    tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, env = "LODE_TLS_KEY")]
    tls_key: Option<PathBuf>,
    /// Cluster mode: `ceph` runs a stateless gateway over Ceph RADOS (see [cluster]).
    #[arg(long, env = "LODE_CLUSTER")]
    cluster: Option<String>,
    /// The Ceph cluster's ceph.conf (cluster mode).
    #[arg(long, env = "LODE_CEPH_CONF")]
    ceph_conf: Option<PathBuf>,
    /// The RADOS user to connect as (cluster mode; default `client.lode`).
    #[arg(long, env = "LODE_CEPH_USER")]
    ceph_user: Option<String>,
    /// Its keyring (cluster mode; default: what ceph.conf says).
    #[arg(long, env = "LODE_CEPH_KEYRING")]
    ceph_keyring: Option<PathBuf>,
    /// Index pool (cluster mode).
    #[arg(long, env = "LODE_CLUSTER_INDEX_POOL")]
    index_pool: Option<String>,
    /// Data pool (cluster mode).
    #[arg(long, env = "LODE_CLUSTER_DATA_POOL")]
    data_pool: Option<String>,
    /// RADOS namespace inside both pools (cluster mode).
    #[arg(long, env = "LODE_CLUSTER_NAMESPACE")]
    namespace: Option<String>,
}

#[derive(clap::Args)]
struct AdminArgs {
    /// The admin endpoint of the running lode.
    #[arg(long, env = "LODE_ADMIN_URL", default_value = "http://127.0.0.1:9001")]
    admin_url: String,
    /// Data dir whose `credentials` file holds the root secret (unless LODE_SECRET_KEY is set).
    #[arg(long, env = "LODE_DATA_DIR", default_value = "./lode-data")]
    data_dir: PathBuf,
    #[command(subcommand)]
    cmd: AdminCmd,
}

#[derive(Subcommand)]
enum AdminCmd {
    /// Users: add (prints the new keys once), list, remove.
    #[command(subcommand)]
    User(UserCmd),
    /// Give USER read or write access to BUCKET.
    Grant {
        bucket: String,
        user: String,
        #[arg(value_parser = ["read", "write"])]
        perm: String,
    },
    /// Take USER's grant on BUCKET away.
    Revoke { bucket: String, user: String },
    /// BUCKET's effective access: owner, grants, policy (public or not), Block Public Access,
    /// whether anonymous callers reach anything, CORS rules.
    Access { bucket: String },
    /// The key ring of SSE-KMS: create-key, list-keys, disable-key, enable-key,
    /// schedule-deletion.
    #[command(subcommand)]
    Kms(KmsCmd),
    /// The master key versions of SSE-S3: show, rotate (new objects' keys are sealed by a new
    /// version), reseal (existing keys move to the newest version), retire / unretire an old
    /// version. No data is re-encrypted.
    #[command(subcommand)]
    MasterKey(MasterKeyCmd),
    /// Event notification destinations: `status` (backlog, delivered, retried, failed and
    /// dropped events, the last error, the ARNs configurations name).
    #[command(subcommand)]
    Notify(NotifyCmd),
}

#[derive(Subcommand)]
enum NotifyCmd {
    Status,
}

#[derive(Subcommand)]
enum KmsCmd {
    CreateKey {
        #[arg(long, default_value = "")]
        description: String,
    },
    ListKeys,
    DisableKey {
        id: String,
    },
    EnableKey {
        id: String,
    },
    /// Disables the key now and deletes it after DAYS (7-30; AWS's window).
    ScheduleDeletion {
        id: String,
        #[arg(long, default_value_t = 30)]
        days: u32,
    },
}

#[derive(Subcommand)]
enum MasterKeyCmd {
    Show,
    /// Adds a new master key version: new objects' data keys are sealed by it.
    Rotate,
    /// Re-seals every SSE-S3 data key and key ring key sealed by an older version with the
    /// newest (metadata only: no data is rewritten); reports what an older version still seals.
    Reseal,
    /// Stops VERSION from opening anything (refused while anything is still sealed by it).
    Retire {
        version: u32,
    },
    /// Puts a retired VERSION back in use.
    Unretire {
        version: u32,
    },
}

#[derive(Subcommand)]
enum UserCmd {
    Add {
        name: String,
        /// The uid the user's buckets show on the POSIX mount.
        #[arg(long)]
        uid: Option<u32>,
        /// The email address ACL grants may name the user by (`emailAddress=`).
        #[arg(long)]
        email: Option<String>,
    },
    List,
    Remove {
        name: String,
    },
}

/// One HTTP call returning JSON (`bearer`: an Authorization token).
async fn http_json(
    method: &str,
    url: &str,
    bearer: Option<&str>,
) -> anyhow::Result<serde_json::Value> {
    use http_body_util::BodyExt;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Full<bytes::Bytes>>();
    let mut req = http::Request::builder().method(method).uri(url);
    if let Some(t) = bearer {
        req = req.header(http::header::AUTHORIZATION, format!("Bearer {t}"));
    }
    let req = req.body(http_body_util::Full::new(bytes::Bytes::new()))?;
    let resp = client
        .request(req)
        .await
        .with_context(|| format!("calling {url} (is lode serving?)"))?;
    let status = resp.status();
    let body = resp.into_body().collect().await?.to_bytes();
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
    if !status.is_success() {
        anyhow::bail!(
            "{status}: {}",
            v["error"]
                .as_str()
                .unwrap_or(&String::from_utf8_lossy(&body))
        );
    }
    Ok(v)
}

/// The profile as a compact text summary.
fn profile_summary(v: &serde_json::Value) -> String {
    let f = |x: &serde_json::Value| x.as_f64().unwrap_or(0.0);
    let gateways = v["gateways"].as_array().map_or(0, Vec::len);
    let mut out = if gateways > 0 {
        format!("Lode cluster: {gateways} gateway(s) added up\n")
    } else {
        String::new()
    };
    out += &format!(
        "Lode IO profile ({:.0} s up)\n  ops/s peak {:.0}, avg {:.1}; MiB/s peak {:.1}, avg {:.2}\n  metadata share {:.1}%; read/write bytes {}\n",
        f(&v["uptime_secs"]),
        f(&v["ops_per_sec_peak"]),
        f(&v["ops_per_sec_avg"]),
        f(&v["mib_per_sec_peak"]),
        f(&v["mib_per_sec_avg"]),
        100.0 * f(&v["metadata_share"]),
        v["read_write_ratio"]
            .as_f64()
            .map_or("-".to_owned(), |r| format!("{r:.2}")),
    );
    out += &format!(
        "  {:6} {:6} {:>10} {:>12} {:>9} {:>9}\n",
        "door", "class", "ops", "MiB", "p50 ms", "p99 ms"
    );
    for door in ["s3", "posix"] {
        for class in ["read", "write", "meta", "other"] {
            let c = &v["doors"][door][class];
            let ops = c["ops"].as_u64().unwrap_or(0);
            if ops == 0 {
                continue;
            }
            out += &format!(
                "  {door:6} {class:6} {ops:>10} {:>12.2} {:>9.3} {:>9.3}\n",
                f(&c["bytes"]) / (1u64 << 20) as f64,
                f(&c["p50_ms"]),
                f(&c["p99_ms"]),
            );
        }
    }
    if let Some(b) = v["buckets"].as_object() {
        let mut rows: Vec<(&String, u64)> = b
            .iter()
            .map(|(n, m)| {
                let ops = ["read", "write", "meta", "other"]
                    .iter()
                    .map(|c| m[*c][0].as_u64().unwrap_or(0))
                    .sum();
                (n, ops)
            })
            .collect();
        rows.sort_by_key(|r| std::cmp::Reverse(r.1));
        out += "  busiest buckets:";
        for (n, ops) in rows.iter().take(5) {
            out += &format!(" {n} ({ops} ops)");
        }
        out += "\n";
    }
    out
}

/// One call to the admin API with the root secret as bearer token; prints the JSON answer.
async fn admin_call(a: &AdminArgs) -> anyhow::Result<()> {
    let secret = match std::env::var("LODE_SECRET_KEY") {
        Ok(s) => s,
        Err(_) => {
            let p = a.data_dir.join("credentials");
            let text = std::fs::read_to_string(&p).with_context(|| {
                format!(
                    "reading the root secret from {} (or set LODE_SECRET_KEY)",
                    p.display()
                )
            })?;
            let v: serde_json::Value = serde_json::from_str(&text)?;
            v["secret_key"].as_str().unwrap_or_default().to_owned()
        }
    };
    let e = lode_gateway::admin::percent_encode;
    let (method, path) = match &a.cmd {
        AdminCmd::User(UserCmd::Add { name, uid, email }) => (
            "POST",
            format!(
                "/api/users?name={}{}{}",
                e(name),
                uid.map(|u| format!("&uid={u}")).unwrap_or_default(),
                email
                    .as_deref()
                    .map(|m| format!("&email={}", e(m)))
                    .unwrap_or_default()
            ),
        ),
        AdminCmd::User(UserCmd::List) => ("GET", "/api/users".to_owned()),
        AdminCmd::User(UserCmd::Remove { name }) => {
            ("DELETE", format!("/api/users?name={}", e(name)))
        }
        AdminCmd::Grant { bucket, user, perm } => (
            "PUT",
            format!(
                "/api/grants?bucket={}&user={}&perm={perm}",
                e(bucket),
                e(user)
            ),
        ),
        AdminCmd::Revoke { bucket, user } => (
            "DELETE",
            format!("/api/grants?bucket={}&user={}", e(bucket), e(user)),
        ),
        AdminCmd::Access { bucket } => ("GET", format!("/api/access?bucket={}", e(bucket))),
        AdminCmd::Kms(KmsCmd::CreateKey { description }) => (
            "POST",
            format!("/api/kms/keys?description={}", e(description)),
        ),
        AdminCmd::Kms(KmsCmd::ListKeys) => ("GET", "/api/kms/keys".to_owned()),
        AdminCmd::Kms(KmsCmd::DisableKey { id }) => {
            ("PUT", format!("/api/kms/state?id={}&state=disable", e(id)))
        }
        AdminCmd::Kms(KmsCmd::EnableKey { id }) => {
            ("PUT", format!("/api/kms/state?id={}&state=enable", e(id)))
        }
        AdminCmd::Kms(KmsCmd::ScheduleDeletion { id, days }) => (
            "PUT",
            format!(
                "/api/kms/state?id={}&state=schedule-deletion&days={days}",
                e(id)
            ),
        ),
        AdminCmd::Notify(NotifyCmd::Status) => ("GET", "/api/notify".to_owned()),
        AdminCmd::MasterKey(MasterKeyCmd::Show) => ("GET", "/api/master-key".to_owned()),
        AdminCmd::MasterKey(MasterKeyCmd::Rotate) => ("POST", "/api/master-key/rotate".to_owned()),
        AdminCmd::MasterKey(MasterKeyCmd::Reseal) => ("POST", "/api/master-key/reseal".to_owned()),
        AdminCmd::MasterKey(MasterKeyCmd::Retire { version }) => {
            ("POST", format!("/api/master-key/retire?version={version}"))
        }
        AdminCmd::MasterKey(MasterKeyCmd::Unretire { version }) => (
            "POST",
            format!("/api/master-key/unretire?version={version}"),
        ),
    };
    let v = http_json(
        method,
        &format!("{}{path}", a.admin_url.trim_end_matches('/')),
        Some(&secret),
    )
    .await?;
    println!("{}", serde_json::to_string_pretty(&v)?);
    Ok(())
}

#[derive(clap::Args)]
struct FsckArgs {
    #[command(flatten)]
    serve: ServeArgs,
    /// Fix reference counts and release leaked extents.
    #[arg(long)]
    repair: bool,
    /// Also read every chunk and check its crc32c.
    #[arg(long)]
    verify_data: bool,
    /// Cluster mode: an unreferenced chunk younger than this (seconds) is a write in flight,
    /// not an orphan.
    #[arg(long, default_value_t = 3600)]
    min_age_secs: u64,
}

fn load(args: &ServeArgs) -> anyhow::Result<LodeConfig> {
    let mut cfg = match &args.config {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("reading config {}", p.display()))?;
            LodeConfig::from_toml(&text).with_context(|| format!("in {}", p.display()))?
        }
        None => LodeConfig::default(),
    };
    if let Some(v) = &args.listen {
        cfg.server.listen = v.clone();
    }
    if let Some(v) = &args.admin_listen {
        cfg.server.admin_listen = v.clone();
    }
    if let Some(v) = &args.data_dir {
        cfg.data_dir = v.clone();
    }
    if let Some(v) = &args.domain {
        cfg.server.domain = v.clone();
    }
    if let Some(v) = &args.mount {
        cfg.posix.mount = v.clone();
    }
    if let Some(v) = &args.posix_user {
        cfg.posix.user = v.clone();
    }
    if let Some(v) = &args.tls_cert {
        cfg.server.tls_cert = v.clone();
    }
    if let Some(v) = &args.tls_key {
        cfg.server.tls_key = v.clone();
    }
    if let Some(v) = &args.cluster {
        cfg.cluster.backend = v.clone();
    }
    if let Some(v) = &args.ceph_conf {
        cfg.cluster.ceph_conf = v.clone();
    }
    if let Some(v) = &args.ceph_user {
        cfg.cluster.client_name = v.clone();
    }
    if let Some(v) = &args.ceph_keyring {
        cfg.cluster.keyring = v.clone();
    }
    if let Some(v) = &args.index_pool {
        cfg.cluster.index_pool = v.clone();
    }
    if let Some(v) = &args.data_pool {
        cfg.cluster.data_pool = v.clone();
    }
    if let Some(v) = &args.namespace {
        cfg.cluster.namespace = v.clone();
    }
    if let Ok(v) = std::env::var("LODE_ACCESS_KEY") {
        cfg.auth.access_key = v;
    }
    if let Ok(v) = std::env::var("LODE_SECRET_KEY") {
        cfg.auth.secret_key = v;
    }
    cfg.validate()?;
    Ok(cfg)
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("LODE_LOG")
                .unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match cli.cmd {
        Cmd::Fsck(args) => {
            let cfg = load(&args.serve)?;
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            if cfg.cluster.backend == "ceph" {
                let rep = rt.block_on(lode_gateway::server::fsck_cluster(
                    &cfg,
                    args.repair,
                    std::time::Duration::from_secs(args.min_age_secs),
                ))?;
                println!("{}", serde_json::to_string_pretty(&rep)?);
                let fixed = args.repair && rep.gaps.is_empty();
                return if rep.is_clean() || fixed {
                    Ok(())
                } else {
                    std::process::exit(1)
                };
            }
            let rep = rt.block_on(lode_gateway::server::fsck(
                &cfg,
                args.repair,
                args.verify_data,
            ))?;
            println!("{}", serde_json::to_string_pretty(&rep)?);
            if rep.is_clean()
                || rep.repaired && rep.bad_extents.is_empty() && rep.corrupt.is_empty()
            {
                Ok(())
            } else {
                std::process::exit(1)
            }
        }
        Cmd::Scrub(args) => {
            let cfg = load(&args)?;
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            let rep = rt.block_on(lode_gateway::server::scrub_once(&cfg))?;
            println!("{}", serde_json::to_string_pretty(&rep)?);
            if rep.bad.is_empty() {
                Ok(())
            } else {
                std::process::exit(1)
            }
        }
        Cmd::Profile {
            endpoint,
            json,
            cluster,
        } => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let scope = if cluster { "?scope=cluster" } else { "" };
            let url = format!("{}/api/profile{scope}", endpoint.trim_end_matches('/'));
            let v = rt.block_on(http_json("GET", &url, None))?;
            if json {
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                print!("{}", profile_summary(&v));
            }
            Ok(())
        }
        Cmd::Admin(args) => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(admin_call(&args))
        }
        Cmd::Bench(args) => {
            lode_gateway::server::raise_open_files();
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            rt.block_on(lode_bench::run(args))?;
            Ok(())
        }
        Cmd::BenchCeiling {
            listen,
            fuse_source,
            fuse_mount,
            fuse_threads,
        } => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            match (fuse_source, fuse_mount) {
                (Some(src), Some(mnt)) => Ok(rt.block_on(lode_bench::ceiling_fuse::serve(
                    &src,
                    &mnt,
                    fuse_threads,
                    lode_bench::ceiling_fuse::FuseTuning {
                        negotiate: lode_gateway::posix::negotiate,
                        raise_readahead: lode_gateway::posix::raise_readahead,
                    },
                    lode_gateway::server::shutdown_signal(),
                ))?),
                _ => Ok(rt.block_on(lode_bench::ceiling::serve(listen))?),
            }
        }
        Cmd::ConfigTemplate => {
            print!("{}", lode_config::TEMPLATE);
            Ok(())
        }
        Cmd::CheckConfig(args) => {
            let cfg = load(&args)?;
            lode_gateway::server::check(&cfg)?;
            println!("{}", toml::to_string_pretty(&cfg)?);
            Ok(())
        }
        Cmd::Serve(args) => {
            let cfg = load(&args)?;
            let region = cfg.server.region.clone();
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .thread_name("lode")
                .build()?;
            // Crash-test failpoints (see gateway/src/failpoint.rs); never set in production.
            let failpoints = match std::env::var("LODE_FAILPOINTS") {
                Ok(spec) => lode_objects::failpoint::Failpoints::parse(&spec)
                    .map_err(|e| anyhow::anyhow!("LODE_FAILPOINTS: {e}"))?,
                Err(_) => Default::default(),
            };
            rt.block_on(lode_gateway::server::serve(
                cfg,
                std::env::var("LODE_MASTER_KEY").ok(),
                failpoints,
                |s| {
                    use std::io::Write;
                    print!("{}", s.banner(&region));
                    let _ = std::io::stdout().flush();
                },
                lode_gateway::server::shutdown_signal(),
            ))
        }
    }
}
