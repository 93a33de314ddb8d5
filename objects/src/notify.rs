//! Change announcements: the object service announces every commit it makes (every door's,
//! the lifecycle's and the admin's) to the [`ChangeListener`]s registered with it, after the
//! commit applied and before the request that made it is answered. The POSIX door listens to
//! drop what the kernel caches of the names; in cluster mode the change feed listens to
//! publish them to the other gateways.
//!
//! The changes come from where the catalog describes each commit to its event draft
//! (`lode_catalog::events`): every backend, every commit path, one description.

use std::sync::{Arc, RwLock};

pub use crate::bucket_events::Door;

/// What a commit did to a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    /// An object (or a version of it) was written, or its metadata changed.
    Written,
    /// The object, or one of its versions, was removed.
    Removed,
    /// A delete in a versioned bucket made a delete marker: the key reads as gone.
    MarkerCreated,
}

/// One change the service committed, as announced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectChange {
    pub bucket: String,
    /// The key; one ending in `/` named by a directory's rename or removal on the mount stands
    /// for everything under it.
    pub key: String,
    pub kind: ChangeKind,
    /// The version written, removed or made; `None` in a bucket that keeps no versions.
    pub version_id: Option<String>,
    /// The door of this gateway that made it; `None`: another gateway (the cluster's feed).
    pub door: Option<Door>,
}

impl ObjectChange {
    /// Whether the key may read as gone after it.
    pub fn deleted(&self) -> bool {
        self.kind != ChangeKind::Written
    }

    pub(crate) fn of(c: &lode_catalog::events::Change<'_>, door: Door) -> Self {
        use lode_catalog::events::What;
        let (kind, version_id) = match c.what {
            What::Written { record } => (ChangeKind::Written, record.version_id.clone()),
            What::Removed { version_id } => (ChangeKind::Removed, version_id.map(str::to_owned)),
            What::MarkerCreated { version_id } => {
                (ChangeKind::MarkerCreated, version_id.map(str::to_owned))
            }
        };
        ObjectChange {
            bucket: c.bucket.to_owned(),
            key: c.key.to_owned(),
            kind,
            version_id,
            door: Some(door),
        }
    }
}

/// Told about every change the service commits (see the module docs). Called on the
/// committing task, before its request is answered: it must not wait long. A listener that
/// may block (a FUSE invalidation) is run where the runtime allows it.
pub trait ChangeListener: Send + Sync {
    fn object_changed(&self, change: &ObjectChange);
    /// The bucket was created or deleted (`door`: as for objects).
    fn bucket_changed(&self, bucket: &str, door: Option<Door>);
}

/// Cluster mode: the changes the other gateways commit, delivered to `sink` as this gateway's
/// own are (the POSIX door's invalidator); `reset` is called when some may have been lost (a
/// broken watch), so that the sink drops everything it caches. The binary's cluster wiring
/// implements it over RADOS watch/notify.
pub trait RemoteChanges: Send + Sync {
    fn subscribe(&self, sink: Arc<dyn ChangeListener>, reset: Arc<dyn Fn() + Send + Sync>);
}

/// Cluster mode: makes a change of a bucket's settings (its versioning state) known to every
/// other gateway before the change is acknowledged, so that they drop what they cache of it
/// (`ObjectService::settings_listener`).
#[async_trait::async_trait]
pub trait SettingsAnnouncer: Send + Sync {
    /// Returns once every gateway that could be reached in time has dropped its cached
    /// settings of `bucket`; one that could not reads them again within the cache's lifetime.
    async fn announce(&self, bucket: &str);
}

/// The registered listeners.
#[derive(Default)]
pub(crate) struct Listeners(RwLock<Vec<Arc<dyn ChangeListener>>>);

impl Listeners {
    pub(crate) fn add(&self, l: Arc<dyn ChangeListener>) {
        self.0.write().expect("listeners").push(l);
    }

    pub(crate) fn any(&self) -> bool {
        !self.0.read().expect("listeners").is_empty()
    }

    /// Runs `f` on every listener.
    pub(crate) fn notify(&self, f: impl Fn(&dyn ChangeListener)) {
        let ls = self.0.read().expect("listeners").clone();
        if ls.is_empty() {
            return;
        }
        let run = || ls.iter().for_each(|l| f(&**l));
        // A listener may wait in the kernel (FUSE invalidation takes the directory's lock), so
        // let the runtime move other tasks off this worker meanwhile.
        match tokio::runtime::Handle::try_current() {
            Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(run)
            }
            _ => run(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use bytes::Bytes;
    use lode_catalog::{ObjectMeta, Versioning};
    use lode_datapath::{Datapath, MemChunkStore};

    use super::*;
    use crate::bucket_events::Origin;
    use crate::service::{Integrity, ObjectService, ServiceConfig, WriteCond};

    /// Every announcement, as one line.
    #[derive(Default)]
    struct Heard(Mutex<Vec<String>>);

    impl ChangeListener for Heard {
        fn object_changed(&self, c: &ObjectChange) {
            let v = if c.version_id.is_some() { " v" } else { "" };
            let line = format!("{:?} {}/{}{v} {:?}", c.kind, c.bucket, c.key, c.door);
            self.0.lock().unwrap().push(line);
        }

        fn bucket_changed(&self, bucket: &str, door: Option<Door>) {
            self.0
                .lock()
                .unwrap()
                .push(format!("bucket {bucket} {door:?}"));
        }
    }

    impl Heard {
        fn take(&self) -> Vec<String> {
            std::mem::take(&mut *self.0.lock().unwrap())
        }
    }

    async fn put(svc: &ObjectService, key: &str, cond: WriteCond) -> crate::ObjResult<()> {
        let body = futures::stream::iter(vec![Ok::<_, std::io::Error>(Bytes::from_static(b"x"))]);
        svc.put_object(
            "ann",
            key,
            ObjectMeta::default(),
            body,
            Some(1),
            Integrity::default(),
            cond,
        )
        .await
        .map(drop)
    }

    /// The service announces each commit once, after it applied, with its kind, version and
    /// door; a refused commit announces nothing; a directory's rename announces its prefixes.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_commit_is_announced_with_its_door() {
        let dp = Arc::new(Datapath::new(
            Arc::new(MemChunkStore::new(&[64 << 20])),
            true,
        ));
        let svc = crate::test_service(dp, ServiceConfig::default());
        let heard = Arc::new(Heard::default());
        svc.add_listener(heard.clone());
        let s3 = Origin::new(Door::S3);
        s3.clone()
            .scope(async {
                svc.create_bucket("ann", "me").await.unwrap();
                put(&svc, "d/k", WriteCond::default()).await.unwrap();
                let exists = WriteCond {
                    if_none_match_any: true,
                    ..Default::default()
                };
                assert!(put(&svc, "d/k", exists).await.is_err());
                svc.update_meta("ann", "d/k", |m| m.content_type = Some("text/x".into()))
                    .await
                    .unwrap();
            })
            .await;
        assert_eq!(
            heard.take(),
            [
                "bucket ann Some(S3)",
                "Written ann/d/k Some(S3)",
                "Written ann/d/k Some(S3)"
            ]
        );
        Origin::new(Door::Posix)
            .scope(async { svc.rename_prefix("ann", "d/", "e/").await.unwrap() })
            .await;
        assert_eq!(
            heard.take(),
            ["Removed ann/d/ Some(Posix)", "Written ann/e/ Some(Posix)"]
        );
        // Outside any request: the admin's.
        svc.set_bucket_versioning("ann", Versioning::Enabled)
            .await
            .unwrap();
        put(&svc, "k", WriteCond::default()).await.unwrap();
        svc.delete_object("ann", "k").await.unwrap();
        assert_eq!(
            heard.take(),
            [
                "Written ann/k v Some(Admin)",
                "MarkerCreated ann/k v Some(Admin)"
            ]
        );
        s3.scope(async {
            let q = lode_catalog::VersionQuery {
                max: 1000,
                ..Default::default()
            };
            let page = svc.list_object_versions("ann", q).await.unwrap();
            for e in page.entries {
                let v = e.record.version_id.unwrap_or_else(|| "null".into());
                svc.delete_object_version("ann", &e.key, &v, &WriteCond::default(), false)
                    .await
                    .unwrap();
            }
            svc.delete_bucket("ann").await.unwrap();
        })
        .await;
        let last = heard.take();
        assert_eq!(last.last().unwrap(), "bucket ann Some(S3)");
        assert!(
            last[..last.len() - 1]
                .iter()
                .all(|l| l.starts_with("Removed ann/"))
        );
    }
}
