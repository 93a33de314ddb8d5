//! The inode table: which names the kernel knows, under which inode numbers.
//!
//! Objects have no inode numbers of their own, so the door hands them out as the kernel looks
//! names up, and forgets them when the kernel does. A node records its parent and its name, so
//! paths follow renames of any ancestor for free. Numbers are never reused (the generation is
//! always 0).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::open::OpenFile;

pub const ROOT: u64 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Root,
    Bucket,
    Dir,
    File,
}

struct Node {
    parent: u64,
    name: String,
    kind: Kind,
    /// Kernel references (lookups not yet forgotten).
    lookups: u64,
    /// Still reachable by (parent, name) (false after unlink, or when replaced).
    linked: bool,
    /// Open-file state while the file is open or created but not yet committed.
    open: Option<Arc<OpenFile>>,
}

/// Where a node lives in the namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodePath {
    pub kind: Kind,
    pub bucket: String,
    /// The key ("" for a bucket or the root; no trailing '/' for a directory).
    pub key: String,
}

impl NodePath {
    /// The key prefix of this directory's children ("" at a bucket's root).
    pub fn dir_prefix(&self) -> String {
        if self.key.is_empty() {
            String::new()
        } else {
            format!("{}/", self.key)
        }
    }
}

/// Inode numbers are handed out in sequence (no one else picks them): a cheap hash is safe.
type ByIno<V> = HashMap<u64, V, std::hash::BuildHasherDefault<rustc_hash::FxHasher>>;

/// (parent, name) → inode, by parent first, so a lookup by `&str` allocates nothing (this runs
/// for every entry of a directory listing). Names come from object keys, which anyone with
/// write access picks: their map keeps the std hasher, keyed per process.
#[derive(Default)]
struct Names(ByIno<HashMap<String, u64>>);

impl Names {
    fn get(&self, parent: u64, name: &str) -> Option<u64> {
        self.0.get(&parent)?.get(name).copied()
    }

    fn insert(&mut self, parent: u64, name: String, ino: u64) {
        self.0.entry(parent).or_default().insert(name, ino);
    }

    fn remove(&mut self, parent: u64, name: &str) -> Option<u64> {
        let children = self.0.get_mut(&parent)?;
        let ino = children.remove(name);
        if children.is_empty() {
            self.0.remove(&parent);
        }
        ino
    }

    fn children(&self, parent: u64) -> impl Iterator<Item = (&String, &u64)> {
        self.0.get(&parent).into_iter().flatten()
    }

    fn iter(&self) -> impl Iterator<Item = (u64, &String, u64)> {
        self.0
            .iter()
            .flat_map(|(p, c)| c.iter().map(move |(n, i)| (*p, n, *i)))
    }
}

struct Inner {
    nodes: ByIno<Node>,
    names: Names,
    next: u64,
}

pub struct Inodes {
    inner: Mutex<Inner>,
}

impl Default for Inodes {
    fn default() -> Self {
        let mut nodes = ByIno::default();
        nodes.insert(
            ROOT,
            Node {
                parent: ROOT,
                name: String::new(),
                kind: Kind::Root,
                lookups: 1,
                linked: true,
                open: None,
            },
        );
        Inodes {
            inner: Mutex::new(Inner {
                nodes,
                names: Names::default(),
                next: ROOT + 1,
            }),
        }
    }
}

impl Inner {
    fn path(&self, ino: u64) -> Option<NodePath> {
        let mut n = self.nodes.get(&ino)?;
        let kind = n.kind;
        if kind == Kind::Root {
            return Some(NodePath {
                kind,
                bucket: String::new(),
                key: String::new(),
            });
        }
        let mut parts: Vec<&str> = vec![];
        while n.kind != Kind::Bucket {
            parts.push(&n.name);
            n = self.nodes.get(&n.parent)?;
        }
        parts.reverse();
        Some(NodePath {
            kind,
            bucket: n.name.clone(),
            key: parts.join("/"),
        })
    }

    fn unlink(&mut self, parent: u64, name: &str) -> Option<u64> {
        let ino = self.names.remove(parent, name)?;
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.linked = false;
        }
        self.maybe_drop(ino);
        Some(ino)
    }

    fn maybe_drop(&mut self, ino: u64) {
        let drop = self
            .nodes
            .get(&ino)
            .is_some_and(|n| n.lookups == 0 && n.open.is_none() && n.kind != Kind::Root);
        if drop
            && let Some(n) = self.nodes.remove(&ino)
            && self.names.get(n.parent, &n.name) == Some(ino)
        {
            self.names.remove(n.parent, &n.name);
        }
    }
}

impl Inodes {
    pub fn path(&self, ino: u64) -> Option<NodePath> {
        self.inner.lock().expect("inodes").path(ino)
    }

    pub fn kind(&self, ino: u64) -> Option<Kind> {
        self.inner
            .lock()
            .expect("inodes")
            .nodes
            .get(&ino)
            .map(|n| n.kind)
    }

    /// The node the kernel knows under (parent, name), if any.
    pub fn find(&self, parent: u64, name: &str) -> Option<(u64, Kind)> {
        let g = self.inner.lock().expect("inodes");
        let ino = g.names.get(parent, name)?;
        g.nodes.get(&ino).map(|n| (ino, n.kind))
    }

    /// Records a successful lookup of (parent, name) as `kind` and returns its inode. A known
    /// node of another kind is replaced by a new inode (the kernel must not see an inode change
    /// type).
    pub fn lookup(&self, parent: u64, name: &str, kind: Kind) -> u64 {
        let mut g = self.inner.lock().expect("inodes");
        if let Some(ino) = g.names.get(parent, name) {
            let n = g.nodes.get_mut(&ino).expect("named node exists");
            if n.kind == kind {
                n.lookups += 1;
                return ino;
            }
            g.unlink(parent, name);
        }
        let ino = g.next;
        g.next += 1;
        g.nodes.insert(
            ino,
            Node {
                parent,
                name: name.to_owned(),
                kind,
                lookups: 1,
                linked: true,
                open: None,
            },
        );
        g.names.insert(parent, name.to_owned(), ino);
        ino
    }

    /// The kernel dropped `n` references.
    pub fn forget(&self, ino: u64, n: u64) {
        let mut g = self.inner.lock().expect("inodes");
        if let Some(node) = g.nodes.get_mut(&ino) {
            node.lookups = node.lookups.saturating_sub(n);
        }
        g.maybe_drop(ino);
    }

    /// The name is gone (unlink, rmdir); the inode lives on while referenced.
    pub fn unlink(&self, parent: u64, name: &str) -> Option<u64> {
        self.inner.lock().expect("inodes").unlink(parent, name)
    }

    pub fn is_linked(&self, ino: u64) -> bool {
        self.inner
            .lock()
            .expect("inodes")
            .nodes
            .get(&ino)
            .is_some_and(|n| n.linked)
    }

    /// Moves (parent, name) to (new_parent, new_name); whatever was there is unlinked.
    pub fn rename(&self, parent: u64, name: &str, new_parent: u64, new_name: &str) {
        let mut g = self.inner.lock().expect("inodes");
        let Some(ino) = g.names.remove(parent, name) else {
            return;
        };
        g.unlink(new_parent, new_name);
        if let Some(n) = g.nodes.get_mut(&ino) {
            n.parent = new_parent;
            n.name = new_name.to_owned();
        }
        g.names.insert(new_parent, new_name.to_owned(), ino);
    }

    /// The open-file state of `ino` (made by `make` if there is none), with one more hold on
    /// it (`handles`), which the caller gives back through its last-holder path.
    pub fn open_file(
        &self,
        ino: u64,
        make: impl FnOnce() -> Arc<OpenFile>,
    ) -> Option<Arc<OpenFile>> {
        let mut g = self.inner.lock().expect("inodes");
        let n = g.nodes.get_mut(&ino)?;
        let of = Arc::clone(n.open.get_or_insert_with(make));
        // The caller's hold is taken under the lock that `close_file` checks it under, so a
        // state being dropped by its last holder is never handed out, and one handed out is
        // never dropped.
        of.handles.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Some(of)
    }

    /// The open-file state of `ino`, if any.
    pub fn opened(&self, ino: u64) -> Option<Arc<OpenFile>> {
        let g = self.inner.lock().expect("inodes");
        g.nodes.get(&ino).and_then(|n| n.open.clone())
    }

    /// Drops the open-file state once nothing holds it (checked under the lock
    /// [`Inodes::open_file`] takes holds under: a holder that came in meanwhile keeps it).
    pub fn close_file(&self, ino: u64, of: &Arc<OpenFile>) {
        let mut g = self.inner.lock().expect("inodes");
        if let Some(n) = g.nodes.get_mut(&ino)
            && n.open.as_ref().is_some_and(|o| Arc::ptr_eq(o, of))
            && of.handles.load(std::sync::atomic::Ordering::Acquire) == 0
        {
            n.open = None;
        }
        g.maybe_drop(ino);
    }

    /// Files of `parent` that exist only on the mount so far (created, not yet committed).
    pub fn pending_children(&self, parent: u64) -> Vec<(String, u64)> {
        let g = self.inner.lock().expect("inodes");
        g.names
            .children(parent)
            .filter(|(_, ino)| {
                g.nodes
                    .get(ino)
                    .and_then(|n| n.open.as_ref())
                    .is_some_and(|o| o.is_pending())
            })
            .map(|(name, ino)| (name.clone(), *ino))
            .collect()
    }

    /// Every name the kernel may have cached: (parent, name, inode).
    pub fn all_names(&self) -> Vec<(u64, String, u64)> {
        let g = self.inner.lock().expect("inodes");
        g.names
            .iter()
            .map(|(parent, name, ino)| (parent, name.clone(), ino))
            .collect()
    }

    /// For a change to `bucket/key`: each known (parent, name, inode) along its path, from the
    /// bucket down, as far as the kernel knows it.
    pub fn along(&self, bucket: &str, key: &str) -> Vec<(u64, String, u64, Kind)> {
        let g = self.inner.lock().expect("inodes");
        let mut out = vec![];
        let mut parent = ROOT;
        for name in std::iter::once(bucket).chain(key.split('/').filter(|s| !s.is_empty())) {
            let Some(ino) = g.names.get(parent, name) else {
                break;
            };
            let kind = g.nodes.get(&ino).map_or(Kind::File, |n| n.kind);
            out.push((parent, name.to_owned(), ino, kind));
            parent = ino;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The last holder of a file's open state drops it only if nobody took a hold meanwhile:
    /// a new open racing the release of the previous handle must get the state that is still
    /// registered, or a fresh one after it is gone, never one that is being dropped (a later
    /// truncate then found no other holder and committed an empty object at once).
    #[test]
    fn an_open_state_held_again_is_not_dropped() {
        use std::sync::atomic::Ordering;
        let t = Inodes::default();
        let b = t.lookup(ROOT, "bkt", Kind::Bucket);
        let f = t.lookup(b, "f", Kind::File);
        let make = || {
            Arc::new(OpenFile::new(
                false,
                super::super::open::Snapshot {
                    size: 0,
                    mtime: std::time::SystemTime::UNIX_EPOCH,
                    attrs: Default::default(),
                },
            ))
        };
        let a = t.open_file(f, make).unwrap();
        assert_eq!(
            a.handles.load(Ordering::Acquire),
            1,
            "the hold is taken with the state"
        );
        // The last holder lets go; before it drops the state, a new opener takes it.
        a.handles.fetch_sub(1, Ordering::AcqRel);
        let again = t.open_file(f, make).unwrap();
        assert!(Arc::ptr_eq(&a, &again));
        t.close_file(f, &a);
        assert!(
            t.opened(f).is_some_and(|o| Arc::ptr_eq(&o, &a)),
            "a state with a holder stays registered"
        );
        again.handles.fetch_sub(1, Ordering::AcqRel);
        t.close_file(f, &again);
        assert!(t.opened(f).is_none());
    }

    #[test]
    fn paths_follow_renames_and_forget_drops() {
        let t = Inodes::default();
        let b = t.lookup(ROOT, "bkt", Kind::Bucket);
        let d = t.lookup(b, "d", Kind::Dir);
        let f = t.lookup(d, "f", Kind::File);
        assert_eq!(
            t.path(f).unwrap(),
            NodePath {
                kind: Kind::File,
                bucket: "bkt".into(),
                key: "d/f".into()
            }
        );
        assert_eq!(t.path(d).unwrap().dir_prefix(), "d/");
        assert_eq!(t.path(b).unwrap().dir_prefix(), "");
        t.rename(b, "d", b, "e");
        assert_eq!(t.path(f).unwrap().key, "e/f");
        // A second lookup of the same kind is the same inode; another kind is a new one.
        assert_eq!(t.lookup(d, "f", Kind::File), f);
        let f2 = t.lookup(d, "f", Kind::Dir);
        assert_ne!(f2, f);
        assert!(!t.is_linked(f));
        t.forget(f, 2);
        assert!(t.path(f).is_none());
        assert_eq!(t.along("bkt", "e/f/x").len(), 3);
        assert_eq!(t.along("other", "e").len(), 0);
    }
}
