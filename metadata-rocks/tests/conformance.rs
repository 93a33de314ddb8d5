//! One conformance suite for every `MetadataStore` backend (memory and RocksDB).

use std::sync::Arc;

use lode_metadata::{
    FaultyMetadataStore, MemMetadataStore, MetaError, MetadataStore, Table, transact,
};
use lode_metadata_rocks::{RocksConfig, RocksMetadataStore};

fn rocks() -> (tempfile::TempDir, Arc<dyn MetadataStore>) {
    let dir = tempfile::tempdir().unwrap();
    let s = RocksMetadataStore::open(&RocksConfig::new(dir.path().join("db"))).unwrap();
    (dir, Arc::new(s))
}

fn backends() -> Vec<(
    &'static str,
    Option<tempfile::TempDir>,
    Arc<dyn MetadataStore>,
)> {
    let (d, r) = rocks();
    vec![
        ("mem", None, Arc::new(MemMetadataStore::new())),
        ("rocks", Some(d), r),
        // The fault-injecting wrapper, with no fault armed, behaves exactly like its inner store.
        (
            "faulty(mem)",
            None,
            Arc::new(FaultyMetadataStore::new(MemMetadataStore::new())),
        ),
    ]
}

fn put(s: &dyn MetadataStore, t: Table, k: &[u8], v: &[u8]) {
    let mut txn = s.begin();
    txn.put(t, k, v).unwrap();
    txn.commit().unwrap();
}

#[test]
fn put_get_delete_and_tables_are_separate() {
    for (name, _d, s) in backends() {
        put(&*s, Table::Objects, b"k", b"v1");
        assert_eq!(
            s.get(Table::Objects, b"k").unwrap().as_deref(),
            Some(&b"v1"[..]),
            "{name}"
        );
        assert_eq!(s.get(Table::Buckets, b"k").unwrap(), None, "{name}");
        let mut txn = s.begin();
        txn.delete(Table::Objects, b"k").unwrap();
        // Not visible before commit.
        assert!(s.get(Table::Objects, b"k").unwrap().is_some(), "{name}");
        txn.commit().unwrap();
        assert_eq!(s.get(Table::Objects, b"k").unwrap(), None, "{name}");
    }
}

#[test]
fn cached_reads_agree_with_reads() {
    for (name, _d, s) in backends() {
        put(&*s, Table::Objects, b"k1", b"v1");
        put(&*s, Table::Objects, b"k1", b"v2");
        put(&*s, Table::Objects, b"gone", b"x");
        let mut t = s.begin();
        t.delete(Table::Objects, b"gone").unwrap();
        t.commit().unwrap();
        for k in [&b"k1"[..], b"gone", b"never"] {
            // When the store answers from memory, the answer is what `get` says (the newest).
            if let Some(v) = s.get_cached(Table::Objects, k).unwrap() {
                assert_eq!(v, s.get(Table::Objects, k).unwrap(), "{name}");
            }
        }
        // Fresh writes sit in memory (RocksDB: the memtable), so they are answered there.
        assert_eq!(
            s.get_cached(Table::Objects, b"k1").unwrap(),
            Some(Some(b"v2".to_vec())),
            "{name}"
        );
        assert_eq!(
            s.get_cached(Table::Buckets, b"k1").unwrap().flatten(),
            None,
            "{name}"
        );
    }
}

#[test]
fn scan_is_ordered_and_bounded() {
    for (name, _d, s) in backends() {
        for k in ["b", "a", "c/1", "c", "d"] {
            put(&*s, Table::Objects, k.as_bytes(), b"x");
        }
        let got: Vec<Vec<u8>> = s
            .scan(Table::Objects, b"a0", Some(b"d"), 10)
            .unwrap()
            .into_iter()
            .map(|e| e.0)
            .collect();
        assert_eq!(
            got,
            vec![b"b".to_vec(), b"c".to_vec(), b"c/1".to_vec()],
            "{name}"
        );
        assert_eq!(
            s.scan(Table::Objects, b"", None, 2).unwrap().len(),
            2,
            "{name}"
        );
    }
}

#[test]
fn cursor_is_a_snapshot() {
    for (name, _d, s) in backends() {
        put(&*s, Table::Objects, b"a", b"1");
        let mut c = s.cursor(Table::Objects).unwrap();
        put(&*s, Table::Objects, b"b", b"2");
        c.seek(b"");
        assert_eq!(
            c.current().map(|e| e.0.to_vec()),
            Some(b"a".to_vec()),
            "{name}"
        );
        c.next();
        assert!(
            c.current().is_none(),
            "{name}: a write after the cursor was made is not seen"
        );
        c.status().unwrap();
    }
}

/// Every entry from `from` on, read with `c` (seeking once, then stepping).
fn walk(mut c: Box<dyn lode_metadata::Cursor + '_>, from: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    c.seek(from);
    let mut out = vec![];
    while let Some((k, v)) = c.current() {
        out.push((k.to_vec(), v.to_vec()));
        c.next();
    }
    c.status().unwrap();
    out
}

/// 3,000 keys of about 300 bytes each: several of the RocksDB scan cursor's reads.
fn many_keys(s: &dyn MetadataStore) {
    for chunk in 0..30 {
        let mut txn = s.begin();
        for i in 0..100 {
            let k = format!("bucket\0dir/f{:06}", chunk * 100 + i);
            txn.put(Table::Objects, k.as_bytes(), &[chunk as u8; 300])
                .unwrap();
        }
        txn.commit().unwrap();
    }
}

#[test]
fn a_scan_cursor_reads_what_a_cursor_reads_in_the_same_snapshot() {
    for (name, _d, s) in backends() {
        many_keys(&*s);
        let want = walk(s.cursor(Table::Objects).unwrap(), b"bucket\0dir/f000123");
        assert_eq!(want.len(), 3000 - 123, "{name}");
        let c = s.scan_cursor(Table::Objects).unwrap();
        put(&*s, Table::Objects, b"bucket\0dir/f000500x", b"late");
        assert_eq!(
            walk(c, b"bucket\0dir/f000123"),
            want,
            "{name}: the same entries, no late one"
        );
    }
}

#[test]
fn rocks_scan_cursor_reads_table_files_like_a_cursor() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = RocksConfig::new(dir.path().join("db"));
    many_keys(&RocksMetadataStore::open(&cfg).unwrap());
    // Reopened, the keys come from a table file (the WAL is flushed at recovery), read through
    // each cursor's readahead rather than from the memtable.
    let s = RocksMetadataStore::open(&cfg).unwrap();
    assert!(
        s.get_cached(Table::Objects, b"bucket\0dir/f000007")
            .unwrap()
            .is_none()
    );
    for from in [&b""[..], b"bucket\0dir/f001500", b"bucket\0dir/f002999"] {
        let want = walk(s.cursor(Table::Objects).unwrap(), from);
        assert!(!want.is_empty());
        assert_eq!(walk(s.scan_cursor(Table::Objects).unwrap(), from), want);
    }
}

#[test]
fn conflicting_commits_are_detected() {
    for (name, _d, s) in backends() {
        put(&*s, Table::Extents, b"e", b"1");
        let mut t1 = s.begin();
        let mut t2 = s.begin();
        assert!(t1.get_for_update(Table::Extents, b"e").unwrap().is_some());
        t1.put(Table::Extents, b"e", b"2").unwrap();
        t1.commit().unwrap();
        // t2 reads after t1 committed: for the optimistic backends the read is validated at commit
        // against the snapshot the transaction started from.
        let v = t2.get_for_update(Table::Extents, b"e").unwrap();
        t2.put(Table::Extents, b"e", b"3").unwrap();
        let r = t2.commit();
        // Either the backend saw t1's value (no conflict) or it refuses the commit.
        match r {
            Ok(()) => assert_eq!(v.as_deref(), Some(&b"2"[..]), "{name}"),
            Err(MetaError::Conflict) => {}
            Err(e) => panic!("{name}: {e}"),
        }

        // The classic lost update: both read, both write; the second commit must fail.
        let mut a = s.begin();
        let mut b = s.begin();
        a.get_for_update(Table::Extents, b"x").unwrap();
        b.get_for_update(Table::Extents, b"x").unwrap();
        a.put(Table::Extents, b"x", b"a").unwrap();
        b.put(Table::Extents, b"x", b"b").unwrap();
        a.commit().unwrap();
        assert!(
            matches!(b.commit(), Err(MetaError::Conflict)),
            "{name}: lost update not detected"
        );
        assert_eq!(
            s.get(Table::Extents, b"x").unwrap().as_deref(),
            Some(&b"a"[..]),
            "{name}"
        );
    }
}

#[test]
fn transact_retries_make_counters_exact() {
    for (name, _d, s) in backends() {
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let s = Arc::clone(&s);
                std::thread::spawn(move || {
                    for _ in 0..50 {
                        transact::<_, MetaError>(&*s, |t| {
                            let n = t
                                .get_for_update(Table::System, b"n")?
                                .map(|v| u64::from_be_bytes(v.try_into().unwrap()))
                                .unwrap_or(0);
                            t.put(Table::System, b"n", &(n + 1).to_be_bytes())
                        })
                        .unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let n = u64::from_be_bytes(
            s.get(Table::System, b"n")
                .unwrap()
                .unwrap()
                .try_into()
                .unwrap(),
        );
        assert_eq!(n, 200, "{name}");
    }
}

#[test]
fn rocks_persists_across_reopen_and_refuses_a_second_opener() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = RocksConfig::new(dir.path().join("db"));
    {
        let s = RocksMetadataStore::open(&cfg).unwrap();
        put(&s, Table::Buckets, b"b", b"1");
        let second = RocksMetadataStore::open(&cfg);
        let err = second.err().expect("the lock is held").to_string();
        assert!(err.contains("cannot open RocksDB"), "{err}");
    }
    let s = RocksMetadataStore::open(&cfg).unwrap();
    assert_eq!(
        s.get(Table::Buckets, b"b").unwrap().as_deref(),
        Some(&b"1"[..])
    );
}

#[test]
fn rocks_reports_a_corrupt_database_without_panicking() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = RocksConfig::new(dir.path().join("db"));
    drop(RocksMetadataStore::open(&cfg).unwrap());
    // Destroy the manifest pointer.
    std::fs::write(dir.path().join("db/CURRENT"), b"garbage\n").unwrap();
    let err = RocksMetadataStore::open(&cfg)
        .err()
        .expect("corrupt db refused")
        .to_string();
    assert!(err.contains("cannot open RocksDB"), "{err}");
}
