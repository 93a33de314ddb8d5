//! `lode-metadata`: buckets, keys, multipart state and extent maps.
//!
//! The boundary is the [`MetadataStore`] trait: an ordered, transactional key-value store with
//! tables, snapshot cursors and atomic multi-key commits with conflict detection. It names no
//! RocksDB type, so a distributed ordered-KV engine can implement it later, and depends on no
//! storage engine. Backends: `lode-metadata-rocks` (production, a crate of its own) and
//! [`MemMetadataStore`] (tests); both pass the same conformance suite
//! (`metadata-rocks/tests/conformance.rs`). [`FaultyMetadataStore`] wraps either to inject
//! failures.
//!
//! On top of the trait this crate owns the key encoding ([`keys`]), whose byte order equals S3
//! listing order, and the versioned records ([`records`]); the listings over it are the KV
//! catalog's (`lode-catalog`). It must never depend on the datapath or gateway.

pub mod fault;
pub mod keys;
pub mod mem;
pub mod records;

pub use fault::FaultyMetadataStore;
pub use mem::MemMetadataStore;

/// The tables (RocksDB column families) of the metadata store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Table {
    /// bucket name -> [`records::BucketRecord`]
    Buckets,
    /// bucket \0 key -> [`records::ObjectRecord`]
    Objects,
    /// bucket \0 key \0 upload id -> [`records::UploadRecord`]
    Uploads,
    /// upload id \0 part number (u32 BE) -> [`records::PartRecord`]
    Parts,
    /// device (u32 BE) offset (u64 BE) -> [`records::ExtentRecord`]: the used extents
    Extents,
    /// misc. singletons (format version, credentials)
    System,
    /// bucket \0 key (as in `Objects`) -> the payload of the object record at that key: the
    /// raw bytes of its inline segments, stored apart so that listings and stats never read
    /// them ([`records::split_inline`]). Only records in format 3 with inline segments have
    /// one.
    Inline,
    /// bucket \0 key \0 version suffix ([`keys::version`]) -> [`records::ObjectRecord`]: the
    /// noncurrent versions and delete markers of a versioned bucket, newest first per key, each
    /// whole (inline bytes inside the value). The current version stays in `Objects`.
    Versions,
}

impl Table {
    /// Every table. RocksDB creates the column families missing from an older data dir
    /// (`inline`) when it opens it.
    pub const ALL: [Table; 8] = [
        Table::Buckets,
        Table::Objects,
        Table::Uploads,
        Table::Parts,
        Table::Extents,
        Table::System,
        Table::Inline,
        Table::Versions,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Table::Buckets => "buckets",
            Table::Objects => "objects",
            Table::Uploads => "uploads",
            Table::Parts => "parts",
            Table::Extents => "extents",
            Table::System => "system",
            Table::Inline => "inline",
            Table::Versions => "versions",
        }
    }
}

/// Errors of the metadata store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MetaError {
    /// A transaction lost a race with a concurrent commit; retry it ([`transact`] does).
    #[error("transaction conflict")]
    Conflict,
    /// A record has a format version this build does not know.
    #[error("unknown record format version {0}")]
    UnknownFormat(u8),
    /// A record could not be decoded.
    #[error("corrupt metadata record: {0}")]
    Corrupt(String),
    /// The backend failed (IO error, corruption, lock held by another process...).
    #[error("metadata backend error: {0}")]
    Backend(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// One key-value pair.
pub type Entry = (Vec<u8>, Vec<u8>);

/// A positioned, forward-only view of one table at one point in time (a snapshot).
pub trait Cursor {
    /// Positions at the first key `>= key`.
    fn seek(&mut self, key: &[u8]);
    /// Moves to the next key.
    fn next(&mut self);
    /// The current entry, or `None` past the end.
    fn current(&self) -> Option<(&[u8], &[u8])>;
    /// Any error the cursor met (an invalid cursor is either at the end or failed).
    fn status(&self) -> Result<(), MetaError>;
}

/// An optimistic transaction: reads register conflicts, writes are buffered and applied
/// atomically by `commit`, which fails with [`MetaError::Conflict`] when a key read with
/// `get_for_update` changed in between.
pub trait Transaction {
    fn get_for_update(&mut self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, MetaError>;
    fn put(&mut self, table: Table, key: &[u8], value: &[u8]) -> Result<(), MetaError>;
    fn delete(&mut self, table: Table, key: &[u8]) -> Result<(), MetaError>;
    /// Applies every write at once, durably when the store is configured so (the WAL is synced;
    /// concurrent commits share one sync).
    fn commit(self: Box<Self>) -> Result<(), MetaError>;
}

/// The metadata storage boundary.
pub trait MetadataStore: Send + Sync + 'static {
    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, MetaError>;

    /// A point read that never waits for IO: `Ok(None)` when the answer is not in memory (the
    /// caller then uses [`MetadataStore::get`] where blocking is fine). Lets an async caller
    /// answer a cached lookup without a hop to a blocking thread. Default: never answers.
    fn get_cached(&self, table: Table, key: &[u8]) -> Result<Option<Option<Vec<u8>>>, MetaError> {
        let _ = (table, key);
        Ok(None)
    }
    fn cursor(&self, table: Table) -> Result<Box<dyn Cursor + '_>, MetaError>;

    /// A cursor for a long forward scan (a listing page of many keys): the same view as
    /// [`MetadataStore::cursor`], and a backend may read more at once from its files, since
    /// most of what it reads will be used. Default: [`MetadataStore::cursor`].
    fn scan_cursor(&self, table: Table) -> Result<Box<dyn Cursor + '_>, MetaError> {
        self.cursor(table)
    }

    fn begin(&self) -> Box<dyn Transaction + '_>;

    /// Up to `limit` entries with `start <= key < end` (no end: to the table's end).
    fn scan(
        &self,
        table: Table,
        start: &[u8],
        end: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<Entry>, MetaError> {
        let mut c = self.cursor(table)?;
        c.seek(start);
        let mut out = vec![];
        while out.len() < limit {
            let Some((k, v)) = c.current() else { break };
            if end.is_some_and(|e| k >= e) {
                break;
            }
            out.push((k.to_vec(), v.to_vec()));
            c.next();
        }
        c.status()?;
        Ok(out)
    }
}

/// Runs `f` in a transaction and commits it, retrying on conflict (up to 64 times).
pub fn transact<T, E: From<MetaError>>(
    store: &dyn MetadataStore,
    mut f: impl FnMut(&mut dyn Transaction) -> Result<T, E>,
) -> Result<T, E> {
    let mut attempt = 0;
    loop {
        let mut txn = store.begin();
        let out = f(&mut *txn)?;
        match txn.commit() {
            Ok(()) => return Ok(out),
            Err(MetaError::Conflict) if attempt < 64 => {
                attempt += 1;
                // Back off with jitter once plain retries keep colliding (a hot key under
                // load), so the racers spread out instead of colliding again in lockstep.
                if attempt < 4 {
                    std::thread::yield_now();
                } else {
                    let max_us = (50u64 << attempt.min(7)).min(5_000);
                    let nanos = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.subsec_nanos());
                    let jitter = u64::from(nanos / 1000) % max_us;
                    std::thread::sleep(std::time::Duration::from_micros(max_us / 2 + jitter / 2));
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
}
