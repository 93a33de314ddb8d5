//! Change announcements: the object service announces every commit it makes (every door's,
//! the lifecycle's and the admin's) to the [`ChangeListener`]s registered with it, after the
//! commit applied and before the request that made it is answered. The POSIX door listens to
//! drop what the kernel caches of the names; in cluster mode the change feed listens to
//! publish them to the other gateways.
//!
//! The changes come from where the catalog describes each commit to its event draft
//! (`lode_catalog::events`): every backend, every commit path, one description.

use std::sync::{Arc, RwLock};

/// Which door or worker a change came through (the event's `lode.door`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Door {
    S3,
    Posix,
    Lifecycle,
    Admin,
}

impl Door {
    pub fn as_str(self) -> &'static str {
        match self {
            Door::S3 => "s3",
            Door::Posix => "posix",
            Door::Lifecycle => "lifecycle",
            Door::Admin => "admin",
        }
    }
}

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
