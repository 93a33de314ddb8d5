//! Change notifications: the doors that cache names (the POSIX door's kernel caches) register
//! a [`ChangeListener`] with the service; the S3 door tells the service after each commit,
//! before its reply (`ObjectService::notify_changed`).

use std::sync::{Arc, RwLock};

/// Told about changes made through the S3 door, after they commit and before the S3 reply, so
/// that the POSIX door can drop what the kernel caches about the name.
pub trait ChangeListener: Send + Sync {
    /// `key` in `bucket` was written (`deleted` = false) or removed.
    fn object_changed(&self, bucket: &str, key: &str, deleted: bool);
    /// The bucket was created or deleted.
    fn bucket_changed(&self, bucket: &str);
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
