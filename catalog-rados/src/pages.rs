//! Delimiter listings remembered with the index partition version they were read at.
//!
//! A delimiter listing over large directories seeks past each one with a read of its own (the
//! OSD cannot skip a prefix for us without an object class), so it costs one round trip per
//! directory. A page whose reads all came from one partition at one object version is a
//! function of that version: when the same query's first read meets the same partition at the
//! same version (RADOS bumps it on every write to the object), no key under it changed, and
//! the rest of the page is what the remembered reads found. Repeated listings of an unchanged
//! directory (every data loader worker listing its dataset's shards, `aws s3 sync` polling)
//! then cost one read; a changed partition is listed as before.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use lode_catalog::{ListPage, ListQuery};

/// Pages remembered at most (then it starts over).
const PAGES_MAX: usize = 64;
/// Entries (objects and common prefixes) remembered at most over all pages.
const ENTRIES_MAX: usize = 1 << 14;

#[derive(Hash, PartialEq, Eq)]
struct Query {
    bucket: String,
    prefix: String,
    delimiter: String,
    after: Option<String>,
    max: usize,
}

impl Query {
    fn of(bucket: &str, q: &ListQuery<'_>) -> Option<Self> {
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

#[derive(Default)]
pub(crate) struct Pages {
    map: Mutex<HashMap<Query, (Read, ListPage)>>,
    hits: AtomicU64,
}

impl Pages {
    /// The page remembered for `q` in `bucket`, if its reads were all `first`: the partition
    /// and version the listing's first read met now.
    pub(crate) fn hit(&self, bucket: &str, q: &ListQuery<'_>, first: &Read) -> Option<ListPage> {
        let key = Query::of(bucket, q)?;
        let m = self.map.lock().expect("pages");
        let (read, page) = m.get(&key)?;
        if read != first {
            return None;
        }
        self.hits.fetch_add(1, Ordering::Relaxed);
        Some(page.clone())
    }

    /// How many listings [`hit`](Self::hit) answered.
    pub(crate) fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    /// Remembers a delimiter listing's page if it took more than one read (one read costs as
    /// much as the check) and every read was of one partition at one version.
    pub(crate) fn remember(
        &self,
        bucket: &str,
        q: &ListQuery<'_>,
        reads: &[Read],
        page: &ListPage,
    ) {
        let Some(key) = Query::of(bucket, q) else {
            return;
        };
        let [first, rest @ ..] = reads else { return };
        let size = page.objects.len() + page.common_prefixes.len();
        if rest.is_empty() || rest.iter().any(|r| r != first) || size > ENTRIES_MAX {
            return;
        }
        let mut m = self.map.lock().expect("pages");
        let held: usize = m
            .values()
            .map(|(_, p)| p.objects.len() + p.common_prefixes.len())
            .sum();
        if m.len() >= PAGES_MAX || held + size > ENTRIES_MAX {
            m.clear();
        }
        m.insert(key, (first.clone(), page.clone()));
    }
}
