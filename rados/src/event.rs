//! What a watch delivers ([`crate::IoCtx::watch`]): the types the FFI callbacks (`raw`) send
//! and the [`crate::Watch`] handle hands out.

use bytes::Bytes;

use crate::error::RadosError;

/// One notify delivered to a watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notification {
    /// Identifies this notify (pass to [`Watch::ack`] when not auto-acking).
    pub notify_id: u64,
    /// The watch's cookie (handle).
    pub cookie: u64,
    /// The notifier's client instance id (`Cluster::instance_id` of the sender).
    pub notifier_id: u64,
    /// The notifier's payload.
    pub payload: Bytes,
}

/// What a watch reports.
#[derive(Debug)]
#[non_exhaustive]
pub enum WatchEvent {
    /// A notify arrived.
    Notify(Notification),
    /// The watch broke (e.g. `ENOTCONN`, `ETIMEDOUT`): notifies may have been missed. Drop
    /// the caches this watch protects and re-watch.
    Error {
        /// The watch's cookie.
        cookie: u64,
        /// The error librados reported.
        error: RadosError,
    },
}
