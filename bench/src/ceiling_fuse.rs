//! `lode bench-ceiling --fuse-source DIR --fuse-mount MNT`: a bare FUSE file system on the same
//! fuser session setup as Lode's mount (threads, readahead, TTLs, `FOPEN_KEEP_CACHE |
//! FOPEN_NOFLUSH`, `ioctl` answered ENOTTY) serving an in-memory copy of a directory tree: no
//! metadata store, no disk, no checksums. A file-reading workload on it measures the ceiling of
//! FUSE itself on this machine; Lode's mount against it is the share Lode's own work costs.
//!
//! Files created on it (`open(O_CREAT)`, writes, close) are kept in memory beside the tree,
//! readable by name but not listed: enough to measure what a create costs through FUSE.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    KernelConfig, MountOption, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyDirectoryPlus,
    ReplyEmpty, ReplyEntry, ReplyOpen, Request,
};

const TTL: Duration = Duration::from_secs(30);
/// The largest file created on the ceiling (they live in memory).
const MAX_CREATED: usize = 1 << 30;

enum Node {
    Dir(Vec<(String, u64)>),
    File(bytes::Bytes),
}

struct Tree {
    nodes: Vec<Node>,
    names: HashMap<(u64, String), u64>,
    started: SystemTime,
    negotiate: fn(&mut KernelConfig),
    /// Files created on the mount: inode numbers from `nodes.len()` on.
    created: Mutex<Created>,
}

#[derive(Default)]
struct Created {
    names: HashMap<(u64, String), u64>,
    files: Vec<Vec<u8>>,
}

/// What the Lode mount asks of the kernel, done the same way by the ceiling so that the two
/// compare fairly. The binary passes the POSIX door's own functions.
#[derive(Debug, Clone, Copy)]
pub struct FuseTuning {
    /// Sets the FUSE init options (request sizes, read-ahead, async reads).
    pub negotiate: fn(&mut KernelConfig),
    /// Raises the mount's bdi read-ahead (needs root; a no-op otherwise).
    pub raise_readahead: fn(&Path),
}

impl Tree {
    /// Loads `dir` (recursively) into memory; inode 1 is `dir`.
    fn load(dir: &Path, negotiate: fn(&mut KernelConfig)) -> std::io::Result<Self> {
        let mut t = Tree {
            negotiate,
            nodes: vec![Node::Dir(vec![]), Node::Dir(vec![])],
            names: HashMap::new(),
            started: SystemTime::now(),
            created: Mutex::default(),
        };
        let mut stack: Vec<(PathBuf, u64)> = vec![(dir.to_path_buf(), 1)];
        while let Some((path, ino)) = stack.pop() {
            let mut kids = vec![];
            for e in std::fs::read_dir(&path)? {
                let e = e?;
                let name = e.file_name().to_string_lossy().into_owned();
                let child = t.nodes.len() as u64;
                if e.file_type()?.is_dir() {
                    t.nodes.push(Node::Dir(vec![]));
                    stack.push((e.path(), child));
                } else {
                    t.nodes.push(Node::File(std::fs::read(e.path())?.into()));
                }
                t.names.insert((ino, name.clone()), child);
                kids.push((name, child));
            }
            kids.sort();
            t.nodes[ino as usize] = Node::Dir(kids);
        }
        Ok(t)
    }

    fn attr(&self, ino: u64) -> Option<FileAttr> {
        let (kind, size, perm) = match self.nodes.get(ino as usize) {
            Some(Node::Dir(_)) => (FileType::Directory, 0, 0o755),
            Some(Node::File(b)) => (FileType::RegularFile, b.len() as u64, 0o644),
            None => {
                let c = self.created.lock().expect("created");
                let f = c.files.get(ino as usize - self.nodes.len())?;
                (FileType::RegularFile, f.len() as u64, 0o644)
            }
        };
        Some(FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: self.started,
            mtime: self.started,
            ctime: self.started,
            crtime: self.started,
            kind,
            perm,
            nlink: 1,
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 1 << 20,
            flags: 0,
        })
    }
}

/// The bytes of `b` a read of `size` at `offset` gets.
fn window(b: &[u8], offset: u64, size: u32) -> &[u8] {
    let s = (offset as usize).min(b.len());
    &b[s..(s + size as usize).min(b.len())]
}

impl Filesystem for Tree {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        (self.negotiate)(config);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let key = (parent.0, name.to_string_lossy().into_owned());
        let ino = self.names.get(&key).copied().or_else(|| {
            let c = self.created.lock().expect("created");
            c.names.get(&key).copied()
        });
        match ino.and_then(|i| self.attr(i)) {
            Some(a) => reply.entry(&TTL, &a, Generation(0)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        _flags: i32,
        reply: fuser::ReplyCreate,
    ) {
        let key = (parent.0, name.to_string_lossy().into_owned());
        if !matches!(self.nodes.get(parent.0 as usize), Some(Node::Dir(_)))
            || self.names.contains_key(&key)
        {
            return reply.error(Errno::EACCES);
        }
        let ino = {
            let mut c = self.created.lock().expect("created");
            if c.names.contains_key(&key) {
                return reply.error(Errno::EEXIST);
            }
            let ino = (self.nodes.len() + c.files.len()) as u64;
            c.files.push(vec![]);
            c.names.insert(key, ino);
            ino
        };
        let a = self.attr(ino).expect("just made");
        reply.created(&TTL, &a, Generation(0), FileHandle(0), FopenFlags::empty());
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: fuser::WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: fuser::ReplyWrite,
    ) {
        let mut c = self.created.lock().expect("created");
        let Some(f) = (ino.0 as usize)
            .checked_sub(self.nodes.len())
            .and_then(|i| c.files.get_mut(i))
        else {
            return reply.error(Errno::EACCES);
        };
        let end = offset as usize + data.len();
        if end > MAX_CREATED {
            return reply.error(Errno::EFBIG);
        }
        if f.len() < end {
            f.resize(end, 0);
        }
        f[offset as usize..end].copy_from_slice(data);
        reply.written(data.len() as u32);
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: fuser::LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.attr(ino.0) {
            Some(a) => reply.attr(&TTL, &a),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn open(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply.opened(
            FileHandle(0),
            FopenFlags::FOPEN_KEEP_CACHE | FopenFlags::FOPEN_NOFLUSH,
        );
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyData,
    ) {
        match self.nodes.get(ino.0 as usize) {
            Some(Node::File(b)) => reply.data(window(b, offset, size)),
            Some(Node::Dir(_)) => reply.error(Errno::EISDIR),
            None => {
                let c = self.created.lock().expect("created");
                match c.files.get(ino.0 as usize - self.nodes.len()) {
                    Some(f) => reply.data(window(f, offset, size)),
                    None => reply.error(Errno::ENOENT),
                }
            }
        }
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let Some(Node::Dir(kids)) = self.nodes.get(ino.0 as usize) else {
            return reply.error(Errno::ENOTDIR);
        };
        for (i, (name, child)) in kids.iter().enumerate().skip(offset as usize) {
            let kind = match self.nodes[*child as usize] {
                Node::Dir(_) => FileType::Directory,
                Node::File(_) => FileType::RegularFile,
            };
            if reply.add(INodeNo(*child), (i + 1) as u64, kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let Some(Node::Dir(kids)) = self.nodes.get(ino.0 as usize) else {
            return reply.error(Errno::ENOTDIR);
        };
        for (i, (name, child)) in kids.iter().enumerate().skip(offset as usize) {
            let a = self.attr(*child).expect("child exists");
            if reply.add(
                INodeNo(*child),
                (i + 1) as u64,
                name,
                &TTL,
                &a,
                Generation(0),
            ) {
                break;
            }
        }
        reply.ok();
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
        reply.error(Errno::ENOTTY);
    }
}

/// Loads `source` into memory and mounts it at `mount` (the tree read-only, creates kept
/// beside it) until `shutdown` completes
/// (the binary passes SIGINT/SIGTERM).
pub async fn serve(
    source: &Path,
    mount: &Path,
    threads: usize,
    tuning: FuseTuning,
    shutdown: impl std::future::Future<Output = ()>,
) -> crate::error::Result<()> {
    let t0 = std::time::Instant::now();
    let tree = Tree::load(source, tuning.negotiate)?;
    let files = tree
        .nodes
        .iter()
        .filter(|n| matches!(n, Node::File(_)))
        .count();
    std::fs::create_dir_all(mount)?;
    let mut fc = fuser::Config::default();
    fc.mount_options = vec![
        MountOption::FSName("lode-ceiling".into()),
        MountOption::NoAtime,
    ];
    fc.n_threads = Some(threads);
    fc.clone_fd = true;
    let session = fuser::Session::new(tree, mount, &fc)?;
    let bg = session.spawn()?;
    (tuning.raise_readahead)(mount);
    println!(
        "bench-ceiling: {files} files of {} in memory ({:.1} s), FUSE on {} ({threads} threads)",
        source.display(),
        t0.elapsed().as_secs_f64(),
        mount.display()
    );
    shutdown.await;
    bg.umount_and_join()?;
    Ok(())
}
