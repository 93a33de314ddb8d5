//! [`FaultyMetadataStore`]: wraps any store and fails commits (or reads) on demand, for tests of
//! the commit protocol's failure paths.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

type Hook = Box<dyn FnOnce() + Send>;

use crate::{Cursor, MetaError, MetadataStore, Table, Transaction};

pub struct FaultyMetadataStore<S> {
    inner: S,
    /// Every commit fails with a backend error while set.
    pub fail_commits: AtomicBool,
    /// Every point read fails while set.
    pub fail_reads: AtomicBool,
    /// Commits that went through.
    pub commits: AtomicU64,
    before_commit: Mutex<Option<Hook>>,
}

impl<S: MetadataStore> FaultyMetadataStore<S> {
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            fail_commits: AtomicBool::new(false),
            fail_reads: AtomicBool::new(false),
            commits: AtomicU64::new(0),
            before_commit: Mutex::new(None),
        }
    }

    /// Runs `f` once, at the start of the next commit (after that transaction's reads), to
    /// interleave another writer deterministically.
    pub fn before_next_commit(&self, f: impl FnOnce() + Send + 'static) {
        *self.before_commit.lock().expect("hook") = Some(Box::new(f));
    }
}

fn injected() -> MetaError {
    MetaError::Backend("injected metadata fault".into())
}

impl<S: MetadataStore> MetadataStore for FaultyMetadataStore<S> {
    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, MetaError> {
        if self.fail_reads.load(Ordering::SeqCst) {
            return Err(injected());
        }
        self.inner.get(table, key)
    }

    fn get_cached(&self, table: Table, key: &[u8]) -> Result<Option<Option<Vec<u8>>>, MetaError> {
        if self.fail_reads.load(Ordering::SeqCst) {
            return Err(injected());
        }
        self.inner.get_cached(table, key)
    }

    fn cursor(&self, table: Table) -> Result<Box<dyn Cursor + '_>, MetaError> {
        if self.fail_reads.load(Ordering::SeqCst) {
            return Err(injected());
        }
        self.inner.cursor(table)
    }

    fn scan_cursor(&self, table: Table) -> Result<Box<dyn Cursor + '_>, MetaError> {
        if self.fail_reads.load(Ordering::SeqCst) {
            return Err(injected());
        }
        self.inner.scan_cursor(table)
    }

    fn begin(&self) -> Box<dyn Transaction + '_> {
        Box::new(FaultyTxn {
            store: self,
            inner: self.inner.begin(),
        })
    }
}

struct FaultyTxn<'a, S> {
    store: &'a FaultyMetadataStore<S>,
    inner: Box<dyn Transaction + 'a>,
}

impl<S: MetadataStore> Transaction for FaultyTxn<'_, S> {
    fn get_for_update(&mut self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, MetaError> {
        self.inner.get_for_update(table, key)
    }
    fn put(&mut self, table: Table, key: &[u8], value: &[u8]) -> Result<(), MetaError> {
        self.inner.put(table, key, value)
    }
    fn delete(&mut self, table: Table, key: &[u8]) -> Result<(), MetaError> {
        self.inner.delete(table, key)
    }
    fn commit(self: Box<Self>) -> Result<(), MetaError> {
        if self.store.fail_commits.load(Ordering::SeqCst) {
            return Err(injected()); // dropped: nothing applied
        }
        let hook = self.store.before_commit.lock().expect("hook").take();
        if let Some(f) = hook {
            f();
        }
        self.inner.commit()?;
        self.store.commits.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}
