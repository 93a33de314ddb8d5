//! Event records written in the same commit as the change they describe (the outbox of bucket
//! event notifications).
//!
//! The object service **arms** a commit ([`armed`]) with an [`EventDraft`]: the backend, while
//! it builds the commit, describes each change it makes to an object's current state as a
//! [`Change`] and asks the draft to render it; what the draft returns (a destination and an
//! opaque body each) goes into the outbox **in the same atomic commit** as the change itself,
//! so a crash can never keep the change and lose its event, nor the reverse. The outbox is
//! per destination and ordered by a sequence number ([`next_seq`]); the service's delivery
//! worker reads it in order ([`Catalog::outbox_scan`](crate::Catalog::outbox_scan)) and
//! removes what was delivered.
//!
//! The backend knows nothing of S3 event names, filters or formats: those are the draft's.
//! It only says what changed: which key, written or removed, with which record or version.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::ObjectRecord;

/// What a commit did to one key's current state (or, for a version removed by id, to that
/// version), as the backend describes it to the [`EventDraft`].
#[derive(Debug, Clone, Copy)]
pub struct Change<'a> {
    pub bucket: &'a str,
    pub key: &'a str,
    pub what: What<'a>,
}

/// The kind of a [`Change`].
#[derive(Debug, Clone, Copy)]
pub enum What<'a> {
    /// `record` is now stored at the key (a new object, an overwrite, a copy, a completed
    /// upload, a rewrite in place; in a versioned bucket it carries its version id). Not a
    /// delete marker: see `MarkerCreated`.
    Written { record: &'a ObjectRecord },
    /// The object (or the version `version_id`, removed by id) is gone. A removal of the
    /// current version by id names it too.
    Removed { version_id: Option<&'a str> },
    /// A delete in a versioned bucket made a delete marker (`version_id`: its id).
    MarkerCreated { version_id: Option<&'a str> },
}

/// What the service arms a commit with.
pub trait EventDraft: Send + Sync {
    /// The outbox entries `change` makes: (destination, body) each; empty when no rule of the
    /// bucket wants it. `seq` is the entries' sequence number (their order in the outbox).
    /// A commit that runs again (it lost a race) renders again; only the last attempt's
    /// entries are stored.
    fn render(&self, change: &Change<'_>, seq: u64) -> Vec<(String, Vec<u8>)>;
}

tokio::task_local! {
    static ARMED: Arc<dyn EventDraft>;
}

/// Runs `fut` with its commits armed with `draft`.
pub async fn armed<F: Future>(draft: Arc<dyn EventDraft>, fut: F) -> F::Output {
    ARMED.scope(draft, fut).await
}

/// The draft the current task's commits are armed with (a backend calls this in the task
/// that called it, before it moves work to another thread).
pub fn current() -> Option<Arc<dyn EventDraft>> {
    ARMED.try_with(Arc::clone).ok()
}

/// The outbox entries `changes` make under `draft` (none without one), each with its own
/// sequence number: (destination, sequence, body).
pub fn render(
    draft: Option<&dyn EventDraft>,
    changes: &[Change<'_>],
) -> Vec<(String, u64, Vec<u8>)> {
    let Some(d) = draft else { return vec![] };
    let mut out = vec![];
    for c in changes {
        let seq = next_seq();
        out.extend(
            d.render(c, seq)
                .into_iter()
                .map(|(dest, body)| (dest, seq, body)),
        );
    }
    out
}

static LAST_SEQ: AtomicU64 = AtomicU64::new(0);

/// A sequence number greater than every one this process handed out before, and, as long as
/// the clock does not go back across a restart, than every one before the restart: the
/// microseconds since the epoch, bumped past the last one handed out.
pub fn next_seq() -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64);
    let mut last = LAST_SEQ.load(Ordering::Relaxed);
    loop {
        let next = now.max(last + 1);
        match LAST_SEQ.compare_exchange_weak(last, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return next,
            Err(seen) => last = seen,
        }
    }
}

/// Makes [`next_seq`] hand out numbers above `seq` (a backend that found `seq` in its outbox
/// at open: the clock may have gone back).
pub fn seq_at_least(seq: u64) {
    LAST_SEQ.fetch_max(seq, Ordering::Relaxed);
}

/// One outbox entry as [`Catalog::outbox_scan`](crate::Catalog::outbox_scan) returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outboxed {
    pub seq: u64,
    pub body: Vec<u8>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_numbers_rise_and_pass_a_floor() {
        let a = next_seq();
        let b = next_seq();
        assert!(b > a);
        seq_at_least(b + 1_000_000_000);
        assert!(next_seq() > b + 1_000_000_000);
    }

    struct Every;
    impl EventDraft for Every {
        fn render(&self, c: &Change<'_>, _: u64) -> Vec<(String, Vec<u8>)> {
            vec![("d".into(), c.key.as_bytes().to_vec())]
        }
    }

    #[tokio::test]
    async fn a_draft_is_seen_only_inside_its_scope() {
        assert!(current().is_none());
        let d: Arc<dyn EventDraft> = Arc::new(Every);
        let inside = armed(d, async { current().is_some() }).await;
        assert!(inside);
        assert!(current().is_none());
        let c = Change {
            bucket: "b",
            key: "k",
            what: What::Removed { version_id: None },
        };
        let out = render(Some(&Every), &[c, c]);
        assert_eq!(out.len(), 2);
        assert!(out[1].1 > out[0].1);
        assert!(render(None, &[c]).is_empty());
    }
}
