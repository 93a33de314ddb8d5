//! Scrub: re-reads every stored chunk at a bounded rate and checks its crc32c, so silent
//! corruption is found before a reader meets it.
//!
//! A pass walks every bucket's versions in key order (current ones, and noncurrent ones of a
//! versioned bucket), a batch at a time. Each object is opened like a
//! GET (a fresh record under a read guard, so a chunk freed and reused meanwhile is never read
//! as if it were still the object's), its chunks are read through the datapath (which verifies
//! the crc32c), and the bytes read are paced to the configured rate. A bad chunk is logged with
//! its bucket, key, version, device and offset (in cluster mode the chunk object is
//! `lode.c.<dev>.<offset>` in hex), counted in the metrics, and listed in the last report.
//!
//! Cluster mode: one gateway at a time scrubs (a lease in the catalog's system keys, renewed as
//! the pass goes), and a pass starts only when the last one that finished anywhere is an
//! interval old, so the cluster is scrubbed once per interval at the configured rate, whatever
//! the number of gateways. A chunk the cluster does not answer for (a timeout, a refusal) fails
//! the pass instead of being reported as bad.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lode_blob::ChunkError;
use lode_catalog::{CatalogError, Segment};
use serde::{Deserialize, Serialize};

use crate::error::{ObjError, ObjResult};
use crate::now_ms;
use crate::service::{ObjectService, chunk_ref};

/// One chunk that failed its check.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct BadChunk {
    pub bucket: String,
    pub key: String,
    /// The version's id (`null` in a bucket never versioned).
    pub version: String,
    pub dev: u32,
    pub offset: u64,
    pub error: String,
}

/// What one pass found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PassReport {
    pub objects: u64,
    pub chunks: u64,
    pub bytes: u64,
    pub bad: Vec<BadChunk>,
    pub started_ms: i64,
    pub seconds: f64,
}

/// Running totals, exported as metrics.
#[derive(Default)]
pub struct ScrubStats {
    pub bytes: AtomicU64,
    pub chunks: AtomicU64,
    pub corrupt: AtomicU64,
    pub passes: AtomicU64,
    pub last_pass_end_ms: AtomicU64,
    /// The bad chunks of the last finished pass (at most 1000).
    pub last_bad: Mutex<Vec<BadChunk>>,
}

/// Paces reads to `rate` bytes per second (0: unpaced).
struct Pacer {
    rate: u64,
    start: Instant,
    done: u64,
}

impl Pacer {
    async fn take(&mut self, n: u64) {
        self.done += n;
        if self.rate == 0 {
            return;
        }
        let due = Duration::from_secs_f64(self.done as f64 / self.rate as f64);
        let elapsed = self.start.elapsed();
        if due > elapsed {
            tokio::time::sleep(due - elapsed).await;
        }
    }
}

/// The lease key in the catalog's system key space (cluster mode).
const LEASE: &[u8] = b"scrub/lease";
/// A lease not renewed for this long is free for another gateway.
const LEASE_TTL: Duration = Duration::from_secs(300);

/// Who scrubs, until when, and when the last pass anywhere finished.
#[derive(Serialize, Deserialize, Default)]
struct Lease {
    holder: String,
    until_ms: i64,
    last_end_ms: i64,
}

/// What a lease update wants: start a pass (if none runs and the last ended an interval ago),
/// renew this holder's, or record the end of its pass.
#[derive(Clone, Copy)]
enum LeaseStep {
    Begin(Duration),
    Renew,
    Finish,
}

/// Updates the scrub lease for `holder`: false if the step may not happen (another gateway
/// scrubs, the pass is not due, or this holder lost the lease).
async fn lease(svc: &ObjectService, holder: &str, step: LeaseStep) -> ObjResult<bool> {
    let me = holder.to_owned();
    let f: lode_catalog::SysFn = Arc::new(move |cur| {
        let now = now_ms();
        let cur: Lease = cur
            .and_then(|b| serde_json::from_slice(b).ok())
            .unwrap_or_default();
        let mine = cur.holder == me;
        let next = match step {
            LeaseStep::Begin(interval) => {
                if (!mine && cur.until_ms > now)
                    || cur.last_end_ms.saturating_add(interval.as_millis() as i64) > now
                {
                    return Err(CatalogError::PreconditionFailed);
                }
                Lease {
                    holder: me.clone(),
                    until_ms: now.saturating_add(LEASE_TTL.as_millis() as i64),
                    last_end_ms: cur.last_end_ms,
                }
            }
            LeaseStep::Renew if mine => Lease {
                until_ms: now.saturating_add(LEASE_TTL.as_millis() as i64),
                ..cur
            },
            LeaseStep::Finish if mine => Lease {
                holder: me.clone(),
                until_ms: 0,
                last_end_ms: now,
            },
            _ => return Err(CatalogError::PreconditionFailed),
        };
        Ok(Some(serde_json::to_vec(&next).expect("a lease serializes")))
    });
    match svc.catalog().sys_update(LEASE, f).await {
        Ok(()) => Ok(true),
        Err(CatalogError::PreconditionFailed) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Scrubs every object once, reading at most `rate` bytes per second.
pub async fn pass(svc: &ObjectService, rate: u64, stats: &ScrubStats) -> ObjResult<PassReport> {
    pass_held(svc, rate, stats, None)
        .await
        .map(|r| r.expect("no lease to lose"))
}

/// [`pass`], renewing `holder`'s lease as it goes: `None` if the lease was lost (another
/// gateway took it after this one stalled), the pass then stopped.
async fn pass_held(
    svc: &ObjectService,
    rate: u64,
    stats: &ScrubStats,
    holder: Option<&str>,
) -> ObjResult<Option<PassReport>> {
    let t0 = Instant::now();
    let mut renewed = Instant::now();
    let mut rep = PassReport {
        started_ms: now_ms(),
        ..Default::default()
    };
    let mut pacer = Pacer {
        rate,
        start: t0,
        done: 0,
    };
    // Every bucket's versions (current and noncurrent; in a bucket never versioned, its
    // objects), a page at a time, through the catalog (one node or a cluster).
    let mut work: Vec<(String, String, String)> = vec![];
    let buckets = svc.list_buckets().await?;
    let mut next_bucket = buckets.into_iter().map(|(b, _)| b);
    let mut current: Option<(String, lode_catalog::VersionQuery)> = None;
    loop {
        if work.is_empty() {
            let Some((bucket, q)) = current.take().or_else(|| {
                next_bucket.next().map(|b| {
                    let q = lode_catalog::VersionQuery {
                        max: 256,
                        ..Default::default()
                    };
                    (b, q)
                })
            }) else {
                break;
            };
            let page = match svc.list_object_versions(&bucket, q.clone()).await {
                Ok(p) => p,
                Err(ObjError::NoSuchBucket) => continue, // deleted meanwhile
                Err(e) => return Err(e),
            };
            if page.truncated
                && let Some((k, v)) = page.next.clone()
            {
                let mut q = q;
                (q.key_marker, q.version_marker) = (Some(k), v);
                current = Some((bucket.clone(), q));
            }
            work = page
                .entries
                .into_iter()
                .rev()
                .filter(|e| !e.record.delete_marker)
                .map(|e| {
                    let id = e.record.version_id.unwrap_or_else(|| "null".into());
                    (bucket.clone(), e.key, id)
                })
                .collect();
            continue;
        }
        let (bucket, key, version) = work.pop().expect("work");
        if let Some(h) = holder
            && renewed.elapsed() > LEASE_TTL / 3
        {
            if !lease(svc, h, LeaseStep::Renew).await? {
                tracing::warn!("scrub: another gateway took the lease; this pass stops");
                return Ok(None);
            }
            renewed = Instant::now();
        }
        {
            // Fresh record under a guard, as a GET would read it.
            let h = match svc.open_object_version(&bucket, &key, &version).await {
                Ok(h) => h,
                // Gone meanwhile.
                Err(ObjError::NoSuchVersion | ObjError::NoSuchKey | ObjError::NoSuchBucket) => {
                    continue;
                }
                Err(e) => return Err(e),
            };
            rep.objects += 1;
            for seg in &h.record.segments {
                let Segment::Chunk(c) = seg else { continue };
                let r = svc.blobs().read(&chunk_ref(c)).await;
                rep.chunks += 1;
                rep.bytes += u64::from(c.data_len);
                stats.chunks.fetch_add(1, Ordering::Relaxed);
                stats
                    .bytes
                    .fetch_add(u64::from(c.data_len), Ordering::Relaxed);
                if let Err(e) = r {
                    if !matches!(e, ChunkError::Corrupt { .. } | ChunkError::Io(_))
                        || e.is_unavailable()
                    {
                        return Err(e.into());
                    }
                    tracing::error!(
                        bucket, key, version, dev = c.dev, offset = c.offset, error = %e,
                        "scrub: chunk failed its check"
                    );
                    stats.corrupt.fetch_add(1, Ordering::Relaxed);
                    if rep.bad.len() < 1000 {
                        rep.bad.push(BadChunk {
                            bucket: bucket.clone(),
                            key: key.clone(),
                            version: version.clone(),
                            dev: c.dev,
                            offset: c.offset,
                            error: e.to_string(),
                        });
                    }
                }
                pacer.take(u64::from(c.data_len)).await;
            }
        }
    }
    rep.seconds = t0.elapsed().as_secs_f64();
    stats.passes.fetch_add(1, Ordering::Relaxed);
    stats
        .last_pass_end_ms
        .store(now_ms().max(0) as u64, Ordering::Relaxed);
    *stats.last_bad.lock().expect("scrub stats") = rep.bad.clone();
    tracing::info!(
        objects = rep.objects,
        chunks = rep.chunks,
        bytes = rep.bytes,
        bad = rep.bad.len(),
        seconds = rep.seconds,
        "scrub pass finished"
    );
    Ok(Some(rep))
}

/// The background scrubber: a pass every `interval` (measured from the start of the previous
/// pass), the first after `delay`. With a `holder` (cluster mode) passes are shared by the
/// gateways: one at a time, one per interval in all (see the module's documentation).
pub async fn run(
    svc: Arc<ObjectService>,
    stats: Arc<ScrubStats>,
    rate: u64,
    delay: Duration,
    interval: Duration,
    holder: Option<String>,
) {
    tokio::time::sleep(delay).await;
    if let Some(h) = holder {
        loop {
            match lease(&svc, &h, LeaseStep::Begin(interval)).await {
                Ok(true) => match pass_held(&svc, rate, &stats, Some(&h)).await {
                    Ok(Some(_)) => {
                        if let Err(e) = lease(&svc, &h, LeaseStep::Finish).await {
                            tracing::warn!(error = %e, "scrub: recording the pass's end failed");
                        }
                    }
                    Ok(None) => {}
                    Err(e) => tracing::error!(error = %e, "scrub pass failed (retried)"),
                },
                Ok(false) => {}
                Err(e) => tracing::warn!(error = %e, "scrub: the lease could not be read"),
            }
            // Not due, or another gateway scrubs: look again in a while.
            tokio::time::sleep(interval.clamp(Duration::from_secs(1), Duration::from_secs(60)))
                .await;
        }
    }
    loop {
        let began = Instant::now();
        if let Err(e) = pass(&svc, rate, &stats).await {
            tracing::error!(error = %e, "scrub pass failed");
        }
        let next = interval.saturating_sub(began.elapsed());
        tokio::time::sleep(next.max(Duration::from_secs(1))).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use lode_catalog::ObjectMeta;
    use lode_datapath::{Datapath, MemChunkStore};

    use crate::service::{Integrity, ServiceConfig, WriteCond};

    /// A noncurrent version's chunks are read too, and a bad one is named by its key.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_pass_reads_noncurrent_versions() {
        let store = Arc::new(MemChunkStore::new(&[64 << 20]));
        let dp = Arc::new(Datapath::new(store.clone(), true));
        let cfg = ServiceConfig {
            chunk_size: 1 << 20,
            ..Default::default()
        };
        let svc = crate::test_service(dp, cfg);
        svc.create_bucket("vbk", "me").await.unwrap();
        svc.set_bucket_versioning("vbk", lode_catalog::Versioning::Enabled)
            .await
            .unwrap();
        let mut ids = vec![];
        for byte in [1u8, 2] {
            let body = futures::stream::iter(vec![Ok::<_, std::io::Error>(Bytes::from(vec![
                    byte;
                    2 << 20
                ]))]);
            let r = svc
                .put_object(
                    "vbk",
                    "k",
                    ObjectMeta::default(),
                    body,
                    Some(2 << 20),
                    Integrity::default(),
                    WriteCond::default(),
                )
                .await
                .unwrap();
            ids.push(r.version_id.unwrap());
        }
        svc.delete_object("vbk", "k").await.unwrap();
        let stats = ScrubStats::default();
        let rep = pass(&svc, 0, &stats).await.unwrap();
        assert_eq!(
            (rep.objects, rep.chunks),
            (2, 4),
            "both versions, no marker"
        );
        let h = svc.open_object_version("vbk", "k", &ids[0]).await.unwrap();
        let Segment::Chunk(loc) = h.record.segments[1].clone() else {
            panic!("chunked")
        };
        drop(h);
        store.corrupt(loc.dev, loc.offset + 7);
        let rep = pass(&svc, 0, &stats).await.unwrap();
        assert_eq!(rep.bad.len(), 1);
        assert_eq!(rep.bad[0].key, "k");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_pass_reads_every_chunk_and_names_the_corrupt_object() {
        let store = Arc::new(MemChunkStore::new(&[64 << 20]));
        let dp = Arc::new(Datapath::new(store.clone(), true));
        let cfg = ServiceConfig {
            chunk_size: 1 << 20,
            ..Default::default()
        };
        let svc = crate::test_service(dp, cfg);
        svc.create_bucket("bkt", "me").await.unwrap();
        for (k, n) in [("a", 3 << 20), ("b", 10), ("c", 2 << 20)] {
            let body =
                futures::stream::iter(vec![Ok::<_, std::io::Error>(Bytes::from(vec![1u8; n]))]);
            svc.put_object(
                "bkt",
                k,
                ObjectMeta::default(),
                body,
                Some(n as i64),
                Integrity::default(),
                WriteCond::default(),
            )
            .await
            .unwrap();
        }
        let stats = ScrubStats::default();
        let rep = pass(&svc, 0, &stats).await.unwrap();
        assert_eq!((rep.objects, rep.chunks, rep.bytes), (3, 5, 5 << 20));
        assert!(rep.bad.is_empty());
        // Flip a byte of object c's first chunk.
        let h = svc.open_object("bkt", "c").await.unwrap();
        let Segment::Chunk(loc) = h.record.segments[0].clone() else {
            panic!("chunked")
        };
        drop(h);
        store.corrupt(loc.dev, loc.offset + 100);
        let rep = pass(&svc, 0, &stats).await.unwrap();
        assert_eq!(rep.bad.len(), 1);
        assert_eq!(
            (rep.bad[0].bucket.as_str(), rep.bad[0].key.as_str()),
            ("bkt", "c")
        );
        assert_eq!(stats.corrupt.load(Ordering::Relaxed), 1);
        assert_eq!(stats.passes.load(Ordering::Relaxed), 2);
        // Pacing: 5 MiB at 20 MiB/s takes about a quarter of a second.
        let t = Instant::now();
        pass(&svc, 20 << 20, &stats).await.unwrap();
        assert!(
            t.elapsed() >= Duration::from_millis(200),
            "{:?}",
            t.elapsed()
        );
    }
}
