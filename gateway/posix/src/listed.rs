//! What whole listings of directories showed, remembered for lookups (`ls -l`, `find`, `du`, a
//! dataset's scan: a listing, then a `stat` of every name in it):
//! - which names are directories: a lookup of a name listed as a file skips the range scan
//!   that asks whether `name/` holds keys;
//! - the files' attributes: a lookup of a listed file answers from the listing, with no
//!   catalog read.
//!
//! A listing is remembered only if nothing changed while it ran, and counts for at most the
//! mount's attribute TTL (what bounds a lost cluster notify, as for the kernel's own caches).
//! Two counters void it:
//! - [`Stamp::names`] ([`crate::fs::LodeFs`]'s `seq`): every change from outside this mount
//!   (the S3 door, lifecycle, admin, other gateways) and every mkdir and rename through it;
//!   that voids both what is known;
//! - [`Stamp::writes`]: every change through this mount (the service announces each commit
//!   before the request that made it is answered); that voids the attributes only (a write
//!   through the mount never makes a file a directory).

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use hashbrown::HashTable;

use crate::inodes::Kind;
use crate::names::Attrs;

/// One entry of a directory listing.
#[derive(Clone)]
pub(crate) struct DirEntry {
    pub(crate) name: String,
    pub(crate) kind: Kind,
    /// For files: size, last-modified and attributes (from the listing itself).
    pub(crate) file: Option<(u64, i64, Attrs)>,
}

/// Directories whose listing is remembered at most (then it starts over).
const LISTED_MAX: usize = 4096;
/// Listed entries whose attributes are remembered at most, over all directories (about
/// 100 bytes each; then it starts over). A directory of more entries keeps only its
/// directories' names.
const ENTRIES_MAX: usize = 1 << 18;

/// The two counters at one moment (see the module documentation).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Stamp {
    names: u64,
    writes: u64,
}

struct Listed {
    stamp: Stamp,
    at: Instant,
    dirs: HashSet<String>,
    /// The listing's entries (shared with the handle that listed them) and, built at the
    /// first lookup, their index by name.
    entries: Option<Arc<Vec<DirEntry>>>,
    index: OnceLock<HashTable<u32>>,
}

/// The remembered listings of one mount, by bucket and directory key (not inode: numbers
/// change when the kernel forgets one).
pub(crate) struct Listings {
    ttl: Duration,
    names: Arc<AtomicU64>,
    writes: Arc<AtomicU64>,
    hasher: RandomState,
    map: Mutex<Held>,
}

/// The remembered listings by bucket and directory key, and how many directories and entries
/// they hold in all (kept as they change, not summed at each insert).
#[derive(Default)]
struct Held {
    by_bucket: HashMap<String, HashMap<String, Listed>>,
    dirs: usize,
    entries: usize,
}

impl Held {
    fn entries_of(l: &Listed) -> usize {
        l.entries.as_ref().map_or(0, |v| v.len())
    }

    fn insert(&mut self, bucket: &str, key: &str, l: Listed) {
        self.dirs += 1;
        self.entries += Self::entries_of(&l);
        let old = match self.by_bucket.get_mut(bucket) {
            Some(b) => b.insert(key.to_owned(), l),
            None => self
                .by_bucket
                .entry(bucket.to_owned())
                .or_default()
                .insert(key.to_owned(), l),
        };
        if let Some(old) = old {
            self.dirs -= 1;
            self.entries -= Self::entries_of(&old);
        }
    }
}

impl Listings {
    /// `names` and `writes` are the counters described in the module documentation.
    pub(crate) fn new(ttl: Duration, names: Arc<AtomicU64>, writes: Arc<AtomicU64>) -> Self {
        Listings {
            ttl,
            names,
            writes,
            hasher: RandomState::new(),
            map: Mutex::new(Held::default()),
        }
    }

    /// The counter of changes from outside the mount and of namespace changes through it.
    pub(crate) fn names(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.names)
    }

    /// Now, for a listing that begins.
    pub(crate) fn stamp(&self) -> Stamp {
        Stamp {
            names: self.names.load(Ordering::Acquire),
            writes: self.writes.load(Ordering::Acquire),
        }
    }

    /// Remembers the whole listing of `key` in `bucket`, begun at `began`: its directories,
    /// and its entries' attributes if nothing was written through the mount meanwhile.
    pub(crate) fn remember(
        &self,
        bucket: &str,
        key: &str,
        began: Stamp,
        dirs: &HashSet<String>,
        entries: &Arc<Vec<DirEntry>>,
    ) {
        let now = self.stamp();
        if self.ttl.is_zero() || now.names != began.names {
            return;
        }
        let entries =
            (now.writes == began.writes && entries.len() <= ENTRIES_MAX).then(|| entries.clone());
        let mut l = self.map.lock().expect("listed");
        let adding = entries.as_ref().map_or(0, |v| v.len());
        if l.dirs >= LISTED_MAX || l.entries + adding > ENTRIES_MAX {
            *l = Held::default();
        }
        l.insert(
            bucket,
            key,
            Listed {
                stamp: began,
                at: Instant::now(),
                dirs: dirs.clone(),
                entries,
                index: OnceLock::new(),
            },
        );
    }

    /// The still valid listing of `key` in `bucket`, with the lock held for `f`.
    fn with<T>(&self, bucket: &str, key: &str, f: impl FnOnce(&Listed) -> Option<T>) -> Option<T> {
        let names = self.names.load(Ordering::Acquire);
        let l = self.map.lock().expect("listed");
        let d = l.by_bucket.get(bucket)?.get(key)?;
        if d.stamp.names != names || d.at.elapsed() >= self.ttl {
            return None;
        }
        f(d)
    }

    /// Whether a still valid listing of directory `key` shows that `name` is not a directory.
    pub(crate) fn is_file(&self, bucket: &str, key: &str, name: &str) -> bool {
        self.with(bucket, key, |d| Some(!d.dirs.contains(name)))
            .unwrap_or(false)
    }

    /// The size, last-modified and attributes a still valid listing of directory `key` shows
    /// for the file `name`.
    pub(crate) fn file(&self, bucket: &str, key: &str, name: &str) -> Option<(u64, i64, Attrs)> {
        let writes = self.writes.load(Ordering::Acquire);
        self.with(bucket, key, |d| {
            if d.stamp.writes != writes {
                return None;
            }
            let entries = d.entries.as_ref()?;
            let hash = |n: &str| self.hasher.hash_one(n);
            let index = d.index.get_or_init(|| {
                let mut t = HashTable::with_capacity(entries.len());
                for (i, e) in entries.iter().enumerate() {
                    if e.kind == Kind::File && !d.dirs.contains(&e.name) {
                        t.insert_unique(hash(&e.name), i as u32, |&j| {
                            hash(&entries[j as usize].name)
                        });
                    }
                }
                t
            });
            let i = index.find(hash(name), |&i| entries[i as usize].name == name)?;
            entries[*i as usize].file
        })
    }
}

/// Directories this mount found to exist lately (their marker, if any), for the `getattr` the
/// kernel sends through a directory after every create in it: with `default_permissions` a
/// change in a directory voids the kernel's copy of its mode, so the next path walk through
/// it asks again, and each ask was a range scan for a key under it.
///
/// A directory stops existing, or its marker changes, only through a change from outside this
/// mount (which bumps the mount's `seq`, the listings' `names`), or an unlink, rmdir, rename
/// or setattr through it (which bump [`SeenDirs::shrunk`]). A create or write through the
/// mount never does either, so a burst of creates in one directory keeps it remembered. An
/// entry counts for at most the attribute TTL, as a remembered listing does.
pub(crate) struct SeenDirs<T> {
    ttl: Duration,
    names: Arc<AtomicU64>,
    shrinks: AtomicU64,
    /// By bucket, then directory key (looked up by `&str`, with no allocation: every lookup of
    /// a name not known to be a file asks here first), and how many are held in all.
    map: Mutex<(HashMap<String, ByDir<T>>, usize)>,
}

/// A remembered directory: its marker, the counters when it was read, and when.
type Seen<T> = (T, u64, u64, Instant);
/// One bucket's remembered directories, by key.
type ByDir<T> = HashMap<String, Seen<T>>;

/// Directories remembered at most (then it starts over).
const SEEN_DIRS_MAX: usize = 4096;

impl<T: Clone> SeenDirs<T> {
    pub(crate) fn new(ttl: Duration, names: Arc<AtomicU64>) -> Self {
        SeenDirs {
            ttl,
            names,
            shrinks: AtomicU64::new(0),
            map: Mutex::new((HashMap::new(), 0)),
        }
    }

    /// The counters now, to pass to [`SeenDirs::remember`] for what is read after this.
    pub(crate) fn stamp(&self) -> (u64, u64) {
        (
            self.names.load(Ordering::Acquire),
            self.shrinks.load(Ordering::Acquire),
        )
    }

    /// An unlink, rmdir, rename or setattr through the mount ended (called after its commit).
    pub(crate) fn shrunk(&self) {
        self.shrinks.fetch_add(1, Ordering::AcqRel);
    }

    /// `dir` of `bucket` exists, as read after `stamp` was taken.
    pub(crate) fn remember(&self, bucket: &str, dir: &str, stamp: (u64, u64), marker: T) {
        if self.ttl.is_zero() || self.stamp() != stamp {
            return;
        }
        let mut g = self.map.lock().expect("seen dirs");
        let (map, held) = &mut *g;
        if *held >= SEEN_DIRS_MAX {
            map.clear();
            *held = 0;
        }
        let seen = (marker, stamp.0, stamp.1, Instant::now());
        if map
            .entry(bucket.to_owned())
            .or_default()
            .insert(dir.to_owned(), seen)
            .is_none()
        {
            *held += 1;
        }
    }

    /// The marker of `dir`, if it is remembered to exist and nothing since can have changed
    /// that.
    pub(crate) fn get(&self, bucket: &str, dir: &str) -> Option<T> {
        let (names, shrinks) = self.stamp();
        let g = self.map.lock().expect("seen dirs");
        let (m, n, s, at) = g.0.get(bucket)?.get(dir)?;
        (*n == names && *s == shrinks && at.elapsed() < self.ttl).then(|| m.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str, size: u64) -> DirEntry {
        DirEntry {
            name: name.into(),
            kind: Kind::File,
            file: Some((size, 7, Attrs::default())),
        }
    }

    fn listings(ttl_ms: u64) -> (Listings, Arc<AtomicU64>, Arc<AtomicU64>) {
        let (n, w) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let l = Listings::new(Duration::from_millis(ttl_ms), n.clone(), w.clone());
        (l, n, w)
    }

    #[test]
    fn a_listing_answers_until_a_change_voids_it() {
        let (l, names, writes) = listings(60_000);
        let dirs: HashSet<String> = ["d".to_owned()].into();
        let entries = Arc::new(vec![
            file("a", 1),
            DirEntry {
                name: "d".into(),
                kind: Kind::Dir,
                file: None,
            },
            file("b", 2),
        ]);
        l.remember("bk", "x/", l.stamp(), &dirs, &entries);
        assert_eq!(l.file("bk", "x/", "b").map(|f| f.0), Some(2));
        assert_eq!(l.file("bk", "x/", "a").map(|f| f.0), Some(1));
        assert!(l.file("bk", "x/", "d").is_none() && l.file("bk", "x/", "zz").is_none());
        assert!(l.file("bk", "y/", "a").is_none() && l.file("other", "x/", "a").is_none());
        assert!(l.is_file("bk", "x/", "a") && !l.is_file("bk", "x/", "d"));
        // A write through the mount voids the attributes, not which names are directories.
        writes.fetch_add(1, Ordering::AcqRel);
        assert!(l.file("bk", "x/", "a").is_none());
        assert!(l.is_file("bk", "x/", "a"));
        // Any other change voids both.
        l.remember("bk", "x/", l.stamp(), &dirs, &entries);
        assert!(l.file("bk", "x/", "a").is_some());
        names.fetch_add(1, Ordering::AcqRel);
        assert!(l.file("bk", "x/", "a").is_none() && !l.is_file("bk", "x/", "a"));
    }

    #[test]
    fn a_listing_changed_while_it_ran_or_past_the_ttl_is_not_used() {
        let (l, names, writes) = listings(60_000);
        let entries = Arc::new(vec![file("a", 1)]);
        let began = l.stamp();
        writes.fetch_add(1, Ordering::AcqRel);
        l.remember("bk", "", began, &HashSet::new(), &entries);
        assert!(l.file("bk", "", "a").is_none() && l.is_file("bk", "", "a"));
        let began = l.stamp();
        names.fetch_add(1, Ordering::AcqRel);
        l.remember("bk", "", began, &HashSet::new(), &entries);
        assert!(!l.is_file("bk", "", "a"));

        let (l, ..) = listings(1);
        l.remember("bk", "", l.stamp(), &HashSet::new(), &entries);
        std::thread::sleep(Duration::from_millis(5));
        assert!(l.file("bk", "", "a").is_none() && !l.is_file("bk", "", "a"));
    }

    #[test]
    fn remembered_entries_are_bounded() {
        let (l, ..) = listings(60_000);
        let big = Arc::new(
            (0..ENTRIES_MAX / 2 + 1)
                .map(|i| file(&i.to_string(), 1))
                .collect(),
        );
        l.remember("bk", "one/", l.stamp(), &HashSet::new(), &big);
        assert!(l.file("bk", "one/", "0").is_some());
        // The second does not fit beside the first: it starts over.
        l.remember("bk", "two/", l.stamp(), &HashSet::new(), &big);
        assert!(l.file("bk", "two/", "0").is_some());
        assert!(l.file("bk", "one/", "0").is_none() && !l.is_file("bk", "one/", "0"));
        // More than the whole budget: only its directories are remembered.
        let huge = Arc::new(
            (0..ENTRIES_MAX + 1)
                .map(|i| file(&i.to_string(), 1))
                .collect(),
        );
        l.remember("bk", "three/", l.stamp(), &HashSet::new(), &huge);
        assert!(l.file("bk", "three/", "0").is_none() && l.is_file("bk", "three/", "0"));
        assert!(l.file("bk", "two/", "0").is_some());
    }

    #[test]
    fn a_directory_listed_again_is_counted_once() {
        let (l, ..) = listings(60_000);
        let quarter = Arc::new(
            (0..ENTRIES_MAX / 4)
                .map(|i| file(&i.to_string(), 1))
                .collect(),
        );
        for _ in 0..4 {
            l.remember("bk", "one/", l.stamp(), &HashSet::new(), &quarter);
        }
        l.remember("bk", "two/", l.stamp(), &HashSet::new(), &quarter);
        assert!(l.file("bk", "one/", "0").is_some() && l.file("bk", "two/", "0").is_some());
        // The same for the directory count.
        let one = Arc::new(vec![file("a", 1)]);
        let (l, ..) = listings(60_000);
        for _ in 0..LISTED_MAX {
            l.remember("bk", "d/", l.stamp(), &HashSet::new(), &one);
        }
        l.remember("bk", "e/", l.stamp(), &HashSet::new(), &one);
        assert!(l.file("bk", "d/", "a").is_some() && l.file("bk", "e/", "a").is_some());
    }

    #[test]
    fn a_seen_directory_counts_until_something_could_have_removed_it() {
        let names = Arc::new(AtomicU64::new(0));
        let seen = SeenDirs::new(Duration::from_secs(60), Arc::clone(&names));
        let st = seen.stamp();
        seen.remember("bk", "d/", st, 7u32);
        assert_eq!(seen.get("bk", "d/"), Some(7));
        assert_eq!(seen.get("bk", "e/"), None);
        assert_eq!(seen.get("other", "d/"), None);
        // An unlink (rmdir, rename, setattr) through the mount voids it.
        seen.shrunk();
        assert_eq!(seen.get("bk", "d/"), None);
        // So does any change from outside the mount.
        seen.remember("bk", "d/", seen.stamp(), 8);
        assert_eq!(seen.get("bk", "d/"), Some(8));
        names.fetch_add(1, Ordering::AcqRel);
        assert_eq!(seen.get("bk", "d/"), None);
        // What was read across a change is not remembered.
        let st = seen.stamp();
        seen.shrunk();
        seen.remember("bk", "d/", st, 9);
        assert_eq!(seen.get("bk", "d/"), None);
        // Past the TTL it does not count; a TTL of zero remembers nothing.
        let seen = SeenDirs::new(Duration::from_millis(20), Arc::clone(&names));
        seen.remember("bk", "d/", seen.stamp(), 1u32);
        assert_eq!(seen.get("bk", "d/"), Some(1));
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(seen.get("bk", "d/"), None);
        let seen = SeenDirs::new(Duration::ZERO, names);
        seen.remember("bk", "d/", seen.stamp(), 1u32);
        assert_eq!(seen.get("bk", "d/"), None);
    }
}
