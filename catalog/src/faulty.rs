//! [`FaultyCatalog`]: a wrapper that makes chosen commits fail, before or after they apply
//! (an unavailable backend; a commit whose reply was lost), for tests of the code around the
//! boundary. Reads pass through.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use crate::{
    Aborted, AppendFn, Brief, BucketFn, BucketRecord, Catalog, CatalogError, ChunkLoc, Commit,
    CompleteFn, Cond, ListPage, ListQuery, ObjectRecord, ObjectSummary, PartRecord, RecordFn, Refs,
    RenameCheck, Result, SysFn, UploadPage, UploadQuery, UploadRecord, VersionPage, VersionQuery,
    Versioning,
};

/// What happens to the next commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Fails with `Unavailable` without applying anything.
    FailBefore,
    /// Applies, then fails with `Unavailable` (the caller cannot tell it happened).
    FailAfter,
}

pub struct FaultyCatalog {
    inner: Arc<dyn Catalog>,
    plan: Mutex<VecDeque<Fault>>,
}

impl FaultyCatalog {
    pub fn new(inner: Arc<dyn Catalog>) -> Self {
        Self {
            inner,
            plan: Mutex::new(VecDeque::new()),
        }
    }

    /// Queues a fault for the next commit that has none yet.
    pub fn inject(&self, f: Fault) {
        self.plan.lock().expect("fault plan").push_back(f);
    }

    async fn commit<T>(&self, op: impl std::future::Future<Output = Result<T>>) -> Result<T> {
        let fault = self.plan.lock().expect("fault plan").pop_front();
        match fault {
            None => op.await,
            Some(Fault::FailBefore) => Err(CatalogError::Unavailable("injected fault".into())),
            Some(Fault::FailAfter) => {
                op.await?;
                Err(CatalogError::Unavailable(
                    "injected fault after apply".into(),
                ))
            }
        }
    }
}

#[async_trait::async_trait]
impl Catalog for FaultyCatalog {
    fn backend_name(&self) -> &'static str {
        "faulty"
    }
    fn allow_blocking_on_this_thread(&self) {
        self.inner.allow_blocking_on_this_thread()
    }
    fn counts_references(&self) -> bool {
        self.inner.counts_references()
    }
    async fn create_bucket(&self, name: &str, rec: BucketRecord) -> Result<()> {
        self.commit(self.inner.create_bucket(name, rec)).await
    }
    async fn bucket(&self, name: &str) -> Result<Option<BucketRecord>> {
        self.inner.bucket(name).await
    }
    async fn list_buckets(&self) -> Result<Vec<(String, BucketRecord)>> {
        self.inner.list_buckets().await
    }
    async fn update_bucket(&self, name: &str, f: BucketFn) -> Result<BucketRecord> {
        self.commit(self.inner.update_bucket(name, f)).await
    }
    async fn delete_bucket(&self, name: &str) -> Result<Vec<ChunkLoc>> {
        self.commit(self.inner.delete_bucket(name)).await
    }
    async fn get(&self, bucket: &str, key: &str) -> Result<Option<ObjectRecord>> {
        self.inner.get(bucket, key).await
    }
    async fn head(&self, bucket: &str, key: &str) -> Result<Option<ObjectRecord>> {
        self.inner.head(bucket, key).await
    }
    fn get_cached(&self, bucket: &str, key: &str) -> Option<Result<Option<ObjectRecord>>> {
        self.inner.get_cached(bucket, key)
    }
    fn bucket_known(&self, name: &str) -> bool {
        self.inner.bucket_known(name)
    }
    fn head_cached(&self, bucket: &str, key: &str) -> Option<Result<Option<ObjectRecord>>> {
        self.inner.head_cached(bucket, key)
    }
    async fn put(
        &self,
        bucket: &str,
        key: &str,
        rec: ObjectRecord,
        cond: &Cond,
        refs: Refs,
    ) -> Result<Commit> {
        self.commit(self.inner.put(bucket, key, rec, cond, refs))
            .await
    }
    async fn delete(&self, bucket: &str, key: &str, cond: &Cond) -> Result<Commit> {
        self.commit(self.inner.delete(bucket, key, cond)).await
    }
    async fn copy(
        &self,
        src: (&str, &str),
        dst: (&str, &str),
        make: RecordFn,
    ) -> Result<(ObjectRecord, Commit)> {
        self.commit(self.inner.copy(src, dst, make)).await
    }
    async fn append(
        &self,
        bucket: &str,
        key: &str,
        f: AppendFn,
        v: Versioning,
    ) -> Result<(ObjectRecord, Commit)> {
        self.commit(self.inner.append(bucket, key, f, v)).await
    }
    async fn update(&self, bucket: &str, key: &str, f: RecordFn) -> Result<ObjectRecord> {
        self.commit(self.inner.update(bucket, key, f)).await
    }
    async fn get_version(
        &self,
        bucket: &str,
        key: &str,
        version_id: &str,
    ) -> Result<Option<ObjectRecord>> {
        self.inner.get_version(bucket, key, version_id).await
    }
    async fn newest_version(&self, bucket: &str, key: &str) -> Result<Option<ObjectRecord>> {
        self.inner.newest_version(bucket, key).await
    }
    async fn delete_version(
        &self,
        bucket: &str,
        key: &str,
        version_id: &str,
        check: Option<crate::RecordCheck>,
    ) -> Result<Commit> {
        self.commit(self.inner.delete_version(bucket, key, version_id, check))
            .await
    }
    async fn update_version(
        &self,
        bucket: &str,
        key: &str,
        version_id: &str,
        f: RecordFn,
    ) -> Result<ObjectRecord> {
        self.commit(self.inner.update_version(bucket, key, version_id, f))
            .await
    }
    async fn list_versions(&self, bucket: &str, q: &VersionQuery) -> Result<VersionPage> {
        self.inner.list_versions(bucket, q).await
    }
    fn supports_versions(&self) -> bool {
        self.inner.supports_versions()
    }
    async fn list(&self, bucket: &str, q: &ListQuery<'_>) -> Result<ListPage> {
        self.inner.list(bucket, q).await
    }
    async fn list_briefs(&self, bucket: &str, q: &ListQuery<'_>) -> Result<(ListPage, Vec<Brief>)> {
        self.inner.list_briefs(bucket, q).await
    }
    async fn rename(
        &self,
        bucket: &str,
        from: &str,
        to: &str,
        check: RenameCheck,
        v: Versioning,
    ) -> Result<Commit> {
        self.commit(self.inner.rename(bucket, from, to, check, v))
            .await
    }
    async fn rename_prefix(
        &self,
        bucket: &str,
        from: &str,
        to: &str,
        max_key_len: usize,
    ) -> Result<(usize, Vec<ChunkLoc>)> {
        self.commit(self.inner.rename_prefix(bucket, from, to, max_key_len))
            .await
    }
    async fn remove_dir(&self, bucket: &str, prefix: &str) -> Result<Vec<ChunkLoc>> {
        self.commit(self.inner.remove_dir(bucket, prefix)).await
    }
    async fn create_upload(
        &self,
        bucket: &str,
        key: &str,
        id: &str,
        rec: UploadRecord,
    ) -> Result<()> {
        self.commit(self.inner.create_upload(bucket, key, id, rec))
            .await
    }
    async fn upload(&self, bucket: &str, key: &str, id: &str) -> Result<UploadRecord> {
        self.inner.upload(bucket, key, id).await
    }
    async fn put_part(
        &self,
        bucket: &str,
        key: &str,
        id: &str,
        n: u32,
        part: PartRecord,
    ) -> Result<Vec<ChunkLoc>> {
        self.commit(self.inner.put_part(bucket, key, id, n, part))
            .await
    }
    async fn list_parts(
        &self,
        bucket: &str,
        key: &str,
        id: &str,
        after: u32,
        max: usize,
    ) -> Result<(Vec<(u32, PartRecord)>, bool)> {
        self.inner.list_parts(bucket, key, id, after, max).await
    }
    async fn list_uploads(&self, bucket: &str, q: &UploadQuery) -> Result<UploadPage> {
        self.inner.list_uploads(bucket, q).await
    }
    async fn abort(&self, bucket: &str, key: &str, id: &str) -> Result<Aborted> {
        self.commit(self.inner.abort(bucket, key, id)).await
    }
    async fn complete(
        &self,
        bucket: &str,
        key: &str,
        id: &str,
        cond: &Cond,
        f: CompleteFn,
    ) -> Result<(ObjectRecord, Commit)> {
        self.commit(self.inner.complete(bucket, key, id, cond, f))
            .await
    }
    fn get_blocking(&self, bucket: &str, key: &str) -> Result<Option<ObjectRecord>> {
        self.inner.get_blocking(bucket, key)
    }
    fn head_blocking(&self, bucket: &str, key: &str) -> Result<Option<ObjectRecord>> {
        self.inner.head_blocking(bucket, key)
    }
    fn list_blocking(&self, bucket: &str, q: &ListQuery<'_>) -> Result<ListPage> {
        self.inner.list_blocking(bucket, q)
    }
    fn list_summaries_blocking(
        &self,
        bucket: &str,
        q: &ListQuery<'_>,
        f: &mut dyn FnMut(&str, &ObjectSummary<'_>),
    ) -> Result<ListPage> {
        self.inner.list_summaries_blocking(bucket, q, f)
    }
    async fn sys_get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.inner.sys_get(key).await
    }
    async fn sys_scan(&self, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.inner.sys_scan(prefix).await
    }
    async fn sys_update(&self, key: &[u8], f: SysFn) -> Result<()> {
        self.commit(self.inner.sys_update(key, f)).await
    }
    fn supports_events(&self) -> bool {
        self.inner.supports_events()
    }
    async fn outbox_add(&self, dest: &str, body: Vec<u8>) -> Result<u64> {
        self.commit(self.inner.outbox_add(dest, body)).await
    }
    async fn outbox_scan(
        &self,
        dest: &str,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<crate::events::Outboxed>> {
        self.inner.outbox_scan(dest, after, limit).await
    }
    async fn outbox_remove(&self, dest: &str, seqs: &[u64]) -> Result<()> {
        self.commit(self.inner.outbox_remove(dest, seqs)).await
    }
    async fn outbox_len(&self, dest: &str) -> Result<u64> {
        self.inner.outbox_len(dest).await
    }

    async fn hand_off(&self) -> Result<()> {
        self.inner.hand_off().await
    }
}
