//! Files open on the mount: their staging copy and what a close or fsync commits.
//!
//! A file written through the mount is staged in an anonymous local file (random writes,
//! overwrites and truncation work as on any file system), and committed as one new object
//! version, MD5 ETag and all, by the same commit protocol as a PUT when it is closed or
//! fsynced. Until then S3 readers see the previous version, never part of the new one.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use bytes::Bytes;
use futures::Stream;
use lode_objects::{Integrity, ObjectMeta, ObjectService, WriteCond};

use super::names::Attrs;
use crate::error::ToErrno;

/// What `stat` shows of an open file without waiting for its data lock.
#[derive(Debug, Clone, Copy)]
pub struct Snapshot {
    pub size: u64,
    pub mtime: SystemTime,
    pub attrs: Attrs,
}

pub struct FileData {
    /// The staged content; `None` while the file reads through to its object.
    pub staging: Option<Arc<File>>,
    pub size: u64,
    /// Removed from the namespace while open: never committed again.
    pub unlinked: bool,
    /// Standard and user metadata to commit with (the previous version's, when there was one).
    pub meta: ObjectMeta,
    /// POSIX attributes set on the mount, stored over `meta` at commit.
    pub attrs: Attrs,
}

pub struct OpenFile {
    pub data: tokio::sync::Mutex<FileData>,
    snap: Mutex<Snapshot>,
    /// Kernel file handles open on it.
    pub handles: AtomicUsize,
    /// Created on the mount and not committed yet: exists only here.
    pending: AtomicBool,
    /// Changed since the last commit (written under the data lock; read without it by stat).
    dirty: AtomicBool,
}

impl OpenFile {
    pub fn new(pending: bool, snap: Snapshot) -> Self {
        OpenFile {
            data: tokio::sync::Mutex::new(FileData {
                staging: None,
                size: snap.size,
                unlinked: false,
                meta: ObjectMeta::default(),
                attrs: snap.attrs,
            }),
            snap: Mutex::new(snap),
            handles: AtomicUsize::new(0),
            pending: AtomicBool::new(pending),
            dirty: AtomicBool::new(pending),
        }
    }

    pub fn is_dirty(&self) -> bool {
        self.dirty.load(Ordering::Acquire)
    }

    /// Marks the content changed (call with the data lock held).
    pub fn set_dirty(&self, dirty: bool) {
        self.dirty.store(dirty, Ordering::Release);
    }

    pub fn is_pending(&self) -> bool {
        self.pending.load(Ordering::Acquire)
    }

    pub fn snapshot(&self) -> Snapshot {
        *self.snap.lock().expect("snapshot")
    }

    /// Records what `stat` should show after a change to `d`.
    pub fn touch(&self, d: &FileData, mtime: Option<SystemTime>) {
        let mut s = self.snap.lock().expect("snapshot");
        s.size = d.size;
        s.attrs = d.attrs;
        if let Some(t) = mtime {
            s.mtime = t;
        }
    }

    /// Whether `stat` must come from here rather than from the stored object.
    pub fn shadows_object(&self) -> bool {
        self.is_dirty() || self.is_pending()
    }
}

/// A new anonymous staging file in `dir`.
pub fn staging_file(dir: &Path) -> std::io::Result<File> {
    tempfile::tempfile_in(dir)
}

/// Makes sure `d` has a staging copy, copying (up to `limit` bytes of) the stored object into it
/// first when `copy_from` names one (its metadata becomes the base of the next commit).
pub async fn stage(
    svc: &ObjectService,
    staging_dir: &Path,
    d: &mut FileData,
    copy_from: Option<(&str, &str)>,
    limit: u64,
) -> Result<(), i32> {
    if d.staging.is_some() {
        return Ok(());
    }
    let f = staging_file(staging_dir).map_err(|e| {
        tracing::error!(error = %e, dir = %staging_dir.display(), "cannot create a staging file");
        e.raw_os_error().unwrap_or(libc::EIO)
    })?;
    let mut size = 0u64;
    if let Some((bucket, key)) = copy_from {
        match svc.stat_blocking(bucket, key) {
            Ok(Some(rec)) => {
                d.meta = rec.meta.clone();
                // A new version: the old one's object lock stays with it.
                d.meta.lock = Default::default();
                let mut off = 0u64;
                size = svc
                    .read_prefix(bucket, key, limit, |piece| {
                        f.write_all_at(piece, off)?;
                        off += piece.len() as u64;
                        Ok(())
                    })
                    .await
                    .map_err(|e| e.errno())?;
            }
            Ok(None) => {}
            Err(e) => return Err(e.errno()),
        }
    }
    d.staging = Some(Arc::new(f));
    d.size = size;
    Ok(())
}

/// The staged bytes as a body stream, read in 4 MiB pieces on the blocking pool.
fn staged_body(
    f: Arc<File>,
    size: u64,
) -> impl Stream<Item = Result<Bytes, std::io::Error>> + Unpin + Send {
    const PIECE: u64 = 4 << 20;
    Box::pin(futures::stream::unfold(0u64, move |off| {
        let f = Arc::clone(&f);
        async move {
            if off >= size {
                return None;
            }
            let n = PIECE.min(size - off) as usize;
            let r = tokio::task::spawn_blocking(move || {
                let mut buf = vec![0u8; n];
                f.read_exact_at(&mut buf, off).map(|()| Bytes::from(buf))
            })
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e)));
            Some((r, off + n as u64))
        }
    }))
}

/// Commits the staged content of `d` as a new version of `bucket/key` (when it changed).
pub async fn commit(
    svc: &ObjectService,
    of: &OpenFile,
    d: &mut FileData,
    bucket: &str,
    key: &str,
) -> Result<(), i32> {
    if !of.is_dirty() {
        return Ok(());
    }
    if d.unlinked {
        of.set_dirty(false);
        return Ok(());
    }
    let mut meta = d.meta.clone();
    d.attrs.store(&mut meta, libc::S_IFREG);
    let body: std::pin::Pin<Box<dyn Stream<Item = Result<Bytes, std::io::Error>> + Send>> =
        match &d.staging {
            Some(f) => Box::pin(staged_body(Arc::clone(f), d.size)),
            None => Box::pin(futures::stream::empty()),
        };
    let size = if d.staging.is_some() { d.size } else { 0 };
    svc.put_object(
        bucket,
        key,
        meta,
        body,
        Some(size as i64),
        Integrity::default(),
        WriteCond::default(),
    )
    .await
    .map_err(|e| {
        tracing::warn!(bucket, key, error = %e, "POSIX commit failed");
        e.errno()
    })?;
    of.set_dirty(false);
    of.pending.store(false, Ordering::Release);
    Ok(())
}
