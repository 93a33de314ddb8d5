//! The IO profile: what the pipelines do to Lode, through both doors.
//!
//! Per door and op class (data read, data write, metadata, other): op counts, bytes, IO-size
//! and latency histograms (powers of two), a per-second series of the last five minutes (for
//! peak vs average), and a per-bucket breakdown. Recording is a handful of relaxed atomic adds
//! (plus a read-locked map lookup for the bucket), cheap enough to stay on all the time.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Door {
    S3 = 0,
    Posix = 1,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// GET, POSIX read.
    Read = 0,
    /// PUT, UploadPart, POSIX write.
    Write = 1,
    /// HEAD, LIST, stat/lookup, open, readdir.
    Meta = 2,
    /// Deletes, bucket and multipart bookkeeping, rename, ...
    Other = 3,
}

pub const DOORS: [&str; 2] = ["s3", "posix"];
pub const CLASSES: [&str; 4] = ["read", "write", "meta", "other"];
const BUCKETS: usize = 40; // power-of-two histogram buckets
const SECONDS: usize = 300;
const MAX_TRACKED_BUCKETS: usize = 1000;

struct Hist([AtomicU64; BUCKETS]);

impl Default for Hist {
    fn default() -> Self {
        Hist(std::array::from_fn(|_| AtomicU64::new(0)))
    }
}

impl Hist {
    fn add(&self, v: u64) {
        let i = (64 - v.leading_zeros() as usize).min(BUCKETS - 1);
        self.0[i].fetch_add(1, Relaxed);
    }

    fn snapshot(&self) -> Vec<u64> {
        self.0.iter().map(|a| a.load(Relaxed)).collect()
    }
}

/// Upper bound of histogram bucket `i` (values `<= bound`).
pub fn bucket_bound(i: usize) -> u64 {
    if i == 0 { 0 } else { (1u64 << i) - 1 }
}

#[derive(Default)]
struct ClassStats {
    ops: AtomicU64,
    bytes: AtomicU64,
    sizes: Hist,
    /// Microseconds.
    latency: Hist,
}

#[derive(Default)]
struct Slot {
    /// Which second (since start) this slot holds.
    second: AtomicU64,
    ops: [AtomicU64; 4],
    bytes: [AtomicU64; 4],
}

#[derive(Default)]
struct BucketStats {
    ops: [AtomicU64; 4],
    bytes: [AtomicU64; 4],
}

pub struct Profile {
    /// Off: `record` does nothing.
    pub enabled: std::sync::atomic::AtomicBool,
    start: Instant,
    classes: [[ClassStats; 4]; 2],
    series: Vec<Slot>,
    buckets: RwLock<HashMap<String, Arc<BucketStats>>>,
}

impl Default for Profile {
    fn default() -> Self {
        Profile {
            enabled: std::sync::atomic::AtomicBool::new(true),
            start: Instant::now(),
            classes: Default::default(),
            series: (0..SECONDS).map(|_| Slot::default()).collect(),
            buckets: RwLock::new(HashMap::new()),
        }
    }
}

/// The whole cluster's profile, as the admin endpoint asks for it (`?scope=cluster`); the
/// cluster wiring implements it (`cluster::profile::Registry`, over RADOS).
#[async_trait::async_trait]
pub trait ClusterProfile: Send + Sync {
    /// Every live gateway's snapshot, added up.
    async fn cluster_snapshot(&self) -> Result<Snapshot, Box<dyn std::error::Error + Send + Sync>>;
}

/// The profile as `/api/profile` serves it.
#[derive(Debug, Serialize, Deserialize, Clone)]
pub struct Snapshot {
    pub uptime_secs: f64,
    /// door -> class -> stats
    pub doors: HashMap<String, HashMap<String, ClassSnap>>,
    /// Both doors together.
    pub total: HashMap<String, ClassSnap>,
    /// Per-second ops and MiB for the last `SECONDS` (oldest first), per class.
    pub series: Vec<SecondSnap>,
    /// Peak and average of the per-second series, all classes together.
    pub ops_per_sec_peak: u64,
    pub ops_per_sec_avg: f64,
    pub mib_per_sec_peak: f64,
    pub mib_per_sec_avg: f64,
    /// Bytes read / bytes written (null when nothing was written).
    pub read_write_ratio: Option<f64>,
    /// Metadata ops / all ops.
    pub metadata_share: f64,
    pub buckets: HashMap<String, HashMap<String, (u64, u64)>>,
    /// Upper bounds of the histogram buckets: sizes in bytes, latencies in microseconds.
    pub histogram_bounds: Vec<u64>,
    /// In a cluster-wide profile: the gateways it adds up.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gateways: Vec<String>,
}

impl ClassSnap {
    fn add(&mut self, o: &ClassSnap) {
        self.ops += o.ops;
        self.bytes += o.bytes;
        for (h, oh) in [
            (&mut self.size_hist, &o.size_hist),
            (&mut self.latency_us_hist, &o.latency_us_hist),
        ] {
            if h.len() < oh.len() {
                h.resize(oh.len(), 0);
            }
            for (a, b) in h.iter_mut().zip(oh) {
                *a += b;
            }
        }
        self.p50_ms = quantile(&self.latency_us_hist, 0.5) as f64 / 1000.0;
        self.p99_ms = quantile(&self.latency_us_hist, 0.99) as f64 / 1000.0;
    }
}

/// Peak and average ops/s and MiB/s over the seconds that have passed (the last is partial).
fn peaks(series: &[SecondSnap]) -> (u64, f64, f64, f64) {
    let done = &series[..series.len().saturating_sub(1)];
    let per = |f: &dyn Fn(&SecondSnap) -> u64| -> (u64, f64) {
        let v: Vec<u64> = done.iter().map(f).collect();
        let peak = v.iter().copied().max().unwrap_or(0);
        let avg = if v.is_empty() {
            0.0
        } else {
            v.iter().sum::<u64>() as f64 / v.len() as f64
        };
        (peak, avg)
    };
    let (ops_peak, ops_avg) = per(&|s| s.ops.iter().sum());
    let (b_peak, b_avg) = per(&|s| s.bytes.iter().sum());
    (
        ops_peak,
        ops_avg,
        b_peak as f64 / (1 << 20) as f64,
        b_avg / (1 << 20) as f64,
    )
}

/// (read/write bytes ratio, metadata share of all ops) of the totals.
fn shares(total: &HashMap<String, ClassSnap>) -> (Option<f64>, f64) {
    let get = |c: &str| total.get(c).cloned().unwrap_or_default();
    let (rd, wr) = (get("read").bytes, get("write").bytes);
    let all: u64 = total.values().map(|c| c.ops).sum();
    let meta = if all == 0 {
        0.0
    } else {
        get("meta").ops as f64 / all as f64
    };
    ((wr > 0).then(|| rd as f64 / wr as f64), meta)
}

impl Snapshot {
    /// Several gateways' profiles added up (the cluster's profile): counts, bytes, histograms
    /// and buckets summed, percentiles taken from the summed histograms, the per-second series
    /// summed second by second of wall-clock time.
    pub fn merge(parts: &[Snapshot], gateways: Vec<String>) -> Snapshot {
        let mut doors: HashMap<String, HashMap<String, ClassSnap>> = HashMap::new();
        let mut total: HashMap<String, ClassSnap> = HashMap::new();
        let mut buckets: HashMap<String, HashMap<String, (u64, u64)>> = HashMap::new();
        let mut secs: std::collections::BTreeMap<u64, ([u64; 4], [u64; 4])> = Default::default();
        for p in parts {
            for (d, classes) in &p.doors {
                for (c, snap) in classes {
                    doors
                        .entry(d.clone())
                        .or_default()
                        .entry(c.clone())
                        .or_default()
                        .add(snap);
                }
            }
            for (c, snap) in &p.total {
                total.entry(c.clone()).or_default().add(snap);
            }
            for (b, classes) in &p.buckets {
                for (c, (ops, bytes)) in classes {
                    let e = buckets
                        .entry(b.clone())
                        .or_default()
                        .entry(c.clone())
                        .or_default();
                    e.0 += ops;
                    e.1 += bytes;
                }
            }
            for s in &p.series {
                let e = secs.entry(s.unix).or_default();
                for i in 0..4 {
                    e.0[i] += s.ops[i];
                    e.1[i] += s.bytes[i];
                }
            }
        }
        let last = secs.keys().next_back().copied().unwrap_or(0);
        let first = last.saturating_sub(SECONDS as u64 - 1);
        let series: Vec<SecondSnap> = (first..=last)
            .map(|u| {
                let (ops, bytes) = secs.get(&u).copied().unwrap_or_default();
                SecondSnap {
                    t: u - first,
                    unix: u,
                    ops,
                    bytes,
                }
            })
            .collect();
        let (ops_per_sec_peak, ops_per_sec_avg, mib_per_sec_peak, mib_per_sec_avg) = peaks(&series);
        let (read_write_ratio, metadata_share) = shares(&total);
        Snapshot {
            uptime_secs: parts.iter().map(|p| p.uptime_secs).fold(0.0, f64::max),
            doors,
            total,
            series,
            ops_per_sec_peak,
            ops_per_sec_avg,
            mib_per_sec_peak,
            mib_per_sec_avg,
            read_write_ratio,
            metadata_share,
            buckets,
            histogram_bounds: (0..BUCKETS).map(bucket_bound).collect(),
            gateways,
        }
    }
}

#[derive(Debug, Default, Serialize, Deserialize, Clone)]
pub struct ClassSnap {
    pub ops: u64,
    pub bytes: u64,
    pub size_hist: Vec<u64>,
    pub latency_us_hist: Vec<u64>,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

#[derive(Debug, Serialize, Deserialize, Clone)]
pub struct SecondSnap {
    /// Seconds since the profile started (in a merged profile: since its first second).
    pub t: u64,
    /// The wall-clock second (Unix time), which aligns the series of several gateways.
    #[serde(default)]
    pub unix: u64,
    pub ops: [u64; 4],
    pub bytes: [u64; 4],
}

/// The value below which a fraction `q` of a histogram's samples lie (the bucket's bound).
fn quantile(h: &[u64], q: f64) -> u64 {
    let n: u64 = h.iter().sum();
    if n == 0 {
        return 0;
    }
    let want = (n as f64 * q).ceil() as u64;
    let mut seen = 0;
    for (i, c) in h.iter().enumerate() {
        seen += c;
        if seen >= want {
            return bucket_bound(i);
        }
    }
    bucket_bound(h.len() - 1)
}

impl Profile {
    /// Records one finished op.
    pub fn record(
        &self,
        door: Door,
        class: Class,
        bucket: Option<&str>,
        bytes: u64,
        took: Duration,
    ) {
        let c = &self.classes[door as usize][class as usize];
        c.ops.fetch_add(1, Relaxed);
        c.bytes.fetch_add(bytes, Relaxed);
        if matches!(class, Class::Read | Class::Write) {
            c.sizes.add(bytes);
        }
        c.latency.add(took.as_micros() as u64);
        let sec = self.start.elapsed().as_secs();
        let slot = &self.series[(sec as usize) % SECONDS];
        if slot.second.swap(sec, Relaxed) != sec {
            // A new second in this slot: start it over (a racing add may land in either).
            for a in slot.ops.iter().chain(slot.bytes.iter()) {
                a.store(0, Relaxed);
            }
        }
        slot.ops[class as usize].fetch_add(1, Relaxed);
        slot.bytes[class as usize].fetch_add(bytes, Relaxed);
        if let Some(b) = bucket.filter(|b| !b.is_empty()) {
            let known = self.buckets.read().expect("profile").get(b).cloned();
            let bs = match known {
                Some(bs) => Some(bs),
                None => {
                    let mut m = self.buckets.write().expect("profile");
                    if m.len() < MAX_TRACKED_BUCKETS {
                        Some(Arc::clone(m.entry(b.to_owned()).or_default()))
                    } else {
                        None
                    }
                }
            };
            if let Some(bs) = bs {
                bs.ops[class as usize].fetch_add(1, Relaxed);
                bs.bytes[class as usize].fetch_add(bytes, Relaxed);
            }
        }
    }

    fn class_snap(stats: &[&ClassStats]) -> ClassSnap {
        let mut s = ClassSnap {
            size_hist: vec![0; BUCKETS],
            latency_us_hist: vec![0; BUCKETS],
            ..Default::default()
        };
        for c in stats {
            s.ops += c.ops.load(Relaxed);
            s.bytes += c.bytes.load(Relaxed);
            for (a, b) in s.size_hist.iter_mut().zip(c.sizes.snapshot()) {
                *a += b;
            }
            for (a, b) in s.latency_us_hist.iter_mut().zip(c.latency.snapshot()) {
                *a += b;
            }
        }
        s.p50_ms = quantile(&s.latency_us_hist, 0.5) as f64 / 1000.0;
        s.p99_ms = quantile(&s.latency_us_hist, 0.99) as f64 / 1000.0;
        s
    }

    pub fn snapshot(&self) -> Snapshot {
        let mut doors = HashMap::new();
        let mut total = HashMap::new();
        for (ci, cname) in CLASSES.iter().enumerate() {
            for (di, dname) in DOORS.iter().enumerate() {
                doors
                    .entry((*dname).to_owned())
                    .or_insert_with(HashMap::new)
                    .insert(
                        (*cname).to_owned(),
                        Self::class_snap(&[&self.classes[di][ci]]),
                    );
            }
            total.insert(
                (*cname).to_owned(),
                Self::class_snap(&[&self.classes[0][ci], &self.classes[1][ci]]),
            );
        }
        let now = self.start.elapsed().as_secs();
        let unix_now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let first = now.saturating_sub(SECONDS as u64 - 1);
        let series: Vec<SecondSnap> = (first..=now)
            .map(|t| {
                let slot = &self.series[(t as usize) % SECONDS];
                let live = slot.second.load(Relaxed) == t;
                let get = |a: &[AtomicU64; 4]| {
                    std::array::from_fn(|i| if live { a[i].load(Relaxed) } else { 0 })
                };
                SecondSnap {
                    t,
                    unix: unix_now - (now - t),
                    ops: get(&slot.ops),
                    bytes: get(&slot.bytes),
                }
            })
            .collect();
        let (ops_per_sec_peak, ops_per_sec_avg, mib_per_sec_peak, mib_per_sec_avg) = peaks(&series);
        let (read_write_ratio, metadata_share) = shares(&total);
        let buckets = self
            .buckets
            .read()
            .expect("profile")
            .iter()
            .map(|(name, b)| {
                let m = CLASSES
                    .iter()
                    .enumerate()
                    .map(|(i, c)| {
                        (
                            (*c).to_owned(),
                            (b.ops[i].load(Relaxed), b.bytes[i].load(Relaxed)),
                        )
                    })
                    .collect();
                (name.clone(), m)
            })
            .collect();
        Snapshot {
            uptime_secs: self.start.elapsed().as_secs_f64(),
            doors,
            ops_per_sec_peak,
            ops_per_sec_avg,
            mib_per_sec_peak,
            mib_per_sec_avg,
            read_write_ratio,
            metadata_share,
            total,
            series,
            buckets,
            histogram_bounds: (0..BUCKETS).map(bucket_bound).collect(),
            gateways: vec![],
        }
    }

    /// Prometheus text: counters and histograms with standard names and units.
    pub fn prometheus(&self) -> String {
        let mut out = String::new();
        out += "# HELP lode_ops_total Operations served, by door and class.\n# TYPE lode_ops_total counter\n";
        for (di, d) in DOORS.iter().enumerate() {
            for (ci, c) in CLASSES.iter().enumerate() {
                let v = self.classes[di][ci].ops.load(Relaxed);
                out += &format!("lode_ops_total{{door=\"{d}\",class=\"{c}\"}} {v}\n");
            }
        }
        out += "# HELP lode_io_bytes_total Bytes read or written, by door and class.\n# TYPE lode_io_bytes_total counter\n";
        for (di, d) in DOORS.iter().enumerate() {
            for (ci, c) in CLASSES.iter().enumerate() {
                let v = self.classes[di][ci].bytes.load(Relaxed);
                out += &format!("lode_io_bytes_total{{door=\"{d}\",class=\"{c}\"}} {v}\n");
            }
        }
        let hist = |out: &mut String,
                    name: &str,
                    help: &str,
                    scale: f64,
                    pick: &dyn Fn(&ClassStats) -> Vec<u64>| {
            *out += &format!("# HELP {name} {help}\n# TYPE {name} histogram\n");
            for (di, d) in DOORS.iter().enumerate() {
                for (ci, c) in CLASSES.iter().enumerate() {
                    let h = pick(&self.classes[di][ci]);
                    let mut cum = 0;
                    for (i, n) in h.iter().enumerate() {
                        cum += n;
                        let le = bucket_bound(i) as f64 * scale;
                        *out += &format!(
                            "{name}_bucket{{door=\"{d}\",class=\"{c}\",le=\"{le}\"}} {cum}\n"
                        );
                    }
                    *out +=
                        &format!("{name}_bucket{{door=\"{d}\",class=\"{c}\",le=\"+Inf\"}} {cum}\n");
                    *out += &format!("{name}_count{{door=\"{d}\",class=\"{c}\"}} {cum}\n");
                }
            }
        };
        hist(
            &mut out,
            "lode_op_latency_seconds",
            "Time to answer an operation.",
            1e-6,
            &|c| c.latency.snapshot(),
        );
        hist(
            &mut out,
            "lode_io_size_bytes",
            "Size of each data read or write.",
            1.0,
            &|c| c.sizes.snapshot(),
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_histograms_series_and_buckets() {
        let p = Profile::default();
        for _ in 0..10 {
            p.record(
                Door::S3,
                Class::Read,
                Some("b1"),
                4096,
                Duration::from_micros(300),
            );
        }
        p.record(
            Door::S3,
            Class::Write,
            Some("b1"),
            1 << 20,
            Duration::from_millis(5),
        );
        for _ in 0..9 {
            p.record(
                Door::Posix,
                Class::Meta,
                Some("b2"),
                0,
                Duration::from_micros(20),
            );
        }
        let s = p.snapshot();
        assert_eq!(s.doors["s3"]["read"].ops, 10);
        assert_eq!(s.total["read"].bytes, 40960);
        assert_eq!(s.doors["posix"]["meta"].ops, 9);
        assert_eq!(s.read_write_ratio, Some(40960.0 / (1 << 20) as f64));
        assert!((s.metadata_share - 0.45).abs() < 1e-9);
        // 4096 falls in the bucket whose bound is 8191; 300 us below 511 us.
        assert_eq!(s.total["read"].size_hist[13], 10);
        assert_eq!(s.total["read"].p50_ms, 0.511);
        assert_eq!(s.buckets["b1"]["read"], (10, 40960));
        assert_eq!(s.buckets["b2"]["meta"].0, 9);
        assert_eq!(s.series.last().unwrap().ops.iter().sum::<u64>(), 20);
        let m = p.prometheus();
        assert!(m.contains("lode_ops_total{door=\"s3\",class=\"read\"} 10"));
        assert!(m.contains("lode_op_latency_seconds_count{door=\"posix\",class=\"meta\"} 9"));
    }

    /// Two gateways' profiles add up: counts, histograms and percentiles, buckets, and the
    /// per-second series aligned on wall-clock seconds; a snapshot survives JSON (it travels
    /// through the cluster).
    #[test]
    fn snapshots_of_several_gateways_merge() {
        let (a, b) = (Profile::default(), Profile::default());
        for _ in 0..10 {
            a.record(
                Door::S3,
                Class::Read,
                Some("x"),
                100,
                Duration::from_micros(100),
            );
        }
        for _ in 0..90 {
            b.record(
                Door::S3,
                Class::Read,
                Some("x"),
                100,
                Duration::from_millis(50),
            );
        }
        b.record(
            Door::Posix,
            Class::Write,
            Some("y"),
            7,
            Duration::from_micros(10),
        );
        let sa: Snapshot =
            serde_json::from_str(&serde_json::to_string(&a.snapshot()).unwrap()).unwrap();
        let m = Snapshot::merge(&[sa, b.snapshot()], vec!["a".into(), "b".into()]);
        assert_eq!(m.gateways, vec!["a", "b"]);
        assert_eq!(m.total["read"].ops, 100);
        assert_eq!(m.doors["s3"]["read"].bytes, 10_000);
        assert_eq!(m.total["write"].ops, 1);
        // 90 of 100 reads took 50 ms: the merged p50 is in the 50 ms bucket, not a's 0.1 ms.
        assert!(m.total["read"].p50_ms >= 32.0, "{}", m.total["read"].p50_ms);
        assert_eq!(m.buckets["x"]["read"], (100, 10_000));
        assert_eq!(m.buckets["y"]["write"], (1, 7));
        // The series holds every op once, on consecutive wall-clock seconds.
        let all: u64 = m.series.iter().map(|s| s.ops.iter().sum::<u64>()).sum();
        assert_eq!(all, 101);
        assert_eq!(m.series.len(), SECONDS);
        assert!(m.series.windows(2).all(|w| w[1].unix == w[0].unix + 1));
        assert!((m.metadata_share - 0.0).abs() < 1e-9);
    }
}
