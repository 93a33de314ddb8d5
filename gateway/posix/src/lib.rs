//! `lode-posix`, the POSIX door: the whole namespace as a FUSE file system, `<mount>/<bucket>/<key path>`,
//! served by the same process and the same object service as the S3 door.
//!
//! * [`fs`]: the FUSE operations.
//! * [`inodes`]: inode numbers for the names the kernel knows.
//! * [`open`]: files open for writing, staged and committed at close/fsync.
//! * [`names`]: the S3 <-> POSIX name and attribute rules.
//!
//! Coherence with S3: the object service announces every commit before its request is
//! answered (`lode_objects::notify`); [`Invalidator`] listens and drops the kernel's cached
//! entry, attributes and pages for the path of each change this mount did not make itself.

pub use lode_door::{access, error, profile};

mod ahead;
pub mod fs;
pub mod inodes;
mod listed;
pub mod names;
pub mod open;
mod slots;
pub use fs::negotiate;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use fuser::{Config, INodeNo, MountOption, Notifier, SessionACL};
use lode_config::PosixConfig;

use inodes::{Inodes, Kind, ROOT};
use lode_objects::ObjectService;
use lode_objects::{ChangeListener, ObjectChange, RemoteChanges, notify::Door};

/// Errors of mounting and unmounting.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    #[error("{0} is already mounted (another lode serving it?); unmount it first")]
    Busy(PathBuf),
    #[error("preparing {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "mounting FUSE at {path} (is /dev/fuse available, and are we root or is fusermount3 installed?): {source}"
    )]
    Mount {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A mounted POSIX door. Unmounts when dropped (or by [`PosixMount::unmount`]).
pub struct PosixMount {
    session: Option<fuser::BackgroundSession>,
    path: PathBuf,
}

impl PosixMount {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Unmounts (lazily, so busy files do not keep it mounted) and stops the FUSE threads.
    pub fn unmount(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if let Some(s) = self.session.take() {
            match s.umount_and_join() {
                Ok(()) => tracing::info!(mount = %self.path.display(), "unmounted"),
                Err(e) => {
                    tracing::warn!(mount = %self.path.display(), error = %e, "unmount failed; detaching");
                    let _ = rustix::mount::unmount(&self.path, rustix::mount::UnmountFlags::DETACH);
                }
            }
        }
    }
}

impl Drop for PosixMount {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Whether `path` is a mount point in this mount namespace: its file system type and its
/// device (`major:minor`), from /proc/self/mountinfo (no stat: a dead FUSE mount's root
/// attributes may still be cached by the kernel).
fn mounted_at(path: &Path) -> Option<(String, String)> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let want = path.to_str()?;
    info.lines().rev().find_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        let mp = f.get(4)?;
        let dash = f.iter().position(|x| *x == "-")?;
        // Spaces and such are octal-escaped in mountinfo.
        let mp = mp.replace("\\040", " ");
        (mp == want).then(|| {
            (
                f.get(dash + 1).unwrap_or(&"").to_string(),
                f.get(2).unwrap_or(&"").to_string(),
            )
        })
    })
}

/// Prepares the mount point: creates it, replaces a stale FUSE mount left by a crashed process,
/// and refuses a live one.
fn prepare_mountpoint(path: &Path) -> Result<(), MountError> {
    let io = |source| MountError::Io {
        path: path.to_owned(),
        source,
    };
    match std::fs::metadata(path) {
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => {
            tracing::warn!(mount = %path.display(), "replacing a stale FUSE mount (left by a crash)");
            rustix::mount::unmount(path, rustix::mount::UnmountFlags::DETACH)
                .map_err(|e| io(e.into()))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(path).map_err(io)?;
        }
        Err(e) => return Err(io(e)),
        Ok(_) => {
            if mounted_at(path).is_some_and(|(t, _)| t.starts_with("fuse")) {
                // The stat may have come from the kernel's attribute cache; listing the root
                // always asks the daemon, and a dead one answers ENOTCONN.
                match std::fs::read_dir(path) {
                    Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => {
                        tracing::warn!(mount = %path.display(), "replacing a stale FUSE mount (left by a crash)");
                        rustix::mount::unmount(path, rustix::mount::UnmountFlags::DETACH)
                            .map_err(|e| io(e.into()))?;
                    }
                    _ => return Err(MountError::Busy(path.to_owned())),
                }
            }
        }
    }
    Ok(())
}

/// Mounts the namespace at `cfg.mount`. `data_dir` resolves a relative staging dir. Buckets
/// made by mkdir belong to root; buckets of other users show as theirs (their `uid`, mode 0700).
/// `changes`: in cluster mode, the other gateways' changes (the cluster's change feed), which
/// this mount's invalidator takes as it takes this gateway's own.
pub fn mount(
    svc: Arc<ObjectService>,
    profile: Arc<crate::profile::Profile>,
    cfg: &PosixConfig,
    data_dir: &Path,
    users: Arc<lode_objects::users::Users>,
    rt: tokio::runtime::Handle,
    changes: Option<Arc<dyn RemoteChanges>>,
) -> Result<PosixMount, MountError> {
    let path = std::path::absolute(&cfg.mount).map_err(|source| MountError::Io {
        path: cfg.mount.clone(),
        source,
    })?;
    prepare_mountpoint(&path)?;
    let staging = if cfg.staging_dir.is_absolute() {
        cfg.staging_dir.clone()
    } else {
        data_dir.join(&cfg.staging_dir)
    };
    // Staging files are anonymous (O_TMPFILE): nothing of a crashed run is left to clean.
    std::fs::create_dir_all(&staging).map_err(|source| MountError::Io {
        path: staging.clone(),
        source,
    })?;
    let inodes = Arc::new(Inodes::default());
    let seq = Arc::new(AtomicU64::new(0));
    let writes = Arc::new(AtomicU64::new(0));
    let fscfg = fs::FsConfig {
        ttl: Duration::from_millis(cfg.attr_ttl_ms),
        uid: cfg
            .uid
            .unwrap_or_else(|| rustix::process::geteuid().as_raw()),
        gid: cfg
            .gid
            .unwrap_or_else(|| rustix::process::getegid().as_raw()),
        file_mode: cfg.file_mode as u16,
        dir_mode: cfg.dir_mode as u16,
        allow_bucket_create: cfg.allow_bucket_create,
        staging_dir: staging,
        keep_cache: changes.is_none(),
        user: cfg.user.clone(),
    };
    let lfs = fs::LodeFs::new(
        Arc::clone(&svc),
        profile,
        users,
        rt.clone(),
        Arc::clone(&inodes),
        listed::Listings::new(fscfg.ttl, Arc::clone(&seq), Arc::clone(&writes)),
        fscfg,
    );
    let mut fc = Config::default();
    fc.mount_options = vec![
        MountOption::FSName("lode".into()),
        MountOption::Subtype("lode".into()),
        MountOption::DefaultPermissions,
        MountOption::NoAtime,
    ];
    if cfg.allow_other {
        fc.acl = SessionACL::All;
    }
    fc.n_threads = Some(cfg.threads);
    fc.clone_fd = true;
    let session = fuser::Session::new(lfs, &path, &fc).map_err(|source| MountError::Mount {
        path: path.clone(),
        source,
    })?;
    let notifier = session.notifier();
    let bg = session.spawn().map_err(|source| MountError::Mount {
        path: path.clone(),
        source,
    })?;
    let inval = Arc::new(Invalidator {
        inodes,
        notifier,
        seq,
        writes,
        svc: Arc::downgrade(&svc),
    });
    svc.add_listener(Arc::clone(&inval) as Arc<dyn ChangeListener>);
    if let Some(changes) = changes {
        let reset = Arc::clone(&inval);
        let _guard = rt.enter();
        changes.subscribe(inval, Arc::new(move || reset.reset()));
    }
    raise_readahead(&path);
    tracing::info!(mount = %path.display(), threads = cfg.threads, "POSIX door mounted");
    Ok(PosixMount {
        session: Some(bg),
        path,
    })
}

/// The readahead `init` asks for (`fs.rs`: `set_max_readahead`), in KiB.
pub const READAHEAD_KB: u32 = 1024;

/// The kernel caps a FUSE mount's readahead at its bdi default (128 KiB) whatever the `init`
/// reply negotiates, so a 300 KB file took three READ round trips. Raise the mount's bdi
/// `read_ahead_kb` to the negotiated size ([`READAHEAD_KB`]). Needs root (sysfs); otherwise
/// the default stays.
pub fn raise_readahead(path: &Path) {
    let kb = READAHEAD_KB;
    let Some((_, dev)) = mounted_at(path) else {
        return;
    };
    let knob = format!("/sys/class/bdi/{dev}/read_ahead_kb");
    match std::fs::write(&knob, kb.to_string()) {
        Ok(()) => tracing::debug!(knob, kb, "raised the mount's readahead"),
        Err(e) => {
            tracing::info!(knob, error = %e, "cannot raise the mount's readahead (128 KiB stays)")
        }
    }
}

/// Drops what the kernel caches about names changed by anything but this mount: the S3 door,
/// the lifecycle, the admin, and (cluster mode) the other gateways.
struct Invalidator {
    inodes: Arc<Inodes>,
    notifier: Notifier,
    seq: Arc<AtomicU64>,
    /// Bumped by every change through this mount (voids remembered listings' attributes).
    writes: Arc<AtomicU64>,
    svc: Weak<ObjectService>,
}

impl Invalidator {
    fn entry(&self, parent: u64, name: &str) {
        if let Err(e) = self.notifier.inval_entry(INodeNo(parent), name.as_ref()) {
            tracing::trace!(parent, name, error = %e, "inval_entry");
        }
    }

    fn inode(&self, ino: u64) {
        if let Err(e) = self.notifier.inval_inode(INodeNo(ino), 0, 0) {
            tracing::trace!(ino, error = %e, "inval_inode");
        }
    }

    /// Drops every name and inode the kernel may cache (changes may have been missed).
    fn reset(&self) {
        self.seq.fetch_add(1, Ordering::AcqRel);
        for (parent, name, ino) in self.inodes.all_names() {
            self.entry(parent, &name);
            self.inode(ino);
        }
    }

    /// Whether nothing is left under the directory `prefix` of `bucket`.
    fn gone(&self, bucket: &str, prefix: &str) -> bool {
        self.svc.upgrade().is_some_and(|s| {
            s.keys_under_blocking(bucket, prefix, 1)
                .is_ok_and(|k| k.is_empty())
        })
    }
}

impl ChangeListener for Invalidator {
    fn object_changed(&self, change: &ObjectChange) {
        // This mount's own changes: the kernel learnt them from the request that made them,
        // and an invalidation from inside that request would wait for the directory lock the
        // kernel holds for it. Its remembered listings' attributes are void.
        if change.door == Some(Door::Posix) {
            self.writes.fetch_add(1, Ordering::AcqRel);
            return;
        }
        let (bucket, key, deleted) = (&change.bucket[..], &change.key[..], change.deleted());
        self.seq.fetch_add(1, Ordering::AcqRel);
        let along = self.inodes.along(bucket, key);
        let depth = key.split('/').filter(|s| !s.is_empty()).count();
        let mut prefix = String::new();
        for (i, (parent, name, ino, kind)) in along.iter().enumerate() {
            if i == 0 {
                continue; // the bucket itself
            }
            prefix.push_str(name);
            prefix.push('/');
            let leaf = i == depth;
            match kind {
                // A file node: its content or existence changed, or (not the leaf) a key below
                // it now makes it a directory.
                Kind::File => {
                    self.entry(*parent, name);
                    self.inode(*ino);
                }
                Kind::Dir => {
                    if leaf {
                        // A `dir/` marker (attributes), or a file of the same name (hidden).
                        self.inode(*ino);
                    }
                    if deleted && self.gone(bucket, &prefix) {
                        self.entry(*parent, name);
                    }
                }
                Kind::Root | Kind::Bucket => {}
            }
        }
    }

    fn bucket_changed(&self, bucket: &str, door: Option<Door>) {
        if door == Some(Door::Posix) {
            self.writes.fetch_add(1, Ordering::AcqRel);
            return;
        }
        self.seq.fetch_add(1, Ordering::AcqRel);
        if self.inodes.find(ROOT, bucket).is_some() {
            self.entry(ROOT, bucket);
        }
    }
}
