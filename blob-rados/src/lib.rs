//! `lode-blob-rados`: the blob store of cluster mode. Every chunk (up to the chunk size, 4 MiB
//! by default) is one RADOS object in the data pool (replicated or erasure-coded: chunks are
//! written once, whole), named `lode.c.<gateway incarnation:8 hex>.<ms:11 hex><seq:5 hex>`: unique,
//! never reused, and telling which gateway run wrote it and when (what a reconciliation of the
//! index against the pool needs to judge an orphan).
//!
//! A write is durable when RADOS acknowledges it (every replica in the acting set has it), so
//! `finish` only waits for the writes. A chunk that no committed record names is removed when
//! its writer is dropped. Released chunks are removed after a grace period, so that readers on
//! any gateway (which this process cannot see) finish first; a gateway that dies in between
//! leaves orphans for `lode fsck --cluster` (not built yet).
//!
//! This store does not count references (the RADOS catalog reports every dropped reference);
//! the object service therefore never shares chunks between records in cluster mode
//! (CopyObject copies the bytes).

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use lode_datapath::{
    AlignedBuf, BlobGuard, BlobStore, BlobWriter, ChunkError, ChunkRef, Extent, PendingBlobs,
    crc32c,
};
use lode_rados::{IoCtx, RadosError};

/// Tunables of the RADOS blob store.
#[derive(Debug, Clone)]
pub struct RadosBlobConfig {
    /// How long a released chunk stays readable before it is removed.
    pub release_grace: Duration,
}

impl Default for RadosBlobConfig {
    fn default() -> Self {
        Self {
            release_grace: Duration::from_secs(300),
        }
    }
}

struct Inner {
    io: IoCtx,
    incarnation: u32,
    seq: AtomicU64,
    cfg: RadosBlobConfig,
}

pub struct RadosBlobStore {
    inner: Arc<Inner>,
}

/// The RADOS object name of a chunk.
pub fn chunk_oid(c: &Extent) -> String {
    format!("lode.c.{:08x}.{:016x}", c.dev, c.offset)
}

fn io_err(e: RadosError) -> ChunkError {
    ChunkError::Io(std::io::Error::from_raw_os_error(e.errno()))
}

impl RadosBlobStore {
    /// A store writing chunks into `io`'s pool and namespace.
    pub fn new(io: IoCtx, cfg: RadosBlobConfig) -> Self {
        Self {
            inner: Arc::new(Inner {
                io,
                incarnation: rand::random(),
                seq: AtomicU64::new(0),
                cfg,
            }),
        }
    }
}

impl Inner {
    fn next_extent(&self, len: u32) -> Extent {
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let seq = self.seq.fetch_add(1, Ordering::Relaxed) & 0xf_ffff;
        Extent {
            dev: self.incarnation,
            offset: (ms << 20) | seq,
            len,
        }
    }

    fn remove_later(self: &Arc<Self>, chunks: Vec<ChunkRef>, after: Duration) {
        if chunks.is_empty() {
            return;
        }
        let me = Arc::clone(self);
        let run = async move {
            tokio::time::sleep(after).await;
            for c in chunks {
                match me.io.remove(&chunk_oid(&c.extent)).await {
                    Ok(()) => {}
                    Err(e) if e.is_not_found() => {}
                    Err(e) => {
                        tracing::warn!(error = %e, chunk = %chunk_oid(&c.extent), "removing a released chunk failed (an orphan for fsck)")
                    }
                }
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(h) => {
                h.spawn(run);
            }
            Err(_) => tracing::warn!("no runtime to remove released chunks: left as orphans"),
        }
    }
}

struct Writer {
    inner: Arc<Inner>,
    depth: usize,
    inflight: VecDeque<tokio::task::JoinHandle<Result<ChunkRef, ChunkError>>>,
    done: Vec<ChunkRef>,
}

impl Writer {
    async fn reap_one(&mut self) -> Result<(), ChunkError> {
        if let Some(h) = self.inflight.pop_front() {
            let c = h
                .await
                .map_err(|e| ChunkError::Io(std::io::Error::other(e)))??;
            self.done.push(c);
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl BlobWriter for Writer {
    async fn push(&mut self, buf: AlignedBuf) -> Result<(), ChunkError> {
        while self.inflight.len() >= self.depth {
            self.reap_one().await?;
        }
        let data = Bytes::copy_from_slice(&buf);
        let extent = self.inner.next_extent(data.len() as u32);
        let inner = Arc::clone(&self.inner);
        self.inflight.push_back(tokio::spawn(async move {
            let crc = crc32c(&data);
            let len = data.len() as u32;
            inner
                .io
                .write_full(&chunk_oid(&extent), data)
                .await
                .map_err(io_err)?;
            Ok(ChunkRef {
                extent,
                data_len: len,
                crc32c: crc,
            })
        }));
        Ok(())
    }

    async fn drain(&mut self) -> Result<(), ChunkError> {
        while !self.inflight.is_empty() {
            self.reap_one().await?;
        }
        Ok(())
    }

    async fn finish(
        mut self: Box<Self>,
    ) -> Result<(Vec<ChunkRef>, Box<dyn PendingBlobs>), ChunkError> {
        self.drain().await?;
        let chunks = std::mem::take(&mut self.done);
        Ok((
            chunks.clone(),
            Box::new(Pending {
                inner: Arc::clone(&self.inner),
                chunks,
            }),
        ))
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        // Chunks of a write that never finished: remove them once their writes are done.
        let pending = std::mem::take(&mut self.inflight);
        let done = std::mem::take(&mut self.done);
        if pending.is_empty() && done.is_empty() {
            return;
        }
        let inner = Arc::clone(&self.inner);
        if let Ok(h) = tokio::runtime::Handle::try_current() {
            h.spawn(async move {
                let mut all = done;
                for p in pending {
                    if let Ok(Ok(c)) = p.await {
                        all.push(c);
                    }
                }
                inner.remove_later(all, Duration::ZERO);
            });
        }
    }
}

struct Pending {
    inner: Arc<Inner>,
    chunks: Vec<ChunkRef>,
}

impl PendingBlobs for Pending {
    fn commit(mut self: Box<Self>) {
        self.chunks.clear();
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        let chunks = std::mem::take(&mut self.chunks);
        self.inner.remove_later(chunks, Duration::ZERO);
    }
}

#[async_trait::async_trait]
impl BlobStore for RadosBlobStore {
    fn backend_name(&self) -> &'static str {
        "rados"
    }

    fn writer(&self, depth: usize) -> Box<dyn BlobWriter> {
        Box::new(Writer {
            inner: Arc::clone(&self.inner),
            depth: depth.max(1),
            inflight: VecDeque::new(),
            done: vec![],
        })
    }

    async fn read(&self, chunk: &ChunkRef) -> Result<Bytes, ChunkError> {
        let data = self
            .inner
            .io
            .read(&chunk_oid(&chunk.extent), 0, chunk.data_len as usize)
            .await
            .map_err(io_err)?;
        let actual = crc32c(&data);
        if data.len() != chunk.data_len as usize || actual != chunk.crc32c {
            tracing::error!(chunk = %chunk_oid(&chunk.extent), "chunk crc32c or length mismatch");
            return Err(ChunkError::Corrupt {
                dev: chunk.extent.dev,
                offset: chunk.extent.offset,
                expected: chunk.crc32c,
                actual,
            });
        }
        Ok(data)
    }

    fn read_guard(&self) -> BlobGuard {
        // Readers anywhere in the cluster are covered by the release grace period.
        Box::new(())
    }

    fn release(&self, chunks: Vec<ChunkRef>) {
        self.inner
            .remove_later(chunks, self.inner.cfg.release_grace);
    }

    fn space(&self) -> (u64, u64) {
        // The pool's capacity is the cluster's business (`ceph df`); not reported here yet.
        (0, 0)
    }

    fn is_poisoned(&self) -> bool {
        false
    }
}
