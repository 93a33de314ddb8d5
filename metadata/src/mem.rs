//! [`MemMetadataStore`]: the in-memory backend, for tests of the code around the boundary.
//! Cursors copy the table (a true snapshot); fine for test-sized data.

use std::collections::{BTreeMap, HashMap};
use std::sync::RwLock;

use crate::{Cursor, MetaError, MetadataStore, Table, Transaction};

type Map = BTreeMap<Vec<u8>, Vec<u8>>;

#[derive(Default)]
struct State {
    tables: HashMap<Table, Map>,
    /// Commit sequence of the last write to each key (deletes included).
    versions: HashMap<(Table, Vec<u8>), u64>,
    seq: u64,
}

#[derive(Default)]
pub struct MemMetadataStore {
    state: RwLock<State>,
}

impl MemMetadataStore {
    pub fn new() -> Self {
        Self::default()
    }
}

impl MetadataStore for MemMetadataStore {
    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, MetaError> {
        let s = self.state.read().expect("mem store");
        Ok(s.tables.get(&table).and_then(|t| t.get(key)).cloned())
    }

    fn get_cached(&self, table: Table, key: &[u8]) -> Result<Option<Option<Vec<u8>>>, MetaError> {
        self.get(table, key).map(Some)
    }

    fn cursor(&self, table: Table) -> Result<Box<dyn Cursor + '_>, MetaError> {
        let s = self.state.read().expect("mem store");
        let snap: Vec<(Vec<u8>, Vec<u8>)> = s
            .tables
            .get(&table)
            .map(|t| t.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default();
        Ok(Box::new(MemCursor { snap, pos: 0 }))
    }

    fn begin(&self) -> Box<dyn Transaction + '_> {
        Box::new(MemTxn {
            store: self,
            reads: vec![],
            writes: vec![],
        })
    }
}

struct MemCursor {
    snap: Vec<(Vec<u8>, Vec<u8>)>,
    pos: usize,
}

impl Cursor for MemCursor {
    fn seek(&mut self, key: &[u8]) {
        self.pos = self.snap.partition_point(|(k, _)| k.as_slice() < key);
    }
    fn next(&mut self) {
        self.pos += 1;
    }
    fn current(&self) -> Option<(&[u8], &[u8])> {
        self.snap
            .get(self.pos)
            .map(|(k, v)| (k.as_slice(), v.as_slice()))
    }
    fn status(&self) -> Result<(), MetaError> {
        Ok(())
    }
}

struct MemTxn<'a> {
    store: &'a MemMetadataStore,
    reads: Vec<(Table, Vec<u8>, u64)>,
    writes: Vec<(Table, Vec<u8>, Option<Vec<u8>>)>,
}

impl Transaction for MemTxn<'_> {
    fn get_for_update(&mut self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, MetaError> {
        // Read-your-writes first.
        if let Some((_, _, v)) = self
            .writes
            .iter()
            .rev()
            .find(|(t, k, _)| *t == table && k == key)
        {
            return Ok(v.clone());
        }
        let s = self.store.state.read().expect("mem store");
        let ver = s.versions.get(&(table, key.to_vec())).copied().unwrap_or(0);
        self.reads.push((table, key.to_vec(), ver));
        Ok(s.tables.get(&table).and_then(|t| t.get(key)).cloned())
    }

    fn put(&mut self, table: Table, key: &[u8], value: &[u8]) -> Result<(), MetaError> {
        self.writes
            .push((table, key.to_vec(), Some(value.to_vec())));
        Ok(())
    }

    fn delete(&mut self, table: Table, key: &[u8]) -> Result<(), MetaError> {
        self.writes.push((table, key.to_vec(), None));
        Ok(())
    }

    fn commit(self: Box<Self>) -> Result<(), MetaError> {
        let mut s = self.store.state.write().expect("mem store");
        for (t, k, ver) in &self.reads {
            if s.versions.get(&(*t, k.clone())).copied().unwrap_or(0) != *ver {
                return Err(MetaError::Conflict);
            }
        }
        s.seq += 1;
        let seq = s.seq;
        for (t, k, v) in self.writes {
            s.versions.insert((t, k.clone()), seq);
            let table = s.tables.entry(t).or_default();
            match v {
                Some(v) => {
                    table.insert(k, v);
                }
                None => {
                    table.remove(&k);
                }
            }
        }
        Ok(())
    }
}
