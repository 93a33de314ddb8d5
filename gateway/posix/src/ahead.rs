//! Listing a large directory ahead of the kernel's reads.
//!
//! A cold `readdir` of a big directory is a chain: the kernel asks for a buffer of entries,
//! the mount lists that many from the catalog, the kernel takes the reply in (building a
//! dentry and inode per entry for readdirplus), and asks again. Listing and taking in are
//! each about half of the time, one after the other. Once a directory turns out to hold more
//! than one page, a blocking-pool thread lists the following pages while the kernel takes in
//! the last reply, up to [`MAX_AHEAD`] pages ahead of the reader.
//!
//! The pages are raw (names and attributes of one catalog page, its common prefixes, where it
//! ended); the directory handle merges them in order, exactly as it merges a page it listed
//! itself, so a listing ahead and one inline give the same entries.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use lode_objects::ObjectService;

use crate::error::ToErrno;
use crate::slots::Slots;

use crate::names::{self, Attrs};

/// Pages listed ahead of the reader at most (about 100 bytes an entry: 1.6 MB a handle).
pub(crate) const MAX_AHEAD: usize = 16;
/// Entries per catalog page.
pub(crate) const PAGE: usize = 1000;
/// A lister with no room waits this long for the reader, then stops (a handle left open
/// unread does not hold a thread); the reader lists inline from where it stopped.
const IDLE: Duration = Duration::from_secs(5);
/// Listers running at most, over every open directory: they run on the blocking pool, which
/// the rest of the gateway shares, so many slow readers of large directories must not fill it
/// with waiting listers. Past this, a directory is listed inline, page by page, as its reader
/// asks.
const MAX_LISTERS: usize = 16;

/// The listers' places, each given back when its lister stops.
static LISTERS: Slots = Slots::new(MAX_LISTERS);

/// One catalog page of a directory: its objects (name, size, last-modified, attributes), its
/// common prefixes (directory names), and where it ended.
pub(crate) struct RawPage {
    pub objects: Vec<(String, u64, i64, Attrs)>,
    pub dirs: Vec<String>,
    pub truncated: bool,
    pub last: Option<String>,
}

/// Lists one page of `prefix` in `bucket` after `after`.
pub(crate) fn list_page(
    svc: &ObjectService,
    bucket: &str,
    prefix: &str,
    after: Option<&str>,
) -> Result<RawPage, i32> {
    let mut objects = Vec::with_capacity(PAGE);
    // Only each object's summary is decoded (no checksums, segments or string copies).
    let page = svc
        .list_summaries_blocking(bucket, prefix, after, PAGE, &mut |key, rec| {
            if let Some(n) = names::entry_name(prefix, key) {
                objects.push((
                    n.to_owned(),
                    rec.size,
                    rec.last_modified_ms,
                    Attrs::from_user(rec.meta.user.iter().copied()),
                ));
            }
        })
        .map_err(|e| e.errno())?;
    let dirs = page
        .common_prefixes
        .iter()
        .filter_map(|cp| names::entry_name(prefix, cp).map(str::to_owned))
        .collect();
    Ok(RawPage {
        objects,
        dirs,
        truncated: page.truncated,
        last: page.last,
    })
}

struct State {
    pages: VecDeque<Result<RawPage, i32>>,
    /// The lister is running (it may still push pages).
    running: bool,
    /// The handle was released: the lister stops.
    closed: bool,
}

/// The pages a lister thread has listed ahead for one open directory.
pub(crate) struct Ahead {
    state: Mutex<State>,
    cv: Condvar,
}

impl Ahead {
    /// Starts listing `prefix` of `bucket` after `after` on the blocking pool of `rt`; `None`
    /// when [`MAX_LISTERS`] are running already.
    pub(crate) fn start(
        rt: &tokio::runtime::Handle,
        svc: Arc<ObjectService>,
        bucket: String,
        prefix: String,
        after: String,
    ) -> Option<Arc<Self>> {
        let slot = LISTERS.take()?;
        let me = Arc::new(Self {
            state: Mutex::new(State {
                pages: VecDeque::new(),
                running: true,
                closed: false,
            }),
            cv: Condvar::new(),
        });
        let a = Arc::clone(&me);
        rt.spawn_blocking(move || {
            let _slot = slot;
            a.run(&svc, &bucket, &prefix, after);
        });
        Some(me)
    }

    fn run(&self, svc: &ObjectService, bucket: &str, prefix: &str, mut after: String) {
        loop {
            let page = list_page(svc, bucket, prefix, Some(&after));
            let next = match &page {
                Ok(p) if p.truncated => p.last.clone(),
                _ => None,
            };
            let mut st = self.state.lock().expect("ahead");
            st.pages.push_back(page);
            self.cv.notify_all();
            let Some(next) = next else { break };
            after = next;
            while st.pages.len() >= MAX_AHEAD && !st.closed {
                let (s, timeout) = self.cv.wait_timeout(st, IDLE).expect("ahead");
                st = s;
                if timeout.timed_out() && st.pages.len() >= MAX_AHEAD {
                    st.running = false;
                    self.cv.notify_all();
                    return;
                }
            }
            if st.closed {
                break;
            }
        }
        self.state.lock().expect("ahead").running = false;
        self.cv.notify_all();
    }

    /// The next page, in order; waits while the lister is on it. `None` once the lister has
    /// stopped and every page it listed was taken (the reader lists on from there).
    pub(crate) fn next(&self) -> Option<Result<RawPage, i32>> {
        let mut st = self.state.lock().expect("ahead");
        loop {
            if let Some(p) = st.pages.pop_front() {
                self.cv.notify_all();
                return Some(p);
            }
            if !st.running {
                return None;
            }
            st = self.cv.wait(st).expect("ahead");
        }
    }

    /// Whether [`Ahead::next`] would answer without waiting.
    pub(crate) fn ready(&self) -> bool {
        let st = self.state.lock().expect("ahead");
        !st.pages.is_empty() || !st.running
    }

    /// The handle is released: the lister stops after its current page.
    pub(crate) fn close(&self) {
        self.state.lock().expect("ahead").closed = true;
        self.cv.notify_all();
    }
}
