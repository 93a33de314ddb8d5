//! Results: per-class latency samples, the summary table, the JSON result, `--compare` and the
//! `--chart` SVG (latency CDFs and throughput per class).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

/// Samples of one op class.
#[derive(Default, Clone)]
pub struct ClassSamples {
    pub lat_us: Vec<u32>,
    pub bytes: u64,
    pub errors: u64,
}

impl ClassSamples {
    pub fn add(&mut self, d: Duration, bytes: usize, ok: bool) {
        self.lat_us.push(d.as_micros().min(u32::MAX as u128) as u32);
        self.bytes += bytes as u64;
        self.errors += u64::from(!ok);
    }

    pub fn merge(&mut self, o: ClassSamples) {
        self.lat_us.extend(o.lat_us);
        self.bytes += o.bytes;
        self.errors += o.errors;
    }
}

pub type Samples = BTreeMap<String, ClassSamples>;

pub fn merge_into(into: &mut Samples, from: Samples) {
    for (k, v) in from {
        into.entry(k).or_default().merge(v);
    }
}

/// The value below which a fraction `p` of the sorted samples lie, in ms (nearest rank).
pub fn pct_ms(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    f64::from(sorted[i]) / 1000.0
}

/// One class's summary: the JSON object of the result file.
pub fn summarize(c: &mut ClassSamples, wall: Duration) -> serde_json::Value {
    c.lat_us.sort_unstable();
    let secs = wall.as_secs_f64().max(1e-9);
    serde_json::json!({
        "ops": c.lat_us.len(),
        "ops_per_sec": c.lat_us.len() as f64 / secs,
        "mib_per_sec": c.bytes as f64 / secs / (1 << 20) as f64,
        "p50_ms": pct_ms(&c.lat_us, 0.5),
        "p99_ms": pct_ms(&c.lat_us, 0.99),
        "p999_ms": pct_ms(&c.lat_us, 0.999),
        "errors": c.errors,
        "wall_secs": secs,
    })
}

pub fn table(classes: &serde_json::Map<String, serde_json::Value>) -> String {
    let mut out = format!(
        "{:<10} {:>9} {:>11} {:>9} {:>9} {:>9} {:>9} {:>7}\n",
        "class", "ops", "ops/s", "MiB/s", "p50 ms", "p99 ms", "p99.9 ms", "errors"
    );
    for (name, c) in classes {
        let f = |k: &str| c[k].as_f64().unwrap_or(0.0);
        let _ = writeln!(
            out,
            "{:<10} {:>9} {:>11.0} {:>9.1} {:>9.3} {:>9.3} {:>9.3} {:>7}",
            name,
            f("ops"),
            f("ops_per_sec"),
            f("mib_per_sec"),
            f("p50_ms"),
            f("p99_ms"),
            f("p999_ms"),
            f("errors")
        );
    }
    out
}

/// Ratios of this run against an earlier result file, class by class.
pub fn compare(this: &serde_json::Value, other: &serde_json::Value) -> String {
    let mut out = format!(
        "== compare: this ({}) / other ({})\n{:<10} {:>11} {:>11} {:>8} {:>10} {:>10} {:>8}\n",
        this["params"]["target"].as_str().unwrap_or("?"),
        other["params"]["target"].as_str().unwrap_or("?"),
        "class",
        "ops/s",
        "other",
        "ratio",
        "p99 ms",
        "other",
        "ratio"
    );
    let empty = serde_json::Map::new();
    let theirs = other["classes"].as_object().unwrap_or(&empty);
    for (name, c) in this["classes"].as_object().unwrap_or(&empty) {
        let Some(o) = theirs.get(name) else {
            let _ = writeln!(out, "{name:<10} (not in the other result)");
            continue;
        };
        let f = |v: &serde_json::Value, k: &str| v[k].as_f64().unwrap_or(0.0);
        let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
        let _ = writeln!(
            out,
            "{:<10} {:>11.0} {:>11.0} {:>7.2}x {:>10.3} {:>10.3} {:>7.2}x",
            name,
            f(c, "ops_per_sec"),
            f(o, "ops_per_sec"),
            ratio(f(c, "ops_per_sec"), f(o, "ops_per_sec")),
            f(c, "p99_ms"),
            f(o, "p99_ms"),
            ratio(f(c, "p99_ms"), f(o, "p99_ms")),
        );
    }
    out
}

const COLORS: [&str; 8] = [
    "#2e6fd8", "#e07b20", "#3a9d5d", "#8a63c9", "#c62828", "#00838f", "#6d4c41", "#9e9d24",
];

pub(crate) fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// An SVG with latency CDFs (log x) and ops/s per class.
pub fn chart(
    title: &str,
    samples: &Samples,
    classes: &serde_json::Map<String, serde_json::Value>,
) -> String {
    let (w, h) = (900.0, 380.0);
    let (l, r, t, b) = (60.0, 20.0, 40.0, 50.0);
    let cdf_w = 520.0;
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="11">
<rect width="100%" height="100%" fill="white"/>
<text x="{l}" y="22" font-size="14" font-weight="bold">{}</text>
"#,
        esc(title)
    );
    // Latency CDF: x = log10(ms) over the decades the data spans.
    let all: Vec<f64> = samples
        .values()
        .flat_map(|c| c.lat_us.iter().map(|&u| f64::from(u.max(1)) / 1000.0))
        .collect();
    let lo = all
        .iter()
        .copied()
        .fold(f64::INFINITY, f64::min)
        .max(0.001)
        .log10()
        .floor();
    let hi = all
        .iter()
        .copied()
        .fold(0.0, f64::max)
        .max(0.01)
        .log10()
        .ceil()
        .max(lo + 1.0);
    let x = |ms: f64| l + (cdf_w - l) * ((ms.max(1e-3).log10() - lo) / (hi - lo));
    let y = |q: f64| t + (h - t - b) * (1.0 - q);
    let _ = writeln!(
        s,
        r#"<text x="{l}" y="{}" >latency CDF (ms, log scale)</text>"#,
        t - 6.0
    );
    for d in lo as i32..=hi as i32 {
        let ms = 10f64.powi(d);
        let _ = writeln!(
            s,
            r##"<line x1="{0}" x2="{0}" y1="{1}" y2="{2}" stroke="#e4e7ec"/><text x="{0}" y="{3}" text-anchor="middle">{4}</text>"##,
            x(ms),
            t,
            h - b,
            h - b + 14.0,
            if ms >= 1.0 {
                format!("{ms}")
            } else {
                format!("{ms:.3}").trim_end_matches('0').to_owned()
            }
        );
    }
    for q in [0.0, 0.25, 0.5, 0.75, 0.9, 1.0] {
        let _ = writeln!(
            s,
            r##"<line x1="{l}" x2="{cdf_w}" y1="{0}" y2="{0}" stroke="#e4e7ec"/><text x="{1}" y="{2}" text-anchor="end">{q}</text>"##,
            y(q),
            l - 4.0,
            y(q) + 4.0
        );
    }
    for (i, (name, c)) in samples.iter().enumerate() {
        let mut v = c.lat_us.clone();
        v.sort_unstable();
        if v.is_empty() {
            continue;
        }
        let n = v.len();
        let pts: Vec<String> = (0..=200)
            .map(|k| {
                let q = k as f64 / 200.0;
                let idx = ((n as f64 * q).ceil() as usize).clamp(1, n) - 1;
                format!("{:.1},{:.1}", x(f64::from(v[idx]) / 1000.0), y(q))
            })
            .collect();
        let col = COLORS[i % COLORS.len()];
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="{col}" stroke-width="1.6" points="{}"/><rect x="{}" y="{}" width="10" height="10" fill="{col}"/><text x="{}" y="{}">{}</text>"#,
            pts.join(" "),
            l + 10.0 + (i as f64) * 90.0,
            h - 22.0,
            l + 24.0 + (i as f64) * 90.0,
            h - 13.0,
            esc(name)
        );
    }
    // Throughput bars: ops/s per class (log-free; label shows MiB/s too).
    let bx = cdf_w + 50.0;
    let bw = w - r - bx;
    let _ = writeln!(
        s,
        r#"<text x="{bx}" y="{}">ops/s per class</text>"#,
        t - 6.0
    );
    let max_ops = classes
        .values()
        .map(|c| c["ops_per_sec"].as_f64().unwrap_or(0.0))
        .fold(0.0, f64::max)
        .max(1e-9);
    let row = ((h - t - b) / classes.len().max(1) as f64).min(40.0);
    for (i, (name, c)) in classes.iter().enumerate() {
        let ops = c["ops_per_sec"].as_f64().unwrap_or(0.0);
        let mib = c["mib_per_sec"].as_f64().unwrap_or(0.0);
        let yy = t + i as f64 * row;
        let col = samples
            .keys()
            .position(|k| k == name)
            .map_or("#888", |p| COLORS[p % COLORS.len()]);
        let _ = writeln!(
            s,
            r#"<rect x="{bx}" y="{yy}" width="{:.1}" height="{:.1}" fill="{col}"/><text x="{bx}" y="{:.1}">{}: {:.0} ops/s, {:.1} MiB/s</text>"#,
            (bw * ops / max_ops).max(1.0),
            row * 0.45,
            yy + row * 0.45 + 12.0,
            esc(name),
            ops,
            mib
        );
    }
    s + "</svg>\n"
}
