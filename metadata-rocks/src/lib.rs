//! `lode-metadata-rocks`: [`RocksMetadataStore`], the RocksDB backend of
//! [`lode_metadata::MetadataStore`] (an optimistic-transaction DB, one column family per
//! [`Table`]), the single-node default. The only crate of Lode that names RocksDB types; the
//! RADOS backends do not link it.

use std::path::{Path, PathBuf};

use rocksdb::{
    BlockBasedOptions, Cache, ColumnFamilyDescriptor, DBRawIteratorWithThreadMode, ErrorKind,
    OptimisticTransactionDB, OptimisticTransactionOptions, Options, ReadOptions, ReadTier,
    WriteOptions,
};

use lode_metadata::{Cursor, MetaError, MetadataStore, Table, Transaction};

type Db = OptimisticTransactionDB;

/// Settings of the RocksDB backend (mapped from `lode.toml` by the binary).
#[derive(Debug, Clone)]
pub struct RocksConfig {
    pub path: PathBuf,
    /// Sync the WAL on every commit (an acknowledged write survives power loss).
    pub sync: bool,
    pub block_cache_bytes: usize,
    /// Memtable memory of all column families together (RocksDB's `db_write_buffer_size`).
    pub write_buffer_bytes: usize,
}

impl RocksConfig {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            sync: true,
            block_cache_bytes: 64 << 20,
            write_buffer_bytes: 64 << 20,
        }
    }
}

/// What a cursor reads at once from a table file when the next block is not cached: 16
/// blocks, not much more than one block's read time for a seek that needs a single block (a
/// mount's lookup asks whether a name is a directory with a one-key listing).
const CURSOR_READAHEAD: usize = 64 << 10;
/// The same for a long scan ([`MetadataStore::scan_cursor`]): about a listing page of 1,000
/// records. A cold listing of 20,000 files through the mount (pages of 1,000, the page cache
/// dropped) read 5.5 MB in 85 reads and took 39 ms at 64 KiB (median of five), 22 reads and
/// 24 ms at 256 KiB, 29 ms at 1 MiB (the reads do not overlap the scan: a longer one waits
/// longer).
const SCAN_READAHEAD: usize = 256 << 10;

pub struct RocksMetadataStore {
    db: Db,
    sync: bool,
}

fn backend(e: rocksdb::Error) -> MetaError {
    if matches!(e.kind(), ErrorKind::Busy | ErrorKind::TryAgain) {
        MetaError::Conflict
    } else {
        MetaError::Backend(Box::new(e))
    }
}

impl RocksMetadataStore {
    /// Opens (creating if needed) the database. A locked or corrupt database is an error that
    /// says so; it never panics.
    pub fn open(cfg: &RocksConfig) -> Result<Self, MetaError> {
        std::fs::create_dir_all(&cfg.path).map_err(|e| MetaError::Backend(Box::new(e)))?;
        let cache = Cache::new_lru_cache(cfg.block_cache_bytes);
        let mut block = BlockBasedOptions::default();
        block.set_block_cache(&cache);
        block.set_bloom_filter(10.0, false);
        block.set_cache_index_and_filter_blocks(true);
        let mut cf_opts = Options::default();
        cf_opts.set_block_based_table_factory(&block);
        cf_opts.set_compression_type(rocksdb::DBCompressionType::None);
        // One column family may use the whole budget; the budget (not each family's own buffer)
        // is what triggers flushes when several families take writes, so memory stays bounded
        // by it (ten families of 64 MiB buffers each grew for hours before).
        cf_opts.set_write_buffer_size(cfg.write_buffer_bytes.min(64 << 20));
        // Optimistic transactions check conflicts against the memtables written since they
        // began, so RocksDB keeps flushed memtables as history: 2 x 64 MiB per column family
        // by default, which held a soak's RSS climbing for half an hour after every flush (a
        // heap profile: all the growth in `MemTable::Add`). Lode's transactions last
        // milliseconds; an eighth of the budget per family covers minutes of writes.
        cf_opts.set_max_write_buffer_size_to_maintain((cfg.write_buffer_bytes / 8) as i64);
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.create_missing_column_families(true);
        opts.set_compression_type(rocksdb::DBCompressionType::None);
        opts.increase_parallelism(2);
        opts.set_max_background_jobs(2);
        opts.set_enable_pipelined_write(true);
        opts.set_db_write_buffer_size(cfg.write_buffer_bytes);
        let cfs = Table::ALL
            .iter()
            .map(|t| ColumnFamilyDescriptor::new(t.name(), cf_opts.clone()));
        let db = Db::open_cf_descriptors(&opts, &cfg.path, cfs).map_err(|e| {
            MetaError::Backend(format!("cannot open RocksDB at {}: {e}", cfg.path.display()).into())
        })?;
        Ok(Self { db, sync: cfg.sync })
    }

    pub fn path(&self) -> &Path {
        self.db.path()
    }

    fn cf(&self, t: Table) -> &rocksdb::ColumnFamily {
        self.db
            .cf_handle(t.name())
            .expect("column family created at open")
    }

    /// A cursor reading `readahead` bytes at once where the next block is not cached.
    fn cursor_reading(
        &self,
        table: Table,
        readahead: usize,
    ) -> Result<Box<dyn Cursor + '_>, MetaError> {
        // An explicit readahead: RocksDB then reads ahead only when a block is not in its
        // cache. Its implicit one asks the kernel to read ahead (a `readahead` syscall, and
        // after the page cache was dropped real device reads) for every few blocks a scan
        // steps into, cached or not: a sixth of a cold directory listing's time.
        let mut ro = ReadOptions::default();
        ro.set_readahead_size(readahead);
        Ok(Box::new(RocksCursor {
            it: self.db.raw_iterator_cf_opt(self.cf(table), ro),
        }))
    }
}

impl MetadataStore for RocksMetadataStore {
    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, MetaError> {
        self.db.get_cf(self.cf(table), key).map_err(backend)
    }

    fn get_cached(&self, table: Table, key: &[u8]) -> Result<Option<Option<Vec<u8>>>, MetaError> {
        // Memtables and the block cache only: RocksDB answers Incomplete instead of reading.
        let mut ro = ReadOptions::default();
        ro.set_read_tier(ReadTier::BlockCache);
        match self.db.get_cf_opt(self.cf(table), key, &ro) {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.kind() == ErrorKind::Incomplete => Ok(None),
            Err(e) => Err(backend(e)),
        }
    }

    fn cursor(&self, table: Table) -> Result<Box<dyn Cursor + '_>, MetaError> {
        self.cursor_reading(table, CURSOR_READAHEAD)
    }

    fn scan_cursor(&self, table: Table) -> Result<Box<dyn Cursor + '_>, MetaError> {
        self.cursor_reading(table, SCAN_READAHEAD)
    }

    fn begin(&self) -> Box<dyn Transaction + '_> {
        let mut w = WriteOptions::default();
        w.set_sync(self.sync);
        let txn = self
            .db
            .transaction_opt(&w, &OptimisticTransactionOptions::default());
        Box::new(RocksTxn { store: self, txn })
    }
}

struct RocksCursor<'a> {
    it: DBRawIteratorWithThreadMode<'a, Db>,
}

impl Cursor for RocksCursor<'_> {
    fn seek(&mut self, key: &[u8]) {
        self.it.seek(key);
    }
    fn next(&mut self) {
        if self.it.valid() {
            self.it.next();
        }
    }
    fn current(&self) -> Option<(&[u8], &[u8])> {
        self.it.item()
    }
    fn status(&self) -> Result<(), MetaError> {
        self.it.status().map_err(backend)
    }
}

struct RocksTxn<'a> {
    store: &'a RocksMetadataStore,
    txn: rocksdb::Transaction<'a, Db>,
}

impl Transaction for RocksTxn<'_> {
    fn get_for_update(&mut self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, MetaError> {
        self.txn
            .get_for_update_cf(self.store.cf(table), key, true)
            .map_err(backend)
    }

    fn put(&mut self, table: Table, key: &[u8], value: &[u8]) -> Result<(), MetaError> {
        self.txn
            .put_cf(self.store.cf(table), key, value)
            .map_err(backend)
    }

    fn delete(&mut self, table: Table, key: &[u8]) -> Result<(), MetaError> {
        self.txn
            .delete_cf(self.store.cf(table), key)
            .map_err(backend)
    }

    fn commit(self: Box<Self>) -> Result<(), MetaError> {
        self.txn.commit().map_err(backend)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lode_metadata::records::{self, Checksums, ObjectMeta, ObjectRecord, Segment};

    /// A data dir written before the `inline` column family existed (format-2 records with
    /// their bytes inside) opens, reads as before, and takes format-3 writes.
    #[test]
    fn a_data_dir_from_before_the_inline_table_opens_and_reads() {
        let dir = tempfile::tempdir().unwrap();
        let old_tables = [
            "buckets", "objects", "uploads", "parts", "extents", "system",
        ];
        let rec = ObjectRecord {
            size: 3,
            etag: "abc".into(),
            last_modified_ms: 5,
            meta: ObjectMeta::default(),
            checksums: Checksums::default(),
            segments: vec![Segment::Inline(b"xyz".to_vec())],
            parts: vec![],
            upload_id: None,
            version_id: None,
            delete_marker: false,
        };
        {
            let mut opts = Options::default();
            opts.create_if_missing(true);
            opts.create_missing_column_families(true);
            let db = rocksdb::DB::open_cf(&opts, dir.path(), old_tables).unwrap();
            // Today's v2 encoding: format byte 2, the postcard body with the bytes inside.
            let v2 = records::encode_v2(&rec);
            let cf = db.cf_handle("objects").unwrap();
            db.put_cf(&cf, b"bkt\0k", &v2).unwrap();
        }
        let store = RocksMetadataStore::open(&RocksConfig::new(dir.path())).unwrap();
        let v = store.get(Table::Objects, b"bkt\0k").unwrap().unwrap();
        assert_eq!(records::decode::<ObjectRecord>(&v).unwrap(), rec);
        assert_eq!(store.get(Table::Inline, b"bkt\0k").unwrap(), None);
        lode_metadata::transact(&store, |t| {
            t.put(Table::Inline, b"bkt\0k2", b"payload")?;
            Ok::<_, MetaError>(())
        })
        .unwrap();
        assert_eq!(
            store.get(Table::Inline, b"bkt\0k2").unwrap().as_deref(),
            Some(&b"payload"[..])
        );
    }
}
