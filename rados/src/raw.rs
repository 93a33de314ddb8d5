//! Every call into librados, and so every `unsafe` block of the crate but the declarations in
//! `sys`. The rest of the crate is safe code on top of the types here.
//!
//! Ownership rules this module keeps:
//! - A `ClusterHandle` is shut down only when its last `Arc` goes; every `IoCtxHandle` holds
//!   one, so no ioctx outlives its cluster (the ceph-rust segfault).
//! - An AIO operation moves everything librados may touch (the op, its buffers, its output
//!   cells, the oid, an `Arc` of the ioctx) into a heap `Inflight` whose raw pointer is the
//!   completion's callback argument. The callback (a librados finisher thread) takes it back
//!   exactly once and sends it, with the return value, to the awaiting task through a tokio
//!   oneshot. Dropping the future early therefore frees nothing librados still uses.
//! - Nothing that might shut the cluster down is dropped on a finisher thread: if the awaiting
//!   task is gone, the callback hands the state to a reaper thread.
//! - Addresses handed to librados (output ints, iterators, read buffers) live in their own heap
//!   cells, so moving the owning structs never moves them.

use std::ffi::{CStr, CString};
use std::future::Future;
use std::pin::Pin;
use std::ptr::{self, NonNull};
use std::sync::{Arc, OnceLock, mpsc};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use libc::{c_char, c_int, c_uchar, c_void, size_t, time_t};
use tokio::sync::{mpsc as tokio_mpsc, oneshot};

use crate::error::{RadosError, Result, check};
use crate::event::{Notification, WatchEvent};
use crate::sys;

/// librados' version as (major, minor, extra); 3.0.0 for Pacific.
pub(crate) fn librados_version() -> (i32, i32, i32) {
    let (mut major, mut minor, mut extra) = (0, 0, 0);
    // SAFETY: three valid out-pointers; the call only writes them.
    unsafe { sys::rados_version(&mut major, &mut minor, &mut extra) };
    (major, minor, extra)
}

// ------------------------------------------------------------------------------------------
// Output cells
// ------------------------------------------------------------------------------------------

/// A heap cell whose address is handed to librados as an output slot. Its address never
/// changes when the owner moves.
struct OutCell<T: Copy> {
    ptr: NonNull<T>,
}

impl<T: Copy> OutCell<T> {
    fn new(value: T) -> Self {
        Self {
            ptr: NonNull::from(Box::leak(Box::new(value))),
        }
    }

    fn as_mut_ptr(&self) -> *mut T {
        self.ptr.as_ptr()
    }

    /// Reads the cell.
    ///
    /// # Safety
    /// No librados write to the cell may be pending: the operation it was handed to has
    /// completed, or was never submitted.
    unsafe fn get(&self) -> T {
        // SAFETY: the cell is a live, initialised allocation owned by `self`; the caller
        // guarantees librados no longer writes to it.
        unsafe { self.ptr.as_ptr().read() }
    }

    /// Writes the cell (same contract as `get`).
    unsafe fn set(&self, value: T) {
        // SAFETY: as for `get`.
        unsafe { self.ptr.as_ptr().write(value) }
    }
}

impl<T: Copy> Drop for OutCell<T> {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from `Box::leak` in `new` and is freed only here.
        drop(unsafe { Box::from_raw(self.ptr.as_ptr()) });
    }
}

// SAFETY: the cell holds plain data (integers, or addresses of librados allocations that the
// owner frees); it is touched by librados only while the op runs and by the owner after.
unsafe impl<T: Copy> Send for OutCell<T> {}

// ------------------------------------------------------------------------------------------
// Cluster handle
// ------------------------------------------------------------------------------------------

/// An owned `rados_t`, shut down on drop.
pub(crate) struct ClusterHandle {
    ptr: sys::rados_t,
}

// SAFETY: a `rados_t` (librados::RadosClient) is internally synchronised; librados documents
// it for use from many threads.
unsafe impl Send for ClusterHandle {}
// SAFETY: as above; every method takes `&self` and librados locks internally.
unsafe impl Sync for ClusterHandle {}

impl ClusterHandle {
    /// `rados_create2("ceph", name)`; `name` is a full entity name such as `client.admin`.
    pub(crate) fn create(name: &CStr) -> Result<Self> {
        init_reaper();
        let mut ptr: sys::rados_t = ptr::null_mut();
        // SAFETY: valid out-pointer and NUL-terminated strings that outlive the call.
        let rc = unsafe { sys::rados_create2(&mut ptr, c"ceph".as_ptr(), name.as_ptr(), 0) };
        check("rados_create2", rc.into())?;
        if ptr.is_null() {
            return Err(RadosError::from_rc(
                "rados_create2",
                -i64::from(libc::ENOMEM),
            ));
        }
        Ok(Self { ptr })
    }

    pub(crate) fn conf_read_file(&self, path: &CStr) -> Result<()> {
        // SAFETY: live handle, NUL-terminated path.
        let rc = unsafe { sys::rados_conf_read_file(self.ptr, path.as_ptr()) };
        check("rados_conf_read_file", rc.into()).map(drop)
    }

    pub(crate) fn conf_set(&self, option: &CStr, value: &CStr) -> Result<()> {
        // SAFETY: live handle, NUL-terminated strings.
        let rc = unsafe { sys::rados_conf_set(self.ptr, option.as_ptr(), value.as_ptr()) };
        check("rados_conf_set", rc.into()).map(drop)
    }

    /// Blocking: waits for the monitors (bounded by `client_mount_timeout`).
    pub(crate) fn connect(&self) -> Result<()> {
        // SAFETY: live handle, configured and not yet connected.
        let rc = unsafe { sys::rados_connect(self.ptr) };
        check("rados_connect", rc.into()).map(drop)
    }

    pub(crate) fn instance_id(&self) -> u64 {
        // SAFETY: live handle.
        unsafe { sys::rados_get_instance_id(self.ptr) }
    }

    /// Blocking: fetches the monitors' latest osdmap (after pool changes made by commands,
    /// which do not update this client's map by themselves).
    pub(crate) fn wait_for_latest_osdmap(&self) -> Result<()> {
        // SAFETY: live, connected handle.
        let rc = unsafe { sys::rados_wait_for_latest_osdmap(self.ptr) };
        check("rados_wait_for_latest_osdmap", rc.into()).map(drop)
    }

    /// Blocking: the pool id from this client's osdmap (librados fetches the latest map only
    /// when the name is unknown, so a pool deleted elsewhere stays visible until the map
    /// moves on). `None` when no such pool.
    pub(crate) fn pool_lookup(&self, name: &CStr) -> Result<Option<i64>> {
        // SAFETY: live handle, NUL-terminated name.
        let rc = unsafe { sys::rados_pool_lookup(self.ptr, name.as_ptr()) };
        if rc == -i64::from(libc::ENOENT) {
            return Ok(None);
        }
        check("rados_pool_lookup", rc).map(Some)
    }

    /// Blocking: one JSON monitor command. Returns (rc, outbuf, outs).
    pub(crate) fn mon_command(&self, cmd: &CStr, input: &[u8]) -> (c_int, Vec<u8>, String) {
        let mut cmds = [cmd.as_ptr()];
        let mut outbuf: *mut c_char = ptr::null_mut();
        let mut outbuf_len: size_t = 0;
        let mut outs: *mut c_char = ptr::null_mut();
        let mut outs_len: size_t = 0;
        // SAFETY: `cmds` is an array of one NUL-terminated string; `input` is a valid buffer
        // of its length; the four out-pointers are valid. librados allocates the outputs.
        let rc = unsafe {
            sys::rados_mon_command(
                self.ptr,
                cmds.as_mut_ptr(),
                1,
                input.as_ptr().cast(),
                input.len(),
                &mut outbuf,
                &mut outbuf_len,
                &mut outs,
                &mut outs_len,
            )
        };
        // SAFETY: librados set each pointer to a buffer of the given length, or left it null.
        let out = unsafe { take_buffer(outbuf, outbuf_len) };
        // SAFETY: as above.
        let status = unsafe { take_buffer(outs, outs_len) };
        (rc, out, String::from_utf8_lossy(&status).into_owned())
    }

    /// Blocking: the addresses of this client session, as `rados_blocklist_add` takes them.
    pub(crate) fn addrs(&self) -> Result<String> {
        let mut out: *mut c_char = ptr::null_mut();
        // SAFETY: live handle, valid out-pointer.
        let rc = unsafe { sys::rados_getaddrs(self.ptr, &mut out) };
        check("rados_getaddrs", rc.into())?;
        if out.is_null() {
            return Ok(String::new());
        }
        // SAFETY: librados returned a NUL-terminated string allocated with malloc (strdup).
        let s = unsafe { CStr::from_ptr(out) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: the string was allocated by librados with malloc and is freed once here.
        unsafe { libc::free(out.cast()) };
        Ok(s)
    }

    /// Blocking: blocklists a client address (fencing) for `expire_seconds` (0: default).
    pub(crate) fn blocklist_add(&self, addr: &CStr, expire_seconds: u32) -> Result<()> {
        let mut owned = addr.to_bytes_with_nul().to_vec();
        // SAFETY: live handle; `owned` is a NUL-terminated, writable copy (the C signature
        // takes `char *` but does not keep it).
        let rc = unsafe {
            sys::rados_blocklist_add(self.ptr, owned.as_mut_ptr().cast(), expire_seconds)
        };
        check("rados_blocklist_add", rc.into()).map(drop)
    }

    /// Blocking: waits until every queued watch/notify callback of this cluster has run.
    fn watch_flush(&self) -> c_int {
        // SAFETY: live handle; never called from a librados callback thread.
        unsafe { sys::rados_watch_flush(self.ptr) }
    }
}

impl Drop for ClusterHandle {
    fn drop(&mut self) {
        tracing::debug!("rados_shutdown");
        // SAFETY: last owner (every IoCtxHandle holds an Arc of this handle, every AIO holds
        // an ioctx, every watch holds an ioctx); never dropped on a librados thread (see the
        // reaper), so the shutdown cannot join the thread it runs on.
        unsafe { sys::rados_shutdown(self.ptr) };
    }
}

/// Copies and frees a buffer allocated by librados (`rados_buffer_free`).
///
/// # Safety
/// `buf` is null or a librados-allocated buffer of at least `len` bytes, not freed yet.
unsafe fn take_buffer(buf: *mut c_char, len: size_t) -> Vec<u8> {
    if buf.is_null() {
        return Vec::new();
    }
    // SAFETY: per the contract, `buf` holds `len` readable bytes.
    let v = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) }.to_vec();
    // SAFETY: per the contract, `buf` came from librados and is freed once, here.
    unsafe { sys::rados_buffer_free(buf) };
    v
}

// ------------------------------------------------------------------------------------------
// IoCtx handle
// ------------------------------------------------------------------------------------------

/// An owned `rados_ioctx_t`; keeps its cluster alive. Its namespace is set at creation and
/// never changed while shared (librados does not synchronise `set_namespace` with I/O).
pub(crate) struct IoCtxHandle {
    ptr: sys::rados_ioctx_t,
    cluster: Arc<ClusterHandle>,
}

// SAFETY: I/O through a `rados_ioctx_t` is thread-safe in librados (the Objecter locks); the
// only mutating call, `set_namespace`, happens in `create` before the handle is shared.
unsafe impl Send for IoCtxHandle {}
// SAFETY: as above.
unsafe impl Sync for IoCtxHandle {}

impl IoCtxHandle {
    /// Blocking (pool lookup). `namespace` may be empty (the default namespace).
    pub(crate) fn create(
        cluster: Arc<ClusterHandle>,
        pool: &CStr,
        namespace: &CStr,
    ) -> Result<Self> {
        let mut ptr: sys::rados_ioctx_t = ptr::null_mut();
        // SAFETY: live cluster handle, NUL-terminated pool name, valid out-pointer.
        let rc = unsafe { sys::rados_ioctx_create(cluster.ptr, pool.as_ptr(), &mut ptr) };
        check("rados_ioctx_create", rc.into())?;
        let handle = Self { ptr, cluster };
        if !namespace.is_empty() {
            // SAFETY: live ioctx, not shared yet; librados copies the string.
            unsafe { sys::rados_ioctx_set_namespace(handle.ptr, namespace.as_ptr()) };
        }
        Ok(handle)
    }

    pub(crate) fn pool_id(&self) -> i64 {
        // SAFETY: live ioctx.
        unsafe { sys::rados_ioctx_get_id(self.ptr) }
    }
}

impl Drop for IoCtxHandle {
    fn drop(&mut self) {
        // SAFETY: last owner: every AIO and watch holds an Arc of this handle until librados
        // is done with it. The cluster handle is dropped after this (field order).
        unsafe { sys::rados_ioctx_destroy(self.ptr) };
    }
}

// ------------------------------------------------------------------------------------------
// AIO completions → tokio
// ------------------------------------------------------------------------------------------

/// The result of a completed AIO: the return value, the object version librados reports, and
/// the state that was kept alive for the operation.
pub(crate) struct Done<S> {
    pub(crate) rval: c_int,
    pub(crate) version: u64,
    state: S,
}

struct Inflight<S> {
    state: S,
    tx: oneshot::Sender<Done<S>>,
}

/// A submitted AIO; resolves when librados completes it.
pub(crate) struct Pending<S> {
    op: &'static str,
    rx: oneshot::Receiver<Done<S>>,
}

impl<S> Future for Pending<S> {
    type Output = Result<Done<S>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let op = self.op;
        Pin::new(&mut self.rx).poll(cx).map(|r| {
            // The sender is always consumed by the completion callback; a closed channel
            // means librados dropped the completion without calling back.
            r.map_err(|_| RadosError::from_rc(op, -i64::from(libc::EIO)))
        })
    }
}

/// The completion callback, on a librados finisher thread. Must not block.
///
/// # Safety
/// `arg` is the `Box<Inflight<S>>` leaked by `start::<S>`, and librados calls this once.
unsafe extern "C" fn on_complete<S: Send + 'static>(c: sys::rados_completion_t, arg: *mut c_void) {
    // SAFETY: per the contract, `arg` is our leaked box and this is its only reclaim.
    let inflight = unsafe { Box::from_raw(arg.cast::<Inflight<S>>()) };
    // SAFETY: `c` is the live completion this callback belongs to.
    let rval = unsafe { sys::rados_aio_get_return_value(c) };
    // SAFETY: as above.
    let version = unsafe { sys::rados_aio_get_version(c) };
    // SAFETY: we hold the only user reference; librados keeps its own reference while the
    // callback runs (C_AioComplete), so releasing here is what every binding does.
    unsafe { sys::rados_aio_release(c) };
    let Inflight { state, tx } = *inflight;
    if let Err(done) = tx.send(Done {
        rval,
        version,
        state,
    }) {
        // The awaiting future was dropped: dispose of the state off this thread.
        dispose(done);
    }
}

/// Leaks the in-flight state, creates a completion and runs `submit` with it. On a submit
/// error the callback never fires, so the state is reclaimed here.
fn start<S: Send + 'static>(
    op: &'static str,
    state: S,
    submit: impl FnOnce(sys::rados_completion_t) -> c_int,
) -> Result<Pending<S>> {
    let (tx, rx) = oneshot::channel();
    let arg = Box::into_raw(Box::new(Inflight { state, tx })).cast::<c_void>();
    let mut c: sys::rados_completion_t = ptr::null_mut();
    // SAFETY: `arg` is a valid pointer that `on_complete::<S>` reclaims; valid out-pointer.
    let rc = unsafe { sys::rados_aio_create_completion2(arg, Some(on_complete::<S>), &mut c) };
    if rc < 0 {
        // SAFETY: no completion exists, so no callback: we still own the box.
        drop(unsafe { Box::from_raw(arg.cast::<Inflight<S>>()) });
        return Err(RadosError::from_rc(
            "rados_aio_create_completion2",
            rc.into(),
        ));
    }
    let rc = submit(c);
    if rc < 0 {
        // SAFETY: the submit failed, so librados never queues the callback: release the
        // completion and reclaim the box.
        unsafe { sys::rados_aio_release(c) };
        // SAFETY: as above; this is the box's only reclaim.
        drop(unsafe { Box::from_raw(arg.cast::<Inflight<S>>()) });
        return Err(RadosError::from_rc(op, rc.into()));
    }
    Ok(Pending { op, rx })
}

type Garbage = Box<dyn Send>;

fn reaper() -> Option<&'static mpsc::Sender<Garbage>> {
    static REAPER: OnceLock<Option<mpsc::Sender<Garbage>>> = OnceLock::new();
    REAPER
        .get_or_init(|| {
            let (tx, rx) = mpsc::channel::<Garbage>();
            std::thread::Builder::new()
                .name("lode-rados-reaper".into())
                .spawn(move || {
                    for garbage in rx {
                        drop(garbage);
                    }
                })
                .ok()
                .map(|_| tx)
        })
        .as_ref()
}

/// Starts the reaper thread ahead of the first completion.
fn init_reaper() {
    let _ = reaper();
}

/// Drops `value` on the reaper thread (it may hold the last reference to a cluster, whose
/// shutdown must not run on a librados thread). Leaks it if the reaper is unavailable.
fn dispose<T: Send + 'static>(value: T) {
    match reaper() {
        Some(tx) => {
            if let Err(mpsc::SendError(garbage)) = tx.send(Box::new(value)) {
                std::mem::forget(garbage);
            }
        }
        None => std::mem::forget(value),
    }
}

// ------------------------------------------------------------------------------------------
// Write operations
// ------------------------------------------------------------------------------------------

/// An owned `rados_write_op_t` plus every buffer handed to it. librados 16.2 copies the
/// buffers into the op, but they are kept until completion anyway.
pub(crate) struct RawWriteOp {
    ptr: sys::rados_write_op_t,
    keep_bytes: Vec<Bytes>,
    keep_strs: Vec<CString>,
    prvals: Vec<OutCell<c_int>>,
    steps: usize,
}

// SAFETY: the op is a heap object with no thread affinity, used by one owner at a time.
unsafe impl Send for RawWriteOp {}

impl RawWriteOp {
    pub(crate) fn new() -> Self {
        // SAFETY: no arguments; returns a new op or null (out of memory).
        let ptr = unsafe { sys::rados_create_write_op() };
        assert!(!ptr.is_null(), "rados_create_write_op: out of memory");
        Self {
            ptr,
            keep_bytes: Vec::new(),
            keep_strs: Vec::new(),
            prvals: Vec::new(),
            steps: 0,
        }
    }

    pub(crate) fn steps(&self) -> usize {
        self.steps
    }

    fn prval(&mut self) -> *mut c_int {
        let cell = OutCell::new(0);
        let p = cell.as_mut_ptr();
        self.prvals.push(cell);
        p
    }

    /// Flags (`LIBRADOS_OP_FLAG_*`) of the last step added.
    pub(crate) fn set_flags(&mut self, flags: c_int) {
        // SAFETY: live op.
        unsafe { sys::rados_write_op_set_flags(self.ptr, flags) };
    }

    pub(crate) fn assert_exists(&mut self) {
        // SAFETY: live op.
        unsafe { sys::rados_write_op_assert_exists(self.ptr) };
        self.steps += 1;
    }

    pub(crate) fn assert_version(&mut self, ver: u64) {
        // SAFETY: live op.
        unsafe { sys::rados_write_op_assert_version(self.ptr, ver) };
        self.steps += 1;
    }

    pub(crate) fn cmpxattr(&mut self, name: CString, op: u8, value: Bytes) {
        // SAFETY: live op; `name` is NUL-terminated and `value` valid for its length; both
        // are kept in `self` until the op is released.
        unsafe {
            sys::rados_write_op_cmpxattr(
                self.ptr,
                name.as_ptr(),
                op,
                value.as_ptr().cast(),
                value.len(),
            )
        };
        self.keep_strs.push(name);
        self.keep_bytes.push(value);
        self.steps += 1;
    }

    pub(crate) fn omap_cmp(&mut self, key: Bytes, op: u8, value: Bytes) {
        let prval = self.prval();
        // SAFETY: live op; key and value valid for their lengths and kept in `self`; `prval`
        // is an OutCell owned by `self`.
        unsafe {
            sys::rados_write_op_omap_cmp2(
                self.ptr,
                key.as_ptr().cast(),
                op,
                value.as_ptr().cast(),
                key.len(),
                value.len(),
                prval,
            )
        };
        self.keep_bytes.push(key);
        self.keep_bytes.push(value);
        self.steps += 1;
    }

    pub(crate) fn setxattr(&mut self, name: CString, value: Bytes) {
        // SAFETY: live op; NUL-terminated name and a value valid for its length, both kept.
        unsafe {
            sys::rados_write_op_setxattr(
                self.ptr,
                name.as_ptr(),
                value.as_ptr().cast(),
                value.len(),
            )
        };
        self.keep_strs.push(name);
        self.keep_bytes.push(value);
        self.steps += 1;
    }

    pub(crate) fn rmxattr(&mut self, name: CString) {
        // SAFETY: live op; NUL-terminated name, kept.
        unsafe { sys::rados_write_op_rmxattr(self.ptr, name.as_ptr()) };
        self.keep_strs.push(name);
        self.steps += 1;
    }

    pub(crate) fn create(&mut self, exclusive: bool) {
        let mode = if exclusive {
            sys::LIBRADOS_CREATE_EXCLUSIVE
        } else {
            sys::LIBRADOS_CREATE_IDEMPOTENT
        };
        // SAFETY: live op; the category argument is unused by librados and may be null.
        unsafe { sys::rados_write_op_create(self.ptr, mode, ptr::null()) };
        self.steps += 1;
    }

    pub(crate) fn write(&mut self, data: Bytes, offset: u64) {
        // SAFETY: live op; `data` valid for its length and kept.
        unsafe { sys::rados_write_op_write(self.ptr, data.as_ptr().cast(), data.len(), offset) };
        self.keep_bytes.push(data);
        self.steps += 1;
    }

    pub(crate) fn write_full(&mut self, data: Bytes) {
        // SAFETY: live op; `data` valid for its length and kept.
        unsafe { sys::rados_write_op_write_full(self.ptr, data.as_ptr().cast(), data.len()) };
        self.keep_bytes.push(data);
        self.steps += 1;
    }

    pub(crate) fn append(&mut self, data: Bytes) {
        // SAFETY: live op; `data` valid for its length and kept.
        unsafe { sys::rados_write_op_append(self.ptr, data.as_ptr().cast(), data.len()) };
        self.keep_bytes.push(data);
        self.steps += 1;
    }

    pub(crate) fn truncate(&mut self, size: u64) {
        // SAFETY: live op.
        unsafe { sys::rados_write_op_truncate(self.ptr, size) };
        self.steps += 1;
    }

    pub(crate) fn remove(&mut self) {
        // SAFETY: live op.
        unsafe { sys::rados_write_op_remove(self.ptr) };
        self.steps += 1;
    }

    pub(crate) fn exec(&mut self, cls: CString, method: CString, input: Bytes) {
        let prval = self.prval();
        // SAFETY: live op; NUL-terminated names and an input valid for its length, all kept;
        // `prval` is an OutCell owned by `self`.
        unsafe {
            sys::rados_write_op_exec(
                self.ptr,
                cls.as_ptr(),
                method.as_ptr(),
                input.as_ptr().cast(),
                input.len(),
                prval,
            )
        };
        self.keep_strs.push(cls);
        self.keep_strs.push(method);
        self.keep_bytes.push(input);
        self.steps += 1;
    }

    pub(crate) fn omap_set(&mut self, entries: Vec<(Bytes, Bytes)>) {
        let keys: Vec<*const c_char> = entries.iter().map(|(k, _)| k.as_ptr().cast()).collect();
        let vals: Vec<*const c_char> = entries.iter().map(|(_, v)| v.as_ptr().cast()).collect();
        let key_lens: Vec<size_t> = entries.iter().map(|(k, _)| k.len()).collect();
        let val_lens: Vec<size_t> = entries.iter().map(|(_, v)| v.len()).collect();
        // SAFETY: live op; four arrays of `entries.len()` elements pointing into buffers of
        // the given lengths; the arrays are read during the call, the buffers are kept.
        unsafe {
            sys::rados_write_op_omap_set2(
                self.ptr,
                keys.as_ptr(),
                vals.as_ptr(),
                key_lens.as_ptr(),
                val_lens.as_ptr(),
                entries.len(),
            )
        };
        for (k, v) in entries {
            self.keep_bytes.push(k);
            self.keep_bytes.push(v);
        }
        self.steps += 1;
    }

    pub(crate) fn omap_rm_keys(&mut self, keys: Vec<Bytes>) {
        let ptrs: Vec<*const c_char> = keys.iter().map(|k| k.as_ptr().cast()).collect();
        let lens: Vec<size_t> = keys.iter().map(Bytes::len).collect();
        // SAFETY: live op; two arrays of `keys.len()` elements; the key buffers are kept.
        unsafe {
            sys::rados_write_op_omap_rm_keys2(self.ptr, ptrs.as_ptr(), lens.as_ptr(), keys.len())
        };
        self.keep_bytes.extend(keys);
        self.steps += 1;
    }

    pub(crate) fn omap_rm_range(&mut self, start: Bytes, end: Bytes) {
        // SAFETY: live op; both keys valid for their lengths and kept.
        unsafe {
            sys::rados_write_op_omap_rm_range2(
                self.ptr,
                start.as_ptr().cast(),
                start.len(),
                end.as_ptr().cast(),
                end.len(),
            )
        };
        self.keep_bytes.push(start);
        self.keep_bytes.push(end);
        self.steps += 1;
    }

    pub(crate) fn omap_clear(&mut self) {
        // SAFETY: live op.
        unsafe { sys::rados_write_op_omap_clear(self.ptr) };
        self.steps += 1;
    }
}

impl Drop for RawWriteOp {
    fn drop(&mut self) {
        // SAFETY: we own the op; it is dropped only after its completion (or never submitted).
        unsafe { sys::rados_release_write_op(self.ptr) };
    }
}

/// What a write keeps alive until it completes.
pub(crate) struct WriteInflight {
    _op: RawWriteOp,
    _oid: CString,
    _io: Arc<IoCtxHandle>,
}

pub(crate) fn submit_write(
    io: Arc<IoCtxHandle>,
    oid: CString,
    op: RawWriteOp,
    flags: c_int,
) -> Result<Pending<WriteInflight>> {
    let (op_ptr, io_ptr, oid_ptr) = (op.ptr, io.ptr, oid.as_ptr());
    let state = WriteInflight {
        _op: op,
        _oid: oid,
        _io: io,
    };
    start("rados_aio_write_op_operate", state, move |c| {
        // SAFETY: the op, the ioctx and the oid are owned by the in-flight state, which lives
        // until the callback has run; mtime null lets the OSD set it.
        unsafe {
            sys::rados_aio_write_op_operate(op_ptr, io_ptr, c, oid_ptr, ptr::null_mut(), flags)
        }
    })
}

// ------------------------------------------------------------------------------------------
// Read operations
// ------------------------------------------------------------------------------------------

/// Output slots of a read op, in one heap allocation whose address librados holds.
struct ReadSlots {
    stat_size: u64,
    stat_mtime: time_t,
    stat_rval: c_int,
    read_len: size_t,
    read_rval: c_int,
    xattrs_iter: sys::rados_xattrs_iter_t,
    xattrs_rval: c_int,
    vals_iter: sys::rados_omap_iter_t,
    vals_more: c_uchar,
    vals_rval: c_int,
    vals2_iter: sys::rados_omap_iter_t,
    vals2_more: c_uchar,
    vals2_rval: c_int,
    keys_iter: sys::rados_omap_iter_t,
    keys_more: c_uchar,
    keys_rval: c_int,
    bykeys_iter: sys::rados_omap_iter_t,
    bykeys_rval: c_int,
    exec_out: *mut c_char,
    exec_len: size_t,
    exec_rval: c_int,
}

/// Which result slots an op asked for.
#[derive(Clone, Copy, Default)]
struct Requested {
    stat: bool,
    read: bool,
    xattrs: bool,
    vals: bool,
    vals2: bool,
    keys: bool,
    bykeys: bool,
    exec: bool,
}

/// An owned `rados_read_op_t`, its output slots, read buffer and kept inputs.
pub(crate) struct RawReadOp {
    ptr: sys::rados_read_op_t,
    slots: NonNull<ReadSlots>,
    read_buf: Vec<u8>,
    requested: Requested,
    cmp_prvals: Vec<OutCell<c_int>>,
    keep_bytes: Vec<Bytes>,
    keep_strs: Vec<CString>,
    steps: usize,
}

// SAFETY: the op, its slots and buffers are heap objects with no thread affinity, used by one
// owner at a time (librados writes them only while the op is in flight, owned by `Inflight`).
unsafe impl Send for RawReadOp {}

/// Omap entries (key, value), sorted by key.
pub(crate) type OmapEntries = Vec<(Vec<u8>, Bytes)>;

/// Per-step results of a completed read op: each is (prval, value).
#[derive(Default)]
pub(crate) struct ReadOutputs {
    pub(crate) stat: Option<(c_int, u64, time_t)>,
    pub(crate) data: Option<(c_int, Vec<u8>)>,
    pub(crate) xattrs: Option<(c_int, Vec<(String, Bytes)>)>,
    pub(crate) omap_vals: Option<(c_int, OmapEntries, bool)>,
    pub(crate) omap_vals2: Option<(c_int, OmapEntries, bool)>,
    pub(crate) omap_keys: Option<(c_int, Vec<Vec<u8>>, bool)>,
    pub(crate) omap_by_keys: Option<(c_int, OmapEntries)>,
    pub(crate) exec: Option<(c_int, Bytes)>,
    pub(crate) cmp: Vec<c_int>,
}

/// Largest single read this crate asks for (`osd_max_object_size` is 128 MiB).
pub(crate) const MAX_READ: usize = 1 << 30;

impl RawReadOp {
    pub(crate) fn new() -> Self {
        // SAFETY: no arguments; returns a new op or null (out of memory).
        let ptr = unsafe { sys::rados_create_read_op() };
        assert!(!ptr.is_null(), "rados_create_read_op: out of memory");
        let slots = Box::new(ReadSlots {
            stat_size: 0,
            stat_mtime: 0,
            stat_rval: 0,
            read_len: 0,
            read_rval: 0,
            xattrs_iter: ptr::null_mut(),
            xattrs_rval: 0,
            vals_iter: ptr::null_mut(),
            vals_more: 0,
            vals_rval: 0,
            vals2_iter: ptr::null_mut(),
            vals2_more: 0,
            vals2_rval: 0,
            keys_iter: ptr::null_mut(),
            keys_more: 0,
            keys_rval: 0,
            bykeys_iter: ptr::null_mut(),
            bykeys_rval: 0,
            exec_out: ptr::null_mut(),
            exec_len: 0,
            exec_rval: 0,
        });
        Self {
            ptr,
            slots: NonNull::from(Box::leak(slots)),
            read_buf: Vec::new(),
            requested: Requested::default(),
            cmp_prvals: Vec::new(),
            keep_bytes: Vec::new(),
            keep_strs: Vec::new(),
            steps: 0,
        }
    }

    pub(crate) fn steps(&self) -> usize {
        self.steps
    }

    fn s(&self) -> *mut ReadSlots {
        self.slots.as_ptr()
    }

    fn once(flag: &mut bool, what: &str) -> Result<()> {
        if std::mem::replace(flag, true) {
            return Err(RadosError::invalid(format!(
                "a read op can hold one {what} step"
            )));
        }
        Ok(())
    }

    pub(crate) fn set_flags(&mut self, flags: c_int) {
        // SAFETY: live op.
        unsafe { sys::rados_read_op_set_flags(self.ptr, flags) };
    }

    pub(crate) fn assert_exists(&mut self) {
        // SAFETY: live op.
        unsafe { sys::rados_read_op_assert_exists(self.ptr) };
        self.steps += 1;
    }

    pub(crate) fn assert_version(&mut self, ver: u64) {
        // SAFETY: live op.
        unsafe { sys::rados_read_op_assert_version(self.ptr, ver) };
        self.steps += 1;
    }

    pub(crate) fn stat(&mut self) -> Result<()> {
        Self::once(&mut self.requested.stat, "stat")?;
        let s = self.s();
        // SAFETY: live op; the three out-pointers are fields of our slots allocation, which
        // lives until the op is released after completion.
        unsafe {
            sys::rados_read_op_stat(
                self.ptr,
                &raw mut (*s).stat_size,
                &raw mut (*s).stat_mtime,
                &raw mut (*s).stat_rval,
            )
        };
        self.steps += 1;
        Ok(())
    }

    pub(crate) fn read(&mut self, offset: u64, len: usize) -> Result<()> {
        if len == 0 || len > MAX_READ {
            return Err(RadosError::invalid(format!(
                "read length {len} not in 1..={MAX_READ}"
            )));
        }
        Self::once(&mut self.requested.read, "read")?;
        self.read_buf = Vec::with_capacity(len);
        let s = self.s();
        // SAFETY: live op; `read_buf` has `len` bytes of capacity that librados may write
        // (its heap buffer does not move while the Vec is not resized, and it is not until
        // the op completes); the out-pointers are fields of our slots allocation.
        unsafe {
            sys::rados_read_op_read(
                self.ptr,
                offset,
                len,
                self.read_buf.as_mut_ptr().cast(),
                &raw mut (*s).read_len,
                &raw mut (*s).read_rval,
            )
        };
        self.steps += 1;
        Ok(())
    }

    pub(crate) fn getxattrs(&mut self) -> Result<()> {
        Self::once(&mut self.requested.xattrs, "getxattrs")?;
        let s = self.s();
        // SAFETY: live op; librados stores a new iterator in our slot right away (freed in
        // Drop) and fills it on completion; out-pointers are fields of our slots.
        unsafe {
            sys::rados_read_op_getxattrs(
                self.ptr,
                &raw mut (*s).xattrs_iter,
                &raw mut (*s).xattrs_rval,
            )
        };
        self.steps += 1;
        Ok(())
    }

    pub(crate) fn cmpxattr(&mut self, name: CString, op: u8, value: Bytes) {
        // SAFETY: live op; NUL-terminated name and a value valid for its length, both kept.
        unsafe {
            sys::rados_read_op_cmpxattr(
                self.ptr,
                name.as_ptr(),
                op,
                value.as_ptr().cast(),
                value.len(),
            )
        };
        self.keep_strs.push(name);
        self.keep_bytes.push(value);
        self.steps += 1;
    }

    pub(crate) fn omap_cmp(&mut self, key: Bytes, op: u8, value: Bytes) {
        let cell = OutCell::new(0);
        // SAFETY: live op; key and value valid for their lengths and kept; the prval cell is
        // owned by `self`.
        unsafe {
            sys::rados_read_op_omap_cmp2(
                self.ptr,
                key.as_ptr().cast(),
                op,
                value.as_ptr().cast(),
                key.len(),
                value.len(),
                cell.as_mut_ptr(),
            )
        };
        self.cmp_prvals.push(cell);
        self.keep_bytes.push(key);
        self.keep_bytes.push(value);
        self.steps += 1;
    }

    /// `start_after`/`filter_prefix`: NUL-terminated (the C API takes no lengths here).
    /// `second`: the op's second range ([`ReadSlots`]'s `vals2_*`), read at the same version.
    pub(crate) fn omap_get_vals(
        &mut self,
        start_after: CString,
        filter_prefix: CString,
        max: u64,
        second: bool,
    ) -> Result<()> {
        if second {
            Self::once(&mut self.requested.vals2, "a second omap_get_vals")?;
        } else {
            Self::once(&mut self.requested.vals, "omap_get_vals")?;
        }
        let s = self.s();
        // SAFETY: only the addresses of fields of our live slots allocation are taken.
        let (iter, more, rval) = unsafe {
            if second {
                (
                    &raw mut (*s).vals2_iter,
                    &raw mut (*s).vals2_more,
                    &raw mut (*s).vals2_rval,
                )
            } else {
                (
                    &raw mut (*s).vals_iter,
                    &raw mut (*s).vals_more,
                    &raw mut (*s).vals_rval,
                )
            }
        };
        // SAFETY: live op; NUL-terminated strings (copied by librados, kept anyway); the
        // iterator, `more` and prval out-pointers are fields of our slots.
        unsafe {
            sys::rados_read_op_omap_get_vals2(
                self.ptr,
                start_after.as_ptr(),
                filter_prefix.as_ptr(),
                max,
                iter,
                more,
                rval,
            )
        };
        self.keep_strs.push(start_after);
        self.keep_strs.push(filter_prefix);
        self.steps += 1;
        Ok(())
    }

    pub(crate) fn omap_get_keys(&mut self, start_after: CString, max: u64) -> Result<()> {
        Self::once(&mut self.requested.keys, "omap_get_keys")?;
        let s = self.s();
        // SAFETY: as for omap_get_vals.
        unsafe {
            sys::rados_read_op_omap_get_keys2(
                self.ptr,
                start_after.as_ptr(),
                max,
                &raw mut (*s).keys_iter,
                &raw mut (*s).keys_more,
                &raw mut (*s).keys_rval,
            )
        };
        self.keep_strs.push(start_after);
        self.steps += 1;
        Ok(())
    }

    pub(crate) fn omap_get_vals_by_keys(&mut self, keys: Vec<Bytes>) -> Result<()> {
        Self::once(&mut self.requested.bykeys, "omap_get_vals_by_keys")?;
        let ptrs: Vec<*const c_char> = keys.iter().map(|k| k.as_ptr().cast()).collect();
        let lens: Vec<size_t> = keys.iter().map(Bytes::len).collect();
        let s = self.s();
        // SAFETY: live op; two arrays of `keys.len()` elements (read during the call) into
        // kept buffers; iterator and prval out-pointers are fields of our slots.
        unsafe {
            sys::rados_read_op_omap_get_vals_by_keys2(
                self.ptr,
                ptrs.as_ptr(),
                keys.len(),
                lens.as_ptr(),
                &raw mut (*s).bykeys_iter,
                &raw mut (*s).bykeys_rval,
            )
        };
        self.keep_bytes.extend(keys);
        self.steps += 1;
        Ok(())
    }

    pub(crate) fn exec(&mut self, cls: CString, method: CString, input: Bytes) -> Result<()> {
        Self::once(&mut self.requested.exec, "exec")?;
        let s = self.s();
        // SAFETY: live op; NUL-terminated names and input valid for its length, all kept;
        // out-pointers are fields of our slots (librados mallocs the output, freed by us).
        unsafe {
            sys::rados_read_op_exec(
                self.ptr,
                cls.as_ptr(),
                method.as_ptr(),
                input.as_ptr().cast(),
                input.len(),
                &raw mut (*s).exec_out,
                &raw mut (*s).exec_len,
                &raw mut (*s).exec_rval,
            )
        };
        self.keep_strs.push(cls);
        self.keep_strs.push(method);
        self.keep_bytes.push(input);
        self.steps += 1;
        Ok(())
    }

    /// Collects the per-step results.
    ///
    /// # Safety
    /// The op completed with a non-negative return value: librados no longer writes the
    /// slots, and every step's result handler ran (iterators are positioned).
    unsafe fn outputs(&mut self) -> ReadOutputs {
        let s = self.s();
        let req = self.requested;
        let mut out = ReadOutputs::default();
        // SAFETY: per the contract, the slots are ours to read; iterators are
        // only walked when their step succeeded, and freed in Drop.
        unsafe {
            if req.stat {
                out.stat = Some(((*s).stat_rval, (*s).stat_size, (*s).stat_mtime));
            }
            if req.read {
                let rval = (*s).read_rval;
                let mut buf = std::mem::take(&mut self.read_buf);
                if rval >= 0 {
                    let n = (*s).read_len.min(buf.capacity());
                    // librados copied `read_len` bytes into the buffer (C_bl_to_buf).
                    buf.set_len(n);
                }
                out.data = Some((rval, buf));
            }
            if req.xattrs {
                let rval = (*s).xattrs_rval;
                let v = if rval >= 0 {
                    walk_xattrs((*s).xattrs_iter)
                } else {
                    Vec::new()
                };
                out.xattrs = Some((rval, v));
            }
            if req.vals {
                let rval = (*s).vals_rval;
                let v = if rval >= 0 {
                    walk_omap((*s).vals_iter)
                } else {
                    Vec::new()
                };
                out.omap_vals = Some((rval, v, (*s).vals_more != 0));
            }
            if req.vals2 {
                let rval = (*s).vals2_rval;
                let v = if rval >= 0 {
                    walk_omap((*s).vals2_iter)
                } else {
                    Vec::new()
                };
                out.omap_vals2 = Some((rval, v, (*s).vals2_more != 0));
            }
            if req.keys {
                let rval = (*s).keys_rval;
                let v = if rval >= 0 {
                    walk_omap((*s).keys_iter)
                } else {
                    Vec::new()
                };
                out.omap_keys = Some((
                    rval,
                    v.into_iter().map(|(k, _)| k).collect(),
                    (*s).keys_more != 0,
                ));
            }
            if req.bykeys {
                let rval = (*s).bykeys_rval;
                let v = if rval >= 0 {
                    walk_omap((*s).bykeys_iter)
                } else {
                    Vec::new()
                };
                out.omap_by_keys = Some((rval, v));
            }
            if req.exec {
                let rval = (*s).exec_rval;
                let data = take_buffer((*s).exec_out, (*s).exec_len);
                (*s).exec_out = ptr::null_mut();
                out.exec = Some((rval, Bytes::from(data)));
            }
            out.cmp = self.cmp_prvals.iter().map(|c| c.get()).collect();
        }
        out
    }
}

/// Walks an omap iterator to its end (it stays owned by the caller).
///
/// # Safety
/// `iter` is a live iterator whose step completed successfully.
unsafe fn walk_omap(iter: sys::rados_omap_iter_t) -> Vec<(Vec<u8>, Bytes)> {
    let mut out = Vec::new();
    if iter.is_null() {
        return out;
    }
    loop {
        let mut key: *mut c_char = ptr::null_mut();
        let mut val: *mut c_char = ptr::null_mut();
        let (mut key_len, mut val_len): (size_t, size_t) = (0, 0);
        // SAFETY: live, positioned iterator; valid out-pointers.
        let rc = unsafe {
            sys::rados_omap_get_next2(iter, &mut key, &mut val, &mut key_len, &mut val_len)
        };
        if rc < 0 || key.is_null() {
            break;
        }
        // SAFETY: librados returned pointers to `key_len`/`val_len` bytes owned by the
        // iterator, valid until the next call; we copy them now.
        let k = unsafe { std::slice::from_raw_parts(key.cast::<u8>(), key_len) }.to_vec();
        let v = if val.is_null() || val_len == 0 {
            Bytes::new()
        } else {
            // SAFETY: as above.
            Bytes::copy_from_slice(unsafe { std::slice::from_raw_parts(val.cast::<u8>(), val_len) })
        };
        out.push((k, v));
    }
    out
}

/// Walks an xattrs iterator to its end (it stays owned by the caller).
///
/// # Safety
/// `iter` is a live iterator whose step completed successfully.
unsafe fn walk_xattrs(iter: sys::rados_xattrs_iter_t) -> Vec<(String, Bytes)> {
    let mut out = Vec::new();
    if iter.is_null() {
        return out;
    }
    loop {
        let mut name: *const c_char = ptr::null();
        let mut val: *const c_char = ptr::null();
        let mut len: size_t = 0;
        // SAFETY: live, positioned iterator; valid out-pointers.
        let rc = unsafe { sys::rados_getxattrs_next(iter, &mut name, &mut val, &mut len) };
        if rc < 0 || name.is_null() {
            break;
        }
        // SAFETY: `name` is a NUL-terminated string owned by the iterator.
        let n = unsafe { CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned();
        let v = if val.is_null() || len == 0 {
            Bytes::new()
        } else {
            // SAFETY: `val` points to `len` bytes owned by the iterator.
            Bytes::copy_from_slice(unsafe { std::slice::from_raw_parts(val.cast::<u8>(), len) })
        };
        out.push((n, v));
    }
    out
}

impl Drop for RawReadOp {
    fn drop(&mut self) {
        // SAFETY: we own the op; it is dropped only after its completion (or never submitted).
        unsafe { sys::rados_release_read_op(self.ptr) };
        let s = self.s();
        // SAFETY: no librados write is pending (see above); each iterator/buffer was created
        // by librados for this op and is freed once here (exec_out is nulled when taken).
        unsafe {
            if !(*s).xattrs_iter.is_null() {
                sys::rados_getxattrs_end((*s).xattrs_iter);
            }
            for iter in [
                (*s).vals_iter,
                (*s).vals2_iter,
                (*s).keys_iter,
                (*s).bykeys_iter,
            ] {
                if !iter.is_null() {
                    sys::rados_omap_get_end(iter);
                }
            }
            if !(*s).exec_out.is_null() {
                sys::rados_buffer_free((*s).exec_out);
            }
            drop(Box::from_raw(s));
        }
    }
}

/// What a read keeps alive until it completes.
pub(crate) struct ReadInflight {
    op: RawReadOp,
    _oid: CString,
    _io: Arc<IoCtxHandle>,
}

pub(crate) fn submit_read(
    io: Arc<IoCtxHandle>,
    oid: CString,
    op: RawReadOp,
    flags: c_int,
) -> Result<Pending<ReadInflight>> {
    let (op_ptr, io_ptr, oid_ptr) = (op.ptr, io.ptr, oid.as_ptr());
    let state = ReadInflight {
        op,
        _oid: oid,
        _io: io,
    };
    start("rados_aio_read_op_operate", state, move |c| {
        // SAFETY: the op (with its slots and buffer), the ioctx and the oid are owned by the
        // in-flight state, which lives until the callback has run.
        unsafe { sys::rados_aio_read_op_operate(op_ptr, io_ptr, c, oid_ptr, flags) }
    })
}

impl Done<ReadInflight> {
    /// Per-step results; `None` when the whole op failed (`rval < 0`).
    pub(crate) fn outputs(mut self) -> Option<ReadOutputs> {
        if self.rval < 0 {
            return None;
        }
        // SAFETY: a `Done` exists only after the completion callback; rval >= 0.
        Some(unsafe { self.state.op.outputs() })
    }
}

// ------------------------------------------------------------------------------------------
// Notify
// ------------------------------------------------------------------------------------------

/// What a notify keeps alive until it completes; frees the reply buffer if nobody took it.
pub(crate) struct NotifyInflight {
    reply: OutCell<*mut c_char>,
    reply_len: OutCell<size_t>,
    _payload: Bytes,
    _oid: CString,
    _io: Arc<IoCtxHandle>,
}

impl Drop for NotifyInflight {
    fn drop(&mut self) {
        // SAFETY: dropped only after completion (or when never submitted, then null); the
        // buffer, if any, was allocated by librados and is freed once here.
        unsafe {
            let buf = self.reply.get();
            if !buf.is_null() {
                sys::rados_buffer_free(buf);
                self.reply.set(ptr::null_mut());
            }
        }
    }
}

pub(crate) fn submit_notify(
    io: Arc<IoCtxHandle>,
    oid: CString,
    payload: Bytes,
    timeout_ms: u64,
) -> Result<Pending<NotifyInflight>> {
    let len = c_int::try_from(payload.len())
        .map_err(|_| RadosError::invalid("notify payload larger than 2 GiB"))?;
    let state = NotifyInflight {
        reply: OutCell::new(ptr::null_mut()),
        reply_len: OutCell::new(0),
        _payload: payload,
        _oid: oid,
        _io: io,
    };
    let io_ptr = state._io.ptr;
    let oid_ptr = state._oid.as_ptr();
    let buf_ptr = state._payload.as_ptr().cast::<c_char>();
    let reply_ptr = state.reply.as_mut_ptr();
    let reply_len_ptr = state.reply_len.as_mut_ptr();
    start("rados_aio_notify", state, move |c| {
        // SAFETY: ioctx, oid and payload are owned by the in-flight state; the reply cells
        // are heap cells it owns; all live until the callback has run.
        unsafe {
            sys::rados_aio_notify(
                io_ptr,
                oid_ptr,
                c,
                buf_ptr,
                len,
                timeout_ms,
                reply_ptr,
                reply_len_ptr,
            )
        }
    })
}

impl Done<NotifyInflight> {
    /// The raw reply buffer (encoded acks and timeouts), possibly empty.
    pub(crate) fn take_reply(self) -> Vec<u8> {
        // SAFETY: a `Done` exists only after completion; the buffer is taken once and the
        // cell nulled so that Drop does not free it again.
        unsafe {
            let buf = self.state.reply.get();
            let len = self.state.reply_len.get();
            self.state.reply.set(ptr::null_mut());
            take_buffer(buf, len)
        }
    }
}

// ------------------------------------------------------------------------------------------
// Watch
// ------------------------------------------------------------------------------------------

/// The callback argument of a watch. Freed only after unwatch + `rados_watch_flush`.
struct WatchCtx {
    tx: tokio_mpsc::UnboundedSender<WatchEvent>,
    io: sys::rados_ioctx_t,
    oid: CString,
    auto_ack: bool,
}

/// The notify callback, on a librados finisher thread. Never blocks.
unsafe extern "C" fn watch_cb(
    arg: *mut c_void,
    notify_id: u64,
    cookie: u64,
    notifier_id: u64,
    data: *mut c_void,
    data_len: size_t,
) {
    // SAFETY: `arg` is the WatchCtx registered with this watch; it is freed only after the
    // unwatch and a watch flush, so it is alive while callbacks run.
    let ctx = unsafe { &*arg.cast::<WatchCtx>() };
    let payload = if data.is_null() || data_len == 0 {
        Bytes::new()
    } else {
        // SAFETY: librados passes `data_len` readable bytes, valid during the callback.
        Bytes::copy_from_slice(unsafe { std::slice::from_raw_parts(data.cast::<u8>(), data_len) })
    };
    if ctx.auto_ack {
        // SAFETY: the ioctx outlives the ctx (the guard holds its Arc); notify_ack only queues
        // a message (no wait), which RGW and librbd also do from this callback.
        let rc = unsafe {
            sys::rados_notify_ack(ctx.io, ctx.oid.as_ptr(), notify_id, cookie, c"".as_ptr(), 0)
        };
        if rc < 0 {
            tracing::debug!(rc, notify_id, "rados_notify_ack failed");
        }
    }
    let _ = ctx.tx.send(WatchEvent::Notify(Notification {
        notify_id,
        cookie,
        notifier_id,
        payload,
    }));
}

/// The watch error callback, on a librados finisher thread. Never blocks.
unsafe extern "C" fn watch_err_cb(arg: *mut c_void, cookie: u64, err: c_int) {
    // SAFETY: as in `watch_cb`.
    let ctx = unsafe { &*arg.cast::<WatchCtx>() };
    let _ = ctx.tx.send(WatchEvent::Error {
        cookie,
        error: RadosError::from_rc("watch", err.into()),
    });
}

/// A registered watch. Dropping it unwatches, flushes callbacks and frees the context: a
/// blocking sequence, so owners drop it on a thread that may block.
pub(crate) struct WatchGuard {
    io: Arc<IoCtxHandle>,
    oid: CString,
    cookie: u64,
    ctx: NonNull<WatchCtx>,
    torn_down: bool,
}

// SAFETY: the ctx is only read by librados callbacks and freed by the guard's teardown; the
// ioctx is thread-safe; `check`/`ack` take `&self` and only read.
unsafe impl Send for WatchGuard {}
// SAFETY: as above.
unsafe impl Sync for WatchGuard {}

impl WatchGuard {
    /// Blocking: registers a watch (`rados_watch3`). `timeout_secs` 0 = the OSD default.
    pub(crate) fn watch(
        io: Arc<IoCtxHandle>,
        oid: CString,
        timeout_secs: u32,
        auto_ack: bool,
        tx: tokio_mpsc::UnboundedSender<WatchEvent>,
    ) -> Result<Self> {
        let ctx = NonNull::from(Box::leak(Box::new(WatchCtx {
            tx,
            io: io.ptr,
            oid: oid.clone(),
            auto_ack,
        })));
        let mut cookie: u64 = 0;
        // SAFETY: live ioctx and NUL-terminated oid; the callbacks match librados' typedefs
        // and `ctx` stays alive until after unwatch + flush (teardown).
        let rc = unsafe {
            sys::rados_watch3(
                io.ptr,
                oid.as_ptr(),
                &mut cookie,
                Some(watch_cb),
                Some(watch_err_cb),
                timeout_secs,
                ctx.as_ptr().cast(),
            )
        };
        if rc < 0 {
            // librados cancelled the linger op; flush any callback already queued before
            // freeing the context.
            io.cluster.watch_flush();
            // SAFETY: the watch is gone and flushed: no callback can use the ctx any more.
            drop(unsafe { Box::from_raw(ctx.as_ptr()) });
            return Err(RadosError::from_rc("rados_watch3", rc.into()));
        }
        Ok(Self {
            io,
            oid,
            cookie,
            ctx,
            torn_down: false,
        })
    }

    pub(crate) fn cookie(&self) -> u64 {
        self.cookie
    }

    /// `rados_watch_check`: ms since the watch was last confirmed, or a negative errno.
    pub(crate) fn check(&self) -> c_int {
        // SAFETY: live ioctx and a registered cookie (not torn down while `self` lives).
        unsafe { sys::rados_watch_check(self.io.ptr, self.cookie) }
    }

    /// Acks a notify with a reply payload (only needed without auto-ack). Does not block.
    pub(crate) fn ack(&self, notify_id: u64, reply: &[u8]) -> Result<()> {
        let len = c_int::try_from(reply.len())
            .map_err(|_| RadosError::invalid("notify reply larger than 2 GiB"))?;
        // SAFETY: live ioctx, NUL-terminated oid, reply valid for its length.
        let rc = unsafe {
            sys::rados_notify_ack(
                self.io.ptr,
                self.oid.as_ptr(),
                notify_id,
                self.cookie,
                reply.as_ptr().cast(),
                len,
            )
        };
        check("rados_notify_ack", rc.into()).map(drop)
    }

    /// Blocking: unwatch, flush, free. Returns the unwatch result.
    pub(crate) fn unwatch(mut self) -> Result<()> {
        let rc = self.teardown();
        check("rados_unwatch2", rc.into()).map(drop)
    }

    fn teardown(&mut self) -> c_int {
        if std::mem::replace(&mut self.torn_down, true) {
            return 0;
        }
        // SAFETY: live ioctx, registered cookie; librados cancels the linger op even when
        // the unwatch message fails.
        let rc = unsafe { sys::rados_unwatch2(self.io.ptr, self.cookie) };
        self.io.cluster.watch_flush();
        // SAFETY: unwatched and flushed: no callback can reach the ctx any more.
        drop(unsafe { Box::from_raw(self.ctx.as_ptr()) });
        rc
    }
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        let rc = self.teardown();
        if rc < 0 {
            tracing::debug!(
                rc,
                cookie = self.cookie,
                "rados_unwatch2 failed (watch dropped anyway)"
            );
        }
    }
}

// ------------------------------------------------------------------------------------------
// Blocking helpers: listing and advisory locks
// ------------------------------------------------------------------------------------------

/// Blocking: every object name of the ioctx's namespace, in PG order.
pub(crate) fn list_objects(io: &IoCtxHandle) -> Result<Vec<String>> {
    let mut ctx: sys::rados_list_ctx_t = ptr::null_mut();
    // SAFETY: live ioctx, valid out-pointer.
    let rc = unsafe { sys::rados_nobjects_list_open(io.ptr, &mut ctx) };
    check("rados_nobjects_list_open", rc.into())?;
    let mut names = Vec::new();
    let result = loop {
        let mut entry: *const c_char = ptr::null();
        let mut entry_size: size_t = 0;
        // SAFETY: live list context; key/nspace outputs are optional (null).
        let rc = unsafe {
            sys::rados_nobjects_list_next2(
                ctx,
                &mut entry,
                ptr::null_mut(),
                ptr::null_mut(),
                &mut entry_size,
                ptr::null_mut(),
                ptr::null_mut(),
            )
        };
        if rc == -libc::ENOENT {
            break Ok(names);
        }
        if rc < 0 {
            break Err(RadosError::from_rc("rados_nobjects_list_next2", rc.into()));
        }
        if !entry.is_null() {
            // SAFETY: `entry` points to `entry_size` bytes valid until the next call.
            let name = unsafe { std::slice::from_raw_parts(entry.cast::<u8>(), entry_size) };
            names.push(String::from_utf8_lossy(name).into_owned());
        }
    };
    // SAFETY: the context was opened above and is closed once.
    unsafe { sys::rados_nobjects_list_close(ctx) };
    result
}

/// Blocking: `rados_lock_exclusive`. `duration` None = no expiry.
pub(crate) fn lock_exclusive(
    io: &IoCtxHandle,
    oid: &CStr,
    name: &CStr,
    cookie: &CStr,
    desc: &CStr,
    duration: Option<Duration>,
    may_renew: bool,
) -> Result<()> {
    let mut tv = duration.map(|d| libc::timeval {
        tv_sec: libc::time_t::try_from(d.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_usec: libc::suseconds_t::from(d.subsec_micros()),
    });
    let tv_ptr = tv
        .as_mut()
        .map_or(ptr::null_mut(), |t| t as *mut libc::timeval);
    let flags = if may_renew {
        sys::LIBRADOS_LOCK_FLAG_MAY_RENEW
    } else {
        0
    };
    // SAFETY: live ioctx, NUL-terminated strings, a valid or null timeval.
    let rc = unsafe {
        sys::rados_lock_exclusive(
            io.ptr,
            oid.as_ptr(),
            name.as_ptr(),
            cookie.as_ptr(),
            desc.as_ptr(),
            tv_ptr,
            flags,
        )
    };
    check("rados_lock_exclusive", rc.into()).map(drop)
}

/// Blocking: `rados_unlock`.
pub(crate) fn unlock(io: &IoCtxHandle, oid: &CStr, name: &CStr, cookie: &CStr) -> Result<()> {
    // SAFETY: live ioctx, NUL-terminated strings.
    let rc = unsafe { sys::rados_unlock(io.ptr, oid.as_ptr(), name.as_ptr(), cookie.as_ptr()) };
    check("rados_unlock", rc.into()).map(drop)
}

/// Blocking: `rados_break_lock`.
pub(crate) fn break_lock(
    io: &IoCtxHandle,
    oid: &CStr,
    name: &CStr,
    client: &CStr,
    cookie: &CStr,
) -> Result<()> {
    // SAFETY: live ioctx, NUL-terminated strings.
    let rc = unsafe {
        sys::rados_break_lock(
            io.ptr,
            oid.as_ptr(),
            name.as_ptr(),
            client.as_ptr(),
            cookie.as_ptr(),
        )
    };
    check("rados_break_lock", rc.into()).map(drop)
}

/// Raw result of `rados_list_lockers`.
pub(crate) struct RawLockers {
    pub(crate) exclusive: bool,
    pub(crate) tag: String,
    /// (client, cookie, address) per locker.
    pub(crate) lockers: Vec<(String, String, String)>,
}

/// Blocking: `rados_list_lockers`, growing its buffers on `ERANGE`.
pub(crate) fn list_lockers(io: &IoCtxHandle, oid: &CStr, name: &CStr) -> Result<RawLockers> {
    let mut sizes: [size_t; 4] = [256, 1024, 1024, 1024];
    for _ in 0..4 {
        let mut bufs: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![0u8; n.max(1)]).collect();
        let mut lens = sizes;
        let mut exclusive: c_int = 0;
        let [tag, clients, cookies, addrs] = &mut bufs[..] else {
            unreachable!("four buffers")
        };
        // SAFETY: live ioctx, NUL-terminated strings, four writable buffers whose lengths are
        // passed alongside (librados writes at most that many bytes, or returns -ERANGE).
        let rc = unsafe {
            sys::rados_list_lockers(
                io.ptr,
                oid.as_ptr(),
                name.as_ptr(),
                &mut exclusive,
                tag.as_mut_ptr().cast(),
                &mut lens[0],
                clients.as_mut_ptr().cast(),
                &mut lens[1],
                cookies.as_mut_ptr().cast(),
                &mut lens[2],
                addrs.as_mut_ptr().cast(),
                &mut lens[3],
            )
        };
        let rc = i64::try_from(rc).unwrap_or(i64::MIN);
        if rc == -i64::from(libc::ERANGE) {
            sizes = lens.map(|n| n + 16);
            continue;
        }
        let count = usize::try_from(check("rados_list_lockers", rc)?).unwrap_or(0);
        let split = |b: &[u8]| -> Vec<String> {
            b.split(|&c| c == 0)
                .take(count)
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        };
        let tag_s = tag.split(|&c| c == 0).next().unwrap_or_default();
        let tag_s = String::from_utf8_lossy(tag_s).into_owned();
        let (c, k, a) = (
            split(&clients[..lens[1].min(clients.len())]),
            split(&cookies[..lens[2].min(cookies.len())]),
            split(&addrs[..lens[3].min(addrs.len())]),
        );
        let lockers = c
            .into_iter()
            .zip(k)
            .zip(a)
            .map(|((c, k), a)| (c, k, a))
            .collect();
        return Ok(RawLockers {
            exclusive: exclusive != 0,
            tag: tag_s,
            lockers,
        });
    }
    Err(RadosError::from_rc(
        "rados_list_lockers",
        -i64::from(libc::ERANGE),
    ))
}
