//! Delimiter listings remembered with the index partition version they were read at.
//!
//! A delimiter listing over large directories seeks past each one with a read of its own (the
//! OSD cannot skip a prefix for us without an object class), so it costs one round trip per
//! directory. A page whose reads all came from one partition at one object version is a
//! function of that version: when the same query's first read meets the same partition at the
//! same version (RADOS bumps it on every write to the object), no key under it changed, and
//! the rest of the page is what the remembered reads found. Repeated listings of an unchanged
//! directory (every data loader worker listing its dataset's shards, `aws s3 sync` polling)
//! then cost one read.
//!
//! A changed partition is listed again, but the seeks the last listing of the query made are
//! remembered too (where each started): the next listing makes them all at once and takes
//! each result when its walk reaches that point. A directory added since is sought as before;
//! a seek no longer reached is one small read spent. When the last listing of the query was
//! answered from its remembered page, the next one most likely is too, so it makes the seeks
//! only once its first read found the partition changed (one round trip later); otherwise it
//! makes them beside its first read (saving that round trip when the partition keeps changing,
//! and spending up to [`SEEKS_MAX`] reads of [`crate::SEEK_READ`] entries when it did not).
//! Each read is still a read of the partition made during the request, as the sequential
//! walk's are.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use lode_catalog::{ListPage, ListQuery};

/// Queries remembered at most (then it starts over).
const PAGES_MAX: usize = 64;
/// Seeks remembered (and made ahead) per query at most.
pub(crate) const SEEKS_MAX: usize = 32;
/// Entries (objects and common prefixes) remembered at most over all pages.
const ENTRIES_MAX: usize = 1 << 14;

/// A delimiter listing's query in one bucket: what a page is remembered by.
#[derive(Hash, PartialEq, Eq)]
pub(crate) struct Query {
    bucket: String,
    prefix: String,
    delimiter: String,
    after: Option<String>,
    max: usize,
}

impl Query {
    /// `None` without a delimiter (nothing is remembered).
    pub(crate) fn of(bucket: &str, q: &ListQuery<'_>) -> Option<Self> {
        Some(Query {
            bucket: bucket.to_owned(),
            prefix: q.prefix.to_owned(),
            delimiter: q.delimiter?.to_owned(),
            after: q.after.map(str::to_owned),
            max: q.max,
        })
    }
}

/// Which partition object a read of a listing came from, at which version.
pub(crate) type Read = (String, u64);

/// What the last listing of a query found.
struct Remembered {
    /// The page, with the one partition version all its reads met (if they did).
    page: Option<(Read, ListPage)>,
    /// Where its seeks started (omap keys).
    seeks: Vec<Vec<u8>>,
    /// The last listing of the query was answered from `page`.
    hit_last: bool,
}

/// Where the last listing of a query sought, and when to seek there again.
#[derive(Default)]
pub(crate) struct Seeks {
    pub(crate) from: Vec<Vec<u8>>,
    /// Beside the first read (the last listing found the partition changed), or only once the
    /// first read found it changed (the last one was answered from memory).
    pub(crate) beside_first: bool,
}

#[derive(Default)]
pub(crate) struct Pages {
    map: Mutex<HashMap<Query, Remembered>>,
    hits: AtomicU64,
    /// Seeks made ahead that a walk took.
    taken_ahead: AtomicU64,
    /// Seeks made ahead.
    made_ahead: AtomicU64,
}

impl Pages {
    /// The page remembered for `key`, if its reads were all `first`: the partition and version
    /// the listing's first read met now.
    pub(crate) fn hit(&self, key: &Query, first: &Read) -> Option<ListPage> {
        let mut m = self.map.lock().expect("pages");
        let r = m.get_mut(key)?;
        let (read, page) = r.page.as_ref()?;
        if read != first {
            return None;
        }
        let page = page.clone();
        r.hit_last = true;
        self.hits.fetch_add(1, Ordering::Relaxed);
        Some(page)
    }

    /// How many listings [`hit`](Self::hit) answered.
    pub(crate) fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    /// A walk took a seek made ahead.
    pub(crate) fn took_ahead(&self) {
        self.taken_ahead.fetch_add(1, Ordering::Relaxed);
    }

    /// `n` seeks are made ahead.
    pub(crate) fn making_ahead(&self, n: usize) {
        self.made_ahead.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// How many seeks were made ahead.
    pub(crate) fn made_ahead(&self) -> u64 {
        self.made_ahead.load(Ordering::Relaxed)
    }

    /// How many seeks made ahead walks took.
    pub(crate) fn taken_ahead(&self) -> u64 {
        self.taken_ahead.load(Ordering::Relaxed)
    }

    /// Where the last listing of `key` sought, and when to seek there again.
    pub(crate) fn seeks(&self, key: &Query) -> Seeks {
        let m = self.map.lock().expect("pages");
        m.get(key)
            .map(|r| Seeks {
                from: r.seeks.clone(),
                beside_first: !r.hit_last,
            })
            .unwrap_or_default()
    }

    /// Remembers a delimiter listing that took more than one read (one read costs as much as
    /// the check): where it sought, and its page if every read met one partition at one
    /// version.
    pub(crate) fn remember(
        &self,
        key: Query,
        reads: &[Read],
        seeks: Vec<Vec<u8>>,
        page: &ListPage,
    ) {
        let [first, rest @ ..] = reads else { return };
        if rest.is_empty() {
            return;
        }
        let size = page.objects.len() + page.common_prefixes.len();
        let whole = rest.iter().all(|r| r == first) && size <= ENTRIES_MAX;
        let page = whole.then(|| (first.clone(), page.clone()));
        let weight = |r: &Remembered| {
            r.page
                .as_ref()
                .map_or(0, |(_, p)| p.objects.len() + p.common_prefixes.len())
        };
        let mut m = self.map.lock().expect("pages");
        let held: usize = m.values().map(weight).sum();
        let mut seeks = seeks;
        seeks.truncate(SEEKS_MAX);
        let new = Remembered {
            page,
            seeks,
            hit_last: false,
        };
        if m.len() >= PAGES_MAX || held + weight(&new) > ENTRIES_MAX {
            m.clear();
        }
        m.insert(key, new);
    }
}
