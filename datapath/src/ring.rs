//! The io_uring engine: one thread owns one ring and serves reads, writes and fdatasyncs
//! submitted from any async task.
//!
//! One of the two modules of Lode where `unsafe` is allowed (the other is `buffer`).
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

use crate::buffer::AlignedBuf;

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

struct InFlight {
    buf: Option<AlignedBuf>,
    done: oneshot::Sender<Done>,
}

fn entry_for(op: &mut Op, id: u64, buf: &mut Option<AlignedBuf>) -> io_uring::squeue::Entry {
    let is_write = matches!(op, Op::Write { .. });
    match op {
        Op::Write { fd, offset, .. } | Op::Read { fd, offset, .. } => {
            let b = buf.as_mut().expect("buffer for data IO");
            let len = b.io_len() as u32;
            let ptr = b.as_mut_ptr();
            if is_write {
                opcode::Write::new(types::Fd(*fd), ptr, len)
                    .offset(*offset)
                    .build()
                    .user_data(id)
            } else {
                opcode::Read::new(types::Fd(*fd), ptr, len)
                    .offset(*offset)
                    .build()
                    .user_data(id)
            }
        }
        Op::Sync { fd } => opcode::Fsync::new(types::Fd(*fd))
            .flags(types::FsyncFlags::DATASYNC)
            .build()
            .user_data(id),
    }
}

fn run(mut ring: IoUring, rx: mpsc::Receiver<Msg>, wake_fd: RawFd, depth: usize) {
    let mut slab: Vec<Option<InFlight>> = Vec::new();
    let mut free_ids: Vec<usize> = Vec::new();
    let mut backlog: VecDeque<(Op, oneshot::Sender<Done>)> = VecDeque::new();
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
        // Move queued requests into the submission queue, bounded by the queue depth.
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
            let e = entry_for(&mut op, id as u64, &mut buf);
            // SAFETY: the buffer the entry points at is moved into the slab just below and stays
            // there (heap allocation, never moved in memory) until this id's completion.
            if unsafe { ring.submission().push(&e) }.is_err() {
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
            slab[id] = Some(InFlight { buf, done });
            in_flight += 1;
        }
        if shutting_down && in_flight == 0 && backlog.is_empty() && !wake_armed {
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
            let Some(f) = slab.get_mut(id as usize).and_then(Option::take) else {
                tracing::error!(id, "io_uring completion for an unknown request");
                continue;
            };
            free_ids.push(id as usize);
            in_flight -= 1;
            let r = if res < 0 {
                Err(io::Error::from_raw_os_error(-res))
            } else {
                Ok(res as usize)
            };
            let _ = f.done.send((r, f.buf));
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
    thread_local! {
        static RING: RefCell<Option<IoUring>> = const { RefCell::new(None) };
    }
    RING.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            match IoUring::new(4) {
                Ok(r) => *slot = Some(r),
                Err(e) => return (Err(e), Some(buf)),
            }
        }
        let ring = slot.as_mut().expect("ring just set");
        let e = opcode::Read::new(types::Fd(fd), buf.as_mut_ptr(), buf.io_len() as u32)
            .offset(offset)
            .build()
            .user_data(1);
        // SAFETY: `buf` stays owned by this function until the read's completion is reaped below
        // (or is leaked if the ring fails with the read in flight), so the kernel never writes
        // into freed memory.
        if unsafe { ring.submission().push(&e) }.is_err() {
            return (
                Err(io::Error::other("io_uring: empty ring is full")),
                Some(buf),
            );
        }
        let mut submitted = false;
        loop {
            match ring.submit_and_wait(1) {
                Ok(n) => submitted |= n > 0,
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
                    ) => {}
                Err(e) if !submitted && !ring.submission().is_empty() => {
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
            if let Some(c) = ring.completion().next() {
                let res = c.result();
                let r = if res < 0 {
                    Err(io::Error::from_raw_os_error(-res))
                } else {
                    Ok(res as usize)
                };
                return (r, Some(buf));
            }
        }
    })
}
