//! Splits' activations, announced to every gateway.
//!
//! While a split's new partition is building, writers and readers of its range wait (see
//! [`crate::partition`]). The gateway running the split wakes its own waiters at the activation
//! ([`crate::partition::Routes`]'s handovers). Every other gateway's waiters used to read the
//! new partition again every 5-50 ms: with hundreds of clients spread over several gateways,
//! hundreds of reads a second on the very object whose catch-up and activation they waited for.
//!
//! Now the gateway that activates a new partition (its own split or one it took over) notifies
//! the object `lode.splits`, which every gateway of the namespace watches from its start. A
//! notification bumps the gateway's activation count, and a waiter that read a building
//! partition waits for the count to move from what it was *before* that read (so an
//! activation landing between its read and its wait is not missed), then reads again. Any
//! split's activation wakes every waiter of the gateway, which then reads once: splits are
//! rare, and most waiters wait for the same one.
//!
//! A notify can be lost (the activating gateway died right after the activation; the watch is
//! being set up again after an OSD failure). So the wait is bounded: while the watch is up, a
//! waiter reads again at least every [`WATCHED_POLL`]; while it is not, every 5-50 ms as before.

use std::sync::Weak;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use lode_rados::{IoCtx, WatchEvent, WriteOp};
use tokio::sync::watch;

/// The object every gateway of the namespace watches for activations.
pub(crate) const SPLITS: &str = "lode.splits";
/// While the watch is up, a waiter reads the building partition again at least this often
/// (a lost notify: the activating gateway died right after its activation).
pub(crate) const WATCHED_POLL: Duration = Duration::from_millis(500);
/// How long an announcement waits for the watchers' acks.
const NOTIFY_TIMEOUT: Duration = Duration::from_secs(1);
/// How often the watching task checks whether its catalog is gone.
const ALIVE_CHECK: Duration = Duration::from_secs(5);

/// This gateway's count of activations heard of, and whether its watch is up.
pub(crate) struct Activations {
    count: watch::Sender<u64>,
    live: AtomicBool,
}

impl Default for Activations {
    fn default() -> Self {
        Self {
            count: watch::Sender::new(0),
            live: AtomicBool::new(false),
        }
    }
}

impl Activations {
    /// The count now: take it before the read whose answer may make the caller wait.
    pub fn seen(&self) -> u64 {
        *self.count.borrow()
    }

    /// Waits until an activation after `seen` was heard of, or for the fallback interval;
    /// `false` when the watch is not up (the caller polls as it did before).
    pub async fn wait_past(&self, seen: u64) -> bool {
        if !self.live.load(Ordering::Acquire) {
            return false;
        }
        if tokio::runtime::Handle::try_current().is_err() {
            return false;
        }
        let mut rx = self.count.subscribe();
        let _ = tokio::time::timeout(WATCHED_POLL, rx.wait_for(|n| *n != seen)).await;
        true
    }

    fn heard(&self) {
        self.count.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Tells every gateway (this one too) that partition `oid` is active now, waiting at most
    /// [`NOTIFY_TIMEOUT`] for their acks. (Awaited, not left running: a notify still in flight
    /// when a process ends keeps its librados client alive through the exit, which aborts.)
    pub async fn announce(io: &IoCtx, oid: &str) {
        match tokio::time::timeout(
            NOTIFY_TIMEOUT,
            io.notify(SPLITS, oid.to_owned(), NOTIFY_TIMEOUT),
        )
        .await
        {
            Ok(Ok(r)) => tracing::debug!(
                partition = oid,
                acks = r.acks.len(),
                missed = r.timeouts.len(),
                "activation announced"
            ),
            Ok(Err(e)) => tracing::debug!(
                partition = oid,
                error = %e,
                "announcing an activation failed: other gateways' waiters read again within their poll"
            ),
            Err(_) => tracing::debug!(
                partition = oid,
                "announcing an activation timed out: other gateways' waiters read again within their poll"
            ),
        }
    }

    /// Starts the task that watches [`SPLITS`] for as long as the catalog lives (`me`).
    pub fn watch(io: IoCtx, me: Weak<crate::Inner>) {
        if tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        tokio::spawn(async move {
            loop {
                let Some(inner) = me.upgrade() else { return };
                drop(inner);
                let _ = io.operate_write(SPLITS, WriteOp::new().create(false)).await;
                let mut w = match io.watch(SPLITS).await {
                    Ok(w) => w,
                    Err(e) => {
                        tracing::warn!(error = %e, "watching for split activations failed; retrying (waiters poll meanwhile)");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        continue;
                    }
                };
                let Some(inner) = me.upgrade() else { return };
                inner.activations.live.store(true, Ordering::Release);
                // Activations while not watching are unknown: wake every waiter to read again.
                inner.activations.heard();
                drop(inner);
                let broke = loop {
                    let ev = tokio::select! {
                        ev = w.recv() => ev,
                        () = tokio::time::sleep(ALIVE_CHECK) => {
                            if me.strong_count() == 0 {
                                let _ = w.unwatch().await;
                                return;
                            }
                            continue;
                        }
                    };
                    let Some(inner) = me.upgrade() else { return };
                    match ev {
                        Some(WatchEvent::Notify(_)) => inner.activations.heard(),
                        Some(WatchEvent::Error { error, .. }) => break error.to_string(),
                        None => break "the watch ended".to_owned(),
                        Some(_) => {}
                    }
                };
                if let Some(inner) = me.upgrade() {
                    inner.activations.live.store(false, Ordering::Release);
                    inner.activations.heard();
                }
                tracing::warn!(error = %broke, "the split activations watch broke; watching again (waiters poll meanwhile)");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_waiter_wakes_for_an_activation_after_its_read_even_one_before_its_wait() {
        let a = Activations::default();
        // Not watching: no wait at all (the caller polls).
        assert!(!a.wait_past(a.seen()).await);
        a.live.store(true, Ordering::Release);
        // An activation heard between the read and the wait ends the wait at once.
        let seen = a.seen();
        a.heard();
        let t = std::time::Instant::now();
        assert!(a.wait_past(seen).await);
        assert!(t.elapsed() < WATCHED_POLL, "{:?}", t.elapsed());
        // Nothing heard: the wait ends after the fallback interval.
        let t = std::time::Instant::now();
        assert!(a.wait_past(a.seen()).await);
        assert!(t.elapsed() >= WATCHED_POLL, "{:?}", t.elapsed());
        // One heard during the wait wakes it.
        let a = std::sync::Arc::new(a);
        let seen = a.seen();
        let a2 = a.clone();
        let t = std::time::Instant::now();
        let waiter = tokio::spawn(async move { a2.wait_past(seen).await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        a.heard();
        assert!(waiter.await.unwrap());
        assert!(t.elapsed() < WATCHED_POLL, "{:?}", t.elapsed());
    }
}
