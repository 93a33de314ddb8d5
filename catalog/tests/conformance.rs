//! The catalog conformance suite on every local backend: the KV catalog over the memory store
//! and over real RocksDB, and through the fault-injecting wrapper.

use std::sync::Arc;

use lode_catalog::{
    Catalog, CatalogError, Cond, Fault, FaultyCatalog, KvCatalog, Refs, conformance, mem_catalog,
};
use lode_metadata::{RocksConfig, RocksMetadataStore};

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
