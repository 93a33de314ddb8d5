//! `lode bench`: S3 workloads against any endpoint, with Lode's own signed client (hyper +
//! aws-sigv4, keep-alive, no SDK), so the client is not the bottleneck.
//!
//! Workloads (shapes from shared/WORKLOADS.md; more come with the benchmark milestone):
//! * `small`: PUT `--objects` objects of `--size` (default 4 KiB), then GET each once, shuffled.
//! * `losf-ingest`: PUTs with 25% under 100 B and the rest log-spread over 10 KB-1 MB.
//! * `train-read`: one shuffled epoch of GETs over 400-500 KB objects; 30% preceded by a HEAD.
//! * `stat-storm`: HEADs of random existing keys.
//! * `list`: `--objects` keys in directories of 1000; first-page ListObjectsV2 latency with and
//!   without a delimiter (`--ops` repetitions, one client), then one full listing (keys/s).
//!
//! Output: a table (ops/s, MiB/s, p50/p99/p99.9 per op class) and `--json` in the shape
//! `{"workload", "params", "classes": {"put": {"ops_per_sec", "mib_per_sec", "p50_ms", ...}}}`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, bail};
use aws_credential_types::Credentials;
use aws_sigv4::http_request::{
    PayloadChecksumKind, SignableBody, SignableRequest, SigningSettings, sign,
};
use aws_sigv4::sign::v4;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use tokio::sync::Mutex;

#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// small | losf-ingest | train-read | stat-storm
    pub workload: String,
    #[arg(long, default_value = "http://127.0.0.1:9000")]
    pub endpoint: String,
    #[arg(long, env = "AWS_ACCESS_KEY_ID")]
    pub access_key: String,
    #[arg(long, env = "AWS_SECRET_ACCESS_KEY")]
    pub secret_key: String,
    #[arg(long, default_value = "us-east-1")]
    pub region: String,
    /// Bucket to use (created if missing).
    #[arg(long, default_value = "lode-bench")]
    pub bucket: String,
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    #[arg(long, default_value_t = 10_000)]
    pub objects: usize,
    /// Object size for `small` (e.g. 4KiB).
    #[arg(long, default_value = "4KiB")]
    pub size: String,
    /// Operations for `stat-storm`.
    #[arg(long, default_value_t = 50_000)]
    pub ops: usize,
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
}

type HttpClient = Client<HttpConnector, Full<Bytes>>;

struct S3Client {
    http: HttpClient,
    endpoint: String,
    identity: aws_smithy_runtime_api::client::identity::Identity,
    region: String,
}

impl S3Client {
    fn new(a: &BenchArgs) -> Self {
        let mut conn = HttpConnector::new();
        conn.set_nodelay(true);
        let http = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(a.concurrency * 2)
            .pool_idle_timeout(Duration::from_secs(30))
            .build(conn);
        let identity =
            Credentials::new(&a.access_key, &a.secret_key, None, None, "lode-bench").into();
        Self {
            http,
            endpoint: a.endpoint.trim_end_matches('/').to_owned(),
            identity,
            region: a.region.clone(),
        }
    }

    /// One signed request; returns (status, body length).
    async fn call(&self, method: &str, path: &str, body: Bytes) -> anyhow::Result<(u16, usize)> {
        let (s, b) = self.call_body(method, path, body).await?;
        Ok((s, b.len()))
    }

    /// One signed request; returns (status, body).
    async fn call_body(
        &self,
        method: &str,
        path: &str,
        body: Bytes,
    ) -> anyhow::Result<(u16, Bytes)> {
        let uri = format!("{}{}", self.endpoint, path);
        let mut settings = SigningSettings::default();
        settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
        let params = v4::SigningParams::builder()
            .identity(&self.identity)
            .region(&self.region)
            .name("s3")
            .time(SystemTime::now())
            .settings(settings)
            .build()?
            .into();
        let len = body.len().to_string();
        let headers: Vec<(&str, &str)> = if method == "PUT" {
            vec![("content-length", &len)]
        } else {
            vec![]
        };
        let signable = SignableRequest::new(
            method,
            &uri,
            headers.iter().copied(),
            SignableBody::UnsignedPayload,
        )?;
        let (instr, _) = sign(signable, &params)?.into_parts();
        let mut req = http::Request::builder().method(method).uri(&uri);
        if method == "PUT" {
            req = req.header("content-length", &len);
        }
        let mut req = req.body(Full::new(body))?;
        instr.apply_to_request_http1x(&mut req);
        let resp = self.http.request(req).await.context("request failed")?;
        let status = resp.status().as_u16();
        let n = resp.into_body().collect().await?.to_bytes();
        Ok((status, n))
    }
}

/// Latencies of one op class.
#[derive(Default)]
struct Class {
    lat_us: Vec<u32>,
    bytes: u64,
    errors: u64,
}

#[derive(Default)]
struct Recorder {
    classes: Mutex<BTreeMap<&'static str, Class>>,
}

impl Recorder {
    async fn add(&self, class: &'static str, d: Duration, bytes: usize, ok: bool) {
        let mut c = self.classes.lock().await;
        let e = c.entry(class).or_default();
        e.lat_us.push(d.as_micros().min(u32::MAX as u128) as u32);
        e.bytes += bytes as u64;
        if !ok {
            e.errors += 1;
        }
    }
}

fn pct(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i] as f64 / 1000.0
}

/// Runs `jobs` over `concurrency` workers; each job is (class, method, path, body, expected bytes).
async fn run_phase(
    client: &Arc<S3Client>,
    rec: &Arc<Recorder>,
    jobs: Vec<(&'static str, &'static str, String, Bytes)>,
    concurrency: usize,
) -> anyhow::Result<Duration> {
    let jobs = Arc::new(jobs);
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut tasks = vec![];
    for _ in 0..concurrency {
        let (jobs, next, client, rec) = (
            Arc::clone(&jobs),
            Arc::clone(&next),
            Arc::clone(client),
            Arc::clone(rec),
        );
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some((class, method, path, body)) = jobs.get(i) else {
                    break;
                };
                let t = Instant::now();
                let sent = body.len();
                let r = client.call(method, path, body.clone()).await;
                let (ok, n) = match r {
                    Ok((s, n)) => (
                        (200..300).contains(&s),
                        if *method == "PUT" { sent } else { n },
                    ),
                    Err(_) => (false, 0),
                };
                rec.add(class, t.elapsed(), n, ok).await;
            }
        }));
    }
    for t in tasks {
        t.await?;
    }
    Ok(start.elapsed())
}

fn parse_size(s: &str) -> anyhow::Result<usize> {
    lode_config::ByteSize::parse(s)
        .map(|b| b.0 as usize)
        .map_err(|e| anyhow::anyhow!(e))
}

pub async fn run(a: BenchArgs) -> anyhow::Result<serde_json::Value> {
    let client = Arc::new(S3Client::new(&a));
    let (st, _) = client
        .call("PUT", &format!("/{}", a.bucket), Bytes::new())
        .await?;
    if !(200..300).contains(&st) && st != 409 {
        bail!("creating bucket {} failed with HTTP {st}", a.bucket);
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(a.seed);
    let payload = |rng: &mut rand::rngs::StdRng, n: usize| -> Bytes {
        let mut v = vec![0u8; n];
        rng.fill(&mut v[..]);
        Bytes::from(v)
    };
    let prefix = format!("{}-{}", a.workload, rng.random::<u32>());
    let key = |i: usize| format!("/{}/{}/{:08}", a.bucket, prefix, i);
    let mut timed: Vec<(&'static str, Duration)> = vec![];
    let setup = Arc::new(Recorder::default());
    let rec = Arc::new(Recorder::default());
    match a.workload.as_str() {
        "small" => {
            let size = parse_size(&a.size)?;
            let jobs = (0..a.objects)
                .map(|i| ("put", "PUT", key(i), payload(&mut rng, size)))
                .collect();
            timed.push(("put", run_phase(&client, &rec, jobs, a.concurrency).await?));
            let mut order: Vec<usize> = (0..a.objects).collect();
            order.shuffle(&mut rng);
            let jobs = order
                .into_iter()
                .map(|i| ("get", "GET", key(i), Bytes::new()))
                .collect();
            timed.push(("get", run_phase(&client, &rec, jobs, a.concurrency).await?));
        }
        "losf-ingest" => {
            let jobs = (0..a.objects)
                .map(|i| {
                    let n = if rng.random_bool(0.25) {
                        rng.random_range(1..100)
                    } else {
                        (10_000f64 * 100f64.powf(rng.random::<f64>())) as usize
                    };
                    ("put", "PUT", key(i), payload(&mut rng, n))
                })
                .collect();
            timed.push(("put", run_phase(&client, &rec, jobs, a.concurrency).await?));
        }
        "train-read" => {
            let jobs = (0..a.objects)
                .map(|i| {
                    let n = rng.random_range(400_000..500_000);
                    ("setup", "PUT", key(i), payload(&mut rng, n))
                })
                .collect();
            run_phase(&client, &setup, jobs, a.concurrency).await?;
            let mut order: Vec<usize> = (0..a.objects).collect();
            order.shuffle(&mut rng);
            let mut jobs = vec![];
            for i in order {
                if rng.random_bool(0.3) {
                    jobs.push(("head", "HEAD", key(i), Bytes::new()));
                }
                jobs.push(("get", "GET", key(i), Bytes::new()));
            }
            timed.push((
                "epoch",
                run_phase(&client, &rec, jobs, a.concurrency).await?,
            ));
        }
        "stat-storm" => {
            let jobs = (0..a.objects)
                .map(|i| ("setup", "PUT", key(i), payload(&mut rng, 100)))
                .collect();
            run_phase(&client, &setup, jobs, a.concurrency).await?;
            let jobs = (0..a.ops)
                .map(|_| {
                    (
                        "head",
                        "HEAD",
                        key(rng.random_range(0..a.objects)),
                        Bytes::new(),
                    )
                })
                .collect();
            timed.push(("head", run_phase(&client, &rec, jobs, a.concurrency).await?));
        }
        "list" => {
            // N empty objects in directories of 1000 keys: `<prefix>/dNNNNN/NNNNNNNN`.
            let dkey = |i: usize| format!("/{}/{}/d{:05}/{:08}", a.bucket, prefix, i / 1000, i);
            let jobs = (0..a.objects)
                .map(|i| ("setup", "PUT", dkey(i), Bytes::new()))
                .collect();
            run_phase(&client, &setup, jobs, a.concurrency).await?;
            let reps = a.ops.min(2000);
            let first = format!(
                "/{}?list-type=2&max-keys=1000&prefix={}%2F",
                a.bucket, prefix
            );
            let jobs = (0..reps)
                .map(|_| ("first", "GET", first.clone(), Bytes::new()))
                .collect();
            timed.push(("first", run_phase(&client, &rec, jobs, 1).await?));
            let delim = format!("{first}&delimiter=%2F");
            let jobs = (0..reps)
                .map(|_| ("delim", "GET", delim.clone(), Bytes::new()))
                .collect();
            timed.push(("delim", run_phase(&client, &rec, jobs, 1).await?));
            // One full listing, page by page: keys/s.
            let t0 = Instant::now();
            let mut token: Option<String> = None;
            let mut keys = 0usize;
            loop {
                let mut path = first.clone();
                if let Some(t) = &token {
                    path.push_str(&format!("&continuation-token={t}"));
                }
                let t = Instant::now();
                let (st, body) = client.call_body("GET", &path, Bytes::new()).await?;
                let text = String::from_utf8_lossy(&body);
                rec.add("page", t.elapsed(), body.len(), st == 200).await;
                keys += text.matches("<Key>").count();
                token = text
                    .split_once("<NextContinuationToken>")
                    .and_then(|(_, r)| r.split_once("</NextContinuationToken>"))
                    .map(|(t, _)| t.to_owned());
                if st != 200 || token.is_none() {
                    break;
                }
            }
            let secs = t0.elapsed().as_secs_f64();
            timed.push(("page", t0.elapsed()));
            println!(
                "full listing: {keys} keys in {secs:.2} s = {:.0} keys/s",
                keys as f64 / secs
            );
            if keys != a.objects {
                bail!(
                    "the full listing returned {keys} keys, expected {}",
                    a.objects
                );
            }
        }
        w => bail!("unknown workload `{w}` (small, losf-ingest, train-read, stat-storm, list)"),
    }
    let setup_errors: u64 = setup.classes.lock().await.values().map(|c| c.errors).sum();
    if setup_errors > 0 {
        bail!("{setup_errors} setup requests failed");
    }
    // Wall time per class: the phase it ran in (train-read mixes HEAD and GET in one phase).
    let wall = |class: &str| {
        timed
            .iter()
            .find(|(n, _)| *n == class)
            .or_else(|| timed.first())
            .map(|(_, d)| d.as_secs_f64())
            .unwrap_or(1.0)
    };
    let mut classes = serde_json::Map::new();
    println!(
        "{:<6} {:>9} {:>11} {:>9} {:>9} {:>9} {:>9} {:>7}",
        "class", "ops", "ops/s", "MiB/s", "p50 ms", "p99 ms", "p99.9 ms", "errors"
    );
    let mut total_errors = 0;
    for (name, c) in rec.classes.lock().await.iter_mut() {
        c.lat_us.sort_unstable();
        let secs = wall(name);
        let ops = c.lat_us.len() as f64 / secs;
        let mib = c.bytes as f64 / secs / (1 << 20) as f64;
        total_errors += c.errors;
        println!(
            "{:<6} {:>9} {:>11.0} {:>9.1} {:>9.3} {:>9.3} {:>9.3} {:>7}",
            name,
            c.lat_us.len(),
            ops,
            mib,
            pct(&c.lat_us, 0.5),
            pct(&c.lat_us, 0.99),
            pct(&c.lat_us, 0.999),
            c.errors
        );
        classes.insert(
            name.to_string(),
            serde_json::json!({
                "ops": c.lat_us.len(), "ops_per_sec": ops, "mib_per_sec": mib,
                "p50_ms": pct(&c.lat_us, 0.5), "p99_ms": pct(&c.lat_us, 0.99), "p999_ms": pct(&c.lat_us, 0.999),
                "errors": c.errors,
            }),
        );
    }
    let out = serde_json::json!({
        "workload": a.workload,
        "params": {"endpoint": a.endpoint, "concurrency": a.concurrency, "objects": a.objects, "size": a.size, "ops": a.ops},
        "classes": classes,
    });
    if let Some(p) = &a.json {
        std::fs::write(p, serde_json::to_string_pretty(&out)?)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    if total_errors > 0 {
        bail!("{total_errors} requests failed");
    }
    Ok(out)
}
