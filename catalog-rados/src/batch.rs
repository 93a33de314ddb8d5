//! Group commit of new keys into one index partition.
//!
//! A guarded write op (any `cmpxattr` or `omap_cmp` step) reads the object, and the OSD runs
//! such ops on one object one after the other, each waiting for the commit of the one before
//! (measured on the single-host cluster: about 420 guarded writes per second to one object at
//! any queue depth, against 1,300 unguarded). Every commit of a key is guarded, so without
//! batching a partition takes at most that many new keys per second however many clients
//! write. Here the blind commits of new keys (see `Inner::commit_blind`) that wait for the same
//! partition go as one op: the partition's epoch compared once, every key compared with
//! absent, every entry set (with the split's log entries of each, while a split copies the
//! partition). The op is one transaction: if any guard fails nothing is applied, and one read
//! of the partition's epoch and the batch's keys sorts the commits out: a key that exists
//! goes the read-then-commit path on its own; if the partition changed (a split claimed or
//! sealed it), the others refresh it and commit blind again, with the commits still queued
//! against the old epoch; if it did not, they go again in the next op. (Sending a whole batch
//! down the read path made every epoch bump a burst of single-key guarded writes, which the
//! OSD runs one after the other: hundreds of milliseconds of a partition's writes.) One key
//! appears at most once per op (a second commit of the same key waits for the next op, so it
//! sees the first as present).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use lode_catalog::{CatalogError, Result};
use lode_rados::{CmpOp, IoCtx, RadosError, ReadOp, WriteOp};
use tokio::sync::oneshot;

use crate::{EPOCH, lost_race};

/// At most this many keys per op.
const MAX_KEYS: usize = 64;
/// At most about this many bytes of keys and values per op.
const MAX_BYTES: usize = 2 << 20;

/// One blind commit: the object key's omap key (compared with absent), the entries to set,
/// and the partition epoch it was prepared against.
pub(crate) struct Blind {
    pub key: Vec<u8>,
    pub set: Vec<(Vec<u8>, Vec<u8>)>,
    pub epoch: Bytes,
}

/// What became of a blind commit (nothing is applied but with `Applied`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Applied,
    /// Its key exists, or which guard failed is not known: read, then commit.
    Exists,
    /// The partition changed since it was read (or is gone), and the key was absent: read the
    /// partition again, then commit blind again.
    Stale,
}

/// A commit held up by another key's guard goes again at most this many times.
const TRIES: u8 = 3;

struct Waiting {
    blind: Blind,
    done: oneshot::Sender<Result<Outcome>>,
    tries: u8,
}

#[derive(Default)]
struct Lane {
    queue: VecDeque<Waiting>,
    busy: bool,
}

/// The lanes of blind commits, one per partition object with commits waiting or in flight.
#[derive(Default, Clone)]
pub(crate) struct Batches {
    lanes: Arc<Mutex<HashMap<String, Lane>>>,
}

impl Batches {
    /// Commits `blind` to partition `oid` with whatever else waits for it. A failure that
    /// may have applied the op (a timeout) is an error.
    pub async fn commit(&self, io: &IoCtx, oid: &str, blind: Blind) -> Result<Outcome> {
        let (done, rx) = oneshot::channel();
        let lead = {
            let mut lanes = self.lanes.lock().unwrap();
            let lane = lanes.entry(oid.to_owned()).or_default();
            lane.queue.push_back(Waiting {
                blind,
                done,
                tries: 0,
            });
            !std::mem::replace(&mut lane.busy, true)
        };
        if lead {
            // Its own task: a request that goes away must not strand the others.
            let (me, io, oid) = (self.clone(), io.clone(), oid.to_owned());
            tokio::spawn(async move { me.drain(&io, &oid).await });
        }
        rx.await
            .unwrap_or_else(|_| Err(CatalogError::Unavailable("group commit stopped".into())))
    }

    async fn drain(&self, io: &IoCtx, oid: &str) {
        loop {
            let batch = {
                let mut lanes = self.lanes.lock().unwrap();
                let Some(lane) = lanes.get_mut(oid) else {
                    return;
                };
                if lane.queue.is_empty() {
                    lanes.remove(oid);
                    return;
                }
                take_batch(&mut lane.queue)
            };
            let Some(first) = batch.first() else {
                continue;
            };
            let epoch = first.blind.epoch.clone();
            let mut op = WriteOp::new().cmpxattr(EPOCH, CmpOp::Eq, &epoch);
            for w in &batch {
                op = op.omap_cmp(&w.blind.key, CmpOp::Eq, b"");
            }
            let set: Vec<(&[u8], &[u8])> = batch
                .iter()
                .flat_map(|w| w.blind.set.iter().map(|(k, v)| (&k[..], &v[..])))
                .collect();
            op = op.omap_set(&set);
            let outcome = io.operate_write(oid, op).await;
            tracing::trace!(
                partition = oid,
                keys = batch.len(),
                ok = outcome.is_ok(),
                "group commit"
            );
            match outcome {
                Ok(_) => {
                    for w in batch {
                        let _ = w.done.send(Ok(Outcome::Applied));
                    }
                }
                Err(e) if lost_race(&e) || e.is_not_found() => {
                    self.sort_out(io, oid, &epoch, batch, e.is_not_found())
                        .await;
                }
                Err(e) => {
                    for w in batch {
                        let _ = w.done.send(Err(copy_err(&e)));
                    }
                }
            }
        }
    }

    /// A batch whose guard failed (nothing applied): one read of the partition's epoch and
    /// the batch's keys tells each commit what to do ([`Outcome`]); the commits absent from
    /// an unchanged partition go again at the front of the queue.
    async fn sort_out(
        &self,
        io: &IoCtx,
        oid: &str,
        epoch: &Bytes,
        batch: Vec<Waiting>,
        gone: bool,
    ) {
        let read = if gone {
            None
        } else {
            let keys: Vec<&[u8]> = batch.iter().map(|w| &w.blind.key[..]).collect();
            let op = ReadOp::new().getxattr(EPOCH).omap_get_vals_by_keys(&keys);
            match io.operate_read(oid, op).await {
                Ok(r) => Some(r),
                Err(e) if e.is_not_found() => None,
                Err(e) => {
                    tracing::debug!(partition = oid, error = %e, "reading a failed group commit");
                    for w in batch {
                        let _ = w.done.send(Ok(Outcome::Exists));
                    }
                    return;
                }
            }
        };
        let (now, present): (Option<Bytes>, HashSet<Vec<u8>>) = match read {
            Some(r) => (
                r.xattr(EPOCH).cloned(),
                r.omap_vals_by_keys
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, _)| k)
                    .collect(),
            ),
            None => (None, HashSet::new()),
        };
        let changed = now.as_ref() != Some(epoch);
        let mut again = vec![];
        for mut w in batch {
            let o = if present.contains(&w.blind.key) {
                Outcome::Exists
            } else if changed {
                Outcome::Stale
            } else if w.tries + 1 < TRIES {
                w.tries += 1;
                again.push(w);
                continue;
            } else {
                Outcome::Exists
            };
            let _ = w.done.send(Ok(o));
        }
        let mut lanes = self.lanes.lock().unwrap();
        let Some(lane) = lanes.get_mut(oid) else {
            return;
        };
        for w in again.into_iter().rev() {
            lane.queue.push_front(w);
        }
        if changed {
            // Those prepared against the old epoch would fail the same way: answer them now.
            let (stale, keep): (VecDeque<Waiting>, VecDeque<Waiting>) =
                lane.queue.drain(..).partition(|w| w.blind.epoch == *epoch);
            lane.queue = keep;
            for w in stale {
                let _ = w.done.send(Ok(Outcome::Stale));
            }
        }
    }
}

/// The next op's commits from the front of `queue`: one epoch, each key once, within the
/// limits. Those left out stay in order for the next op.
fn take_batch(queue: &mut VecDeque<Waiting>) -> Vec<Waiting> {
    let epoch = queue
        .iter()
        .find(|w| !w.done.is_closed())
        .map(|w| w.blind.epoch.clone())
        .unwrap_or_default();
    let (mut batch, mut rest) = (vec![], VecDeque::new());
    let mut keys = HashSet::new();
    let mut bytes = 0usize;
    while let Some(w) = queue.pop_front() {
        // Its request went away (a client that disconnected): its chunks are being removed,
        // so its record must not be written.
        if w.done.is_closed() {
            continue;
        }
        let size: usize = w.blind.set.iter().map(|(k, v)| k.len() + v.len()).sum();
        let fits = batch.is_empty()
            || (batch.len() < MAX_KEYS && bytes + size <= MAX_BYTES && w.blind.epoch == epoch);
        if fits && keys.insert(w.blind.key.clone()) {
            bytes += size;
            batch.push(w);
        } else {
            rest.push_back(w);
        }
    }
    *queue = rest;
    batch
}

/// The same error for every commit of a batch.
fn copy_err(e: &RadosError) -> CatalogError {
    if e.is_timeout() {
        CatalogError::Unavailable(e.to_string())
    } else if let Some(why) = crate::fenced(e) {
        CatalogError::Unavailable(why)
    } else {
        CatalogError::Backend(e.to_string().into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiting(
        key: &str,
        epoch: &str,
        size: usize,
    ) -> (Waiting, oneshot::Receiver<Result<Outcome>>) {
        let (done, rx) = oneshot::channel();
        let blind = Blind {
            key: key.as_bytes().to_vec(),
            set: vec![(key.as_bytes().to_vec(), vec![0; size])],
            epoch: Bytes::copy_from_slice(epoch.as_bytes()),
        };
        (
            Waiting {
                blind,
                done,
                tries: 0,
            },
            rx,
        )
    }

    fn keys(b: &[Waiting]) -> Vec<String> {
        b.iter()
            .map(|w| String::from_utf8(w.blind.key.clone()).unwrap())
            .collect()
    }

    #[test]
    fn a_batch_holds_each_key_once_one_epoch_and_stays_within_limits() {
        let mut q = VecDeque::new();
        let mut rxs = vec![];
        for (k, e) in [("a", "1"), ("b", "1"), ("a", "1"), ("c", "2"), ("d", "1")] {
            let (w, rx) = waiting(k, e, 10);
            q.push_back(w);
            rxs.push(rx);
        }
        let b = take_batch(&mut q);
        assert_eq!(keys(&b), ["a", "b", "d"]);
        let left: Vec<Waiting> = q.into_iter().collect();
        assert_eq!(keys(&left), ["a", "c"]);

        let (mut q, _rxs): (VecDeque<Waiting>, Vec<_>) = (0..MAX_KEYS + 5)
            .map(|i| waiting(&format!("k{i}"), "1", 10))
            .unzip();
        assert_eq!(take_batch(&mut q).len(), MAX_KEYS);
        assert_eq!(q.len(), 5);

        // A commit whose request went away is dropped, not written.
        let (gone, rx) = waiting("gone", "1", 10);
        drop(rx);
        let (kept, _rx) = waiting("kept", "1", 10);
        let mut q: VecDeque<Waiting> = [gone, kept].into_iter().collect();
        assert_eq!(keys(&take_batch(&mut q)), ["kept"]);
        assert!(q.is_empty());

        // Bytes: a big first commit goes alone; the next one waits.
        let (mut q, _rxs): (VecDeque<Waiting>, Vec<_>) = [MAX_BYTES + 1, 10]
            .iter()
            .enumerate()
            .map(|(i, s)| waiting(&format!("k{i}"), "1", *s))
            .unzip();
        assert_eq!(take_batch(&mut q).len(), 1);
        assert_eq!(q.len(), 1);
    }
}
