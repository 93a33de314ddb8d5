//! Failpoints at each step of the commit protocol, for deterministic crash tests.
//!
//! The binary arms them from `LODE_FAILPOINTS` (e.g. `put.after_data_sync=abort@3`: abort the
//! process, like `kill -9`, on the third time a PUT reaches that point). Unarmed, a failpoint is
//! one relaxed atomic load.
//!
//! Points: `put.after_data_write` (chunks written, not yet synced), `put.after_data_sync` (data
//! durable, metadata not committed), `put.after_commit` (committed, reply not sent).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

#[derive(Debug, Default, Clone)]
pub struct Failpoints {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    armed: AtomicBool,
    points: Vec<(String, AtomicU64)>,
}

impl Failpoints {
    /// Parses `name=abort[@N],name2=abort` (N: abort on the N-th hit; default 1).
    pub fn parse(spec: &str) -> Result<Self, String> {
        let mut points = vec![];
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (name, action) = item
                .split_once('=')
                .ok_or_else(|| format!("failpoint `{item}`: expected name=abort[@N]"))?;
            let n = match action.strip_prefix("abort") {
                Some("") => 1,
                Some(rest) => rest
                    .strip_prefix('@')
                    .and_then(|n| n.parse::<u64>().ok())
                    .filter(|&n| n > 0)
                    .ok_or_else(|| format!("failpoint `{item}`: expected abort or abort@N"))?,
                None => return Err(format!("failpoint `{item}`: only `abort` is supported")),
            };
            if !KNOWN.contains(&name) {
                return Err(format!(
                    "unknown failpoint `{name}` (known: {})",
                    KNOWN.join(", ")
                ));
            }
            points.push((name.to_owned(), AtomicU64::new(n)));
        }
        Ok(Self {
            inner: Arc::new(Inner {
                armed: AtomicBool::new(!points.is_empty()),
                points,
            }),
        })
    }

    /// Whether any failpoint is armed.
    pub fn armed(&self) -> bool {
        self.inner.armed.load(Ordering::Relaxed)
    }

    /// Passes `name`; aborts the process when it is armed and its count runs out.
    pub fn hit(&self, name: &str) {
        if !self.armed() {
            return;
        }
        for (n, left) in &self.inner.points {
            if n == name && left.fetch_sub(1, Ordering::SeqCst) == 1 {
                tracing::error!(failpoint = name, "failpoint reached: aborting");
                std::process::abort();
            }
        }
    }
}

pub const KNOWN: [&str; 3] = [
    "put.after_data_write",
    "put.after_data_sync",
    "put.after_commit",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_rejects() {
        let f = Failpoints::parse("put.after_commit=abort@3, put.after_data_sync=abort").unwrap();
        assert_eq!(f.inner.points.len(), 2);
        f.hit("put.after_commit"); // 3 -> 2
        f.hit("put.after_commit"); // 2 -> 1
        f.hit("put.other");
        assert!(Failpoints::parse("nope=abort").is_err());
        assert!(Failpoints::parse("put.after_commit=panic").is_err());
        assert!(Failpoints::parse("put.after_commit=abort@0").is_err());
        assert!(Failpoints::parse("").unwrap().inner.points.is_empty());
    }
}
