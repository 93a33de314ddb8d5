//! The catalog conformance suite on every local backend: the KV catalog over the memory store
//! and over real RocksDB, and through the fault-injecting wrapper; then what the KV catalog
//! stores for inline payloads, and format-2 records of older data dirs.

use std::sync::Arc;

use lode_catalog::{
    Catalog, CatalogError, Cond, Fault, FaultyCatalog, ListQuery, ObjectRecord, Refs, Versioning,
    conformance, replace_check,
};
use lode_catalog_kv::{KvCatalog, mem_catalog};
use lode_metadata::{MetadataStore, Table, keys, records};
use lode_metadata_rocks::{RocksConfig, RocksMetadataStore};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_backend_conforms() {
    conformance::run_all(Arc::new(mem_catalog())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rocksdb_backend_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let store = RocksMetadataStore::open(&RocksConfig::new(dir.path())).unwrap();
    conformance::run_all(Arc::new(KvCatalog::new(Arc::new(store)))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn faulty_wrapper_conforms_when_no_fault_is_queued() {
    conformance::run_all(Arc::new(FaultyCatalog::new(Arc::new(mem_catalog())))).await;
}

/// A fault before a commit applies nothing; a fault after it hides a commit that did apply
/// (so a retried conditional write sees its own first attempt).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injected_faults_fail_before_or_after_applying() {
    let c = FaultyCatalog::new(Arc::new(mem_catalog()));
    c.create_bucket(
        "f",
        lode_catalog::BucketRecord {
            created_ms: 1,
            owner: "o".into(),
            tags: vec![],
            settings: vec![],
        },
    )
    .await
    .unwrap();
    let rec = conformance::record("e1", &[]);
    c.inject(Fault::FailBefore);
    assert!(matches!(
        c.put("f", "k", rec.clone(), &Cond::absent(), Refs::Fresh)
            .await,
        Err(CatalogError::Unavailable(_))
    ));
    assert!(c.get("f", "k").await.unwrap().is_none());
    c.inject(Fault::FailAfter);
    assert!(matches!(
        c.put("f", "k", rec.clone(), &Cond::absent(), Refs::Fresh)
            .await,
        Err(CatalogError::Unavailable(_))
    ));
    assert_eq!(c.get("f", "k").await.unwrap().unwrap().etag, "e1");
    assert!(matches!(
        c.put("f", "k", rec, &Cond::absent(), Refs::Fresh).await,
        Err(CatalogError::PreconditionFailed)
    ));
}

/// The payload keys of the inline table under `bucket` (as object keys).
fn stored_payloads(store: &dyn MetadataStore, bucket: &str) -> Vec<String> {
    let start = keys::bucket_prefix(bucket);
    let end = keys::prefix_successor(&start);
    store
        .scan(Table::Inline, &start, end.as_deref(), usize::MAX)
        .unwrap()
        .into_iter()
        .map(|(k, _)| String::from_utf8(k[start.len()..].to_vec()).unwrap())
        .collect()
}

/// The KV catalog stores a payload exactly for each record with inline bytes (none leaked
/// by overwrites, copies, renames, completions, deletes), in the inline table, beside a
/// format-3 record that holds none of the bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kv_payloads_live_in_the_inline_table_and_never_leak() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn MetadataStore> =
        Arc::new(RocksMetadataStore::open(&RocksConfig::new(dir.path())).unwrap());
    let kv = Arc::new(KvCatalog::new(Arc::clone(&store)));
    conformance::inline_payloads(kv.clone(), "leak").await;
    assert_eq!(
        stored_payloads(&*store, "leak"),
        vec!["keep/inline".to_owned()]
    );
    let okey = keys::object("leak", "keep/inline");
    let value = store.get(Table::Objects, &okey).unwrap().unwrap();
    assert_eq!(value[0], records::FORMAT_V7);
    let payload = store.get(Table::Inline, &okey).unwrap().unwrap();
    assert_eq!(payload, conformance::pattern(100, 5));
    assert!(
        !value.windows(payload.len()).any(|w| w == payload),
        "the record value holds its payload"
    );
    conformance::empty_and_delete_bucket(&*kv, "leak").await;
    assert!(stored_payloads(&*store, "leak").is_empty());
}

/// A format-2 value (`records::tests::v2_fixture_decodes_and_reencodes_split` pins format
/// 2's bytes).
fn v2_value(rec: &ObjectRecord) -> Vec<u8> {
    records::encode_v2(rec)
}

/// Records an older data dir wrote (format 2: the bytes inside the value, no payload in the
/// inline table) read whole through `get`, in head form through `head` and `list`, and are
/// split when a commit rewrites them; directory renames move them as they are.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kv_reads_and_migrates_format_2_records() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn MetadataStore> =
        Arc::new(RocksMetadataStore::open(&RocksConfig::new(dir.path())).unwrap());
    let kv: Arc<dyn Catalog> = Arc::new(KvCatalog::new(Arc::clone(&store)));
    kv.create_bucket(
        "old",
        lode_catalog::BucketRecord {
            created_ms: 1,
            owner: "o".into(),
            tags: vec![],
            settings: vec![],
        },
    )
    .await
    .unwrap();
    let recs = conformance::legacy_records();
    let mut t = store.begin();
    for (k, r) in &recs {
        t.put(Table::Objects, &keys::object("old", k), &v2_value(r))
            .unwrap();
    }
    t.commit().unwrap();
    for (k, r) in &recs {
        assert_eq!(kv.get("old", k).await.unwrap().as_ref(), Some(r));
        assert_eq!(kv.get_blocking("old", k).unwrap().as_ref(), Some(r));
        let head = kv.head("old", k).await.unwrap().unwrap();
        assert_eq!(head, r.clone().into_head());
        assert_eq!(kv.head_blocking("old", k).unwrap(), Some(head));
    }
    let q = ListQuery {
        prefix: "",
        delimiter: None,
        after: None,
        max: 10,
    };
    let page = kv.list("old", &q).await.unwrap();
    for ((k, got), (want_k, want)) in page.objects.iter().zip(&recs) {
        assert_eq!((k.as_str(), got), (*want_k, &want.clone().into_head()));
    }
    assert_eq!(page.objects, kv.list_blocking("old", &q).unwrap().objects);
    // An update rewrites the record in format 3, its bytes moved to the inline table.
    let up = kv
        .update(
            "old",
            "a",
            Arc::new(|r: &ObjectRecord| {
                let mut r = r.clone();
                r.meta.content_type = Some("t/t".into());
                Ok(r)
            }),
        )
        .await
        .unwrap();
    assert_eq!(kv.get("old", "a").await.unwrap(), Some(up.clone()));
    assert_eq!(up.segments, recs[0].1.segments);
    let stored = |k: &str| store.get(Table::Objects, &keys::object("old", k)).unwrap();
    assert_eq!(stored("a").unwrap()[0], records::FORMAT_V7);
    assert_eq!(stored_payloads(&*store, "old"), vec!["a".to_owned()]);
    // A rename rewrites it too; a directory rename moves the value as it is.
    kv.rename("old", "b", "b2", replace_check(false), Versioning::Off)
        .await
        .unwrap();
    assert_eq!(
        kv.get("old", "b2").await.unwrap().as_ref(),
        Some(&recs[1].1)
    );
    assert_eq!(stored("b2").unwrap()[0], records::FORMAT_V7);
    kv.rename_prefix("old", "d/", "e/", 1024).await.unwrap();
    assert_eq!(
        kv.get("old", "e/x").await.unwrap().as_ref(),
        Some(&recs[2].1)
    );
    assert_eq!(stored("e/x").unwrap()[0], records::FORMAT_V2);
    assert_eq!(
        stored_payloads(&*store, "old"),
        vec!["a".to_owned(), "b2".to_owned()]
    );
    // Overwrites and deletes of format-2 records leave nothing behind.
    kv.put(
        "old",
        "e/x",
        conformance::record("c", &[conformance::chunk()]),
        &Cond::default(),
        Refs::Fresh,
    )
    .await
    .unwrap();
    for k in ["a", "b2", "e/x"] {
        let done = kv.delete("old", k, &Cond::default()).await.unwrap();
        assert!(done.previous.is_some());
    }
    assert!(stored_payloads(&*store, "old").is_empty());
    kv.delete_bucket("old").await.unwrap();
}
