//! The crate's error type. Every failure carries an errno, whatever produced it, so callers
//! branch on [`RadosError::errno`] or the `is_*` helpers rather than on variants.

use std::io;
use std::time::Duration;

/// Result alias of this crate.
pub type Result<T, E = RadosError> = std::result::Result<T, E>;

/// A failed librados call, monitor command or argument check.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RadosError {
    /// librados (or the OSD behind it) returned a negative errno.
    #[error("{op} failed")]
    Rados {
        /// The librados operation, e.g. `"rados_aio_write_op_operate"` or `"omap_get_vals"`.
        op: &'static str,
        /// The errno as an `io::Error` (`raw_os_error()` is always set).
        #[source]
        source: io::Error,
    },
    /// A monitor command failed; `status` is the monitor's human-readable reason.
    #[error("mon command `{prefix}` failed: {status}")]
    MonCommand {
        /// The command's `prefix`, e.g. `"osd pool create"`.
        prefix: String,
        /// The (positive) errno returned by the monitor.
        errno: i32,
        /// The status string (`outs`) returned by the monitor.
        status: String,
        /// The errno as an `io::Error`.
        #[source]
        source: io::Error,
    },
    /// `rados_connect` did not finish within `ClusterConfig::connect_timeout`.
    #[error("connecting to the cluster timed out after {after:?}")]
    ConnectTimeout {
        /// The configured bound.
        after: Duration,
    },
    /// An argument cannot be passed to librados (a NUL byte in a name, a too-long buffer, an
    /// operation that asks twice for the same result slot, ...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A reply (monitor JSON, notify reply, class output) did not have the expected shape.
    #[error("malformed {what}: {detail}")]
    Decode {
        /// What was being decoded.
        what: &'static str,
        /// Why it failed.
        detail: String,
    },
    /// A blocking librados call runs on tokio's blocking pool and that task failed (panicked
    /// or was cancelled at runtime shutdown).
    #[error("blocking librados task failed")]
    Task(#[source] tokio::task::JoinError),
}

impl RadosError {
    /// An error from a negative librados return value (`r < 0`) or a positive errno.
    pub(crate) fn from_rc(op: &'static str, rc: i64) -> Self {
        let errno = i32::try_from(rc.unsigned_abs()).unwrap_or(libc::EIO);
        RadosError::Rados {
            op,
            source: io::Error::from_raw_os_error(errno),
        }
    }

    pub(crate) fn invalid(msg: impl Into<String>) -> Self {
        RadosError::InvalidArgument(msg.into())
    }

    pub(crate) fn decode(what: &'static str, detail: impl ToString) -> Self {
        RadosError::Decode {
            what,
            detail: detail.to_string(),
        }
    }

    /// The (positive) errno of this error. Errors that do not come from librados map onto the
    /// nearest errno: `ConnectTimeout` → `ETIMEDOUT`, `InvalidArgument` → `EINVAL`, `Decode` →
    /// `EBADMSG`, `Task` → `EIO`.
    pub fn errno(&self) -> i32 {
        match self {
            RadosError::Rados { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            RadosError::MonCommand { errno, .. } => *errno,
            RadosError::ConnectTimeout { .. } => libc::ETIMEDOUT,
            RadosError::InvalidArgument(_) => libc::EINVAL,
            RadosError::Decode { .. } => libc::EBADMSG,
            RadosError::Task(_) => libc::EIO,
        }
    }

    /// `ENOENT`: no such object, pool, omap key, lock or conf file.
    pub fn is_not_found(&self) -> bool {
        self.errno() == libc::ENOENT
    }

    /// `EEXIST`: an exclusive create found the object, or a lock is already held by this
    /// cookie without `may_renew`.
    pub fn is_exists(&self) -> bool {
        self.errno() == libc::EEXIST
    }

    /// `ECANCELED`: a guard of the operation (`cmpxattr`, `omap_cmp`) did not hold, so nothing
    /// of the operation was applied.
    pub fn is_canceled(&self) -> bool {
        self.errno() == libc::ECANCELED
    }

    /// Same as [`is_canceled`](Self::is_canceled): the compare-and-write guard failed.
    pub fn compare_failed(&self) -> bool {
        self.is_canceled()
    }

    /// `ETIMEDOUT`: an OSD or monitor operation exceeded `ClusterConfig::op_timeout`, a notify
    /// exceeded its timeout, or the connection did not come up in time. A timed-out write may
    /// still have been applied.
    pub fn is_timeout(&self) -> bool {
        self.errno() == libc::ETIMEDOUT
    }

    /// `ERANGE`/`EOVERFLOW`: an `assert_version` did not match (the object is newer, resp.
    /// older, than asserted).
    pub fn is_version_mismatch(&self) -> bool {
        matches!(self.errno(), libc::ERANGE | libc::EOVERFLOW)
    }

    /// `ESHUTDOWN` (Ceph's `EBLOCKLISTED`): this client was fenced with `osd blocklist`; the
    /// handle is unusable. Drop it and reconnect (a new instance).
    pub fn is_blocklisted(&self) -> bool {
        self.errno() == libc::ESHUTDOWN
    }

    /// `EACCES` / `EPERM`: cephx refused this client (an unknown user, a wrong key, or caps
    /// that do not allow the operation).
    pub fn is_refused(&self) -> bool {
        matches!(self.errno(), libc::EACCES | libc::EPERM)
    }

    /// `EDQUOT` / `ENOSPC`: the write would grow a pool at its quota, or a cluster (an OSD)
    /// past its full ratio. Every write is sent with `FULL_TRY`
    /// ([`IoCtx::operate_write`](crate::IoCtx::operate_write)), so it fails at once instead
    /// of waiting for space.
    pub fn is_full(&self) -> bool {
        matches!(self.errno(), libc::EDQUOT | libc::ENOSPC)
    }

    /// `EBUSY`: an advisory lock is held by someone else.
    pub fn is_busy(&self) -> bool {
        self.errno() == libc::EBUSY
    }
}

/// `Ok(rc)` for `rc >= 0`, else the errno wrapped with `op`.
pub(crate) fn check(op: &'static str, rc: i64) -> Result<i64> {
    if rc < 0 {
        Err(RadosError::from_rc(op, rc))
    } else {
        Ok(rc)
    }
}
