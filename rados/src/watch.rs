//! Watch/notify: cache-coherence messages between clients of one object.
//!
//! A [`Watch`] receives [`WatchEvent`]s through an unbounded channel filled by librados'
//! callbacks. On [`WatchEvent::Error`] the watch may have missed notifies (connection reset,
//! watch timed out on the OSD): the owner must drop whatever the watch protects, then
//! re-watch. Notifies are never needed for correctness; they only shorten staleness.

use std::time::Duration;

use bytes::{Buf, Bytes};
use tokio::sync::mpsc;

use crate::error::{RadosError, Result};
use crate::event::{Notification, WatchEvent};
use crate::raw;

/// Options of [`IoCtx::watch_with`](crate::IoCtx::watch_with).
#[derive(Debug, Clone)]
pub struct WatchOptions {
    /// Ack every notify from the callback with an empty reply, as soon as it is queued for
    /// [`Watch::recv`]. With `false` the owner acks with [`Watch::ack`] (the notifier then
    /// waits until the owner has acted on the notify, or the notify times out).
    pub auto_ack: bool,
    /// How long the OSD keeps the watch without hearing from this client
    /// (`osd_client_watch_timeout`, 30 s, when zero). Whole seconds.
    pub timeout: Duration,
}

impl Default for WatchOptions {
    fn default() -> Self {
        Self {
            auto_ack: true,
            timeout: Duration::ZERO,
        }
    }
}

/// A registered watch on one object. Dropping it unwatches in the background (on a short-lived
/// thread, as unwatching blocks); [`Watch::unwatch`] does it in line.
pub struct Watch {
    rx: mpsc::UnboundedReceiver<WatchEvent>,
    guard: Option<raw::WatchGuard>,
    oid: String,
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch")
            .field("oid", &self.oid)
            .field("cookie", &self.cookie())
            .finish()
    }
}

impl Watch {
    pub(crate) fn new(
        rx: mpsc::UnboundedReceiver<WatchEvent>,
        guard: raw::WatchGuard,
        oid: String,
    ) -> Self {
        Self {
            rx,
            guard: Some(guard),
            oid,
        }
    }

    fn guard(&self) -> &raw::WatchGuard {
        self.guard
            .as_ref()
            .expect("the guard is only taken by unwatch/drop")
    }

    /// The watched object.
    pub fn oid(&self) -> &str {
        &self.oid
    }

    /// The watch handle librados assigned.
    pub fn cookie(&self) -> u64 {
        self.guard.as_ref().map_or(0, raw::WatchGuard::cookie)
    }

    /// The next event. `None` only if the watch is gone.
    pub async fn recv(&mut self) -> Option<WatchEvent> {
        self.rx.recv().await
    }

    /// The next event if one is queued.
    pub fn try_recv(&mut self) -> Option<WatchEvent> {
        self.rx.try_recv().ok()
    }

    /// `rados_watch_check`: the time since the OSD last confirmed the watch, or the error
    /// that broke it (then re-watch). Does not block.
    pub fn check(&self) -> Result<Duration> {
        let rc = self.guard().check();
        if rc < 0 {
            return Err(RadosError::from_rc("rados_watch_check", rc.into()));
        }
        Ok(Duration::from_millis(rc.unsigned_abs().into()))
    }

    /// Acks `notification` with `reply` (delivered to the notifier in
    /// [`NotifyReply::acks`]). Only for watches without auto-ack. Does not block.
    pub fn ack(&self, notification: &Notification, reply: &[u8]) -> Result<()> {
        self.guard().ack(notification.notify_id, reply)
    }

    /// Unregisters the watch and waits until no callback can run any more.
    pub async fn unwatch(mut self) -> Result<()> {
        let Some(guard) = self.guard.take() else {
            return Ok(());
        };
        tokio::task::spawn_blocking(move || guard.unwatch())
            .await
            .map_err(RadosError::Task)?
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        if let Some(guard) = self.guard.take() {
            // Unwatching blocks (a round trip, then a callback flush): never on the caller's
            // thread, which may be an async worker. If the thread cannot start, the guard is
            // dropped (and unwatches) here.
            let spawned = std::thread::Builder::new()
                .name("lode-rados-unwatch".into())
                .spawn(move || drop(guard));
            if let Err(e) = spawned {
                tracing::warn!(error = %e, "could not spawn the unwatch thread");
            }
        }
    }
}

/// One watcher's ack of a notify.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotifyAck {
    /// The watcher's client instance id.
    pub notifier_id: u64,
    /// The watcher's cookie.
    pub cookie: u64,
    /// The watcher's reply (empty with auto-ack).
    pub payload: Bytes,
}

/// The outcome of a notify: who acked, and who did not answer in time.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NotifyReply {
    /// Watchers that acked.
    pub acks: Vec<NotifyAck>,
    /// Watchers (client instance id, cookie) that did not ack before the timeout.
    pub timeouts: Vec<(u64, u64)>,
}

impl NotifyReply {
    /// Decodes librados' reply buffer: `map<pair<u64,u64>, bufferlist>` of acks, then
    /// `set<pair<u64,u64>>` of timeouts, in Ceph's little-endian encoding.
    pub(crate) fn decode(mut buf: &[u8]) -> Result<Self> {
        if buf.is_empty() {
            return Ok(Self::default());
        }
        fn need(buf: &[u8], n: usize) -> Result<()> {
            if buf.remaining() < n {
                return Err(RadosError::decode("notify reply", "truncated"));
            }
            Ok(())
        }
        let mut reply = Self::default();
        need(buf, 4)?;
        let n_acks = buf.get_u32_le();
        for _ in 0..n_acks {
            need(buf, 20)?;
            let notifier_id = buf.get_u64_le();
            let cookie = buf.get_u64_le();
            let len = usize::try_from(buf.get_u32_le())
                .map_err(|e| RadosError::decode("notify reply", e))?;
            need(buf, len)?;
            let payload = Bytes::copy_from_slice(&buf[..len]);
            buf.advance(len);
            reply.acks.push(NotifyAck {
                notifier_id,
                cookie,
                payload,
            });
        }
        if buf.remaining() >= 4 {
            let n_timeouts = buf.get_u32_le();
            for _ in 0..n_timeouts {
                need(buf, 16)?;
                let gid = buf.get_u64_le();
                let cookie = buf.get_u64_le();
                reply.timeouts.push((gid, cookie));
            }
        }
        Ok(reply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_notify_reply() {
        let mut b = Vec::new();
        b.extend_from_slice(&2u32.to_le_bytes());
        for (gid, cookie, payload) in [(7u64, 9u64, &b"hi"[..]), (8, 10, &b""[..])] {
            b.extend_from_slice(&gid.to_le_bytes());
            b.extend_from_slice(&cookie.to_le_bytes());
            b.extend_from_slice(&u32::try_from(payload.len()).unwrap().to_le_bytes());
            b.extend_from_slice(payload);
        }
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&11u64.to_le_bytes());
        b.extend_from_slice(&12u64.to_le_bytes());
        let r = NotifyReply::decode(&b).unwrap();
        assert_eq!(r.acks.len(), 2);
        assert_eq!(r.acks[0].payload, Bytes::from_static(b"hi"));
        assert_eq!(r.acks[1].notifier_id, 8);
        assert_eq!(r.timeouts, vec![(11, 12)]);
        assert!(NotifyReply::decode(&b[..10]).is_err());
        assert_eq!(NotifyReply::decode(&[]).unwrap(), NotifyReply::default());
    }
}
