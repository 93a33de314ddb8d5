//! Namespace operations of the object service that the POSIX door needs beyond S3's: direct
//! (blocking) lookups for FUSE threads, reads at an offset with a per-reader segment cache,
//! atomic renames of a key or of a whole prefix, attribute updates in place.
//!
//! Everything here goes through the same catalog commits and chunk releases as the S3
//! operations in `service.rs`.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use lode_catalog::{
    BucketRecord, ListPage, ListQuery, ObjectMeta, ObjectRecord, ObjectSummary, Segment,
};

use crate::error::{ObjError, ObjResult};
use crate::service::{MAX_KEY_LEN, ObjectHandle, ObjectService, check_key, chunk_ref};

/// Per-reader read state: the last segment read (so sequential small reads of one chunk cost
/// one device read), and, for sequential readers, the next segment read ahead. Keyed by the
/// object's ETag: equal ETags mean equal content.
#[derive(Default)]
pub struct SegmentCache {
    entry: Option<(String, usize, Bytes)>,
    ahead: Option<(String, usize, tokio::task::JoinHandle<ObjResult<Bytes>>)>,
    last_end: u64,
    /// The data key of the encrypted object read lately, by its encryption id.
    key: Option<([u8; 16], Arc<crate::sse::DataKey>)>,
}

/// What a conditional rename asks of the source and of what the target holds
/// ([`ObjectService::rename_object_when`]).
pub type RenameCondition = Arc<dyn Fn(&ObjectRecord, Option<&ObjectRecord>) -> bool + Send + Sync>;

impl ObjectService {
    // ------------------------------------------------ blocking lookups (for FUSE threads)

    /// The bucket's record, if it exists. Blocks (a catalog read).
    pub fn bucket_blocking(&self, name: &str) -> ObjResult<Option<BucketRecord>> {
        Ok(self.catalog.bucket_blocking(name)?)
    }

    /// The object's record without its inline payload (what a stat needs), if it exists.
    /// Blocks.
    pub fn stat_blocking(&self, bucket: &str, key: &str) -> ObjResult<Option<ObjectRecord>> {
        if key.is_empty() || key.len() > MAX_KEY_LEN {
            return Ok(None);
        }
        Ok(self.catalog.head_blocking(bucket, key)?)
    }

    /// Up to `limit` keys that start with `prefix` (in order). Blocks.
    pub fn keys_under_blocking(
        &self,
        bucket: &str,
        prefix: &str,
        limit: usize,
    ) -> ObjResult<Vec<String>> {
        Ok(self.catalog.keys_under_blocking(bucket, prefix, limit)?)
    }

    /// One page of a delimiter listing, for a directory listing: `f` gets each object's key
    /// and summary (size, times, metadata; no checksums or segments), and the page returned
    /// has the common prefixes and no `objects`. Blocks.
    pub fn list_summaries_blocking(
        &self,
        bucket: &str,
        prefix: &str,
        after: Option<&str>,
        max: usize,
        f: &mut dyn FnMut(&str, &ObjectSummary<'_>),
    ) -> ObjResult<ListPage> {
        let q = ListQuery {
            prefix,
            delimiter: Some("/"),
            after,
            max,
        };
        Ok(self.catalog.list_summaries_blocking(bucket, &q, f)?)
    }

    /// Marks the calling thread (a FUSE worker; never an async worker) as one whose chunk reads
    /// may block it on the device, which spares two thread hops per read where the blob store
    /// has such a path.
    pub fn allow_blocking_reads_on_this_thread(&self) {
        self.blobs.allow_blocking_reads_on_this_thread();
    }

    /// Marks the calling thread (a FUSE worker that waits for each reply anyway; never an async
    /// worker) as one that may block on chunk reads and in the catalog's own work (a commit
    /// driven here with `block_on` runs its metadata transaction on this thread), sparing the
    /// hops to other threads and back.
    pub fn allow_blocking_on_this_thread(&self) {
        self.blobs.allow_blocking_reads_on_this_thread();
        self.catalog.allow_blocking_on_this_thread();
    }

    /// Opens an object for reading from a thread that may block.
    pub fn open_blocking(&self, bucket: &str, key: &str) -> ObjResult<ObjectHandle> {
        if key.is_empty() || key.len() > MAX_KEY_LEN {
            return Err(ObjError::NoSuchKey);
        }
        let guard = self.blobs.read_guard();
        match self.catalog.get_blocking(bucket, key)? {
            Some(record) => Ok(ObjectHandle {
                record,
                guard,
                key: None,
                early: None,
            }),
            None => Err(ObjError::NoSuchKey),
        }
    }

    /// Reads `[off, off + len)` (clipped to the object) of an opened object, reusing the last
    /// segment read through `cache`.
    pub async fn read_at(
        &self,
        h: ObjectHandle,
        off: u64,
        len: u64,
        cache: &mut SegmentCache,
    ) -> ObjResult<Bytes> {
        let mut h = h;
        let end = (off.saturating_add(len)).min(h.record.size);
        if off >= end {
            return Ok(Bytes::new());
        }
        // An encrypted object: its key, found once per open file (SSE-C: refused).
        let sse = h.record.meta.sse.clone();
        if let Some(sse) = &sse {
            match &cache.key {
                Some((id, k)) if *id == sse.id => h.key = Some(Arc::clone(k)),
                _ => {
                    self.unlock(&mut h, None).await?;
                    let k = h.key.clone().expect("unlocked");
                    cache.key = Some((sse.id, k));
                }
            }
        }
        let lens = crate::encryption::plain_lens(&h.record)?;
        let key = h.key.clone();
        let opened = |i: usize, stored: &[u8], from: usize, to: usize| -> ObjResult<Bytes> {
            match (&sse, &key) {
                (Some(sse), Some(k)) => crate::encryption::open_piece(
                    k,
                    sse,
                    i,
                    stored,
                    lens[i],
                    from as u64,
                    to as u64,
                ),
                _ => Ok(Bytes::copy_from_slice(&stored[from..to])),
            }
        };
        let mut out: Vec<Bytes> = vec![];
        let mut pos = 0u64;
        for (i, seg) in h.record.segments.iter().enumerate() {
            let (s0, s1) = (pos, pos + lens[i]);
            pos = s1;
            if s1 <= off || s0 >= end {
                continue;
            }
            let (from, to) = ((off.max(s0) - s0) as usize, (end.min(s1) - s0) as usize);
            let data = match seg {
                Segment::Inline(b) => opened(i, b, from, to)?,
                Segment::Detached(_) => return Err(crate::service::unloaded()),
                Segment::Chunk(c) => {
                    let hit = match &cache.entry {
                        Some((etag, idx, d)) if *etag == h.record.etag && *idx == i => {
                            Some(d.clone())
                        }
                        _ => None,
                    };
                    let d = match hit {
                        Some(d) => d,
                        None => {
                            let ahead = match cache.ahead.take() {
                                Some((etag, idx, task)) if etag == h.record.etag && idx == i => {
                                    task.await.ok().and_then(|r| r.ok())
                                }
                                Some((_, _, task)) => {
                                    task.abort();
                                    None
                                }
                                None => None,
                            };
                            let d = match ahead {
                                Some(d) => d,
                                None => self.blobs.read(&chunk_ref(c)).await?,
                            };
                            cache.entry = Some((h.record.etag.clone(), i, d.clone()));
                            d
                        }
                    };
                    // A sequential reader gets the next chunk read ahead, under its own guard
                    // (taken while this read's guard still pins the record's extents).
                    if off == cache.last_end
                        && cache.ahead.is_none()
                        && let Some(Segment::Chunk(next)) = h.record.segments.get(i + 1)
                    {
                        let (blobs, next) = (Arc::clone(&self.blobs), chunk_ref(next));
                        let guard = self.blobs.read_guard();
                        let task = tokio::spawn(async move {
                            let r = blobs.read(&next).await.map_err(ObjError::from);
                            drop(guard);
                            r
                        });
                        cache.ahead = Some((h.record.etag.clone(), i + 1, task));
                    }
                    match sse {
                        Some(_) => opened(i, &d, from, to)?,
                        None => d.slice(from..to),
                    }
                }
            };
            out.push(data);
        }
        drop(h);
        cache.last_end = end;
        Ok(match out.len() {
            1 => out.pop().expect("one piece"),
            _ => {
                let mut b = BytesMut::with_capacity((end - off) as usize);
                for p in out {
                    b.extend_from_slice(&p);
                }
                b.freeze()
            }
        })
    }

    /// Feeds the first `limit` bytes of an object to `sink` piece by piece (for copying it
    /// elsewhere); returns how many bytes it fed.
    pub async fn read_prefix(
        &self,
        bucket: &str,
        key: &str,
        limit: u64,
        mut sink: impl FnMut(&[u8]) -> std::io::Result<()>,
    ) -> ObjResult<u64> {
        let mut h = self.open_object(bucket, key).await?;
        self.unlock(&mut h, None).await?;
        let size = h.record.size.min(limit);
        self.feed(h, size, &mut sink).await?;
        Ok(size)
    }

    // ------------------------------------------------ namespace changes

    /// Renames one object within a bucket in one catalog commit: the record (and its extents)
    /// moves; whatever `to` held is released. `no_replace`: fail if `to` exists.
    pub async fn rename_object(
        &self,
        bucket: &str,
        from: &str,
        to: &str,
        no_replace: bool,
    ) -> ObjResult<()> {
        check_key(from)?;
        check_key(to)?;
        if from == to {
            return Ok(());
        }
        self.rename_object_if(bucket, from, to, lode_catalog::replace_check(no_replace))
            .await
    }

    /// Renames one object within a bucket if `cond` holds for the source and for what the
    /// target holds, judged in the commit that moves it (S3 RenameObject and its conditions;
    /// `412 PreconditionFailed` when it does not). Onto itself: nothing moves, once `cond` holds.
    pub async fn rename_object_when(
        &self,
        bucket: &str,
        from: &str,
        to: &str,
        cond: RenameCondition,
    ) -> ObjResult<()> {
        let check: lode_catalog::RenameCheck = Arc::new(move |src, dst| {
            if cond(src, dst) {
                Ok(())
            } else {
                Err(lode_catalog::CatalogError::PreconditionFailed)
            }
        });
        self.rename_object_if(bucket, from, to, check).await
    }

    /// Renames one object within a bucket if `check` passes on the source and on what the
    /// target holds, in the commit that moves it. Onto itself: nothing moves, once `check`
    /// passes.
    async fn rename_object_if(
        &self,
        bucket: &str,
        from: &str,
        to: &str,
        check: lode_catalog::RenameCheck,
    ) -> ObjResult<()> {
        check_key(from)?;
        check_key(to)?;
        let v = self.versioning_of(bucket).await?;
        let check = if v == lode_catalog::Versioning::Off {
            check
        } else {
            // The source's version leaves its key: a locked one stays (object lock).
            Arc::new(move |src: &ObjectRecord, dst: Option<&ObjectRecord>| {
                if let Some(why) = crate::objlock::lock_reason(src, crate::now_ms(), false) {
                    return Err(crate::error::refused(ObjError::ObjectLocked(why)));
                }
                check(src, dst)
            }) as lode_catalog::RenameCheck
        };
        let rename = self.catalog.rename(bucket, from, to, check, v);
        let done = self
            .with_events(bucket, crate::bucket_events::How::Rename, rename)
            .await??;
        self.release_chunks(done.released);
        Ok(())
    }

    /// Renames every key under the prefix `from` (a directory, ending in '/') to the same key
    /// under `to`, in ONE commit. `to` must hold nothing but (at most) its own marker, which is
    /// replaced. Returns how many keys moved.
    pub async fn rename_prefix(&self, bucket: &str, from: &str, to: &str) -> ObjResult<usize> {
        debug_assert!(from.ends_with('/') && to.ends_with('/'));
        if from == to {
            return Ok(0);
        }
        if self.versioning_of(bucket).await? != lode_catalog::Versioning::Off {
            return Err(ObjError::VersionedRename);
        }
        let rename = self.catalog.rename_prefix(bucket, from, to, MAX_KEY_LEN);
        let coarse = vec![
            (from.to_owned(), crate::notify::ChangeKind::Removed),
            (to.to_owned(), crate::notify::ChangeKind::Written),
        ];
        let (n, released) = self
            .announced(
                bucket,
                crate::bucket_events::How::Rename,
                Some(coarse),
                rename,
            )
            .await??;
        self.release_chunks(released);
        Ok(n)
    }

    /// Changes an object's metadata in place (content and ETag unchanged). Returns the new
    /// record.
    pub async fn update_meta(
        &self,
        bucket: &str,
        key: &str,
        f: impl Fn(&mut ObjectMeta) + Send + Sync + 'static,
    ) -> ObjResult<ObjectRecord> {
        check_key(key)?;
        let update = Arc::new(move |rec: &ObjectRecord| {
            // A locked version's metadata is not rewritten in place (object lock).
            if let Some(why) = crate::objlock::lock_reason(rec, crate::now_ms(), false) {
                return Err(crate::error::refused(ObjError::ObjectLocked(why)));
            }
            let mut rec = rec.clone();
            f(&mut rec.meta);
            Ok(rec)
        });
        let update = self.catalog.update(bucket, key, update);
        Ok(self
            .with_events(bucket, crate::bucket_events::How::Meta, update)
            .await??)
    }

    /// Removes an empty directory: fails with `DirectoryNotEmpty` if any key other than the
    /// marker `prefix` itself lies under it, `NoSuchKey` if nothing does.
    pub async fn remove_dir(&self, bucket: &str, prefix: &str) -> ObjResult<()> {
        let remove = self.catalog.remove_dir(bucket, prefix);
        let coarse = vec![(prefix.to_owned(), crate::notify::ChangeKind::Removed)];
        let released = self
            .announced(
                bucket,
                crate::bucket_events::How::Delete,
                Some(coarse),
                remove,
            )
            .await??;
        self.release_chunks(released);
        Ok(())
    }
}
