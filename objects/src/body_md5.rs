//! MD5 of upload bodies (the ETag), with many bodies hashed at once.
//!
//! MD5 is one long dependency chain per body, so one body hashes at one core's scalar speed.
//! Independent bodies can share SIMD lanes instead: `md5_many` steps eight of them through MD5
//! together on AVX2 (four on SSE4.2), several times the scalar rate in total. To have several
//! bodies to step together, bodies of more than [`ENGINE_MIN`] bytes send their pieces to a
//! hashing engine: a thread that, each round, hashes the waiting piece of every body that has
//! one in a single `update_many` call. A body alone in the engine hashes at scalar speed, as it
//! would inline.
//!
//! There are two engines. Bodies of up to a chunk go to the `fast` one, at the process's CPU
//! priority. Larger bodies (checkpoints, streams) go to the `bulk` one, which runs at a lower
//! priority ([`BULK_NICE`]): when the cores are busy, small requests' work runs first and a large
//! transfer's hashing takes what is left.
//!
//! Each body has at most [`IN_FLIGHT`] pieces waiting in its engine, so a slow engine slows the
//! upload that feeds it instead of buffering it. A body whose upload stops (error, disconnect)
//! tells the engine to drop its state.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;

use bytes::Bytes;
use md5_many::{Md5Many, Md5State};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};

use crate::error::{ObjError, ObjResult};

/// Bodies up to this size hash inline on the request's task: handing them to the engine would
/// cost more than hashing them (64 KiB is about 0.12 ms of MD5 here).
pub(crate) const ENGINE_MIN: u64 = 64 << 10;

/// Pieces of one body waiting in its engine, at most.
const IN_FLIGHT: usize = 32;

/// Bodies hashed together in one round, at most (two AVX2 batches of eight).
const MAX_BATCH: usize = 16;

/// Engines of each kind, at most (one per core up to this).
const MAX_ENGINES: usize = 8;

/// Bytes of each body hashed in one round, at most.
const ROUND_MAX: usize = 64 << 10;

/// How much the bulk engine lowers its CPU priority: added to the process's nice value (at most
/// 19). Under a blend of small requests and checkpoint writes on two cores, 10 took the HEAD p99
/// from 30-36 to 23-25 ms and the small-PUT p99 from 1.1-1.4 s to 0.9 s; 19 measured the same as
/// 10.
pub(crate) const BULK_NICE: i32 = 10;

/// Lowers the calling thread's CPU priority by [`BULK_NICE`] (on Linux the nice value is per
/// thread). Best effort: on failure the thread keeps the process's priority.
pub(crate) fn lower_this_threads_priority() {
    let cur = rustix::process::getpriority_process(None).unwrap_or(0);
    if let Err(e) = rustix::process::setpriority_process(None, (cur + BULK_NICE).min(19)) {
        tracing::debug!(error = %e, "could not lower the MD5 engine's priority");
    }
}

enum Msg {
    /// A body joins the engine with what was hashed of it so far.
    Open(u64, Md5State),
    Data(u64, Bytes, OwnedSemaphorePermit),
    /// The body is complete: answer its digest once its pieces are hashed.
    Finish(u64, oneshot::Sender<[u8; 16]>),
    /// The upload stopped: drop the body's state and pieces.
    Abandon(u64),
}

/// One hashing thread. It stops when the last handle to it (the engines and every body in it)
/// is gone.
struct Engine {
    tx: mpsc::Sender<Msg>,
    next_id: AtomicU64,
    /// Bodies in this engine now (a new body goes to the engine with the fewest).
    open: Arc<AtomicUsize>,
}

impl Engine {
    fn start(name: &str, lower_priority: bool) -> ObjResult<Self> {
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                if lower_priority {
                    lower_this_threads_priority();
                }
                run(rx)
            })
            .map_err(|e| ObjError::Internal(format!("could not start the MD5 engine: {e}")))?;
        Ok(Self {
            tx,
            next_id: AtomicU64::new(0),
            open: Arc::new(AtomicUsize::new(0)),
        })
    }

    fn open(&self, state: Md5State) -> ObjResult<EngineBody> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        send(&self.tx, Msg::Open(id, state))?;
        self.open.fetch_add(1, Ordering::Relaxed);
        Ok(EngineBody {
            id,
            tx: self.tx.clone(),
            room: Arc::new(Semaphore::new(IN_FLIGHT)),
            finished: false,
            open: Arc::clone(&self.open),
        })
    }
}

fn send(tx: &mpsc::Sender<Msg>, m: Msg) -> ObjResult<()> {
    tx.send(m)
        .map_err(|_| ObjError::Internal("the MD5 engine stopped".into()))
}

/// One body waiting in the engine.
struct Body {
    state: Md5State,
    pieces: VecDeque<(Bytes, OwnedSemaphorePermit)>,
    finish: Option<oneshot::Sender<[u8; 16]>>,
    /// The round this body was last hashed in (the longest-waiting bodies go first).
    served: u64,
}

fn run(rx: mpsc::Receiver<Msg>) {
    let lanes = Md5Many::new();
    let zeros = vec![0u8; ROUND_MAX];
    let mut bodies: HashMap<u64, Body> = HashMap::new();
    let mut round = 0u64;
    let apply = |bodies: &mut HashMap<u64, Body>, m: Msg| match m {
        Msg::Open(id, state) => {
            bodies.insert(
                id,
                Body {
                    state,
                    pieces: VecDeque::new(),
                    finish: None,
                    served: 0,
                },
            );
        }
        Msg::Data(id, b, permit) => {
            if let Some(body) = bodies.get_mut(&id) {
                body.pieces.push_back((b, permit));
            }
        }
        Msg::Finish(id, tx) => {
            if let Some(body) = bodies.get_mut(&id) {
                body.finish = Some(tx);
            }
        }
        Msg::Abandon(id) => {
            bodies.remove(&id);
        }
    };
    loop {
        // Wait only when no piece is waiting; then take everything that arrived meanwhile, so
        // the round hashes as many bodies together as there are.
        if bodies.values().all(|b| b.pieces.is_empty()) {
            match rx.recv() {
                Ok(m) => apply(&mut bodies, m),
                Err(_) => return,
            }
        }
        while let Ok(m) = rx.try_recv() {
            apply(&mut bodies, m);
        }
        round += 1;
        let mut ready: Vec<(u64, u64)> = bodies
            .iter()
            .filter(|(_, b)| !b.pieces.is_empty())
            .map(|(id, b)| (b.served, *id))
            .collect();
        ready.sort_unstable();
        ready.truncate(MAX_BATCH);
        // Each body's state is first brought to a block boundary (a few bytes, scalar), so that
        // the lanes then take whole blocks.
        let mut lane_ids = Vec::with_capacity(ready.len());
        for (_, id) in &ready {
            let b = bodies.get_mut(id).expect("ready body");
            b.served = round;
            let front = &mut b.pieces[0].0;
            let partial = (b.state.bytes_hashed() % 64) as usize;
            if partial != 0 {
                let head = front.split_to((64 - partial).min(front.len()));
                b.state.update(&head);
            }
            if front.len() < 64 {
                b.state.update(front);
                front.clear();
            } else {
                lane_ids.push(*id);
            }
        }
        // The same whole blocks of each body: md5_many keeps its lanes full only for equal
        // inputs (bodies 1,000 bytes apart fell back to scalar speed). What is left of a longer
        // piece waits for the next round.
        let len = lane_ids
            .iter()
            .map(|id| bodies[id].pieces[0].0.len() / 64 * 64)
            .min()
            .unwrap_or(0)
            .min(zeros.len());
        let inputs: Vec<Bytes> = lane_ids
            .iter()
            .map(|id| {
                bodies.get_mut(id).expect("ready body").pieces[0]
                    .0
                    .split_to(len)
            })
            .collect();
        hash_together(&lanes, &zeros, &mut bodies, &lane_ids, &inputs);
        // A finished piece's permit gives its upload room for one more.
        for (_, id) in &ready {
            let b = bodies.get_mut(id).expect("ready body");
            if b.pieces[0].0.is_empty() {
                b.pieces.pop_front();
            }
        }
        bodies.retain(|_, b| {
            if !b.pieces.is_empty() {
                return true;
            }
            match b.finish.take() {
                Some(tx) => {
                    let _ = tx.send(b.state.finalize());
                    false
                }
                None => true,
            }
        });
    }
}

/// Hashes `inputs[i]` (all of one length, whole blocks) into body `ids[i]`'s state. md5_many
/// has fast kernels for exactly 8 or 16 bodies at once (AVX2) and a much slower path for other
/// counts, so a batch of 3 to 7 or 9 to 15 is filled up with throwaway states hashing zeros: five
/// bodies in eight lanes still beat hashing them one after the other. One or two bodies hash on
/// the scalar path.
fn hash_together(
    lanes: &Md5Many,
    zeros: &[u8],
    bodies: &mut HashMap<u64, Body>,
    ids: &[u64],
    inputs: &[Bytes],
) {
    if ids.len() <= 2 {
        for (id, b) in ids.iter().zip(inputs) {
            bodies.get_mut(id).expect("ready body").state.update(b);
        }
        return;
    }
    let width = if ids.len() <= 8 { 8 } else { 16 };
    let len = inputs[0].len();
    let mut states: Vec<Md5State> = ids.iter().map(|id| bodies[id].state).collect();
    states.resize(width, Md5State::new());
    let mut slices: Vec<&[u8]> = inputs.iter().map(|b| &b[..]).collect();
    slices.resize(width, &zeros[..len]);
    lanes.update_many(&mut states, &slices);
    for (id, s) in ids.iter().zip(states) {
        bodies.get_mut(id).expect("ready body").state = s;
    }
}

/// A body's handle on its engine.
struct EngineBody {
    id: u64,
    tx: mpsc::Sender<Msg>,
    room: Arc<Semaphore>,
    finished: bool,
    open: Arc<AtomicUsize>,
}

impl Drop for EngineBody {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::Relaxed);
        if !self.finished {
            let _ = self.tx.send(Msg::Abandon(self.id));
        }
    }
}

/// The service's hashing engines, fast and bulk (see the module doc), one of each per core: a
/// thread per engine caps it at one core, and under load a lower-priority thread's share of the
/// CPU is per thread. With one bulk engine, two concurrent 64 MiB-part uploads hashed one after
/// the other and fell from 224-269 to 184-199 MiB/s.
pub(crate) struct Md5Engines {
    fast: Vec<Engine>,
    bulk: Vec<Engine>,
}

impl Md5Engines {
    pub(crate) fn start() -> ObjResult<Self> {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get().min(MAX_ENGINES));
        Ok(Self {
            fast: (0..n)
                .map(|_| Engine::start("lode-md5", false))
                .collect::<ObjResult<_>>()?,
            bulk: (0..n)
                .map(|_| Engine::start("lode-md5-bulk", true))
                .collect::<ObjResult<_>>()?,
        })
    }

    /// The engine of `kind` with the fewest bodies.
    fn least_busy(kind: &[Engine]) -> &Engine {
        kind.iter()
            .min_by_key(|e| e.open.load(Ordering::Relaxed))
            .expect("at least one engine")
    }

    /// A new body's MD5. `bulk`: the body is (or may be) larger than a chunk.
    pub(crate) fn body(self: &Arc<Self>, bulk: bool) -> Md5Pipe {
        Md5Pipe {
            engines: Arc::clone(self),
            bulk,
            state: Pipe::Inline(Md5State::new()),
        }
    }
}

enum Pipe {
    Inline(Md5State),
    Engine(EngineBody),
}

/// The MD5 of one body: inline while it is small, then in its engine.
pub(crate) struct Md5Pipe {
    engines: Arc<Md5Engines>,
    bulk: bool,
    state: Pipe,
}

impl Md5Pipe {
    pub(crate) async fn update(&mut self, b: &Bytes) -> ObjResult<()> {
        if let Pipe::Inline(s) = &self.state {
            if s.bytes_hashed() + b.len() as u64 <= ENGINE_MIN {
                if let Pipe::Inline(s) = &mut self.state {
                    s.update(b);
                }
                return Ok(());
            }
            let engine = Md5Engines::least_busy(if self.bulk {
                &self.engines.bulk
            } else {
                &self.engines.fast
            });
            self.state = Pipe::Engine(engine.open(*s)?);
        }
        let Pipe::Engine(e) = &self.state else {
            unreachable!("moved to the engine above")
        };
        let permit = Arc::clone(&e.room)
            .acquire_owned()
            .await
            .map_err(|_| ObjError::Internal("the MD5 engine stopped".into()))?;
        send(&e.tx, Msg::Data(e.id, b.clone(), permit))
    }

    pub(crate) async fn finish(self) -> ObjResult<[u8; 16]> {
        match self.state {
            Pipe::Inline(s) => Ok(s.finalize()),
            Pipe::Engine(mut e) => {
                let (tx, rx) = oneshot::channel();
                send(&e.tx, Msg::Finish(e.id, tx))?;
                e.finished = true;
                rx.await
                    .map_err(|_| ObjError::Internal("the MD5 engine stopped".into()))
            }
        }
    }

    #[cfg(test)]
    fn in_engine(&self) -> bool {
        matches!(self.state, Pipe::Engine(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use md5::Digest;

    fn reference(pieces: &[Bytes]) -> [u8; 16] {
        md5::Md5::digest(pieces.concat()).into()
    }

    #[test]
    fn the_bulk_engine_runs_at_lower_priority_and_only_that_thread() {
        let before = rustix::process::getpriority_process(None).unwrap();
        let lowered = std::thread::spawn(|| {
            lower_this_threads_priority();
            rustix::process::getpriority_process(None).unwrap()
        })
        .join()
        .unwrap();
        assert_eq!(lowered, (before + BULK_NICE).min(19));
        assert_eq!(rustix::process::getpriority_process(None).unwrap(), before);
    }

    /// Many bodies of odd lengths and piece sizes, fed at once (so rounds hash several together,
    /// with pieces of different lengths), on both engines: every digest equals the reference
    /// MD5's.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_bodies_hash_to_the_reference_md5() {
        let engines = Arc::new(Md5Engines::start().unwrap());
        let mut tasks = Vec::new();
        for n in 0..40usize {
            let engines = Arc::clone(&engines);
            tasks.push(tokio::spawn(async move {
                let piece = [1, 63, 64, 65, 1000, 16_384, 65_537][n % 7];
                let len = [0, 5, 64, 65_536, 65_537, 100_003, 1 << 20][n % 7] + n * 131;
                let data: Vec<u8> = (0..len).map(|i| (i * 31 + n * 7 + i / 251) as u8).collect();
                let pieces: Vec<Bytes> = data.chunks(piece).map(Bytes::copy_from_slice).collect();
                let mut p = engines.body(n % 3 == 0);
                for b in &pieces {
                    p.update(b).await.unwrap();
                }
                assert_eq!(
                    p.in_engine(),
                    len as u64 > ENGINE_MIN,
                    "body {n} of {len} B"
                );
                assert_eq!(p.finish().await.unwrap(), reference(&pieces), "body {n}");
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    }

    /// Batches of every size the lanes take (scalar for one or two, eight lanes filled up with
    /// throwaway states for three to seven, sixteen for nine to fifteen), over several rounds:
    /// each body's digest equals the reference MD5's, so the filler lanes touch no real body.
    #[test]
    fn every_batch_size_hashes_each_body_right() {
        let lanes = Md5Many::new();
        let zeros = vec![0u8; ROUND_MAX];
        for n in 1..=MAX_BATCH {
            let mut bodies = HashMap::new();
            let ids: Vec<u64> = (0..n as u64).map(|i| i * 7 + 3).collect();
            let mut fed: Vec<Vec<Bytes>> = vec![Vec::new(); n];
            for id in &ids {
                bodies.insert(
                    *id,
                    Body {
                        state: Md5State::new(),
                        pieces: VecDeque::new(),
                        finish: None,
                        served: 0,
                    },
                );
            }
            for round in 0..3usize {
                let len = 64 * (1 + round * 37 + n);
                let inputs: Vec<Bytes> = (0..n)
                    .map(|i| {
                        Bytes::from(
                            (0..len)
                                .map(|j| (j * 13 + i * 101 + round) as u8)
                                .collect::<Vec<u8>>(),
                        )
                    })
                    .collect();
                hash_together(&lanes, &zeros, &mut bodies, &ids, &inputs);
                for (i, b) in inputs.into_iter().enumerate() {
                    fed[i].push(b);
                }
            }
            for (i, id) in ids.iter().enumerate() {
                assert_eq!(
                    bodies[id].state.finalize(),
                    reference(&fed[i]),
                    "{n} bodies, body {i}"
                );
            }
        }
    }

    /// An upload that stops halfway does not disturb the body hashed beside it.
    #[tokio::test]
    async fn an_abandoned_body_does_not_disturb_the_others() {
        let engines = Arc::new(Md5Engines::start().unwrap());
        let pieces: Vec<Bytes> = (0..20u8).map(|i| Bytes::from(vec![i; 70_001])).collect();
        let mut gone = engines.body(false);
        let mut kept = engines.body(false);
        for b in &pieces[..5] {
            gone.update(b).await.unwrap();
            kept.update(b).await.unwrap();
        }
        assert!(gone.in_engine());
        drop(gone);
        for b in &pieces[5..] {
            kept.update(b).await.unwrap();
        }
        assert_eq!(kept.finish().await.unwrap(), reference(&pieces));
    }
}
