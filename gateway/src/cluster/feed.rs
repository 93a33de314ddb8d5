//! Cluster mode: changes made through any gateway reach every other gateway's mount.
//!
//! Every gateway publishes the changes its object service announces (every door's) as
//! RADOS notifies on one object of the index pool, `lode.changes`, batched (one notify per
//! burst, at most [`BATCH`] changes) and off the path of the S3 reply: a change is acknowledged
//! before its notify is sent. Every gateway with a mount watches that object and hands the
//! changes of the others to its mount (the POSIX door's invalidator, a
//! [`ChangeListener`], through [`RadosChanges`]), which drops the
//! kernel's cached entries, attributes and pages for those paths, as for a local change.
//!
//! Delivery is not what correctness rests on (RADOS.md: "never depend on its delivery"):
//! * a broken watch (its gateway cut off for longer than the watch timeout, an OSD failover)
//!   drops every cached name and inode of the mount, then watches again;
//! * files open read-only in cluster mode do not keep the page cache, and every read reads
//!   the object's current record (close-to-open: a file opened after a change reads the
//!   change);
//! * the kernel's attribute and entry TTL (`posix.attr_ttl_ms`) bounds what a lost notify can
//!   leave stale.

use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use lode_objects::{ChangeKind, ChangeListener, ObjectChange, RemoteChanges, notify::Door};
use lode_rados::{IoCtx, WatchEvent, WatchOptions, WriteOp};
use tokio::sync::mpsc;

/// The object whose watchers get every change.
pub const CHANGES_OID: &str = "lode.changes";
/// Most changes in one notify.
pub const BATCH: usize = 256;
/// A notify waits this long for the watchers' acks (a dead gateway's watch lingers until the
/// OSD times it out).
const NOTIFY_TIMEOUT: Duration = Duration::from_secs(3);
/// Notifies in flight at once.
const IN_FLIGHT: usize = 8;

/// One change, as published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Object {
        bucket: String,
        key: String,
        deleted: bool,
    },
    Bucket(String),
}

/// Encodes changes: per change a kind byte (`o`, `O` deleted, `b`), then length-prefixed
/// (u16, big-endian) bucket and key. Keys are untrusted bytes: no separators inside.
pub fn encode(changes: &[Change]) -> Bytes {
    let mut b = BytesMut::new();
    let put = |b: &mut BytesMut, s: &str| {
        let s = &s.as_bytes()[..s.len().min(u16::MAX as usize)];
        b.put_u16(s.len() as u16);
        b.put_slice(s);
    };
    for c in changes {
        match c {
            Change::Object {
                bucket,
                key,
                deleted,
            } => {
                b.put_u8(if *deleted { b'O' } else { b'o' });
                put(&mut b, bucket);
                put(&mut b, key);
            }
            Change::Bucket(bucket) => {
                b.put_u8(b'b');
                put(&mut b, bucket);
                put(&mut b, "");
            }
        }
    }
    b.freeze()
}

/// The inverse of [`encode`]; `None` if the payload is not a list of changes.
pub fn decode(mut p: &[u8]) -> Option<Vec<Change>> {
    fn take<'a>(p: &mut &'a [u8]) -> Option<&'a str> {
        let n = u16::from_be_bytes(p.get(..2)?.try_into().ok()?) as usize;
        let s = std::str::from_utf8(p.get(2..2 + n)?).ok()?;
        *p = &p[2 + n..];
        Some(s)
    }
    let mut out = vec![];
    while let Some((&kind, rest)) = p.split_first() {
        p = rest;
        let bucket = take(&mut p)?.to_owned();
        let key = take(&mut p)?.to_owned();
        out.push(match kind {
            b'o' | b'O' => Change::Object {
                bucket,
                key,
                deleted: kind == b'O',
            },
            b'b' => Change::Bucket(bucket),
            _ => return None,
        });
    }
    Some(out)
}

/// Publishes this gateway's changes: a listener of its object service, told of every commit.
pub struct Publisher {
    tx: mpsc::UnboundedSender<Change>,
}

impl ChangeListener for Publisher {
    fn object_changed(&self, c: &ObjectChange) {
        let _ = self.tx.send(Change::Object {
            bucket: c.bucket.clone(),
            key: c.key.clone(),
            deleted: c.deleted(),
        });
    }

    fn bucket_changed(&self, bucket: &str, _: Option<Door>) {
        let _ = self.tx.send(Change::Bucket(bucket.to_owned()));
    }
}

/// Starts publishing: what the returned listener is told is notified to every watcher.
pub fn publisher(io: IoCtx) -> Arc<Publisher> {
    let (tx, mut rx) = mpsc::unbounded_channel::<Change>();
    tokio::spawn(async move {
        let slots = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
        if let Err(e) = io
            .operate_write(CHANGES_OID, WriteOp::new().create(false))
            .await
        {
            tracing::warn!(error = %e, "creating the change feed object");
        }
        while let Some(first) = rx.recv().await {
            let mut batch = vec![first];
            while batch.len() < BATCH {
                match rx.try_recv() {
                    Ok(c) => batch.push(c),
                    Err(_) => break,
                }
            }
            let Ok(permit) = Arc::clone(&slots).acquire_owned().await else {
                break;
            };
            let io = io.clone();
            tokio::spawn(async move {
                let n = batch.len();
                let r = io.notify(CHANGES_OID, encode(&batch), NOTIFY_TIMEOUT).await;
                tracing::debug!(changes = n, ok = r.is_ok(), "published changes");
                match r {
                    Ok(r) if !r.timeouts.is_empty() => {
                        tracing::debug!(
                            changes = n,
                            missed = r.timeouts.len(),
                            "a change notify timed out for some watchers"
                        );
                    }
                    Ok(_) => {}
                    Err(e) => tracing::warn!(changes = n, error = %e, "publishing changes failed"),
                }
                drop(permit);
            });
        }
    });
    Arc::new(Publisher { tx })
}

/// Announces this gateway's bucket settings changes on the feed, waiting for every watcher's
/// ack ([`watch_settings`] acks once it dropped the bucket's cached settings).
pub struct Announcer {
    io: IoCtx,
}

impl Announcer {
    pub fn new(io: IoCtx) -> Self {
        Self { io }
    }
}

#[async_trait::async_trait]
impl lode_objects::SettingsAnnouncer for Announcer {
    async fn announce(&self, bucket: &str) {
        let payload = encode(&[Change::Bucket(bucket.to_owned())]);
        match self.io.notify(CHANGES_OID, payload, NOTIFY_TIMEOUT).await {
            Ok(r) if !r.timeouts.is_empty() => tracing::warn!(
                bucket,
                missed = r.timeouts.len(),
                "a bucket settings change did not reach every gateway in time: they read it again within their cache's lifetime"
            ),
            Ok(r) => tracing::debug!(
                bucket,
                acks = r.acks.len(),
                "bucket settings change announced"
            ),
            Err(e) => tracing::warn!(
                bucket,
                error = %e,
                "announcing a bucket settings change failed: other gateways read it again within their cache's lifetime"
            ),
        }
    }
}

/// Watches the change feed for the service's cached bucket settings, in every cluster
/// gateway (with a mount or not): a bucket's change drops its cached settings, and only then
/// is the notify acked, so an [`Announcer`] that got every ack knows that no gateway still
/// serves the old settings. A broken watch drops them all.
pub fn watch_settings(io: IoCtx, cache: Arc<lode_objects::SettingsCache>) {
    tokio::spawn(async move {
        loop {
            let _ = io
                .operate_write(CHANGES_OID, WriteOp::new().create(false))
                .await;
            let opts = WatchOptions {
                auto_ack: false,
                ..WatchOptions::default()
            };
            let mut watch = match io.watch_with(CHANGES_OID, opts).await {
                Ok(w) => w,
                Err(e) => {
                    tracing::warn!(error = %e, "watching the change feed for settings failed; retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            };
            cache.clear();
            while let Some(ev) = watch.recv().await {
                match ev {
                    WatchEvent::Notify(n) => {
                        for c in decode(&n.payload).unwrap_or_default() {
                            if let Change::Bucket(b) = c {
                                cache.forget(&b);
                            }
                        }
                        if let Err(e) = watch.ack(&n, b"") {
                            tracing::debug!(error = %e, "acking a change notify failed");
                        }
                    }
                    WatchEvent::Error { error, .. } => {
                        tracing::warn!(error = %error, "the settings watch broke; dropping cached settings");
                        break;
                    }
                    _ => {}
                }
            }
            cache.clear();
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
}

/// The other gateways' changes, from the `lode.changes` watch on the index pool.
pub struct RadosChanges(pub IoCtx);

impl RemoteChanges for RadosChanges {
    fn subscribe(&self, sink: Arc<dyn ChangeListener>, reset: Arc<dyn Fn() + Send + Sync>) {
        subscribe(self.0.clone(), sink, reset);
    }
}

/// Watches the change feed for a mount: the other gateways' changes go to `sink`; after a
/// broken watch (changes may have been missed) `reset` drops every cached name first.
pub fn subscribe(io: IoCtx, sink: Arc<dyn ChangeListener>, reset: Arc<dyn Fn() + Send + Sync>) {
    let me = io.cluster().instance_id();
    tokio::spawn(async move {
        loop {
            let _ = io
                .operate_write(CHANGES_OID, WriteOp::new().create(false))
                .await;
            let mut watch = match io.watch(CHANGES_OID).await {
                Ok(w) => w,
                Err(e) => {
                    tracing::warn!(error = %e, "watching the change feed failed; retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            };
            // Whatever changed while not watching is unknown: start from nothing cached.
            let r = Arc::clone(&reset);
            let _ = tokio::task::spawn_blocking(move || r()).await;
            tracing::info!("watching the cluster's change feed");
            while let Some(ev) = watch.recv().await {
                match ev {
                    WatchEvent::Notify(n) if n.notifier_id != me => {
                        let Some(changes) = decode(&n.payload) else {
                            tracing::warn!("an undecodable change notify");
                            continue;
                        };
                        tracing::debug!(
                            changes = changes.len(),
                            from = n.notifier_id,
                            "changes from another gateway"
                        );
                        let sink = Arc::clone(&sink);
                        // The invalidator may read the catalog (blocking): not on a worker.
                        let _ = tokio::task::spawn_blocking(move || {
                            for c in changes {
                                match c {
                                    Change::Object {
                                        bucket,
                                        key,
                                        deleted,
                                    } => sink.object_changed(&ObjectChange {
                                        bucket,
                                        key,
                                        kind: if deleted {
                                            ChangeKind::Removed
                                        } else {
                                            ChangeKind::Written
                                        },
                                        version_id: None,
                                        door: None,
                                    }),
                                    Change::Bucket(b) => sink.bucket_changed(&b, None),
                                }
                            }
                        })
                        .await;
                    }
                    WatchEvent::Notify(_) => {}
                    WatchEvent::Error { error, .. } => {
                        tracing::warn!(error = %error, "the change feed's watch broke; dropping the mount's caches");
                        break;
                    }
                    _ => {}
                }
            }
            let r = Arc::clone(&reset);
            let _ = tokio::task::spawn_blocking(move || r()).await;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_round_trip_with_any_key_bytes() {
        let cs = vec![
            Change::Object {
                bucket: "b".into(),
                key: "a\tb\nc/\u{e9}".into(),
                deleted: false,
            },
            Change::Object {
                bucket: "b".into(),
                key: String::new(),
                deleted: true,
            },
            Change::Bucket("x".into()),
        ];
        assert_eq!(decode(&encode(&cs)).unwrap(), cs);
        assert!(decode(b"z\x00\x00\x00\x00").is_none());
        assert!(decode(b"o\x00\x05ab").is_none());
    }
}
