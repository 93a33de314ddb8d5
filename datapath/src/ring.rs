//! The io_uring engine: one thread owns one ring and serves reads, writes and fdatasyncs
//! submitted from any async task.
//!
//! One of the few modules of Lode where `unsafe` is allowed (with `lode-blob`'s `buffer` and the
//! librados FFI).
//!
//! Ownership rule that makes this sound: a buffer handed to the kernel is held in the ring
//! thread's slab from submission until its completion arrives, whatever happens to the future
//! that asked for the IO (a dropped future just never receives the buffer back). The thread does
//! not exit while any IO is in flight, and the files outlive the thread (`UringChunkStore`
//! joins it before closing them).
#![allow(unsafe_code)]

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Mutex;
use std::sync::mpsc;
use std::thread::JoinHandle;

use io_uring::{IoUring, opcode, types};
use tokio::sync::oneshot;

use lode_blob::AlignedBuf;

const WAKE: u64 = u64::MAX;

/// One IO request.
pub(crate) enum Op {
    /// Write the first `buf.io_len()` bytes of `buf` at `offset`.
    Write {
        fd: RawFd,
        offset: u64,
        buf: AlignedBuf,
    },
    /// Read `buf.io_len()` bytes into `buf` from `offset`.
    Read {
        fd: RawFd,
        offset: u64,
        buf: AlignedBuf,
    },
    /// fdatasync the file.
    Sync { fd: RawFd },
}

/// The outcome of one IO: the kernel's result and the buffer, given back.
pub(crate) type Done = (io::Result<usize>, Option<AlignedBuf>);

enum Msg {
    Io(Op, oneshot::Sender<Done>),
    Shutdown,
}

/// A handle to the ring thread.
pub(crate) struct Ring {
    tx: Mutex<mpsc::Sender<Msg>>,
    wake: OwnedFd,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Ring {
    /// Sets up a ring of `entries` and its thread. Fails where the kernel refuses io_uring.
    pub(crate) fn new(entries: u32) -> io::Result<Self> {
        let ring = IoUring::new(entries)?;
        // SAFETY: eventfd has no memory-safety preconditions; the result is checked.
        let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if efd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: efd is a fresh, valid descriptor that nothing else owns.
        let wake = unsafe { OwnedFd::from_raw_fd(efd) };
        let (tx, rx) = mpsc::channel();
        let wake_fd = wake.as_raw_fd();
        let thread = std::thread::Builder::new()
            .name("lode-uring".into())
            .spawn(move || run(ring, rx, wake_fd, entries as usize))?;
        Ok(Self {
            tx: Mutex::new(tx),
            wake,
            thread: Mutex::new(Some(thread)),
        })
    }

    fn kick(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our own eventfd.
        let _ = unsafe { libc::write(self.wake.as_raw_fd(), (&raw const one).cast(), 8) };
    }

    /// Submits one IO and waits for it.
    pub(crate) async fn submit(&self, op: Op) -> Done {
        let (tx, rx) = oneshot::channel();
        let sent = self.tx.lock().expect("ring sender").send(Msg::Io(op, tx));
        if sent.is_err() {
            return (Err(io::Error::other("io_uring thread has stopped")), None);
        }
        self.kick();
        rx.await.unwrap_or_else(|_| {
            (
                Err(io::Error::other("io_uring thread dropped a request")),
                None,
            )
        })
    }

    /// Stops the thread after every IO in flight has completed.
    pub(crate) fn shutdown(&self) {
        let _ = self.tx.lock().expect("ring sender").send(Msg::Shutdown);
        self.kick();
        if let Some(t) = self.thread.lock().expect("ring thread").take() {
            let _ = t.join();
        }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The largest device IO the ring submits. A data op longer than this goes to the kernel as
/// pieces of at most this size (through its file's bulk lane on the ring thread, all at once on
/// a blocking thread's own ring) and completes when the last piece does.
/// Measured on this machine's virtio disk with fio: a 16 KiB write queued beside 8 MiB reads
/// waited 11 ms at p99, beside the same bytes in 1 MiB reads 0.2-0.4 ms, for the same read
/// throughput (and the same write throughput with 1 MiB against 4 MiB writes). So a
/// checkpoint's or a stream's chunk never holds the device a whole chunk ahead of a small op.
pub(crate) const PIECE: usize = 1 << 20;

/// `(start, len)` of each piece of a data IO of `len` bytes, at most `max` pieces: [`PIECE`]
/// long, or longer (4 KiB aligned, for O_DIRECT) where `max` of those would not cover `len`.
fn pieces(len: usize, max: usize) -> impl Iterator<Item = (usize, usize)> {
    let piece = PIECE.max(len.div_ceil(max.max(1)).next_multiple_of(4096));
    (0..len.max(1))
        .step_by(piece)
        .map(move |at| (at, (len - at.min(len)).min(piece)))
}

/// The pieces of one request still in the kernel and their summed result.
struct Sum {
    pending: usize,
    res: io::Result<usize>,
}

impl Sum {
    fn new(pending: usize) -> Self {
        Self {
            pending,
            res: Ok(0),
        }
    }

    /// Adds one piece's kernel result; true when it was the last piece.
    fn complete(&mut self, res: i32) -> bool {
        if res < 0 {
            if self.res.is_ok() {
                self.res = Err(io::Error::from_raw_os_error(-res));
            }
        } else if let Ok(n) = &mut self.res {
            *n += res as usize;
        }
        self.pending -= 1;
        self.pending == 0
    }
}

/// One request in the kernel: its buffer, where its outcome goes, its pieces, and the file
/// whose bulk lane its pieces go through (a request of more than one piece).
struct InFlight {
    buf: Option<AlignedBuf>,
    done: oneshot::Sender<Done>,
    sum: Sum,
    lane: Option<RawFd>,
}

/// How many pieces of bulk requests (those longer than one [`PIECE`]) one file has in the
/// kernel at once. A request of one piece (a small object's chunk, a sync) does not wait for
/// the lane: it goes to the kernel as soon as it arrives, so it finds at most this many
/// pieces ahead of it at the device instead of whole checkpoint and stream chunks. Measured
/// here with fio at 1 MiB: 2 in flight read 0.9-1.1 GiB/s and wrote 1.6 GiB/s, as much as
/// deeper queues, while the ring thread's own trace showed a 36 KiB write waiting 11 ms behind
/// two streams' 4 MiB chunk reads when every piece went in at once.
const BULK_IN_FLIGHT: usize = 2;

/// The pieces of bulk requests on one file, waiting for room in its lane.
#[derive(Default)]
struct Lane {
    waiting: VecDeque<io_uring::squeue::Entry>,
    in_flight: usize,
}

/// The entries reading or writing `buf.io_len()` bytes at `offset` of `fd`, one per piece (at
/// most `max`), all with user data `id`. The caller keeps `buf` alive and in place until every
/// entry's completion.
fn data_entries(
    write: bool,
    fd: RawFd,
    offset: u64,
    buf: &mut AlignedBuf,
    id: u64,
    max: usize,
) -> Vec<io_uring::squeue::Entry> {
    let base = buf.as_mut_ptr();
    pieces(buf.io_len(), max)
        .map(|(at, len)| {
            // SAFETY: `at + len <= io_len`, within the buffer's allocation.
            let ptr = unsafe { base.add(at) };
            let (fd, off) = (types::Fd(fd), offset + at as u64);
            if write {
                opcode::Write::new(fd, ptr, len as u32)
                    .offset(off)
                    .build()
                    .user_data(id)
            } else {
                opcode::Read::new(fd, ptr, len as u32)
                    .offset(off)
                    .build()
                    .user_data(id)
            }
        })
        .collect()
}

/// The submission entries of `op` (one per [`PIECE`] of a data IO), all with user data `id`.
fn entries_for(op: &Op, id: u64, buf: &mut Option<AlignedBuf>) -> Vec<io_uring::squeue::Entry> {
    match op {
        Op::Write { fd, offset, .. } | Op::Read { fd, offset, .. } => data_entries(
            matches!(op, Op::Write { .. }),
            *fd,
            *offset,
            buf.as_mut().expect("buffer for data IO"),
            id,
            usize::MAX,
        ),
        Op::Sync { fd } => vec![
            opcode::Fsync::new(types::Fd(*fd))
                .flags(types::FsyncFlags::DATASYNC)
                .build()
                .user_data(id),
        ],
    }
}

fn run(mut ring: IoUring, rx: mpsc::Receiver<Msg>, wake_fd: RawFd, depth: usize) {
    let mut slab: Vec<Option<InFlight>> = Vec::new();
    let mut free_ids: Vec<usize> = Vec::new();
    let mut backlog: VecDeque<(Op, oneshot::Sender<Done>)> = VecDeque::new();
    let mut lanes: std::collections::HashMap<RawFd, Lane> = std::collections::HashMap::new();
    let mut in_flight = 0usize;
    let mut wake_buf = [0u8; 8];
    let mut wake_armed = false;
    let mut shutting_down = false;

    loop {
        if !wake_armed && !shutting_down {
            let e = opcode::Read::new(types::Fd(wake_fd), wake_buf.as_mut_ptr(), 8)
                .build()
                .user_data(WAKE);
            // SAFETY: wake_buf lives on this thread's stack for the whole loop, which does not
            // return while the read is armed (shutdown waits for its completion below).
            if unsafe { ring.submission().push(&e) }.is_ok() {
                wake_armed = true;
            }
        }
        // Move queued requests into the submission queue (one piece) or their file's bulk lane
        // (more), bounded by the queue depth.
        while in_flight < depth {
            let Some((mut op, done)) = backlog.pop_front() else {
                break;
            };
            let id = free_ids.pop().unwrap_or_else(|| {
                slab.push(None);
                slab.len() - 1
            });
            let mut buf = match &mut op {
                Op::Write { buf, .. } | Op::Read { buf, .. } => {
                    Some(std::mem::replace(buf, AlignedBuf::with_capacity(0)))
                }
                Op::Sync { .. } => None,
            };
            let es = entries_for(&op, id as u64, &mut buf);
            let lane = match (&op, es.len()) {
                (Op::Write { fd, .. } | Op::Read { fd, .. }, n) if n > 1 => Some(*fd),
                _ => None,
            };
            if let Some(fd) = lane {
                lanes
                    .entry(fd)
                    .or_default()
                    .waiting
                    .extend(es.iter().cloned());
            } else {
                // SAFETY: the buffer the entry points into is moved into the slab just below
                // and stays there (heap allocation, never moved in memory) until this id's
                // completion.
                if unsafe { ring.submission().push_multiple(&es) }.is_err() {
                    // SQ full: put it back and submit what we have first.
                    free_ids.push(id);
                    if let (Op::Write { buf: b, .. } | Op::Read { buf: b, .. }, Some(x)) =
                        (&mut op, buf)
                    {
                        *b = x;
                    }
                    backlog.push_front((op, done));
                    break;
                }
                in_flight += es.len();
            }
            slab[id] = Some(InFlight {
                buf,
                done,
                sum: Sum::new(es.len()),
                lane,
            });
        }
        // Then the bulk pieces each lane has room for.
        for lane in lanes.values_mut() {
            while lane.in_flight < BULK_IN_FLIGHT {
                let Some(e) = lane.waiting.pop_front() else {
                    break;
                };
                // SAFETY: the piece points into a buffer held in the slab (moved there when its
                // request was laned) until the last of its request's completions.
                if unsafe { ring.submission().push(&e) }.is_err() {
                    lane.waiting.push_front(e);
                    break;
                }
                lane.in_flight += 1;
                in_flight += 1;
            }
        }
        if shutting_down
            && in_flight == 0
            && backlog.is_empty()
            && lanes.values().all(|l| l.waiting.is_empty())
            && !wake_armed
        {
            return;
        }
        let want = 1;
        if let Err(e) = ring.submit_and_wait(want)
            && e.raw_os_error() != Some(libc::EINTR)
            && e.raw_os_error() != Some(libc::EBUSY)
        {
            tracing::error!(error = %e, "io_uring submit failed");
            for slot in slab.iter_mut() {
                if let Some(f) = slot.take() {
                    let _ = f
                        .done
                        .send((Err(io::Error::new(e.kind(), e.to_string())), f.buf));
                }
            }
            return;
        }
        let cqes: Vec<(u64, i32)> = ring
            .completion()
            .map(|c| (c.user_data(), c.result()))
            .collect();
        for (id, res) in cqes {
            if id == WAKE {
                wake_armed = false;
                while let Ok(msg) = rx.try_recv() {
                    match msg {
                        Msg::Io(op, done) => backlog.push_back((op, done)),
                        Msg::Shutdown => shutting_down = true,
                    }
                }
                continue;
            }
            let Some(slot) = slab.get_mut(id as usize).filter(|s| s.is_some()) else {
                tracing::error!(id, "io_uring completion for an unknown request");
                continue;
            };
            in_flight -= 1;
            if let Some(l) = slot
                .as_ref()
                .and_then(|f| f.lane)
                .and_then(|fd| lanes.get_mut(&fd))
            {
                l.in_flight -= 1;
            }
            if slot.as_mut().is_some_and(|f| f.sum.complete(res))
                && let Some(f) = slot.take()
            {
                free_ids.push(id as usize);
                let _ = f.done.send((f.sum.res, f.buf));
            }
        }
        if shutting_down && wake_armed {
            // The armed eventfd read must complete before wake_buf goes away: kick ourselves.
            let one: u64 = 1;
            // SAFETY: writes 8 bytes from a live u64 to our own eventfd.
            let _ = unsafe { libc::write(wake_fd, (&raw const one).cast(), 8) };
        }
    }
}

/// Reads `buf.io_len()` bytes at `offset` of `fd` on the calling thread, through a small ring of
/// that thread's own, and blocks the thread until the read completes. For threads that may block
/// (the FUSE workers): a read then costs no hop to the ring thread and back.
pub(crate) fn read_here(fd: RawFd, offset: u64, mut buf: AlignedBuf) -> Done {
    const ENTRIES: u32 = 8;
    thread_local! {
        static RING: RefCell<Option<IoUring>> = const { RefCell::new(None) };
    }
    RING.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            match IoUring::new(ENTRIES) {
                Ok(r) => *slot = Some(r),
                Err(e) => return (Err(e), Some(buf)),
            }
        }
        let ring = slot.as_mut().expect("ring just set");
        let es = data_entries(false, fd, offset, &mut buf, 1, ENTRIES as usize);
        // SAFETY: `buf` stays owned by this function until the last piece's completion is
        // reaped below (or is leaked if the ring fails with pieces in flight), so the kernel
        // never writes into freed memory.
        if unsafe { ring.submission().push_multiple(&es) }.is_err() {
            return (
                Err(io::Error::other("io_uring: empty ring is full")),
                Some(buf),
            );
        }
        let mut sum = Sum::new(es.len());
        let mut submitted = false;
        loop {
            match ring.submit_and_wait(1) {
                Ok(n) => submitted |= n > 0,
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
                    ) => {}
                Err(e) if !submitted && ring.submission().len() == es.len() => {
                    // Never reached the kernel: take it back out of the queue by dropping the ring.
                    *slot = None;
                    return (Err(e), Some(buf));
                }
                Err(e) => {
                    tracing::error!(error = %e, "io_uring wait failed with a read in flight");
                    std::mem::forget(buf);
                    *slot = None;
                    return (Err(e), None);
                }
            }
            for c in ring.completion() {
                if sum.complete(c.result()) {
                    return (sum.res, Some(buf));
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_cover_an_io_in_aligned_slices_no_more_than_asked() {
        for (len, max) in [
            (1, 8),
            (4096, 8),
            (PIECE, 8),
            (PIECE + 1, 8),
            (4 * PIECE + 5000, 63),
            (9 * PIECE - 1, 3),
            (16 * PIECE, 1),
        ] {
            let ps: Vec<_> = pieces(len, max).collect();
            assert!(!ps.is_empty() && ps.len() <= max, "{len}/{max}: {ps:?}");
            let mut at = 0;
            for (i, &(start, n)) in ps.iter().enumerate() {
                assert_eq!(start, at, "{len}/{max}: contiguous");
                assert!(n > 0, "{len}/{max}: piece {i} is empty");
                if i + 1 < ps.len() {
                    assert!(n >= PIECE && n % 4096 == 0, "{len}/{max}: piece {i} is {n}");
                }
                at += n;
            }
            assert_eq!(at, len, "{len}/{max}: covers the IO");
        }
        assert_eq!(pieces(4 * PIECE, 64).count(), 4);
    }
}
