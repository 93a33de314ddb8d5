//! `lode bench-ceiling --fuse-source DIR --fuse-mount MNT`: a bare FUSE file system on the same
//! fuser session setup as Lode's mount (threads, readahead, TTLs, `FOPEN_KEEP_CACHE |
//! FOPEN_NOFLUSH`, `ioctl` answered ENOTTY) serving an in-memory copy of a directory tree: no
//! metadata store, no disk, no checksums. A file-reading workload on it measures the ceiling of
//! FUSE itself on this machine; Lode's mount against it is the share Lode's own work costs.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    KernelConfig, MountOption, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyDirectoryPlus,
    ReplyEmpty, ReplyEntry, ReplyOpen, Request,
};

const TTL: Duration = Duration::from_secs(30);

enum Node {
    Dir(Vec<(String, u64)>),
    File(bytes::Bytes),
}

struct Tree {
    nodes: Vec<Node>,
    names: HashMap<(u64, String), u64>,
    started: SystemTime,
    negotiate: fn(&mut KernelConfig),
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
        let (kind, size, perm) = match self.nodes.get(ino as usize)? {
            Node::Dir(_) => (FileType::Directory, 0, 0o755),
            Node::File(b) => (FileType::RegularFile, b.len() as u64, 0o644),
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

impl Filesystem for Tree {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        (self.negotiate)(config);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let key = (parent.0, name.to_string_lossy().into_owned());
        match self.names.get(&key).and_then(|&i| self.attr(i)) {
            Some(a) => reply.entry(&TTL, &a, Generation(0)),
            None => reply.error(Errno::ENOENT),
        }
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
            Some(Node::File(b)) => {
                let s = (offset as usize).min(b.len());
                let e = (s + size as usize).min(b.len());
                reply.data(&b[s..e]);
            }
            _ => reply.error(Errno::EISDIR),
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

/// Loads `source` into memory and mounts it read-only at `mount` until `shutdown` completes
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
        MountOption::RO,
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
