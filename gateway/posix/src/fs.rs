//! The FUSE file system: POSIX operations mapped onto the object service.
//!
//! Metadata operations (lookup, getattr, readdir) read the metadata store directly from the
//! FUSE thread: no network hop, no task switch. Data reads and commits run on the tokio runtime
//! and reply from there, so a slow device read never holds a FUSE thread.

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, OpenAccMode, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite,
    Request, TimeOrNow, Version,
};
use lode_objects::bucket_events::{self, Origin};
use lode_objects::{Integrity, ObjectMeta, ObjectRecord, ObjectService, SegmentCache, WriteCond};

use super::ahead::{self, Ahead};
use super::inodes::{Inodes, Kind, NodePath, ROOT};
use super::listed::{DirEntry, Listings, Stamp};
use super::names::{self, Attrs, DIR_CONTENT_TYPE};
use super::open::{self, FileData, OpenFile, Snapshot};
use crate::error::{ObjError, ToErrno};
use crate::profile::{Class, Door};
use std::time::Instant;

/// Settings of the POSIX door (from `[posix]`).
#[derive(Debug, Clone)]
pub struct FsConfig {
    pub ttl: Duration,
    pub uid: u32,
    pub gid: u32,
    pub file_mode: u16,
    pub dir_mode: u16,
    pub allow_bucket_create: bool,
    pub staging_dir: PathBuf,
    /// Read-only opens keep the page cache (one node: every change invalidates it). Off in
    /// cluster mode, where a change notify may be lost: every open reads anew.
    pub keep_cache: bool,
    /// The Lode user the mount acts as for bucket policies (`posix.user`).
    pub user: String,
}

struct Handle {
    ino: u64,
    of: Arc<OpenFile>,
    cache: Arc<tokio::sync::Mutex<SegmentCache>>,
}

struct DirHandle {
    path: NodePath,
    ino: u64,
    /// Shared with the remembered listing once it is whole ([`Listings::remember`]).
    entries: Arc<Vec<DirEntry>>,
    /// Listing state: the last key or prefix listed, whether done.
    after: Option<String>,
    done: bool,
    /// Objects held back until we know no directory of the same name follows.
    held: Vec<DirEntry>,
    dirs: HashSet<String>,
    /// When the handle was opened: a listing that completes with nothing changed since is
    /// remembered ([`Listings`]).
    began: Stamp,
    /// The pages being listed ahead (a directory of more than one page).
    ahead: Option<Arc<Ahead>>,
}

impl Drop for DirHandle {
    fn drop(&mut self) {
        if let Some(a) = &self.ahead {
            a.close();
        }
    }
}

impl DirHandle {
    fn push(&mut self, e: DirEntry) {
        Arc::make_mut(&mut self.entries).push(e);
    }
}

/// The runtime the door runs its service calls on: each is a request of the POSIX door, as
/// the mount's user (the events of its changes say so).
struct Rt {
    h: tokio::runtime::Handle,
    origin: Origin,
}

impl Rt {
    /// Boxed first: a commit's future is large, and the runtime's `block_on` moves it by
    /// value several times (measured: those copies were 2.6% of the mount's CPU in a create
    /// storm); a box moves as a pointer.
    fn block_on<F: Future>(&self, f: F) -> F::Output {
        self.h.block_on(Box::pin(self.origin.clone().scope(f)))
    }

    fn spawn<F: Future<Output = ()> + Send + 'static>(&self, f: F) {
        self.h.spawn(self.origin.clone().scope(f));
    }
}

pub struct LodeFs {
    svc: Arc<ObjectService>,
    /// The IO profile this door records into.
    profile: Arc<crate::profile::Profile>,
    users: Arc<lode_objects::users::Users>,
    rt: Rt,
    inodes: Arc<Inodes>,
    cfg: FsConfig,
    /// Bumped by every S3-side change; a reply computed across a bump is not cached.
    seq: Arc<AtomicU64>,
    handles: Mutex<HashMap<u64, Handle>>,
    dirs: Mutex<HashMap<u64, Arc<Mutex<DirHandle>>>>,
    /// What whole listings showed, for lookups.
    listings: Listings,
    /// Directories found to exist lately, for the kernel's `getattr` after each create.
    seen_dirs: crate::listed::SeenDirs<Option<ObjectRecord>>,
    next_fh: AtomicU64,
    started: SystemTime,
    /// Whether files opened write-only bypass the page cache (see [`LodeFs::write_flags`]).
    direct_writes: bool,
}

fn err(e: i32) -> Errno {
    Errno::from_i32(e)
}

fn ms_time(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64)
}

fn time_of(t: TimeOrNow) -> SystemTime {
    match t {
        TimeOrNow::SpecificTime(t) => t,
        TimeOrNow::Now => SystemTime::now(),
    }
}

fn name_str(name: &OsStr) -> Result<&str, i32> {
    name.to_str().ok_or(libc::EINVAL)
}

/// What a name resolved to.
enum Found {
    /// Created (ms) and owner.
    Bucket(i64, String),
    Dir(Option<ObjectRecord>),
    File(ObjectRecord),
    Open(Arc<OpenFile>),
}

impl LodeFs {
    /// The mount's `seq` is the one `listings` was made with ([`Listings::names`]).
    pub(crate) fn new(
        svc: Arc<ObjectService>,
        profile: Arc<crate::profile::Profile>,
        users: Arc<lode_objects::users::Users>,
        rt: tokio::runtime::Handle,
        inodes: Arc<Inodes>,
        listings: Listings,
        cfg: FsConfig,
    ) -> Self {
        let mut origin = Origin::new(bucket_events::Door::Posix);
        origin.principal = Some(cfg.user.clone());
        let seq = listings.names();
        let seen_dirs = crate::listed::SeenDirs::new(cfg.ttl, Arc::clone(&seq));
        LodeFs {
            svc,
            profile,
            users,
            rt: Rt { h: rt, origin },
            inodes,
            cfg,
            seq,
            handles: Mutex::new(HashMap::new()),
            dirs: Mutex::new(HashMap::new()),
            listings,
            seen_dirs,
            next_fh: AtomicU64::new(1),
            started: SystemTime::now(),
            direct_writes: false,
        }
    }

    /// The open flags of a file opened for writing: one opened write-only bypasses the
    /// kernel's page cache (`FOPEN_DIRECT_IO`), on kernels that keep other descriptors'
    /// cached pages coherent with such writes ([`DIRECT_WRITES_COHERENT`]). Its writes come to
    /// the mount straight from the writer's pages instead of being copied into cache pages
    /// first: a copy and a page allocation per 4 KiB that nobody reads (a write-only
    /// descriptor cannot read or map the file), 14% of a sequential write's throughput here.
    fn write_flags(&self, acc: OpenAccMode) -> FopenFlags {
        if self.direct_writes && acc == OpenAccMode::O_WRONLY {
            FopenFlags::FOPEN_DIRECT_IO
        } else {
            FopenFlags::empty()
        }
    }

    /// Records one op of this door in the IO profile.
    fn rec(&self, class: Class, bucket: Option<&str>, bytes: u64, t0: Instant) {
        self.profile
            .record(Door::Posix, class, bucket, bytes, t0.elapsed());
    }

    /// The bucket an inode lives in, for ops that have not computed its path anyway.
    /// An explicit Deny of the bucket's policy for the mount's user (`posix.user`) on
    /// `action` (`key`: the object; `prefix`: a listing's): EACCES. Root is bound by no policy.
    fn policy_check(
        &self,
        bucket: &str,
        key: Option<&str>,
        action: &str,
        prefix: Option<&str>,
    ) -> Result<(), i32> {
        if self.cfg.user == lode_objects::users::ROOT {
            return Ok(());
        }
        let Ok(Some(p)) = self.rt.block_on(self.svc.policy_of(bucket)) else {
            return Ok(());
        };
        match crate::access::mount_decision(&p, &self.cfg.user, bucket, key, action, prefix) {
            lode_objects::policy::Decision::Deny => {
                tracing::debug!(bucket, key, action, "mount: denied by the bucket policy");
                Err(libc::EACCES)
            }
            _ => Ok(()),
        }
    }

    fn bucket_of(&self, ino: u64) -> Option<String> {
        self.inodes.path(ino).map(|p| p.bucket)
    }

    fn ttl(&self, seq0: u64) -> Duration {
        if self.seq.load(Ordering::Acquire) == seq0 {
            self.cfg.ttl
        } else {
            Duration::ZERO
        }
    }

    fn attr(&self, ino: u64, kind: Kind, size: u64, mtime: SystemTime, a: Attrs) -> FileAttr {
        let dir = kind != Kind::File;
        FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: mtime,
            mtime,
            ctime: mtime,
            crtime: mtime,
            kind: if dir {
                FileType::Directory
            } else {
                FileType::RegularFile
            },
            perm: a.perm.unwrap_or(if dir {
                self.cfg.dir_mode
            } else {
                self.cfg.file_mode
            }),
            nlink: if dir { 2 } else { 1 },
            uid: a.uid.unwrap_or(self.cfg.uid),
            gid: a.gid.unwrap_or(self.cfg.gid),
            rdev: 0,
            blksize: 1 << 20,
            flags: 0,
        }
    }

    /// A bucket of another user than root is theirs on the mount: their uid, mode 0700.
    fn bucket_attrs(&self, owner: &str) -> Attrs {
        if self.users.is_owner(lode_objects::users::ROOT, owner) {
            return Attrs::default();
        }
        Attrs {
            perm: Some(0o700),
            uid: self.users.uid_of(owner),
            gid: None,
            mtime: None,
        }
    }

    fn record_attr(&self, ino: u64, kind: Kind, rec: &ObjectRecord) -> FileAttr {
        let a = Attrs::from_meta(&rec.meta);
        let mtime = a.mtime.unwrap_or(ms_time(rec.last_modified_ms));
        let size = if kind == Kind::File { rec.size } else { 0 };
        self.attr(ino, kind, size, mtime, a)
    }

    fn found_attr(&self, ino: u64, f: &Found) -> FileAttr {
        match f {
            Found::Bucket(ms, owner) => {
                let a = self.bucket_attrs(owner);
                self.attr(ino, Kind::Bucket, 0, ms_time(*ms), a)
            }
            Found::Dir(Some(m)) => self.record_attr(ino, Kind::Dir, m),
            Found::Dir(None) => self.attr(ino, Kind::Dir, 0, self.started, Attrs::default()),
            Found::File(r) => self.record_attr(ino, Kind::File, r),
            Found::Open(of) => {
                let s = of.snapshot();
                self.attr(
                    ino,
                    Kind::File,
                    s.size,
                    s.attrs.mtime.unwrap_or(s.mtime),
                    s.attrs,
                )
            }
        }
    }

    fn path(&self, ino: u64) -> Result<NodePath, i32> {
        self.inodes.path(ino).ok_or(libc::ENOENT)
    }

    /// A directory: its marker record (if any), or ENOENT if nothing lies under `prefix`.
    fn dir_at(&self, bucket: &str, prefix: &str) -> Result<Option<Found>, i32> {
        if let Some(marker) = self.seen_dirs.get(bucket, prefix) {
            return Ok(Some(Found::Dir(marker)));
        }
        let stamp = self.seen_dirs.stamp();
        let first = self
            .svc
            .keys_under_blocking(bucket, prefix, 1)
            .map_err(|e| e.errno())?;
        let Some(first) = first.first() else {
            return Ok(None);
        };
        let marker = if first == prefix {
            self.svc
                .stat_blocking(bucket, prefix)
                .map_err(|e| e.errno())?
        } else {
            None
        };
        self.seen_dirs
            .remember(bucket, prefix, stamp, marker.clone());
        Ok(Some(Found::Dir(marker)))
    }

    /// A file's attributes from a listing: size, last-modified, POSIX attributes.
    fn file_attr(&self, ino: u64, &(size, ms, a): &(u64, i64, Attrs)) -> FileAttr {
        self.attr(ino, Kind::File, size, a.mtime.unwrap_or(ms_time(ms)), a)
    }

    /// A lookup answered from a still valid listing of the directory `parent`
    /// ([`Listings::file`]): a file it listed, which no open handle of this mount shadows.
    fn listed_file(&self, parent: u64, name: &str) -> Option<(NodePath, (u64, i64, Attrs))> {
        let p = self.path(parent).ok()?;
        if !matches!(p.kind, Kind::Dir | Kind::Bucket) {
            return None;
        }
        if let Some((ino, _)) = self.inodes.find(parent, name)
            && self.inodes.opened(ino).is_some()
        {
            return None;
        }
        let file = self.listings.file(&p.bucket, &p.key, name)?;
        Some((p, file))
    }

    /// Whether a still valid listing of the directory `parent` shows that `name` is not a
    /// directory.
    fn listed_as_file(&self, parent: &NodePath, name: &str) -> bool {
        self.listings.is_file(&parent.bucket, &parent.key, name)
    }

    /// A change through this mount that may make a name a directory: remembered listings and
    /// replies computed across it are no longer current.
    fn namespace_changed(&self) {
        self.seq.fetch_add(1, Ordering::AcqRel);
    }

    /// Resolves `name` in directory `parent`.
    fn resolve(&self, parent: u64, name: &str) -> Result<(NodePath, Found), i32> {
        let p = self.path(parent)?;
        if p.kind == Kind::File {
            return Err(libc::ENOTDIR);
        }
        if p.kind == Kind::Root {
            return match self.svc.bucket_blocking(name) {
                Ok(Some(b)) => Ok((p, Found::Bucket(b.created_ms, b.owner))),
                Ok(None) => Err(libc::ENOENT),
                Err(e) => Err(e.errno()),
            };
        }
        let key = names::child_key(&p.dir_prefix(), name.as_bytes())?;
        if let Some((ino, Kind::File)) = self.inodes.find(parent, name)
            && let Some(of) = self.inodes.opened(ino)
            && of.is_pending()
        {
            return Ok((p, Found::Open(of)));
        }
        if !self.listed_as_file(&p, name)
            && let Some(d) = self.dir_at(&p.bucket, &format!("{key}/"))?
        {
            return Ok((p, d));
        }
        match self.svc.stat_blocking(&p.bucket, &key) {
            Ok(Some(rec)) => Ok((p, Found::File(rec))),
            Ok(None) => Err(libc::ENOENT),
            Err(e) => Err(e.errno()),
        }
    }

    fn kind_of(f: &Found) -> Kind {
        match f {
            Found::Bucket(..) => Kind::Bucket,
            Found::Dir(_) => Kind::Dir,
            Found::File(_) | Found::Open(..) => Kind::File,
        }
    }

    fn getattr_inner(&self, ino: u64) -> Result<FileAttr, i32> {
        let p = self.path(ino)?;
        match p.kind {
            Kind::Root => Ok(self.attr(ROOT, Kind::Root, 0, self.started, Attrs::default())),
            Kind::Bucket => match self.svc.bucket_blocking(&p.bucket) {
                Ok(Some(b)) => Ok(self.found_attr(ino, &Found::Bucket(b.created_ms, b.owner))),
                Ok(None) => Err(libc::ENOENT),
                Err(e) => Err(e.errno()),
            },
            // An inode whose name vanished behind the kernel's back is stale: ESTALE makes a
            // path-based stat retry the lookup, and an open handle report the loss.
            Kind::Dir => match self.dir_at(&p.bucket, &p.dir_prefix())? {
                Some(f) => Ok(self.found_attr(ino, &f)),
                None => Err(libc::ESTALE),
            },
            Kind::File => {
                if let Some(of) = self.inodes.opened(ino)
                    && of.shadows_object()
                {
                    return Ok(self.found_attr(ino, &Found::Open(of)));
                }
                match self.svc.stat_blocking(&p.bucket, &p.key) {
                    Ok(Some(r)) => Ok(self.record_attr(ino, Kind::File, &r)),
                    Ok(None) => Err(libc::ESTALE),
                    Err(e) => Err(e.errno()),
                }
            }
        }
    }

    fn new_fh(&self) -> u64 {
        self.next_fh.fetch_add(1, Ordering::Relaxed)
    }

    fn open_handle(&self, ino: u64, of: Arc<OpenFile>) -> u64 {
        let fh = self.new_fh();
        self.handles.lock().expect("handles").insert(
            fh,
            Handle {
                ino,
                of,
                cache: Default::default(),
            },
        );
        fh
    }

    fn file_state(&self, ino: u64) -> Arc<OpenFile> {
        let started = self.started;
        self.inodes
            .open_file(ino, || {
                Arc::new(OpenFile::new(
                    false,
                    Snapshot {
                        size: 0,
                        mtime: started,
                        attrs: Attrs::default(),
                    },
                ))
            })
            .expect("node exists")
    }

    /// Drops one holder of `of`; the last one commits what is left and frees the staging copy.
    async fn put_state(svc: &ObjectService, inodes: &Inodes, ino: u64, of: &Arc<OpenFile>) {
        if of.handles.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        let mut d = of.data.lock().await;
        if of.is_dirty()
            && let Some(p) = inodes.path(ino)
            && inodes.is_linked(ino)
        {
            let _ = open::commit(svc, of, &mut d, &p.bucket, &p.key).await;
        }
        if !of.is_dirty() && of.handles.load(Ordering::Acquire) == 0 {
            d.let_go();
            drop(d);
            inodes.close_file(ino, of);
        }
    }

    /// Commits `of` now (flush/fsync and truncate by path).
    async fn commit_now(
        svc: &ObjectService,
        inodes: &Inodes,
        ino: u64,
        of: &OpenFile,
    ) -> Result<(), i32> {
        let mut d = of.data.lock().await;
        if !of.is_dirty() {
            return Ok(());
        }
        if !inodes.is_linked(ino) {
            d.unlinked = true;
        }
        let p = inodes.path(ino).ok_or(libc::ENOENT)?;
        open::commit(svc, of, &mut d, &p.bucket, &p.key).await
    }

    /// Stages `d`, copying in up to `limit` bytes of the stored object unless the file is new.
    fn stage(&self, of: &OpenFile, d: &mut FileData, p: &NodePath, limit: u64) -> Result<(), i32> {
        let copy = (!of.is_pending()).then_some((p.bucket.as_str(), p.key.as_str()));
        self.rt.block_on(open::stage(
            &self.svc,
            &self.cfg.staging_dir,
            d,
            copy,
            limit,
        ))
    }

    fn put_empty(
        &self,
        bucket: &str,
        key: &str,
        meta: ObjectMeta,
        cond: WriteCond,
    ) -> Result<(), ObjError> {
        self.rt
            .block_on(self.svc.put_object(
                bucket,
                key,
                meta,
                futures::stream::empty::<Result<bytes::Bytes, std::io::Error>>(),
                Some(0),
                Integrity::default(),
                cond,
            ))
            .map(|_| ())
    }

    fn mkdir_inner(
        &self,
        req: &Request,
        parent: u64,
        name: &str,
        mode: u32,
        umask: u32,
    ) -> Result<(u64, FileAttr), i32> {
        let p = self.path(parent)?;
        match p.kind {
            Kind::File => return Err(libc::ENOTDIR),
            Kind::Root => {
                if !self.cfg.allow_bucket_create {
                    return Err(libc::EPERM);
                }
                self.rt
                    .block_on(self.svc.create_bucket(name, lode_objects::users::ROOT))
                    .map_err(|e| e.errno())?;
                let ino = self.inodes.lookup(ROOT, name, Kind::Bucket);
                return Ok((ino, self.getattr_inner(ino)?));
            }
            _ => {}
        }
        let key = names::child_key(&p.dir_prefix(), name.as_bytes())?;
        let marker = format!("{key}/");
        if marker.len() > lode_objects::MAX_KEY_LEN {
            return Err(libc::ENAMETOOLONG);
        }
        self.policy_check(&p.bucket, Some(&marker), "s3:PutObject", None)?;
        if self.resolve(parent, name).is_ok() {
            return Err(libc::EEXIST);
        }
        let mut meta = ObjectMeta {
            content_type: Some(DIR_CONTENT_TYPE.to_owned()),
            ..Default::default()
        };
        Attrs {
            perm: Some((mode & !umask & 0o7777) as u16),
            uid: Some(req.uid()),
            gid: Some(req.gid()),
            mtime: Some(SystemTime::now()),
        }
        .store(&mut meta, libc::S_IFDIR);
        self.put_empty(
            &p.bucket,
            &marker,
            meta,
            WriteCond {
                if_none_match_any: true,
                ..Default::default()
            },
        )
        .map_err(|e| e.errno())?;
        let ino = self.inodes.lookup(parent, name, Kind::Dir);
        Ok((ino, self.getattr_inner(ino)?))
    }

    fn rmdir_inner(&self, parent: u64, name: &str) -> Result<(), i32> {
        let p = self.path(parent)?;
        if p.kind == Kind::Root {
            if !self.cfg.allow_bucket_create {
                return Err(libc::EPERM);
            }
            self.rt
                .block_on(self.svc.delete_bucket(name))
                .map_err(|e| e.errno())?;
            if let Err(e) = self.rt.block_on(self.users.drop_bucket(name)) {
                tracing::warn!(error = %e, "dropping the grants of a deleted bucket failed");
            }
            self.inodes.unlink(ROOT, name);
            return Ok(());
        }
        let key = names::child_key(&p.dir_prefix(), name.as_bytes())?;
        self.policy_check(&p.bucket, Some(&format!("{key}/")), "s3:DeleteObject", None)?;
        if let Some((ino, _)) = self.inodes.find(parent, name)
            && !self.inodes.pending_children(ino).is_empty()
        {
            return Err(libc::ENOTEMPTY);
        }
        match self
            .rt
            .block_on(self.svc.remove_dir(&p.bucket, &format!("{key}/")))
        {
            Ok(()) => {}
            Err(ObjError::NoSuchKey) => {
                return Err(match self.svc.stat_blocking(&p.bucket, &key) {
                    Ok(Some(_)) => libc::ENOTDIR,
                    _ => libc::ENOENT,
                });
            }
            Err(e) => return Err(e.errno()),
        }
        self.inodes.unlink(parent, name);
        Ok(())
    }

    fn unlink_inner(&self, parent: u64, name: &str) -> Result<(), i32> {
        let p = self.path(parent)?;
        if p.kind == Kind::Root {
            return Err(libc::EISDIR);
        }
        let key = names::child_key(&p.dir_prefix(), name.as_bytes())?;
        self.policy_check(&p.bucket, Some(&key), "s3:DeleteObject", None)?;
        let open = self
            .inodes
            .find(parent, name)
            .and_then(|(ino, _)| self.inodes.opened(ino));
        let mut guard = open.as_ref().map(|of| self.rt.block_on(of.data.lock()));
        let pending = open.as_ref().is_some_and(|of| of.is_pending());
        if let (Some(d), Some(of)) = (guard.as_mut(), open.as_ref()) {
            d.unlinked = true;
            of.set_dirty(false);
        }
        if !pending {
            if self.dir_at(&p.bucket, &format!("{key}/"))?.is_some() {
                return Err(libc::EISDIR);
            }
            match self.svc.stat_blocking(&p.bucket, &key) {
                Ok(Some(_)) => {}
                Ok(None) => return Err(libc::ENOENT),
                Err(e) => return Err(e.errno()),
            }
            self.rt
                .block_on(self.svc.delete_object(&p.bucket, &key))
                .map_err(|e| e.errno())?;
        }
        self.inodes.unlink(parent, name);
        drop(guard);
        Ok(())
    }

    fn rename_inner(
        &self,
        parent: u64,
        name: &str,
        newparent: u64,
        newname: &str,
        flags: RenameFlags,
    ) -> Result<(), i32> {
        if flags.contains(RenameFlags::RENAME_EXCHANGE)
            || flags.contains(RenameFlags::RENAME_WHITEOUT)
        {
            return Err(libc::EINVAL);
        }
        let no_replace = flags.contains(RenameFlags::RENAME_NOREPLACE);
        let (sp, dp) = (self.path(parent)?, self.path(newparent)?);
        if sp.kind == Kind::Root || dp.kind == Kind::Root {
            return Err(libc::EPERM);
        }
        if sp.bucket != dp.bucket {
            return Err(libc::EXDEV);
        }
        let bucket = sp.bucket.clone();
        let src = names::child_key(&sp.dir_prefix(), name.as_bytes())?;
        let dst = names::child_key(&dp.dir_prefix(), newname.as_bytes())?;
        self.policy_check(&bucket, Some(&src), "s3:DeleteObject", None)?;
        self.policy_check(&bucket, Some(&dst), "s3:PutObject", None)?;
        let (_, found) = self.resolve(parent, name)?;
        let dst_dir = self.dir_at(&bucket, &format!("{dst}/"))?.is_some();
        let dst_file = self
            .svc
            .stat_blocking(&bucket, &dst)
            .map_err(|e| e.errno())?
            .is_some();
        match found {
            Found::Dir(_) => {
                if dst_file && !dst_dir {
                    return Err(libc::ENOTDIR);
                }
                if no_replace && dst_dir {
                    return Err(libc::EEXIST);
                }
                let src_ino = self.inodes.find(parent, name).map(|(i, _)| i);
                let has_pending =
                    src_ino.is_some_and(|i| !self.inodes.pending_children(i).is_empty());
                match self.rt.block_on(self.svc.rename_prefix(
                    &bucket,
                    &format!("{src}/"),
                    &format!("{dst}/"),
                )) {
                    Ok(_) => {}
                    Err(ObjError::NoSuchKey) if has_pending => {}
                    Err(e) => return Err(e.errno()),
                }
            }
            Found::File(_) | Found::Open(..) => {
                if dst_dir {
                    return Err(libc::EISDIR);
                }
                if no_replace && dst_file {
                    return Err(libc::EEXIST);
                }
                let open = self
                    .inodes
                    .find(parent, name)
                    .and_then(|(ino, _)| self.inodes.opened(ino));
                // Hold the file's data lock: a commit must land at one name or the other.
                let _guard = open.as_ref().map(|of| self.rt.block_on(of.data.lock()));
                if open.as_ref().is_some_and(|of| of.is_pending()) {
                    if dst_file {
                        self.rt
                            .block_on(self.svc.delete_object(&bucket, &dst))
                            .map_err(|e| e.errno())?;
                    }
                } else {
                    self.rt
                        .block_on(self.svc.rename_object(&bucket, &src, &dst, no_replace))
                        .map_err(|e| e.errno())?;
                }
                self.inodes.rename(parent, name, newparent, newname);
                return Ok(());
            }
            Found::Bucket(..) => return Err(libc::EPERM),
        }
        self.inodes.rename(parent, name, newparent, newname);
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn setattr_inner(
        &self,
        ino: u64,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        fh: Option<FileHandle>,
    ) -> Result<FileAttr, i32> {
        let _ = atime;
        let p = self.path(ino)?;
        if p.kind == Kind::File {
            self.policy_check(&p.bucket, Some(&p.key), "s3:PutObject", None)?;
        }
        let change = Attrs {
            perm: mode.map(|m| (m & 0o7777) as u16),
            uid,
            gid,
            mtime: mtime.map(time_of),
        };
        let has_change = change != Attrs::default();
        match p.kind {
            Kind::Root | Kind::Bucket => self.getattr_inner(ino),
            Kind::Dir => {
                if has_change {
                    let marker = format!("{}/", p.key);
                    match self.rt.block_on(
                        self.svc.update_meta(&p.bucket, &marker, move |m| {
                            change.store(m, libc::S_IFDIR)
                        }),
                    ) {
                        Ok(_) => {}
                        Err(ObjError::NoSuchKey) => {
                            let mut meta = ObjectMeta {
                                content_type: Some(DIR_CONTENT_TYPE.to_owned()),
                                ..Default::default()
                            };
                            change.store(&mut meta, libc::S_IFDIR);
                            self.put_empty(&p.bucket, &marker, meta, WriteCond::default())
                                .map_err(|e| e.errno())?;
                        }
                        Err(e) => return Err(e.errno()),
                    }
                }
                self.getattr_inner(ino)
            }
            Kind::File => {
                let existing = self.inodes.opened(ino);
                if size.is_none() && existing.is_none() {
                    if has_change {
                        let rec = self
                            .rt
                            .block_on(self.svc.update_meta(&p.bucket, &p.key, move |m| {
                                change.store(m, libc::S_IFREG)
                            }))
                            .map_err(|e| e.errno())?;
                        return Ok(self.record_attr(ino, Kind::File, &rec));
                    }
                    return self.getattr_inner(ino);
                }
                // Through the open-file state (held for the duration, like a handle).
                let of = self.file_state(ino);
                let res = (|| {
                    let mut d = self.rt.block_on(of.data.lock());
                    if let Some(sz) = size {
                        self.stage(&of, &mut d, &p, sz)?;
                        let dir = &self.cfg.staging_dir;
                        let st = d.staging.as_mut().expect("staged");
                        st.set_len(dir, sz).map_err(|e| {
                            open::staging_error(dir, &e);
                            e.raw_os_error().unwrap_or(libc::EIO)
                        })?;
                        d.size = sz;
                        of.set_dirty(true);
                        d.attrs.mtime = Some(SystemTime::now());
                    }
                    d.attrs.merge(change);
                    of.touch(&d, Some(SystemTime::now()));
                    if !of.is_dirty() && has_change {
                        // A clean file: the change goes straight to the stored object.
                        self.rt
                            .block_on(self.svc.update_meta(&p.bucket, &p.key, move |m| {
                                change.store(m, libc::S_IFREG)
                            }))
                            .map_err(|e| e.errno())?;
                    }
                    Ok::<_, i32>(())
                })();
                // Truncate by path (no open handle): commit at once.
                let by_path = fh.is_none() && of.handles.load(Ordering::Acquire) == 1;
                let committed = if res.is_ok() && by_path {
                    self.rt
                        .block_on(Self::commit_now(&self.svc, &self.inodes, ino, &of))
                } else {
                    Ok(())
                };
                self.rt
                    .block_on(Self::put_state(&self.svc, &self.inodes, ino, &of));
                res?;
                committed?;
                self.getattr_inner(ino)
            }
        }
    }

    fn create_inner(
        &self,
        req: &Request,
        parent: u64,
        name: &str,
        mode: u32,
        umask: u32,
    ) -> Result<(u64, u64, FileAttr), i32> {
        let p = self.path(parent)?;
        match p.kind {
            Kind::Root => return Err(libc::EPERM),
            Kind::File => return Err(libc::ENOTDIR),
            _ => {}
        }
        let key = names::child_key(&p.dir_prefix(), name.as_bytes())?;
        self.policy_check(&p.bucket, Some(&key), "s3:PutObject", None)?;
        if self.dir_at(&p.bucket, &format!("{key}/"))?.is_some() {
            return Err(libc::EISDIR);
        }
        let now = SystemTime::now();
        let attrs = Attrs {
            perm: Some((mode & !umask & 0o7777) as u16),
            uid: Some(req.uid()),
            gid: Some(req.gid()),
            mtime: Some(now),
        };
        let ino = self.inodes.lookup(parent, name, Kind::File);
        let fresh = Arc::new(OpenFile::new(
            true,
            Snapshot {
                size: 0,
                mtime: now,
                attrs,
            },
        ));
        let of = self
            .inodes
            .open_file(ino, || Arc::clone(&fresh))
            .ok_or(libc::ENOENT)?;

        {
            let mut d = self.rt.block_on(of.data.lock());
            if Arc::ptr_eq(&of, &fresh) {
                d.attrs = attrs;
                self.rt.block_on(open::stage(
                    &self.svc,
                    &self.cfg.staging_dir,
                    &mut d,
                    None,
                    0,
                ))?;
            } else {
                // Created over a file that is open already: O_CREAT without O_EXCL opens it.
                self.stage(&of, &mut d, &self.path(ino)?, u64::MAX)?;
            }
        }
        let fh = self.open_handle(ino, Arc::clone(&of));
        let attr = self.found_attr(ino, &Found::Open(of));
        Ok((ino, fh, attr))
    }

    /// Lists more of a directory into `dh`.
    fn fill(&self, dh: &mut DirHandle) -> Result<(), i32> {
        if dh.done {
            return Ok(());
        }
        if dh.path.kind == Kind::Root {
            let buckets = self
                .rt
                .block_on(self.svc.list_buckets())
                .map_err(|e| e.errno())?;
            for (name, _) in buckets {
                dh.push(DirEntry {
                    name,
                    kind: Kind::Bucket,
                    file: None,
                });
            }
            dh.done = true;
            return Ok(());
        }
        let prefix = dh.path.dir_prefix();
        let listed_ahead = match &dh.ahead {
            Some(a) => a.next(),
            None => None,
        };
        if listed_ahead.is_none() {
            dh.ahead = None;
        }
        let page = match listed_ahead.unwrap_or_else(|| {
            ahead::list_page(&self.svc, &dh.path.bucket, &prefix, dh.after.as_deref())
        }) {
            Ok(p) => p,
            Err(e) => {
                // Listed again from `after` on a retry, inline.
                dh.ahead = None;
                return Err(e);
            }
        };
        if page.truncated
            && dh.ahead.is_none()
            && let Some(last) = &page.last
        {
            // More than a page: list the rest ahead of the kernel's reads.
            dh.ahead = Ahead::start(
                &self.rt.h,
                Arc::clone(&self.svc),
                dh.path.bucket.clone(),
                prefix.clone(),
                last.clone(),
            );
        }
        for n in page.dirs {
            dh.dirs.insert(n.clone());
            dh.push(DirEntry {
                name: n,
                kind: Kind::Dir,
                file: None,
            });
        }
        let held = std::mem::take(&mut dh.held);
        let files = page
            .objects
            .into_iter()
            .map(|(name, size, ms, a)| DirEntry {
                name,
                kind: Kind::File,
                file: Some((size, ms, a)),
            });
        for e in held.into_iter().chain(files) {
            if dh.dirs.contains(&e.name) {
                continue;
            }
            // A directory of the same name may still follow in a later page.
            // (`prefix + name + "/" > last`, compared without building the string.)
            let later = page.truncated
                && page.last.as_deref().is_some_and(|l| {
                    let dir = prefix.bytes().chain(e.name.bytes()).chain(Some(b'/'));
                    dir.cmp(l.bytes()).is_gt()
                });
            if later {
                dh.held.push(e);
            } else {
                dh.push(e);
            }
        }
        dh.after = page.last.clone();
        if !page.truncated {
            dh.done = true;
            for e in std::mem::take(&mut dh.held) {
                if !dh.dirs.contains(&e.name) {
                    dh.push(e);
                }
            }
            // What the catalog holds is remembered; files not committed yet are not (an open
            // file is looked up anew, and one whose commit fails must not stay listed).
            self.listings.remember(
                &dh.path.bucket,
                &dh.path.key,
                dh.began,
                &dh.dirs,
                &dh.entries,
            );
            for (name, ino) in self.inodes.pending_children(dh.ino) {
                let listed = self
                    .svc
                    .stat_blocking(&dh.path.bucket, &format!("{prefix}{name}"))
                    .ok()
                    .flatten()
                    .is_some();
                if !listed && !dh.dirs.contains(&name) {
                    let s = self
                        .inodes
                        .opened(ino)
                        .map(|of| of.snapshot())
                        .unwrap_or(Snapshot {
                            size: 0,
                            mtime: self.started,
                            attrs: Attrs::default(),
                        });
                    dh.push(DirEntry {
                        name,
                        kind: Kind::File,
                        file: Some((
                            s.size,
                            s.mtime
                                .duration_since(UNIX_EPOCH)
                                .unwrap_or_default()
                                .as_millis() as i64,
                            s.attrs,
                        )),
                    });
                }
            }
        }
        Ok(())
    }

    /// Entry attributes for readdirplus.
    fn entry_attr(&self, dh: &DirHandle, e: &DirEntry, ino: u64) -> FileAttr {
        match (e.kind, &e.file) {
            (Kind::File, Some(file)) => self.file_attr(ino, file),
            (Kind::Bucket, _) => match self.svc.bucket_blocking(&e.name) {
                Ok(Some(b)) => self.found_attr(ino, &Found::Bucket(b.created_ms, b.owner)),
                _ => self.attr(ino, Kind::Bucket, 0, self.started, Attrs::default()),
            },
            _ => {
                let marker = format!("{}{}/", dh.path.dir_prefix(), e.name);
                match self.svc.stat_blocking(&dh.path.bucket, &marker) {
                    Ok(Some(r)) => self.record_attr(ino, Kind::Dir, &r),
                    _ => self.attr(ino, Kind::Dir, 0, self.started, Attrs::default()),
                }
            }
        }
    }

    fn dir_handle(&self, fh: FileHandle) -> Option<Arc<Mutex<DirHandle>>> {
        self.dirs.lock().expect("dirs").get(&fh.0).cloned()
    }

    /// Feeds the entries of an open directory from `offset` on to `add` (listing more as
    /// needed) until `add` reports the reply full. Returns the directory's bucket.
    fn walk_dir(
        &self,
        fh: FileHandle,
        offset: u64,
        mut add: impl FnMut(&DirHandle, usize, &DirEntry) -> bool,
    ) -> Result<String, i32> {
        let dh = self.dir_handle(fh).ok_or(libc::EBADF)?;
        let mut dh = dh.lock().expect("dir handle");
        let mut i = offset as usize;
        loop {
            while i >= dh.entries.len() && !dh.done {
                if i > offset as usize && dh.ahead.as_ref().is_some_and(|a| !a.ready()) {
                    // Reply with what is listed: the kernel takes it in while the next
                    // page is listed, instead of waiting for it.
                    return Ok(dh.path.bucket.clone());
                }
                self.fill(&mut dh)?;
            }
            let Some(e) = dh.entries.get(i) else { break };
            if add(&dh, i, e) {
                break;
            }
            i += 1;
        }
        Ok(dh.path.bucket.clone())
    }

    fn handle(
        &self,
        fh: FileHandle,
    ) -> Option<(u64, Arc<OpenFile>, Arc<tokio::sync::Mutex<SegmentCache>>)> {
        self.handles
            .lock()
            .expect("handles")
            .get(&fh.0)
            .map(|h| (h.ino, Arc::clone(&h.of), Arc::clone(&h.cache)))
    }
}

/// What Lode's mount asks of the kernel at `init` (also used by the FUSE ceiling of `lode
/// bench-ceiling`, which must run on the same setup).
pub fn negotiate(config: &mut KernelConfig) {
    for flag in [
        InitFlags::FUSE_DO_READDIRPLUS,
        InitFlags::FUSE_READDIRPLUS_AUTO,
        InitFlags::FUSE_PARALLEL_DIROPS,
        InitFlags::FUSE_AUTO_INVAL_DATA,
    ] {
        if let Err(unsupported) = config.add_capabilities(flag) {
            tracing::debug!(?unsupported, "kernel lacks a FUSE capability");
        }
    }
    let _ = config.set_max_write(1 << 20);
    let _ = config.set_max_readahead(super::READAHEAD_KB << 10);
    let _ = config.set_max_background(64);
}

/// The first FUSE protocol (7.39, Linux 6.6) whose kernels drop the cached pages of the range
/// a direct write covers (`fuse_direct_io`); before it, other descriptors' cached pages
/// stayed stale after a direct write.
const DIRECT_WRITES_COHERENT: Version = Version(7, 39);

fn file_type(k: Kind) -> FileType {
    match k {
        Kind::File => FileType::RegularFile,
        _ => FileType::Directory,
    }
}

impl Filesystem for LodeFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        negotiate(config);
        let abi = config.kernel_abi();
        self.direct_writes = abi >= DIRECT_WRITES_COHERENT;
        tracing::debug!(%abi, direct_writes = self.direct_writes, "FUSE init");
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let t0 = Instant::now();
        let seq0 = self.seq.load(Ordering::Acquire);
        let r = name_str(name).and_then(|n| {
            if let Some((p, file)) = self.listed_file(parent.0, n) {
                let ino = self.inodes.lookup(parent.0, n, Kind::File);
                return Ok((self.file_attr(ino, &file), p.bucket));
            }
            let (p, f) = self.resolve(parent.0, n)?;
            let ino = self.inodes.lookup(parent.0, n, Self::kind_of(&f));
            Ok((self.found_attr(ino, &f), p.bucket))
        });
        let bucket = match r {
            Ok((attr, bucket)) => {
                reply.entry(&self.ttl(seq0), &attr, Generation(0));
                Some(bucket)
            }
            Err(e) => {
                reply.error(err(e));
                None
            }
        };
        self.rec(Class::Meta, bucket.as_deref(), 0, t0);
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.inodes.forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let t0 = Instant::now();
        let seq0 = self.seq.load(Ordering::Acquire);
        match self.getattr_inner(ino.0) {
            Ok(a) => reply.attr(&self.ttl(seq0), &a),
            Err(e) => reply.error(err(e)),
        }
        self.rec(Class::Meta, self.bucket_of(ino.0).as_deref(), 0, t0);
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let r = self.setattr_inner(ino.0, mode, uid, gid, size, atime, mtime, fh);
        // A directory's marker may have changed.
        self.seen_dirs.shrunk();
        match r {
            Ok(a) => reply.attr(&Duration::ZERO, &a),
            Err(e) => reply.error(err(e)),
        }
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let r = name_str(name).and_then(|n| self.mkdir_inner(req, parent.0, n, mode, umask));
        self.namespace_changed();
        match r {
            Ok((_, attr)) => reply.entry(&self.cfg.ttl, &attr, Generation(0)),
            Err(e) => reply.error(err(e)),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = name_str(name).and_then(|n| self.unlink_inner(parent.0, n));
        // The directory may be empty now, so gone.
        self.seen_dirs.shrunk();
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(err(e)),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = name_str(name).and_then(|n| self.rmdir_inner(parent.0, n));
        self.seen_dirs.shrunk();
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(err(e)),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let r = name_str(name).and_then(|n| {
            let nn = name_str(newname)?;
            self.rename_inner(parent.0, n, newparent.0, nn, flags)
        });
        self.namespace_changed();
        self.seen_dirs.shrunk();
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(err(e)),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        match self.inodes.kind(ino.0) {
            Some(Kind::File) => {}
            Some(_) => return reply.error(Errno::EISDIR),
            None => return reply.error(Errno::ENOENT),
        }
        let t0 = Instant::now();
        let ro = flags.acc_mode() == OpenAccMode::O_RDONLY;
        let checked = self.path(ino.0).and_then(|p| {
            let action = if ro { "s3:GetObject" } else { "s3:PutObject" };
            self.policy_check(&p.bucket, Some(&p.key), action, None)?;
            if flags.acc_mode() == OpenAccMode::O_RDWR {
                self.policy_check(&p.bucket, Some(&p.key), "s3:GetObject", None)?;
            }
            // An SSE-C object opens only with its customer's key, which the mount never has
            // (SEMANTICS.md).
            if let Ok(Some(rec)) = self.svc.stat_blocking(&p.bucket, &p.key)
                && matches!(
                    rec.meta.sse.as_ref().map(|s| &s.kind),
                    Some(lode_objects::SseKind::Customer { .. })
                )
            {
                return Err(libc::EACCES);
            }
            Ok(())
        });
        if let Err(e) = checked {
            return reply.error(err(e));
        }
        let of = self.file_state(ino.0);
        let fh = self.open_handle(ino.0, of);
        self.rec(Class::Meta, self.bucket_of(ino.0).as_deref(), 0, t0);
        let keep = if self.cfg.keep_cache {
            FopenFlags::FOPEN_KEEP_CACHE
        } else {
            FopenFlags::empty()
        };
        // Read-only opens keep the page cache (every S3-side change invalidates it
        // explicitly), and their close() skips the FLUSH round trip: they have nothing to
        // commit.
        reply.opened(
            FileHandle(fh),
            if ro {
                keep | FopenFlags::FOPEN_NOFLUSH
            } else {
                self.write_flags(flags.acc_mode())
            },
        );
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyData,
    ) {
        let t0 = Instant::now();
        let Some((ino, of, cache)) = self.handle(fh) else {
            return reply.error(Errno::EBADF);
        };
        {
            let mut d = self.rt.block_on(of.data.lock());
            if d.is_streaming() {
                // Written front to back until now: read back into a staged copy first.
                let dir = &self.cfg.staging_dir;
                if let Err(e) =
                    self.rt
                        .block_on(open::stage(&self.svc, dir, &mut d, None, u64::MAX))
                {
                    return reply.error(err(e));
                }
            }
            if let Some(st) = &d.staging {
                let end = (offset + u64::from(size)).min(d.size);
                let n = end.saturating_sub(offset) as usize;
                let mut buf = vec![0u8; n];
                let r = st.read_at(&mut buf, offset);
                self.rec(
                    Class::Read,
                    self.bucket_of(ino).as_deref(),
                    buf.len() as u64,
                    t0,
                );
                return match r {
                    Ok(()) => reply.data(&buf),
                    Err(e) => reply.error(err(e.raw_os_error().unwrap_or(libc::EIO))),
                };
            }
        }
        let p = match self.path(ino) {
            Ok(p) => p,
            Err(e) => return reply.error(err(e)),
        };
        let h = match self.svc.open_blocking(&p.bucket, &p.key) {
            Ok(h) => h,
            // Removed (or replaced by a directory) behind this open file.
            Err(ObjError::NoSuchKey) => return reply.error(Errno::ESTALE),
            Err(e) => return reply.error(err(e.errno())),
        };
        // On this FUSE thread: the device read blocks it (see
        // `allow_blocking_reads_on_this_thread`), which costs no hop to a runtime worker and the
        // ring thread and back. Only a sequential reader's read-ahead goes to the runtime.
        self.svc.allow_blocking_reads_on_this_thread();
        let svc = &self.svc;
        let n = self.rt.block_on(async {
            let mut c = cache.lock().await;
            svc.read_at(h, offset, u64::from(size), &mut c).await
        });
        let n = match n {
            Ok(b) => {
                reply.data(&b);
                b.len() as u64
            }
            Err(e) => {
                reply.error(err(e.errno()));
                0
            }
        };
        self.rec(Class::Read, Some(&p.bucket), n, t0);
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: fuser::WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyWrite,
    ) {
        let t0 = Instant::now();
        let Some((ino, of, _)) = self.handle(fh) else {
            return reply.error(Errno::EBADF);
        };
        let r = (|| {
            let p = self.path(ino)?;
            let mut d = self.rt.block_on(of.data.lock());
            open::write(
                &self.svc,
                &self.rt.h,
                &self.cfg.staging_dir,
                &mut d,
                (&p.bucket, &p.key),
                of.is_pending(),
                data,
                offset,
            )?;
            of.set_dirty(true);
            let now = SystemTime::now();
            d.attrs.mtime = Some(now);
            of.touch(&d, Some(now));
            Ok::<_, i32>(p.bucket)
        })();
        let bucket = match r {
            Ok(bucket) => {
                reply.written(data.len() as u32);
                Some(bucket)
            }
            Err(e) => {
                reply.error(err(e));
                None
            }
        };
        self.rec(Class::Write, bucket.as_deref(), data.len() as u64, t0);
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _lock_owner: fuser::LockOwner,
        reply: ReplyEmpty,
    ) {
        let Some((ino, of, _)) = self.handle(fh) else {
            return reply.error(Errno::EBADF);
        };
        if of.snapshot().size <= open::IN_MEMORY {
            // A small file: committed on this FUSE thread, which waits for the reply anyway,
            // its metadata transaction too, with no hop to a runtime worker and a
            // blocking-pool thread and back.
            self.svc.allow_blocking_on_this_thread();
            return match self
                .rt
                .block_on(Self::commit_now(&self.svc, &self.inodes, ino, &of))
            {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(err(e)),
            };
        }
        // A large one on the runtime: this FUSE thread stays free for other requests meanwhile.
        let (svc, inodes) = (Arc::clone(&self.svc), Arc::clone(&self.inodes));
        self.rt.spawn(async move {
            match Self::commit_now(&svc, &inodes, ino, &of).await {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(err(e)),
            }
        });
    }

    fn fsync(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.flush(req, ino, fh, fuser::LockOwner(0), reply);
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let Some(h) = self.handles.lock().expect("handles").remove(&fh.0) else {
            return reply.error(Errno::EBADF);
        };
        if !h.of.is_dirty() {
            // Nothing to commit (a reader's close): done on this thread, no runtime hop.
            self.rt
                .block_on(Self::put_state(&self.svc, &self.inodes, h.ino, &h.of));
            return reply.ok();
        }
        let (svc, inodes) = (Arc::clone(&self.svc), Arc::clone(&self.inodes));
        self.rt.spawn(async move {
            Self::put_state(&svc, &inodes, h.ino, &h.of).await;
            reply.ok();
        });
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let p = match self.path(ino.0) {
            Ok(p) => p,
            Err(e) => return reply.error(err(e)),
        };
        if p.kind == Kind::File {
            return reply.error(Errno::ENOTDIR);
        }
        if p.kind != Kind::Root
            && let Err(e) =
                self.policy_check(&p.bucket, None, "s3:ListBucket", Some(&p.dir_prefix()))
        {
            return reply.error(err(e));
        }
        let fh = self.new_fh();
        let entries = vec![
            DirEntry {
                name: ".".into(),
                kind: Kind::Dir,
                file: None,
            },
            DirEntry {
                name: "..".into(),
                kind: Kind::Dir,
                file: None,
            },
        ];
        self.dirs.lock().expect("dirs").insert(
            fh,
            Arc::new(Mutex::new(DirHandle {
                path: p,
                ino: ino.0,
                entries: Arc::new(entries),
                after: None,
                done: false,
                held: vec![],
                dirs: HashSet::new(),
                began: self.listings.stamp(),
                ahead: None,
            })),
        );
        reply.opened(FileHandle(fh), FopenFlags::empty());
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let t0 = Instant::now();
        // `.` and `..` need no real inode numbers: the kernel ignores them.
        let r = self.walk_dir(fh, offset, |_, i, e| {
            let child = if i < 2 { ino.0 } else { u64::MAX };
            reply.add(INodeNo(child), (i + 1) as u64, file_type(e.kind), &e.name)
        });
        match r {
            Ok(bucket) => {
                reply.ok();
                self.rec(Class::Meta, Some(&bucket), 0, t0);
            }
            Err(e) => reply.error(err(e)),
        }
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let seq0 = self.seq.load(Ordering::Acquire);
        let t0 = Instant::now();
        let r = self.walk_dir(fh, offset, |dh, i, e| {
            if i < 2 {
                let a = self.attr(ino.0, Kind::Dir, 0, self.started, Attrs::default());
                return reply.add(
                    INodeNo(ino.0),
                    (i + 1) as u64,
                    &e.name,
                    &Duration::ZERO,
                    &a,
                    Generation(0),
                );
            }
            // Each entry returned counts as a kernel lookup; one that did not fit does not.
            let child = self.inodes.lookup(dh.ino, &e.name, e.kind);
            let a = self.entry_attr(dh, e, child);
            let full = reply.add(
                INodeNo(child),
                (i + 1) as u64,
                &e.name,
                &self.ttl(seq0),
                &a,
                Generation(0),
            );
            if full {
                self.inodes.forget(child, 1);
            }
            full
        });
        match r {
            Ok(bucket) => {
                reply.ok();
                self.rec(Class::Meta, Some(&bucket), 0, t0);
            }
            Err(e) => reply.error(err(e)),
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.dirs.lock().expect("dirs").remove(&fh.0);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        // Every namespace change is committed (WAL synced) before it is acknowledged.
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let (free, total) = self.svc.space();
        const BS: u64 = 4096;
        reply.statfs(
            total / BS,
            free / BS,
            free / BS,
            u64::from(u32::MAX),
            u64::from(u32::MAX),
            BS as u32,
            names::NAME_MAX as u32,
            BS as u32,
        );
    }

    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: fuser::IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: fuser::ReplyIoctl,
    ) {
        // Not a terminal, no file-system ioctls (Python's open() asks TCGETS every time).
        reply.error(Errno::ENOTTY);
    }

    fn getxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _size: u32,
        reply: fuser::ReplyXattr,
    ) {
        // Extended attributes are not stored (SEMANTICS.md P15). ENOSYS, not ENODATA: the
        // kernel then answers every later getxattr itself (EOPNOTSUPP), where ENODATA would
        // bring one round trip per write() (the kernel asks for `security.capability` before
        // each one, to know whether the write must drop file capabilities) and per `ls -l`.
        reply.error(Errno::ENOSYS);
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, _size: u32, reply: fuser::ReplyXattr) {
        // As getxattr: the kernel answers later calls itself (EOPNOTSUPP), so `ls -l` of a
        // large directory makes no round trip per entry.
        reply.error(Errno::ENOSYS);
    }

    fn setxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _value: &[u8],
        _flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        // Extended attributes are not stored (SEMANTICS.md).
        reply.error(Errno::EOPNOTSUPP);
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        match name_str(name).and_then(|n| self.create_inner(req, parent.0, n, mode, umask)) {
            Ok((_, fh, attr)) => reply.created(
                &self.cfg.ttl,
                &attr,
                Generation(0),
                FileHandle(fh),
                self.write_flags(OpenFlags(flags).acc_mode()),
            ),
            Err(e) => reply.error(err(e)),
        }
    }
}
