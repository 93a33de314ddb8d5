//! Hand-written declarations of the librados C API that this crate uses, checked one by one
//! against `/usr/include/rados/librados.h` of Ceph 16.2.15 (Pacific, `librados-dev`).
//!
//! Only declarations live here: no logic. Every call goes through `crate::raw`.

#![allow(non_camel_case_types)]

use libc::{c_char, c_int, c_uchar, c_void, size_t, ssize_t, time_t, timeval};

pub(crate) type rados_t = *mut c_void;
pub(crate) type rados_ioctx_t = *mut c_void;
pub(crate) type rados_completion_t = *mut c_void;
pub(crate) type rados_write_op_t = *mut c_void;
pub(crate) type rados_read_op_t = *mut c_void;
pub(crate) type rados_omap_iter_t = *mut c_void;
pub(crate) type rados_xattrs_iter_t = *mut c_void;
pub(crate) type rados_list_ctx_t = *mut c_void;

/// `typedef void (*rados_callback_t)(rados_completion_t cb, void *arg);`
pub(crate) type rados_callback_t = Option<unsafe extern "C" fn(rados_completion_t, *mut c_void)>;

/// `typedef void (*rados_watchcb2_t)(void *arg, uint64_t notify_id, uint64_t handle,
/// uint64_t notifier_id, void *data, size_t data_len);`
pub(crate) type rados_watchcb2_t =
    Option<unsafe extern "C" fn(*mut c_void, u64, u64, u64, *mut c_void, size_t)>;

/// `typedef void (*rados_watcherrcb_t)(void *pre, uint64_t cookie, int err);`
pub(crate) type rados_watcherrcb_t = Option<unsafe extern "C" fn(*mut c_void, u64, c_int)>;

/// `LIBRADOS_CREATE_EXCLUSIVE` / `LIBRADOS_CREATE_IDEMPOTENT`.
pub(crate) const LIBRADOS_CREATE_EXCLUSIVE: c_int = 1;
pub(crate) const LIBRADOS_CREATE_IDEMPOTENT: c_int = 0;
/// `LIBRADOS_LOCK_FLAG_MAY_RENEW` (= `LIBRADOS_LOCK_FLAG_RENEW`, `1u<<0`).
pub(crate) const LIBRADOS_LOCK_FLAG_MAY_RENEW: u8 = 1;

#[link(name = "rados")]
unsafe extern "C" {
    // --- cluster handle -------------------------------------------------------------------
    pub(crate) fn rados_version(major: *mut c_int, minor: *mut c_int, extra: *mut c_int);
    pub(crate) fn rados_create2(
        pcluster: *mut rados_t,
        clustername: *const c_char,
        name: *const c_char,
        flags: u64,
    ) -> c_int;
    pub(crate) fn rados_conf_read_file(cluster: rados_t, path: *const c_char) -> c_int;
    pub(crate) fn rados_conf_set(
        cluster: rados_t,
        option: *const c_char,
        value: *const c_char,
    ) -> c_int;
    pub(crate) fn rados_connect(cluster: rados_t) -> c_int;
    pub(crate) fn rados_shutdown(cluster: rados_t);
    pub(crate) fn rados_get_instance_id(cluster: rados_t) -> u64;
    pub(crate) fn rados_getaddrs(cluster: rados_t, addrs: *mut *mut c_char) -> c_int;
    pub(crate) fn rados_blocklist_add(
        cluster: rados_t,
        client_address: *mut c_char,
        expire_seconds: u32,
    ) -> c_int;
    pub(crate) fn rados_wait_for_latest_osdmap(cluster: rados_t) -> c_int;
    pub(crate) fn rados_pool_lookup(cluster: rados_t, pool_name: *const c_char) -> i64;
    pub(crate) fn rados_mon_command(
        cluster: rados_t,
        cmd: *mut *const c_char,
        cmdlen: size_t,
        inbuf: *const c_char,
        inbuflen: size_t,
        outbuf: *mut *mut c_char,
        outbuflen: *mut size_t,
        outs: *mut *mut c_char,
        outslen: *mut size_t,
    ) -> c_int;
    pub(crate) fn rados_buffer_free(buf: *mut c_char);
    pub(crate) fn rados_watch_flush(cluster: rados_t) -> c_int;

    // --- io context ---------------------------------------------------------------------
    pub(crate) fn rados_ioctx_create(
        cluster: rados_t,
        pool_name: *const c_char,
        ioctx: *mut rados_ioctx_t,
    ) -> c_int;
    pub(crate) fn rados_ioctx_destroy(io: rados_ioctx_t);
    pub(crate) fn rados_ioctx_get_id(io: rados_ioctx_t) -> i64;
    pub(crate) fn rados_ioctx_set_namespace(io: rados_ioctx_t, nspace: *const c_char);

    // --- completions ----------------------------------------------------------------------
    pub(crate) fn rados_aio_create_completion2(
        cb_arg: *mut c_void,
        cb_complete: rados_callback_t,
        pc: *mut rados_completion_t,
    ) -> c_int;
    pub(crate) fn rados_aio_get_return_value(c: rados_completion_t) -> c_int;
    pub(crate) fn rados_aio_get_version(c: rados_completion_t) -> u64;
    pub(crate) fn rados_aio_release(c: rados_completion_t);

    // --- write operations -----------------------------------------------------------------
    pub(crate) fn rados_create_write_op() -> rados_write_op_t;
    pub(crate) fn rados_release_write_op(write_op: rados_write_op_t);
    pub(crate) fn rados_write_op_set_flags(write_op: rados_write_op_t, flags: c_int);
    pub(crate) fn rados_write_op_assert_exists(write_op: rados_write_op_t);
    pub(crate) fn rados_write_op_assert_version(write_op: rados_write_op_t, ver: u64);
    pub(crate) fn rados_write_op_cmpxattr(
        write_op: rados_write_op_t,
        name: *const c_char,
        comparison_operator: u8,
        value: *const c_char,
        value_len: size_t,
    );
    pub(crate) fn rados_write_op_omap_cmp2(
        write_op: rados_write_op_t,
        key: *const c_char,
        comparison_operator: u8,
        val: *const c_char,
        key_len: size_t,
        val_len: size_t,
        prval: *mut c_int,
    );
    pub(crate) fn rados_write_op_setxattr(
        write_op: rados_write_op_t,
        name: *const c_char,
        value: *const c_char,
        value_len: size_t,
    );
    pub(crate) fn rados_write_op_rmxattr(write_op: rados_write_op_t, name: *const c_char);
    pub(crate) fn rados_write_op_create(
        write_op: rados_write_op_t,
        exclusive: c_int,
        category: *const c_char,
    );
    pub(crate) fn rados_write_op_write(
        write_op: rados_write_op_t,
        buffer: *const c_char,
        len: size_t,
        offset: u64,
    );
    pub(crate) fn rados_write_op_write_full(
        write_op: rados_write_op_t,
        buffer: *const c_char,
        len: size_t,
    );
    pub(crate) fn rados_write_op_append(
        write_op: rados_write_op_t,
        buffer: *const c_char,
        len: size_t,
    );
    pub(crate) fn rados_write_op_remove(write_op: rados_write_op_t);
    pub(crate) fn rados_write_op_truncate(write_op: rados_write_op_t, offset: u64);
    pub(crate) fn rados_write_op_exec(
        write_op: rados_write_op_t,
        cls: *const c_char,
        method: *const c_char,
        in_buf: *const c_char,
        in_len: size_t,
        prval: *mut c_int,
    );
    pub(crate) fn rados_write_op_omap_set2(
        write_op: rados_write_op_t,
        keys: *const *const c_char,
        vals: *const *const c_char,
        key_lens: *const size_t,
        val_lens: *const size_t,
        num: size_t,
    );
    pub(crate) fn rados_write_op_omap_rm_keys2(
        write_op: rados_write_op_t,
        keys: *const *const c_char,
        key_lens: *const size_t,
        keys_len: size_t,
    );
    pub(crate) fn rados_write_op_omap_rm_range2(
        write_op: rados_write_op_t,
        key_begin: *const c_char,
        key_begin_len: size_t,
        key_end: *const c_char,
        key_end_len: size_t,
    );
    pub(crate) fn rados_write_op_omap_clear(write_op: rados_write_op_t);
    pub(crate) fn rados_aio_write_op_operate(
        write_op: rados_write_op_t,
        io: rados_ioctx_t,
        completion: rados_completion_t,
        oid: *const c_char,
        mtime: *mut time_t,
        flags: c_int,
    ) -> c_int;

    // --- read operations ------------------------------------------------------------------
    pub(crate) fn rados_create_read_op() -> rados_read_op_t;
    pub(crate) fn rados_release_read_op(read_op: rados_read_op_t);
    pub(crate) fn rados_read_op_set_flags(read_op: rados_read_op_t, flags: c_int);
    pub(crate) fn rados_read_op_assert_exists(read_op: rados_read_op_t);
    pub(crate) fn rados_read_op_assert_version(read_op: rados_read_op_t, ver: u64);
    pub(crate) fn rados_read_op_cmpxattr(
        read_op: rados_read_op_t,
        name: *const c_char,
        comparison_operator: u8,
        value: *const c_char,
        value_len: size_t,
    );
    pub(crate) fn rados_read_op_getxattrs(
        read_op: rados_read_op_t,
        iter: *mut rados_xattrs_iter_t,
        prval: *mut c_int,
    );
    pub(crate) fn rados_read_op_omap_cmp2(
        read_op: rados_read_op_t,
        key: *const c_char,
        comparison_operator: u8,
        val: *const c_char,
        key_len: size_t,
        val_len: size_t,
        prval: *mut c_int,
    );
    pub(crate) fn rados_read_op_stat(
        read_op: rados_read_op_t,
        psize: *mut u64,
        pmtime: *mut time_t,
        prval: *mut c_int,
    );
    pub(crate) fn rados_read_op_read(
        read_op: rados_read_op_t,
        offset: u64,
        len: size_t,
        buffer: *mut c_char,
        bytes_read: *mut size_t,
        prval: *mut c_int,
    );
    pub(crate) fn rados_read_op_exec(
        read_op: rados_read_op_t,
        cls: *const c_char,
        method: *const c_char,
        in_buf: *const c_char,
        in_len: size_t,
        out_buf: *mut *mut c_char,
        out_len: *mut size_t,
        prval: *mut c_int,
    );
    pub(crate) fn rados_read_op_omap_get_vals2(
        read_op: rados_read_op_t,
        start_after: *const c_char,
        filter_prefix: *const c_char,
        max_return: u64,
        iter: *mut rados_omap_iter_t,
        pmore: *mut c_uchar,
        prval: *mut c_int,
    );
    pub(crate) fn rados_read_op_omap_get_keys2(
        read_op: rados_read_op_t,
        start_after: *const c_char,
        max_return: u64,
        iter: *mut rados_omap_iter_t,
        pmore: *mut c_uchar,
        prval: *mut c_int,
    );
    pub(crate) fn rados_read_op_omap_get_vals_by_keys2(
        read_op: rados_read_op_t,
        keys: *const *const c_char,
        num_keys: size_t,
        key_lens: *const size_t,
        iter: *mut rados_omap_iter_t,
        prval: *mut c_int,
    );
    pub(crate) fn rados_aio_read_op_operate(
        read_op: rados_read_op_t,
        io: rados_ioctx_t,
        completion: rados_completion_t,
        oid: *const c_char,
        flags: c_int,
    ) -> c_int;

    // --- iterators ------------------------------------------------------------------------
    pub(crate) fn rados_omap_get_next2(
        iter: rados_omap_iter_t,
        key: *mut *mut c_char,
        val: *mut *mut c_char,
        key_len: *mut size_t,
        val_len: *mut size_t,
    ) -> c_int;
    pub(crate) fn rados_omap_get_end(iter: rados_omap_iter_t);
    pub(crate) fn rados_getxattrs_next(
        iter: rados_xattrs_iter_t,
        name: *mut *const c_char,
        val: *mut *const c_char,
        len: *mut size_t,
    ) -> c_int;
    pub(crate) fn rados_getxattrs_end(iter: rados_xattrs_iter_t);

    // --- object listing -------------------------------------------------------------------
    pub(crate) fn rados_nobjects_list_open(io: rados_ioctx_t, ctx: *mut rados_list_ctx_t) -> c_int;
    pub(crate) fn rados_nobjects_list_next2(
        ctx: rados_list_ctx_t,
        entry: *mut *const c_char,
        key: *mut *const c_char,
        nspace: *mut *const c_char,
        entry_size: *mut size_t,
        key_size: *mut size_t,
        nspace_size: *mut size_t,
    ) -> c_int;
    pub(crate) fn rados_nobjects_list_close(ctx: rados_list_ctx_t);

    // --- watch / notify -------------------------------------------------------------------
    pub(crate) fn rados_watch3(
        io: rados_ioctx_t,
        o: *const c_char,
        cookie: *mut u64,
        watchcb: rados_watchcb2_t,
        watcherrcb: rados_watcherrcb_t,
        timeout: u32,
        arg: *mut c_void,
    ) -> c_int;
    pub(crate) fn rados_watch_check(io: rados_ioctx_t, cookie: u64) -> c_int;
    pub(crate) fn rados_unwatch2(io: rados_ioctx_t, cookie: u64) -> c_int;
    pub(crate) fn rados_aio_notify(
        io: rados_ioctx_t,
        o: *const c_char,
        completion: rados_completion_t,
        buf: *const c_char,
        buf_len: c_int,
        timeout_ms: u64,
        reply_buffer: *mut *mut c_char,
        reply_buffer_len: *mut size_t,
    ) -> c_int;
    pub(crate) fn rados_notify_ack(
        io: rados_ioctx_t,
        o: *const c_char,
        notify_id: u64,
        cookie: u64,
        buf: *const c_char,
        buf_len: c_int,
    ) -> c_int;

    // --- advisory locks (cls_lock) --------------------------------------------------------
    pub(crate) fn rados_lock_exclusive(
        io: rados_ioctx_t,
        oid: *const c_char,
        name: *const c_char,
        cookie: *const c_char,
        desc: *const c_char,
        duration: *mut timeval,
        flags: u8,
    ) -> c_int;
    pub(crate) fn rados_unlock(
        io: rados_ioctx_t,
        o: *const c_char,
        name: *const c_char,
        cookie: *const c_char,
    ) -> c_int;
    pub(crate) fn rados_break_lock(
        io: rados_ioctx_t,
        o: *const c_char,
        name: *const c_char,
        client: *const c_char,
        cookie: *const c_char,
    ) -> c_int;
    pub(crate) fn rados_list_lockers(
        io: rados_ioctx_t,
        o: *const c_char,
        name: *const c_char,
        exclusive: *mut c_int,
        tag: *mut c_char,
        tag_len: *mut size_t,
        clients: *mut c_char,
        clients_len: *mut size_t,
        cookies: *mut c_char,
        cookies_len: *mut size_t,
        addrs: *mut c_char,
        addrs_len: *mut size_t,
    ) -> ssize_t;
}
