//! Deferred reclaim: space freed by a delete or overwrite goes back to the allocator only after
//! every reader that started before the free has finished.
//!
//! Readers enter an epoch before they look up metadata. A free is stamped with a new epoch and
//! released once no reader of an older epoch remains. New readers cannot find the freed extents,
//! because the metadata that named them was already committed away.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::Extent;

type Release = Box<dyn FnOnce(Vec<Extent>) + Send>;

#[derive(Default)]
struct State {
    epoch: u64,
    readers: BTreeMap<u64, usize>,
    pending: Vec<(u64, Vec<Extent>)>,
}

impl State {
    /// Takes out every pending free that no live reader can still see.
    fn ready(&mut self) -> Vec<Extent> {
        let oldest = self.readers.keys().next().copied().unwrap_or(u64::MAX);
        let mut out = vec![];
        self.pending.retain_mut(|(e, ex)| {
            if *e <= oldest {
                out.append(ex);
                false
            } else {
                true
            }
        });
        out
    }
}

#[derive(Default)]
pub(crate) struct Reclaim {
    state: Arc<Mutex<State>>,
}

/// Held by an in-flight reader; see [`crate::Datapath::read_guard`].
pub struct ReadGuard {
    state: Arc<Mutex<State>>,
    epoch: u64,
    release: Option<Release>,
}

impl Reclaim {
    pub(crate) fn enter(&self, release: Release) -> ReadGuard {
        let mut s = self.state.lock().expect("reclaim");
        let epoch = s.epoch;
        *s.readers.entry(epoch).or_default() += 1;
        ReadGuard {
            state: Arc::clone(&self.state),
            epoch,
            release: Some(release),
        }
    }

    pub(crate) fn defer(&self, extents: Vec<Extent>, release: Release) {
        let ready = {
            let mut s = self.state.lock().expect("reclaim");
            s.epoch += 1;
            let e = s.epoch;
            s.pending.push((e, extents));
            s.ready()
        };
        if !ready.is_empty() {
            release(ready);
        }
    }

    #[cfg(test)]
    fn pending(&self) -> usize {
        self.state.lock().unwrap().pending.len()
    }
}

impl Drop for ReadGuard {
    fn drop(&mut self) {
        let ready = {
            let mut s = self.state.lock().expect("reclaim");
            if let Some(n) = s.readers.get_mut(&self.epoch) {
                *n -= 1;
                if *n == 0 {
                    s.readers.remove(&self.epoch);
                }
            }
            s.ready()
        };
        if !ready.is_empty()
            && let Some(r) = self.release.take()
        {
            r(ready);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn free_waits_for_older_readers_only() {
        let r = Reclaim::default();
        let released = Arc::new(AtomicUsize::new(0));
        let rel = || {
            let c = Arc::clone(&released);
            Box::new(move |v: Vec<Extent>| {
                c.fetch_add(v.len(), Ordering::SeqCst);
            }) as Release
        };
        let old_reader = r.enter(rel());
        let e = Extent {
            dev: 0,
            offset: 0,
            len: 4096,
        };
        r.defer(vec![e], rel());
        assert_eq!(
            released.load(Ordering::SeqCst),
            0,
            "an older reader still runs"
        );
        let new_reader = r.enter(rel());
        drop(old_reader);
        assert_eq!(
            released.load(Ordering::SeqCst),
            1,
            "a newer reader does not hold it"
        );
        assert_eq!(r.pending(), 0);
        drop(new_reader);
        r.defer(vec![e, e], rel());
        assert_eq!(
            released.load(Ordering::SeqCst),
            3,
            "no readers: released at once"
        );
    }
}
