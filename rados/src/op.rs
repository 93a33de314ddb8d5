//! Compound operations on one object: [`WriteOp`] (atomic: all steps apply or none) and
//! [`ReadOp`] (one consistent view of the object), run with
//! [`IoCtx::operate_write`](crate::IoCtx::operate_write) and
//! [`IoCtx::operate_read`](crate::IoCtx::operate_read).
//!
//! Builders are by value (`WriteOp::new().cmpxattr(..).omap_set(..)`). An argument librados
//! cannot take (a NUL byte in a name) is recorded and returned by `operate_*`, so building
//! never fails half-way.
//!
//! C API limits (librados 16.2): xattr names, class and method names, and the `start_after` /
//! `filter_prefix` arguments of omap listings are NUL-terminated strings; omap keys and
//! values elsewhere are binary-safe (the `*2` calls with explicit lengths are used).

use std::collections::BTreeMap;
use std::ffi::CString;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;

use crate::error::{RadosError, Result};
use crate::raw;

/// Comparison of a guard (`cmpxattr`, `omap_cmp`): always the stored value on the left and
/// the given value on the right (`Lt`: stored < given), for both kinds of guard.
///
/// The OSD itself is not consistent: `omap_cmp` evaluates `stored OP given`, but `cmpxattr`
/// evaluates `given OP stored` (Ceph 16.2 `do_xattr_cmp_str`). This crate swaps `Lt`/`Gt`
/// and `Lte`/`Gte` for `cmpxattr` so that one reading holds for both.
///
/// `cmpxattr` compares as strings (bytewise; zero-pad numbers such as epochs); a missing
/// xattr compares as the empty value. `omap_cmp` compares bytes and supports only `Eq`, `Lt`
/// and `Gt` (the OSD rejects the others with `EINVAL`); a missing omap key compares as the
/// empty value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum CmpOp {
    /// `LIBRADOS_CMPXATTR_OP_EQ`
    Eq = 1,
    /// `LIBRADOS_CMPXATTR_OP_NE`
    Ne = 2,
    /// `LIBRADOS_CMPXATTR_OP_GT`
    Gt = 3,
    /// `LIBRADOS_CMPXATTR_OP_GTE`
    Gte = 4,
    /// `LIBRADOS_CMPXATTR_OP_LT`
    Lt = 5,
    /// `LIBRADOS_CMPXATTR_OP_LTE`
    Lte = 6,
}

/// Per-step flags (`LIBRADOS_OP_FLAG_*`), applied to the step added last.
pub mod op_flags {
    /// Fail a create if the object exists.
    pub const EXCL: i32 = 0x1;
    /// Let the operation succeed even if this step fails.
    pub const FAILOK: i32 = 0x2;
    /// Random access hint.
    pub const FADVISE_RANDOM: i32 = 0x4;
    /// Sequential access hint.
    pub const FADVISE_SEQUENTIAL: i32 = 0x8;
    /// The data will be accessed soon.
    pub const FADVISE_WILLNEED: i32 = 0x10;
    /// The data will not be accessed soon.
    pub const FADVISE_DONTNEED: i32 = 0x20;
    /// Do not cache the data.
    pub const FADVISE_NOCACHE: i32 = 0x40;
}

/// Whole-operation flags (`LIBRADOS_OPERATION_*`); none by default.
pub mod operation_flags {
    /// No flag.
    pub const NOFLAG: i32 = 0;
    /// Read from any replica.
    pub const BALANCE_READS: i32 = 1;
    /// Read from the nearest replica.
    pub const LOCALIZE_READS: i32 = 2;
    /// Order this read with writes.
    pub const ORDER_READS_WRITES: i32 = 4;
    /// Proceed even if the pool is full (deletes that free space).
    pub const FULL_TRY: i32 = 64;
    /// Proceed even if the cluster is full.
    pub const FULL_FORCE: i32 = 128;
}

impl CmpOp {
    /// The operator to pass to librados' `cmpxattr`, which evaluates `given OP stored`.
    fn for_cmpxattr(self) -> u8 {
        let swapped = match self {
            CmpOp::Gt => CmpOp::Lt,
            CmpOp::Gte => CmpOp::Lte,
            CmpOp::Lt => CmpOp::Gt,
            CmpOp::Lte => CmpOp::Gte,
            same => same,
        };
        swapped as u8
    }
}

pub(crate) fn cstring(what: &str, s: impl Into<Vec<u8>>) -> Result<CString> {
    CString::new(s).map_err(|_| RadosError::invalid(format!("{what} contains a NUL byte")))
}

/// An atomic write to one object: its steps apply all together or not at all. A failed guard
/// (`cmpxattr`, `omap_cmp`) fails the whole op with `ECANCELED`.
#[must_use = "a WriteOp does nothing until passed to IoCtx::operate_write"]
pub struct WriteOp {
    pub(crate) raw: raw::RawWriteOp,
    pub(crate) error: Option<RadosError>,
    pub(crate) flags: i32,
}

impl Default for WriteOp {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for WriteOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteOp")
            .field("steps", &self.raw.steps())
            .field("flags", &self.flags)
            .finish()
    }
}

impl WriteOp {
    /// An empty operation.
    pub fn new() -> Self {
        Self {
            raw: raw::RawWriteOp::new(),
            error: None,
            flags: operation_flags::NOFLAG,
        }
    }

    /// Number of steps added so far.
    pub fn len(&self) -> usize {
        self.raw.steps()
    }

    /// Whether no step was added.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn fail(mut self, e: RadosError) -> Self {
        self.error.get_or_insert(e);
        self
    }

    /// Creates the object; with `exclusive` fails with `EEXIST` if it exists.
    pub fn create(mut self, exclusive: bool) -> Self {
        self.raw.create(exclusive);
        self
    }

    /// Fails with `ENOENT` unless the object exists.
    pub fn assert_exists(mut self) -> Self {
        self.raw.assert_exists();
        self
    }

    /// Fails unless the object's version is `version` (`ERANGE` if newer, `EOVERFLOW` if
    /// older).
    pub fn assert_version(mut self, version: u64) -> Self {
        self.raw.assert_version(version);
        self
    }

    /// Guard: fails the op with `ECANCELED` unless `xattr(name) <op> value` (string compare).
    pub fn cmpxattr(mut self, name: &str, op: CmpOp, value: impl AsRef<[u8]>) -> Self {
        match cstring("xattr name", name) {
            Ok(n) => {
                self.raw
                    .cmpxattr(n, op.for_cmpxattr(), Bytes::copy_from_slice(value.as_ref()));
                self
            }
            Err(e) => self.fail(e),
        }
    }

    /// Guard: fails the op with `ECANCELED` unless `omap[key] <op> value` (bytes; a missing
    /// key is the empty value; `Eq`, `Lt`, `Gt` only).
    pub fn omap_cmp(mut self, key: impl AsRef<[u8]>, op: CmpOp, value: impl AsRef<[u8]>) -> Self {
        self.raw.omap_cmp(
            Bytes::copy_from_slice(key.as_ref()),
            op as u8,
            Bytes::copy_from_slice(value.as_ref()),
        );
        self
    }

    /// Sets omap entries (creates the object if needed).
    pub fn omap_set<K: AsRef<[u8]>, V: AsRef<[u8]>>(mut self, entries: &[(K, V)]) -> Self {
        let entries = entries
            .iter()
            .map(|(k, v)| {
                (
                    Bytes::copy_from_slice(k.as_ref()),
                    Bytes::copy_from_slice(v.as_ref()),
                )
            })
            .collect();
        self.raw.omap_set(entries);
        self
    }

    /// Removes omap keys (missing keys are ignored).
    pub fn omap_rm_keys<K: AsRef<[u8]>>(mut self, keys: &[K]) -> Self {
        let keys = keys
            .iter()
            .map(|k| Bytes::copy_from_slice(k.as_ref()))
            .collect();
        self.raw.omap_rm_keys(keys);
        self
    }

    /// Removes the omap keys in `[start, end)`.
    pub fn omap_rm_range(mut self, start: impl AsRef<[u8]>, end: impl AsRef<[u8]>) -> Self {
        self.raw.omap_rm_range(
            Bytes::copy_from_slice(start.as_ref()),
            Bytes::copy_from_slice(end.as_ref()),
        );
        self
    }

    /// Removes every omap entry.
    pub fn omap_clear(mut self) -> Self {
        self.raw.omap_clear();
        self
    }

    /// Sets an xattr.
    pub fn setxattr(mut self, name: &str, value: impl AsRef<[u8]>) -> Self {
        match cstring("xattr name", name) {
            Ok(n) => {
                self.raw.setxattr(n, Bytes::copy_from_slice(value.as_ref()));
                self
            }
            Err(e) => self.fail(e),
        }
    }

    /// Removes an xattr.
    pub fn rmxattr(mut self, name: &str) -> Self {
        match cstring("xattr name", name) {
            Ok(n) => {
                self.raw.rmxattr(n);
                self
            }
            Err(e) => self.fail(e),
        }
    }

    /// Replaces the object's data (creates it if needed).
    pub fn write_full(mut self, data: impl Into<Bytes>) -> Self {
        self.raw.write_full(data.into());
        self
    }

    /// Writes `data` at `offset`.
    pub fn write(mut self, data: impl Into<Bytes>, offset: u64) -> Self {
        self.raw.write(data.into(), offset);
        self
    }

    /// Appends `data`.
    pub fn append(mut self, data: impl Into<Bytes>) -> Self {
        self.raw.append(data.into());
        self
    }

    /// Truncates (or extends with zeros) to `size` bytes.
    pub fn truncate(mut self, size: u64) -> Self {
        self.raw.truncate(size);
        self
    }

    /// Removes the object (data, xattrs and omap).
    pub fn remove(mut self) -> Self {
        self.raw.remove();
        self
    }

    /// Calls object-class method `cls.method` with `input`. In a write op the method's output
    /// is not returned, only its errno.
    pub fn exec(mut self, cls: &str, method: &str, input: impl AsRef<[u8]>) -> Self {
        match (cstring("class name", cls), cstring("method name", method)) {
            (Ok(c), Ok(m)) => {
                self.raw.exec(c, m, Bytes::copy_from_slice(input.as_ref()));
                self
            }
            (Err(e), _) | (_, Err(e)) => self.fail(e),
        }
    }

    /// Per-step flags ([`op_flags`]) for the step added last.
    pub fn set_flags(mut self, flags: i32) -> Self {
        self.raw.set_flags(flags);
        self
    }

    /// Whole-operation flags ([`operation_flags`]).
    pub fn operation_flags(mut self, flags: i32) -> Self {
        self.flags = flags;
        self
    }
}

/// A read of one object: every step sees the same object state. Each kind of result (stat,
/// read, xattrs, omap values, omap keys, omap values by key, exec) can be asked once per op.
#[must_use = "a ReadOp does nothing until passed to IoCtx::operate_read"]
pub struct ReadOp {
    pub(crate) raw: raw::RawReadOp,
    pub(crate) error: Option<RadosError>,
    pub(crate) flags: i32,
}

impl Default for ReadOp {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for ReadOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadOp")
            .field("steps", &self.raw.steps())
            .field("flags", &self.flags)
            .finish()
    }
}

impl ReadOp {
    /// An empty operation.
    pub fn new() -> Self {
        Self {
            raw: raw::RawReadOp::new(),
            error: None,
            flags: operation_flags::NOFLAG,
        }
    }

    /// Number of steps added so far.
    pub fn len(&self) -> usize {
        self.raw.steps()
    }

    /// Whether no step was added.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn record(mut self, r: Result<()>) -> Self {
        if let Err(e) = r {
            self.error.get_or_insert(e);
        }
        self
    }

    /// Fails with `ENOENT` unless the object exists.
    pub fn assert_exists(mut self) -> Self {
        self.raw.assert_exists();
        self
    }

    /// Fails unless the object's version is `version`.
    pub fn assert_version(mut self, version: u64) -> Self {
        self.raw.assert_version(version);
        self
    }

    /// Size and mtime ([`ReadResult::stat`]).
    pub fn stat(mut self) -> Self {
        let r = self.raw.stat();
        self.record(r)
    }

    /// Up to `len` bytes at `offset` ([`ReadResult::data`]).
    pub fn read(mut self, offset: u64, len: usize) -> Self {
        let r = self.raw.read(offset, len);
        self.record(r)
    }

    /// All xattrs ([`ReadResult::xattrs`]).
    pub fn getxattrs(mut self) -> Self {
        let r = self.raw.getxattrs();
        self.record(r)
    }

    /// The xattrs, to read `name` with [`ReadResult::xattr`]. (The C API has no single-xattr
    /// read step; this fetches them all.)
    pub fn getxattr(self, name: &str) -> Self {
        let _ = name;
        self.getxattrs()
    }

    /// Guard: fails the op with `ECANCELED` unless `xattr(name) <op> value`.
    pub fn cmpxattr(mut self, name: &str, op: CmpOp, value: impl AsRef<[u8]>) -> Self {
        match cstring("xattr name", name) {
            Ok(n) => {
                self.raw
                    .cmpxattr(n, op.for_cmpxattr(), Bytes::copy_from_slice(value.as_ref()));
                self
            }
            Err(e) => self.record(Err(e)),
        }
    }

    /// Guard: fails the op with `ECANCELED` unless `omap[key] <op> value`.
    pub fn omap_cmp(mut self, key: impl AsRef<[u8]>, op: CmpOp, value: impl AsRef<[u8]>) -> Self {
        self.raw.omap_cmp(
            Bytes::copy_from_slice(key.as_ref()),
            op as u8,
            Bytes::copy_from_slice(value.as_ref()),
        );
        self
    }

    /// Up to `max` omap entries with keys after `start_after` (empty: from the start) and
    /// starting with `filter_prefix` (empty: any) ([`ReadResult::omap_vals`]). The OSD
    /// returns at most `osd_max_omap_entries_per_request` (1024) per call; `more` says
    /// whether to ask again from the last key.
    pub fn omap_get_vals(
        self,
        start_after: impl AsRef<[u8]>,
        filter_prefix: impl AsRef<[u8]>,
        max: u64,
    ) -> Self {
        self.omap_range(start_after.as_ref(), filter_prefix.as_ref(), max, false)
    }

    /// A second [`ReadOp::omap_get_vals`] in the same op: another range of the same object,
    /// read at the same version ([`ReadResult::omap_vals2`]).
    pub fn omap_get_vals2(
        self,
        start_after: impl AsRef<[u8]>,
        filter_prefix: impl AsRef<[u8]>,
        max: u64,
    ) -> Self {
        self.omap_range(start_after.as_ref(), filter_prefix.as_ref(), max, true)
    }

    fn omap_range(
        mut self,
        start_after: &[u8],
        filter_prefix: &[u8],
        max: u64,
        second: bool,
    ) -> Self {
        let r = cstring("omap start_after", start_after)
            .and_then(|s| Ok((s, cstring("omap filter_prefix", filter_prefix)?)))
            .and_then(|(s, p)| self.raw.omap_get_vals(s, p, max, second));
        self.record(r)
    }

    /// Up to `max` omap keys after `start_after` ([`ReadResult::omap_keys`]).
    pub fn omap_get_keys(mut self, start_after: impl AsRef<[u8]>, max: u64) -> Self {
        let r = cstring("omap start_after", start_after.as_ref())
            .and_then(|s| self.raw.omap_get_keys(s, max));
        self.record(r)
    }

    /// The omap entries for `keys` that exist ([`ReadResult::omap_vals_by_keys`]).
    pub fn omap_get_vals_by_keys<K: AsRef<[u8]>>(mut self, keys: &[K]) -> Self {
        let keys = keys
            .iter()
            .map(|k| Bytes::copy_from_slice(k.as_ref()))
            .collect();
        let r = self.raw.omap_get_vals_by_keys(keys);
        self.record(r)
    }

    /// Calls object-class method `cls.method` with `input` ([`ReadResult::exec_out`]).
    pub fn exec(mut self, cls: &str, method: &str, input: impl AsRef<[u8]>) -> Self {
        let r = cstring("class name", cls)
            .and_then(|c| Ok((c, cstring("method name", method)?)))
            .and_then(|(c, m)| self.raw.exec(c, m, Bytes::copy_from_slice(input.as_ref())));
        self.record(r)
    }

    /// Per-step flags ([`op_flags`]) for the step added last.
    pub fn set_flags(mut self, flags: i32) -> Self {
        self.raw.set_flags(flags);
        self
    }

    /// Whole-operation flags ([`operation_flags`]).
    pub fn operation_flags(mut self, flags: i32) -> Self {
        self.flags = flags;
        self
    }
}

/// Size and modification time of an object (mtime has whole-second precision in the C API).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjectStat {
    /// Data size in bytes.
    pub size: u64,
    /// Last modification.
    pub mtime: SystemTime,
}

/// A page of omap entries, sorted by key (bytewise).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OmapPage {
    /// (key, value) pairs.
    pub entries: Vec<(Vec<u8>, Bytes)>,
    /// More entries follow the last key (ask again with it as `start_after`).
    pub more: bool,
}

/// A page of omap keys, sorted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OmapKeys {
    /// The keys.
    pub keys: Vec<Vec<u8>>,
    /// More keys follow the last one.
    pub more: bool,
}

/// Results of a [`ReadOp`]: each field is `Some` when the op asked for it.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct ReadResult {
    /// The object version the OSD reported.
    pub version: u64,
    /// From [`ReadOp::stat`].
    pub stat: Option<ObjectStat>,
    /// From [`ReadOp::read`] (may be shorter than asked at the end of the object).
    pub data: Option<Bytes>,
    /// From [`ReadOp::getxattrs`] / [`ReadOp::getxattr`].
    pub xattrs: Option<BTreeMap<String, Bytes>>,
    /// From [`ReadOp::omap_get_vals`].
    pub omap_vals: Option<OmapPage>,
    /// From [`ReadOp::omap_get_vals2`].
    pub omap_vals2: Option<OmapPage>,
    /// From [`ReadOp::omap_get_keys`].
    pub omap_keys: Option<OmapKeys>,
    /// From [`ReadOp::omap_get_vals_by_keys`]: the entries found, sorted by key.
    pub omap_vals_by_keys: Option<Vec<(Vec<u8>, Bytes)>>,
    /// From [`ReadOp::exec`].
    pub exec_out: Option<Bytes>,
}

impl ReadResult {
    /// The value of xattr `name`, if the op read xattrs and the object has it.
    pub fn xattr(&self, name: &str) -> Option<&Bytes> {
        self.xattrs.as_ref()?.get(name)
    }

    /// Builds the result from the per-step outputs; the first failed step is the error.
    pub(crate) fn from_outputs(version: u64, out: raw::ReadOutputs) -> Result<Self> {
        let step = |op: &'static str, rval: i32| -> Result<()> {
            if rval < 0 {
                Err(RadosError::from_rc(op, rval.into()))
            } else {
                Ok(())
            }
        };
        for rval in &out.cmp {
            step("omap_cmp", *rval)?;
        }
        let mut r = ReadResult {
            version,
            ..Default::default()
        };
        if let Some((rval, size, mtime)) = out.stat {
            step("stat", rval)?;
            let secs = Duration::from_secs(u64::try_from(mtime).unwrap_or(0));
            r.stat = Some(ObjectStat {
                size,
                mtime: UNIX_EPOCH + secs,
            });
        }
        if let Some((rval, data)) = out.data {
            step("read", rval)?;
            r.data = Some(Bytes::from(data));
        }
        if let Some((rval, xattrs)) = out.xattrs {
            step("getxattrs", rval)?;
            r.xattrs = Some(xattrs.into_iter().collect());
        }
        if let Some((rval, entries, more)) = out.omap_vals {
            step("omap_get_vals", rval)?;
            r.omap_vals = Some(OmapPage { entries, more });
        }
        if let Some((rval, entries, more)) = out.omap_vals2 {
            step("omap_get_vals (second)", rval)?;
            r.omap_vals2 = Some(OmapPage { entries, more });
        }
        if let Some((rval, keys, more)) = out.omap_keys {
            step("omap_get_keys", rval)?;
            r.omap_keys = Some(OmapKeys { keys, more });
        }
        if let Some((rval, entries)) = out.omap_by_keys {
            step("omap_get_vals_by_keys", rval)?;
            r.omap_vals_by_keys = Some(entries);
        }
        if let Some((rval, data)) = out.exec {
            step("exec", rval)?;
            r.exec_out = Some(data);
        }
        Ok(r)
    }
}
