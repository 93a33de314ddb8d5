//! lode-rados: Lode's own async binding to librados (Ceph 16.2 Pacific), for cluster mode.
//!
//! It owns the FFI to `librados.so.2` (hand-written declarations checked against the 16.2
//! header; no bindgen), the cluster and I/O-context lifetimes, atomic compound operations on
//! one object ([`WriteOp`], [`ReadOp`]: omap, xattr guards, object classes), pools and
//! monitor commands, watch/notify and advisory locks. It never depends on other lode crates:
//! the metadata and data backends build on it, not the other way round.
//!
//! Every operation is async and tokio-friendly. AIO completions run on librados finisher
//! threads; the callback only moves the result into a oneshot channel, never blocks, and never
//! drops anything that could shut librados down. The few blocking librados calls (connect,
//! monitor commands, listing, locks, watch registration) run on tokio's blocking pool.
//!
//! Lifetimes: [`Cluster`] is shared as `Arc<Cluster>`; every [`IoCtx`] and every in-flight
//! operation keeps the librados handle alive, so `rados_shutdown` runs only after the last
//! of them is gone. Dropping a future of an in-flight operation is safe: the operation's
//! buffers stay alive until librados completes it.
//!
//! Errno semantics (Pacific, checked by `tests/cluster.rs`): a failed `cmpxattr`/`omap_cmp`
//! guard fails the whole write with `ECANCELED` and applies nothing; omap on an erasure-coded
//! pool is `EOPNOTSUPP`; an op past `ClusterConfig::op_timeout` is `ETIMEDOUT`; a fenced
//! (blocklisted) client gets `ESHUTDOWN` on I/O and `ENOTCONN` on its watches. See
//! [`RadosError`]. [`CmpOp`] reads "stored OP given" for both guards (the OSD evaluates
//! `cmpxattr` the other way round; the crate swaps the operator).
//!
//! `unsafe` lives in two modules only: `sys` (declarations) and `raw` (every call), each
//! block with a `// SAFETY:` comment.

#[allow(unsafe_code)]
mod raw;
#[allow(unsafe_code)]
mod sys;

mod cluster;
mod error;
mod event;
mod ioctx;
mod op;
mod watch;

pub use cluster::{Cluster, ClusterConfig, MonReply, PoolInfo, PoolKind, PoolSpace, PoolSpec};
pub use error::{RadosError, Result};
pub use event::{Notification, WatchEvent};
pub use ioctx::{IoCtx, LockInfo, Locker, OMAP_PAGE};
pub use op::{
    CmpOp, ObjectStat, OmapKeys, OmapPage, ReadOp, ReadResult, WriteOp, op_flags, operation_flags,
};
pub use watch::{NotifyAck, NotifyReply, Watch, WatchOptions};
