//! `lode-catalog-kv`: the KV backend of the catalog boundary (`lode_catalog::Catalog`).
//!
//! [`KvCatalog`]: the catalog over an ordered, transactional key-value store (RocksDB on one
//! node, the memory store in tests). Every commit is one optimistic transaction that also
//! keeps the chunks' reference counts (the extents table), so a record and its references
//! change together or not at all. Tables and key encoding: `lode_metadata::keys`; the layout is
//! the one single-node data dirs have always had, plus the `inline` table: an object record's
//! payload (its inline bytes, format 3) is stored under the same key as the record in
//! `Table::Inline`, which listings never read, and every commit that writes, moves or removes
//! the record does the same to the payload in its transaction. Records of older data dirs
//! (format 2, bytes inside the value) read as they are and are split when next rewritten.

mod list;

use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use lode_metadata::records::{self, AbortedUpload, ExtentRecord, Record};
use lode_metadata::{MemMetadataStore, MetadataStore, Table, Transaction, keys};

use lode_catalog::events::{self, Change, EventDraft, Outboxed, What};
use lode_catalog::listing::{PageFold, Step};

use lode_catalog::{
    Aborted, AppendFn, BucketFn, BucketRecord, Catalog, CatalogError, ChunkLoc, Commit, CompleteFn,
    Cond, ListPage, ListQuery, ObjectRecord, PartRecord, RecordFn, Refs, RenameCheck, Result,
    Segment, SysFn, UploadPage, UploadQuery, UploadRecord, UploadState, appended_segments,
    check_bucket_update, join_record, split_record,
};
use lode_catalog::{
    Brief, ObjectSummary, VersionEntry, VersionPage, VersionQuery, Versioning, delete_marker,
    is_version, retirement, seq_of_suffix, version_suffix,
};

/// How long an aborted upload is remembered for a retried abort.
const ABORTED_MEMORY_MS: i64 = 24 * 3600 * 1000;

thread_local! {
    /// This thread may run the catalog's RocksDB work itself ([`Catalog::allow_blocking_on_this_thread`]).
    static INLINE_BLOCKING: Cell<bool> = const { Cell::new(false) };
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The catalog over a [`MetadataStore`].
pub struct KvCatalog {
    meta: Arc<dyn MetadataStore>,
    /// Commits into a bucket hold it shared; DeleteBucket holds it exclusive, so nothing is
    /// committed into a bucket being deleted. (Commits read the bucket record untracked: a
    /// tracked read would serialize every commit into a bucket, defeating group commit.)
    bucket_gate: Arc<RwLock<()>>,
}

/// A catalog in memory (tests).
pub fn mem_catalog() -> KvCatalog {
    KvCatalog::new(Arc::new(MemMetadataStore::new()))
}

fn chunks(segments: &[Segment]) -> impl Iterator<Item = &ChunkLoc> {
    segments.iter().filter_map(|s| match s {
        Segment::Chunk(c) => Some(c),
        Segment::Inline(_) | Segment::Detached(_) => None,
    })
}

/// How many times a read retries when the record changed under it.
const READ_RETRIES: usize = 64;

/// Puts the payload read beside a record back into it ([`join_record`]).
fn with_payload(rec: ObjectRecord, payload: Option<Vec<u8>>) -> Result<ObjectRecord> {
    join_record(rec, payload.as_deref()).map_err(|e| match e {
        CatalogError::Corrupt(_) => CatalogError::Corrupt(PAYLOAD_TORN.into()),
        e => e,
    })
}

/// What [`with_payload`] answers for a record whose payload is missing or does not fit it.
/// Inside a transaction this is first taken for a read that saw two states (the record before
/// another commit removed or replaced it with its payload, the payload after), and the
/// transaction runs again.
const PAYLOAD_TORN: &str = "an object record's inline payload is missing or does not match it";

/// How many times a transaction that read a record without its payload runs again before
/// the record is taken as corrupt.
const TORN_READ_RETRIES: usize = 8;

/// The full record at `okey`, read outside a transaction with `get` (`Ok(None)` from `get`:
/// the answer is not at hand; then this answers `None` too). The record is read, then its
/// payload, then the record again: a commit in between changes the record's value (the
/// payload only changes with it, and a value names its content: size, ETag, last-modified),
/// so an unchanged value means the payload read belongs to it; a changed one reads again.
fn read_full(
    get: impl Fn(Table, &[u8]) -> Result<Option<Option<Vec<u8>>>>,
    okey: &[u8],
) -> Result<Option<Option<ObjectRecord>>> {
    let Some(mut value) = get(Table::Objects, okey)? else {
        return Ok(None);
    };
    for _ in 0..READ_RETRIES {
        let Some(v) = &value else {
            return Ok(Some(None));
        };
        let rec: ObjectRecord = records::decode(v)?;
        if !rec.has_detached() {
            return Ok(Some(Some(rec)));
        }
        let Some(payload) = get(Table::Inline, okey)? else {
            return Ok(None);
        };
        let Some(again) = get(Table::Objects, okey)? else {
            return Ok(None);
        };
        if again == value {
            return with_payload(rec, payload).map(|r| Some(Some(r)));
        }
        value = again;
    }
    Err(CatalogError::Contended)
}

/// [`read_full`] with blocking reads.
fn get_full(m: &dyn MetadataStore, okey: &[u8]) -> Result<Option<ObjectRecord>> {
    Ok(read_full(|t, k| Ok(Some(m.get(t, k)?)), okey)?.flatten())
}

/// The record at `k`, read for update as stored (head form for format 3; older formats keep
/// their inline bytes).
fn get_obj(t: &mut dyn Transaction, k: &[u8]) -> Result<Option<ObjectRecord>> {
    get_rec(t, Table::Objects, k)
}

/// The full record at `k`, record and payload read for update.
fn get_obj_full(t: &mut dyn Transaction, k: &[u8]) -> Result<Option<ObjectRecord>> {
    get_obj(t, k)?.map(|r| full_record(t, k, r)).transpose()
}

/// `rec`, the record stored at `k`, with its payload (read for update) put back.
fn full_record(t: &mut dyn Transaction, k: &[u8], rec: ObjectRecord) -> Result<ObjectRecord> {
    let payload = if rec.has_detached() {
        t.get_for_update(Table::Inline, k)?
    } else {
        None
    };
    with_payload(rec, payload)
}

/// A full record split for storage: the value and its payload.
struct Split {
    value: Vec<u8>,
    payload: Option<Vec<u8>>,
}

/// Splits a record to commit ([`split_record`]: a record in head form is refused).
fn split(rec: &ObjectRecord) -> Result<Split> {
    let (value, payload) = split_record(rec)?;
    Ok(Split { value, payload })
}

/// Whether the record read at a key (as stored) has a payload beside it.
fn has_payload(old: Option<&ObjectRecord>) -> bool {
    old.is_some_and(ObjectRecord::has_detached)
}

/// Writes a split record at `k` in `t`: the value, and the payload beside it; when the new
/// record has none, the payload of the record it replaces (`had_payload`) goes.
fn put_obj(t: &mut dyn Transaction, k: &[u8], rec: &Split, had_payload: bool) -> Result<()> {
    t.put(Table::Objects, k, &rec.value)?;
    match &rec.payload {
        Some(p) => t.put(Table::Inline, k, p)?,
        None if had_payload => t.delete(Table::Inline, k)?,
        None => {}
    }
    Ok(())
}

/// Removes the record at `k` (`old`, as read) and its payload in `t`.
fn delete_obj(t: &mut dyn Transaction, k: &[u8], old: &ObjectRecord) -> Result<()> {
    t.delete(Table::Objects, k)?;
    if old.has_detached() {
        t.delete(Table::Inline, k)?;
    }
    Ok(())
}

/// A listing page in head form (records of older formats carry their bytes in the value).
/// The system key of `dest`'s outbox entries (`outbox \0 dest \0`, then the sequence number
/// big-endian).
fn outbox_prefix(dest: &str) -> Vec<u8> {
    let mut k = b"outbox\0".to_vec();
    k.extend_from_slice(dest.as_bytes());
    k.push(0);
    k
}

fn outbox_key(dest: &str, seq: u64) -> Vec<u8> {
    let mut k = outbox_prefix(dest);
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

/// Stores the outbox entries `changes` make under the commit's draft, in its transaction.
fn emit(
    t: &mut dyn Transaction,
    draft: &Option<Arc<dyn EventDraft>>,
    changes: &[Change<'_>],
) -> Result<()> {
    for (dest, seq, body) in events::render(draft.as_deref(), changes) {
        t.put(Table::System, &outbox_key(&dest, seq), &body)?;
    }
    Ok(())
}

fn change<'a>(bucket: &'a str, key: &'a str, what: What<'a>) -> Change<'a> {
    Change { bucket, key, what }
}

fn written<'a>(bucket: &'a str, key: &'a str, record: &'a ObjectRecord) -> Change<'a> {
    change(bucket, key, What::Written { record })
}

fn head_page(mut page: ListPage) -> ListPage {
    page.objects = page
        .objects
        .into_iter()
        .map(|(k, r)| (k, r.into_head()))
        .collect();
    page
}

fn get_rec<T: Record>(t: &mut dyn Transaction, table: Table, k: &[u8]) -> Result<Option<T>> {
    Ok(t.get_for_update(table, k)?
        .map(|v| records::decode(&v))
        .transpose()?)
}

/// Adds one reference to each chunk of `segments` (`Refs::Fresh`: new chunks, refs = 1).
fn add_refs(t: &mut dyn Transaction, segments: &[Segment], refs: Refs) -> Result<()> {
    for c in chunks(segments) {
        let k = keys::extent(c.dev, c.offset);
        let rec = match refs {
            Refs::Fresh => ExtentRecord {
                len: c.alloc_len,
                refs: 1,
            },
            Refs::Shared => {
                let Some(mut r) = get_rec::<ExtentRecord>(t, Table::Extents, &k)? else {
                    return Err(CatalogError::Corrupt(format!(
                        "extent {:?} has no record",
                        (c.dev, c.offset)
                    )));
                };
                r.refs += 1;
                r
            }
        };
        t.put(Table::Extents, &k, &records::encode(&rec))?;
    }
    Ok(())
}

/// Drops one reference from each chunk of `segments`, collecting those that reach zero.
fn drop_refs(
    t: &mut dyn Transaction,
    segments: &[Segment],
    freed: &mut Vec<ChunkLoc>,
) -> Result<()> {
    for c in chunks(segments) {
        let k = keys::extent(c.dev, c.offset);
        let Some(mut r) = get_rec::<ExtentRecord>(t, Table::Extents, &k)? else {
            tracing::error!(
                dev = c.dev,
                offset = c.offset,
                "dropping a reference to an unrecorded extent"
            );
            continue;
        };
        r.refs = r.refs.saturating_sub(1);
        if r.refs == 0 {
            t.delete(Table::Extents, &k)?;
            freed.push(*c);
        } else {
            t.put(Table::Extents, &k, &records::encode(&r))?;
        }
    }
    Ok(())
}

/// The noncurrent versions of `b/k`, newest first: (suffix, value as stored).
fn versions_of(m: &dyn MetadataStore, b: &str, k: &str) -> Result<Vec<(String, Vec<u8>)>> {
    let prefix = keys::version_prefix(b, k);
    let end = keys::prefix_successor(&prefix);
    m.scan(Table::Versions, &prefix, end.as_deref(), usize::MAX)?
        .into_iter()
        .map(|(vk, v)| {
            let suffix = String::from_utf8(vk[prefix.len()..].to_vec())
                .map_err(|e| CatalogError::Corrupt(e.to_string()))?;
            Ok((suffix, v))
        })
        .collect()
}

/// The suffix of the `null` version among `versions` ([`versions_of`]), if one is there.
fn null_suffix(versions: &[(String, Vec<u8>)]) -> Option<&str> {
    versions
        .iter()
        .map(|(s, _)| s.as_str())
        .find(|s| s.ends_with("null"))
}

/// Under `v`, retires the current record of `b/k` (`old`, as stored) before a new current
/// version or a delete marker takes its place, and says which version the commit makes
/// (its sequence number and id; `None`: the `null` version). `Off`: the old record is
/// released. Otherwise it is kept whole as a noncurrent version (inline bytes inside), unless
/// the bucket is `Suspended` and it is the `null` version, which is released; in `Suspended`
/// a noncurrent `null` version goes too (a key has one `null` version).
#[allow(clippy::too_many_arguments)]
fn retire_current(
    m: &dyn MetadataStore,
    t: &mut dyn Transaction,
    b: &str,
    k: &str,
    okey: &[u8],
    old: Option<&ObjectRecord>,
    v: Versioning,
    released: &mut Vec<ChunkLoc>,
) -> Result<(u64, Option<String>)> {
    let versions = if v == Versioning::Off {
        vec![]
    } else {
        versions_of(m, b, k)?
    };
    let floor = versions
        .first()
        .and_then(|(s, _)| seq_of_suffix(s))
        .unwrap_or(0);
    let null = null_suffix(&versions);
    let r = retirement(old, floor, null.is_some(), v);
    if let Some(old) = old {
        if let Some(suffix) = &r.keep_as {
            let whole = full_record(t, okey, old.clone())?;
            let vkey = keys::version(b, k, suffix);
            t.put(Table::Versions, &vkey, &records::encode(&whole))?;
        } else if r.release_old {
            drop_refs(t, &old.segments, released)?;
        }
    }
    if r.drop_null
        && let Some(suffix) = null
    {
        let vkey = keys::version(b, k, suffix);
        if let Some(val) = t.get_for_update(Table::Versions, &vkey)? {
            let rec: ObjectRecord = records::decode(&val)?;
            drop_refs(t, &rec.segments, released)?;
            t.delete(Table::Versions, &vkey)?;
        }
    }
    Ok((r.seq, r.version_id))
}

/// Rewrites the current record at `okey` (`cur`, as stored) in place with `f`, its payload
/// read and written with it: the content (segments) must stay, and a current record is never
/// a delete marker (else `Corrupt`).
fn rewrite_current(
    t: &mut dyn Transaction,
    okey: &[u8],
    cur: ObjectRecord,
    f: &RecordFn,
) -> Result<ObjectRecord> {
    let had_payload = cur.has_detached();
    let whole = full_record(t, okey, cur)?;
    let new = f(&whole)?;
    if new.segments != whole.segments || new.delete_marker {
        return Err(CatalogError::Corrupt(
            "update may not change an object's content".into(),
        ));
    }
    put_obj(t, okey, &split(&new)?, had_payload)?;
    Ok(new)
}

/// The version `id` of `b/k` among the noncurrent ones: its key in `Versions` and record.
fn find_noncurrent(
    m: &dyn MetadataStore,
    t: &mut dyn Transaction,
    b: &str,
    k: &str,
    id: &str,
) -> Result<Option<(Vec<u8>, ObjectRecord)>> {
    let vkey = if id == "null" {
        match null_suffix(&versions_of(m, b, k)?) {
            Some(s) => keys::version(b, k, s),
            None => return Ok(None),
        }
    } else {
        keys::version(b, k, id)
    };
    match t.get_for_update(Table::Versions, &vkey)? {
        Some(v) => Ok(Some((vkey, records::decode(&v)?))),
        None => Ok(None),
    }
}

/// After a version of `b/k` went: with no current record left, the newest noncurrent one
/// becomes current unless it is a delete marker (its chunks keep their references).
fn promote_newest(
    m: &dyn MetadataStore,
    t: &mut dyn Transaction,
    b: &str,
    k: &str,
    okey: &[u8],
    gone: &[u8],
) -> Result<()> {
    if get_obj(t, okey)?.is_some() {
        return Ok(());
    }
    let versions = versions_of(m, b, k)?;
    let Some((suffix, _)) = versions
        .iter()
        .find(|(s, _)| keys::version(b, k, s) != gone)
    else {
        return Ok(());
    };
    let vkey = keys::version(b, k, suffix);
    let Some(val) = t.get_for_update(Table::Versions, &vkey)? else {
        return Ok(());
    };
    let rec: ObjectRecord = records::decode(&val)?;
    if rec.delete_marker {
        return Ok(());
    }
    t.delete(Table::Versions, &vkey)?;
    put_obj(t, okey, &split(&rec)?, false)
}

/// One page of ListObjectVersions: the `Objects` (current) and `Versions` (noncurrent) tables
/// merged in one pass of two cursors: keys in order, each key's current version first, then
/// its noncurrent ones newest first; a common prefix is skipped with one seek of each.
fn list_versions_page(m: &dyn MetadataStore, b: &str, q: &VersionQuery) -> Result<VersionPage> {
    let base = keys::bucket_prefix(b);
    let mut full_prefix = base.clone();
    full_prefix.extend_from_slice(q.prefix.as_bytes());
    let km = q.key_marker.as_deref().map(str::as_bytes);
    let mut fold = PageFold::new(
        &q.prefix,
        q.delimiter.as_deref(),
        q.key_marker.as_deref(),
        q.max,
    );
    // Where the previous page ended: (key, rank); rank None is the current version.
    let marker: Option<(Vec<u8>, Option<Vec<u8>>)> = match (km, q.version_marker.as_deref()) {
        (Some(k), Some(v)) => {
            let key = String::from_utf8_lossy(k).into_owned();
            let cur = get_obj_stored(m, &keys::object(b, &key))?;
            let rank = match cur {
                Some(c) if is_version(&c, v) => None,
                _ if v == "null" => {
                    null_suffix(&versions_of(m, b, &key)?).map(|s| s.as_bytes().to_vec())
                }
                _ => Some(v.as_bytes().to_vec()),
            };
            Some((k.to_vec(), rank))
        }
        _ => None,
    };
    let start = match km {
        Some(k) if k > q.prefix.as_bytes() => [&base[..], k].concat(),
        _ => full_prefix.clone(),
    };
    let mut objs = list::PageCursor::new(m, Table::Objects, q.max)?;
    let mut vers = list::PageCursor::new(m, Table::Versions, q.max)?;
    objs.cur.seek(&start);
    vers.cur.seek(&start);
    let mut page = VersionPage::default();
    let mut latest_done: Option<Vec<u8>> = marker.as_ref().map(|(k, _)| k.clone());
    loop {
        let o = objs
            .cur
            .current()
            .filter(|(k, _)| k.starts_with(&full_prefix))
            .map(|(k, v)| (k[base.len()..].to_vec(), None::<Vec<u8>>, v.to_vec()));
        let v = vers
            .cur
            .current()
            .filter(|(k, _)| k.starts_with(&full_prefix))
            .map(|(k, v)| {
                let rest = &k[base.len()..];
                let nul = rest.iter().position(|&c| c == 0).unwrap_or(rest.len());
                let suffix = rest.get(nul + 1..).unwrap_or_default().to_vec();
                (rest[..nul].to_vec(), Some(suffix), v.to_vec())
            });
        let (from_objs, (key, rank, value)) = match (o, v) {
            (None, None) => break,
            (Some(o), None) => (true, o),
            (None, Some(v)) => (false, v),
            (Some(o), Some(v)) => {
                if (&o.0, &o.1) <= (&v.0, &v.1) {
                    (true, o)
                } else {
                    (false, v)
                }
            }
        };
        let advance = |objs: &mut Box<dyn lode_metadata::Cursor + '_>,
                       vers: &mut Box<dyn lode_metadata::Cursor + '_>| {
            if from_objs { objs.next() } else { vers.next() }
        };
        let skip = match (&marker, km) {
            (Some((mk, mr)), _) => (&key, &rank) <= (mk, mr),
            (None, Some(k)) => key.as_slice() <= k,
            (None, None) => false,
        };
        if skip {
            advance(&mut objs.cur, &mut vers.cur);
            continue;
        }
        let name = std::str::from_utf8(&key).map_err(|e| CatalogError::Corrupt(e.to_string()))?;
        match fold.offer(name) {
            Step::Take => {}
            Step::Skip => {
                advance(&mut objs.cur, &mut vers.cur);
                continue;
            }
            Step::Prefix { listed } => {
                let cp = fold.skipping().expect("a prefix is being skipped");
                if listed {
                    page.next = Some((cp.to_owned(), None));
                }
                let Some(succ) = keys::prefix_successor(cp.as_bytes()) else {
                    break;
                };
                let next = [&base[..], &succ].concat();
                objs.skip_to(&next)?;
                vers.skip_to(&next)?;
                continue;
            }
            Step::Full => break,
        }
        let record = records::decode::<ObjectRecord>(&value)?.into_head();
        let is_latest = latest_done.as_deref() != Some(key.as_slice());
        latest_done = Some(key.clone());
        let key = String::from_utf8(key).map_err(|e| CatalogError::Corrupt(e.to_string()))?;
        let id = record.version_id.clone().unwrap_or_else(|| "null".into());
        page.next = Some((key.clone(), Some(id)));
        page.entries.push(VersionEntry {
            key,
            record,
            is_latest,
        });
        advance(&mut objs.cur, &mut vers.cur);
    }
    objs.cur.status()?;
    vers.cur.status()?;
    (page.prefixes, page.truncated) = fold.finish();
    if !page.truncated {
        page.next = None;
    }
    Ok(page)
}

/// The record at `okey` as stored, read outside a transaction.
fn get_obj_stored(m: &dyn MetadataStore, okey: &[u8]) -> Result<Option<ObjectRecord>> {
    Ok(m.get(Table::Objects, okey)?
        .map(|v| records::decode(&v))
        .transpose()?)
}

fn part_number(pk: &[u8]) -> Result<u32> {
    pk.len()
        .checked_sub(4)
        .and_then(|i| pk[i..].try_into().ok())
        .map(u32::from_be_bytes)
        .ok_or_else(|| CatalogError::Corrupt("bad part key".into()))
}

/// Removes an upload (read for update by the caller) and its parts in `t`.
fn drop_upload(
    m: &dyn MetadataStore,
    t: &mut dyn Transaction,
    uk: &[u8],
    id: &str,
    freed: &mut Vec<ChunkLoc>,
) -> Result<()> {
    let prefix = keys::part_prefix(id);
    let end = keys::prefix_successor(&prefix);
    for (pk, v) in m.scan(Table::Parts, &prefix, end.as_deref(), usize::MAX)? {
        let p: PartRecord = records::decode(&v)?;
        drop_refs(t, &p.segments, freed)?;
        t.delete(Table::Parts, &pk)?;
    }
    t.delete(Table::Uploads, uk)?;
    Ok(())
}

/// Forgets up to 32 of the oldest aborted-upload tombstones that are over a day old.
fn prune_aborted(m: &dyn MetadataStore) -> Result<()> {
    let end = keys::prefix_successor(keys::ABORTED_PREFIX);
    let old = now_ms() - ABORTED_MEMORY_MS;
    let stale: Vec<Vec<u8>> = m
        .scan(Table::System, keys::ABORTED_PREFIX, end.as_deref(), 32)?
        .into_iter()
        .filter(|(_, v)| records::decode::<AbortedUpload>(v).is_ok_and(|a| a.aborted_ms < old))
        .map(|(k, _)| k)
        .collect();
    if stale.is_empty() {
        return Ok(());
    }
    let mut t = m.begin();
    for k in &stale {
        t.delete(Table::System, k)?;
    }
    Ok(t.commit()?)
}

fn has_bucket(m: &dyn MetadataStore, b: &str) -> Result<()> {
    match m.get(Table::Buckets, b.as_bytes())? {
        Some(_) => Ok(()),
        None => Err(CatalogError::NoSuchBucket),
    }
}

impl KvCatalog {
    pub fn new(meta: Arc<dyn MetadataStore>) -> Self {
        Self {
            meta,
            bucket_gate: Arc::new(RwLock::new(())),
        }
    }

    /// The store underneath (for the single-node tools that read it whole: fsck, scrub).
    pub fn store(&self) -> &Arc<dyn MetadataStore> {
        &self.meta
    }

    /// A cached read found no record: absent if the bucket is there, `NoSuchBucket` if not,
    /// `None` if that is not at hand either.
    fn absent_cached(&self, bucket: &str) -> Option<Result<Option<ObjectRecord>>> {
        match self.meta.get_cached(Table::Buckets, bucket.as_bytes()) {
            Err(e) => Some(Err(e.into())),
            Ok(Some(None)) => Some(Err(CatalogError::NoSuchBucket)),
            Ok(Some(Some(_))) => Some(Ok(None)),
            Ok(None) => None,
        }
    }

    /// Runs the listing `f` of `q` on the blocking pool, on an owned copy of the query, once
    /// the bucket is known to exist (a query for no entries answers an empty page).
    async fn listing<T: Default + Send + 'static>(
        &self,
        bucket: &str,
        q: &ListQuery<'_>,
        f: impl FnOnce(&dyn MetadataStore, &str, &ListQuery<'_>) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let b = bucket.to_owned();
        let (prefix, delimiter, after, max) = (
            q.prefix.to_owned(),
            q.delimiter.map(str::to_owned),
            q.after.map(str::to_owned),
            q.max,
        );
        self.blocking(move |m, _| {
            has_bucket(m, &b)?;
            if max == 0 {
                return Ok(T::default());
            }
            let q = ListQuery {
                prefix: &prefix,
                delimiter: delimiter.as_deref(),
                after: after.as_deref(),
                max,
            };
            f(m, &b, &q)
        })
        .await
    }

    /// Runs `f` on the blocking pool (RocksDB calls may block on IO and fsync).
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&dyn MetadataStore, &RwLock<()>) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        if INLINE_BLOCKING.with(Cell::get) {
            // A thread that may block (see `allow_blocking_on_this_thread`): no hop. A panic
            // is an error of this call, as it is through `spawn_blocking`, not the thread's end.
            let (meta, gate) = (&*self.meta, &*self.bucket_gate);
            return std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(meta, gate)))
                .map_err(|_| {
                    CatalogError::Backend("a catalog transaction panicked".to_string().into())
                })?;
        }
        let meta = Arc::clone(&self.meta);
        let gate = Arc::clone(&self.bucket_gate);
        tokio::task::spawn_blocking(move || f(&*meta, &gate))
            .await
            .map_err(|e| CatalogError::Backend(Box::new(e)))?
    }

    /// Runs `f` in an optimistic transaction, retried on conflict (`Contended` after 64
    /// losses). A transaction's reads see the latest commits, not one snapshot, so a record
    /// and then its payload can come from two states when a commit lands in between (a
    /// rename or delete removes the payload, an overwrite changes its length): such a torn
    /// read (`PAYLOAD_TORN`) runs `f` again from the start, in a new transaction (the old one,
    /// and whatever it wrote, is dropped). A record whose payload stays wrong is `Corrupt`.
    fn transact<T>(
        m: &dyn MetadataStore,
        mut f: impl FnMut(&mut dyn Transaction) -> Result<T>,
    ) -> Result<T> {
        let mut tries = 0;
        loop {
            match lode_metadata::transact(m, &mut f) {
                Err(CatalogError::Corrupt(why))
                    if why == PAYLOAD_TORN && tries < TORN_READ_RETRIES =>
                {
                    tries += 1;
                    std::thread::yield_now();
                }
                r => return r,
            }
        }
    }
}

#[async_trait::async_trait]
impl Catalog for KvCatalog {
    fn backend_name(&self) -> &'static str {
        "kv"
    }

    async fn create_bucket(&self, name: &str, rec: BucketRecord) -> Result<()> {
        let name = name.to_owned();
        self.blocking(move |m, _| {
            Self::transact(m, |t| {
                if let Some(old) = get_rec::<BucketRecord>(t, Table::Buckets, name.as_bytes())? {
                    return Err(CatalogError::BucketExists { owner: old.owner });
                }
                t.put(Table::Buckets, name.as_bytes(), &records::encode(&rec))?;
                Ok(())
            })
        })
        .await
    }

    async fn bucket(&self, name: &str) -> Result<Option<BucketRecord>> {
        let name = name.to_owned();
        self.blocking(move |m, _| {
            Ok(m.get(Table::Buckets, name.as_bytes())?
                .map(|v| records::decode(&v))
                .transpose()?)
        })
        .await
    }

    async fn list_buckets(&self) -> Result<Vec<(String, BucketRecord)>> {
        self.blocking(|m, _| {
            m.scan(Table::Buckets, b"", None, usize::MAX)?
                .into_iter()
                .map(|(k, v)| {
                    Ok((
                        String::from_utf8_lossy(&k).into_owned(),
                        records::decode(&v)?,
                    ))
                })
                .collect()
        })
        .await
    }

    async fn update_bucket(&self, name: &str, f: BucketFn) -> Result<BucketRecord> {
        let name = name.to_owned();
        self.blocking(move |m, _| {
            Self::transact(m, |t| {
                let Some(old) = get_rec::<BucketRecord>(t, Table::Buckets, name.as_bytes())? else {
                    return Err(CatalogError::NoSuchBucket);
                };
                let new = f(&old)?;
                check_bucket_update(&old, &new)?;
                t.put(Table::Buckets, name.as_bytes(), &records::encode(&new))?;
                Ok(new)
            })
        })
        .await
    }

    async fn delete_bucket(&self, name: &str) -> Result<Vec<ChunkLoc>> {
        let name = name.to_owned();
        self.blocking(move |m, gate| {
            let _exclusive = gate.write().expect("bucket gate");
            let prefix = keys::bucket_prefix(&name);
            let end = keys::prefix_successor(&prefix);
            Self::transact(m, |t| {
                if t.get_for_update(Table::Buckets, name.as_bytes())?.is_none() {
                    return Err(CatalogError::NoSuchBucket);
                }
                if !m
                    .scan(Table::Objects, &prefix, end.as_deref(), 1)?
                    .is_empty()
                    || !m
                        .scan(Table::Versions, &prefix, end.as_deref(), 1)?
                        .is_empty()
                {
                    return Err(CatalogError::BucketNotEmpty);
                }
                let mut freed = vec![];
                for (uk, _) in m.scan(Table::Uploads, &prefix, end.as_deref(), usize::MAX)? {
                    let Some((_, id)) = keys::split_upload(&uk[prefix.len()..]) else {
                        continue;
                    };
                    let id = String::from_utf8_lossy(id).into_owned();
                    // Read for update: a part committing into this upload now conflicts.
                    if t.get_for_update(Table::Uploads, &uk)?.is_some() {
                        drop_upload(m, t, &uk, &id, &mut freed)?;
                    }
                }
                t.delete(Table::Buckets, name.as_bytes())?;
                Ok(freed)
            })
        })
        .await
    }

    async fn get(&self, bucket: &str, key: &str) -> Result<Option<ObjectRecord>> {
        let (b, k) = (bucket.to_owned(), key.to_owned());
        self.blocking(move |m, _| match get_full(m, &keys::object(&b, &k))? {
            Some(r) => Ok(Some(r)),
            None => has_bucket(m, &b).map(|()| None),
        })
        .await
    }

    async fn head(&self, bucket: &str, key: &str) -> Result<Option<ObjectRecord>> {
        let (b, k) = (bucket.to_owned(), key.to_owned());
        self.blocking(
            move |m, _| match m.get(Table::Objects, &keys::object(&b, &k))? {
                Some(v) => Ok(Some(records::decode_head(&v)?)),
                None => has_bucket(m, &b).map(|()| None),
            },
        )
        .await
    }

    fn get_cached(&self, bucket: &str, key: &str) -> Option<Result<Option<ObjectRecord>>> {
        let okey = keys::object(bucket, key);
        let cached = |t, k: &[u8]| Ok(self.meta.get_cached(t, k)?);
        match read_full(cached, &okey) {
            Err(e) => Some(Err(e)),
            Ok(None) => None,
            Ok(Some(Some(r))) => Some(Ok(Some(r))),
            Ok(Some(None)) => self.absent_cached(bucket),
        }
    }

    fn head_cached(&self, bucket: &str, key: &str) -> Option<Result<Option<ObjectRecord>>> {
        match self
            .meta
            .get_cached(Table::Objects, &keys::object(bucket, key))
        {
            Err(e) => Some(Err(e.into())),
            Ok(None) => None,
            Ok(Some(Some(v))) => Some(records::decode_head(&v).map(Some).map_err(Into::into)),
            Ok(Some(None)) => self.absent_cached(bucket),
        }
    }

    async fn put(
        &self,
        bucket: &str,
        key: &str,
        rec: ObjectRecord,
        cond: &Cond,
        refs: Refs,
    ) -> Result<Commit> {
        let (b, k, cond) = (bucket.to_owned(), key.to_owned(), cond.clone());
        let draft = events::current();
        self.blocking(move |m, gate| {
            let _shared = gate.read().expect("bucket gate");
            let okey = keys::object(&b, &k);
            let value = split(&rec)?;
            Self::transact(m, |t| {
                has_bucket(m, &b)?;
                let old = get_obj(t, &okey)?;
                cond.check(old.as_ref())?;
                add_refs(t, &rec.segments, refs)?;
                let mut released = vec![];
                let (_, version_id) = retire_current(
                    m,
                    t,
                    &b,
                    &k,
                    &okey,
                    old.as_ref(),
                    cond.versioning,
                    &mut released,
                )?;
                if version_id.is_some() {
                    let mut rec = rec.clone();
                    rec.version_id = version_id.clone();
                    put_obj(t, &okey, &split(&rec)?, has_payload(old.as_ref()))?;
                    emit(t, &draft, &[written(&b, &k, &rec)])?;
                } else {
                    put_obj(t, &okey, &value, has_payload(old.as_ref()))?;
                    emit(t, &draft, &[written(&b, &k, &rec)])?;
                }
                Ok(Commit {
                    previous: old.map(ObjectRecord::into_head),
                    released,
                    version_id,
                    delete_marker: false,
                })
            })
        })
        .await
    }

    async fn delete(&self, bucket: &str, key: &str, cond: &Cond) -> Result<Commit> {
        let (b, k, cond) = (bucket.to_owned(), key.to_owned(), cond.clone());
        let draft = events::current();
        self.blocking(move |m, _| {
            let okey = keys::object(&b, &k);
            Self::transact(m, |t| {
                has_bucket(m, &b)?;
                let mut released = vec![];
                let old = get_obj(t, &okey)?;
                cond.check(old.as_ref())?;
                let (seq, version_id) = retire_current(
                    m,
                    t,
                    &b,
                    &k,
                    &okey,
                    old.as_ref(),
                    cond.versioning,
                    &mut released,
                )?;
                let marker = cond.versioning != Versioning::Off;
                match &old {
                    Some(old) => delete_obj(t, &okey, old)?,
                    // Nothing current: a write of the absent key all the same, so that racing
                    // versioned commits of the key conflict (the version scans are not read
                    // for update) and a key keeps one `null` version.
                    None if marker => t.delete(Table::Objects, &okey)?,
                    None => {}
                }
                if marker {
                    let vkey = keys::version(&b, &k, &version_suffix(seq, version_id.as_deref()));
                    let rec = delete_marker(version_id.clone());
                    t.put(Table::Versions, &vkey, &records::encode(&rec))?;
                    let what = What::MarkerCreated {
                        version_id: version_id.as_deref(),
                    };
                    emit(t, &draft, &[change(&b, &k, what)])?;
                } else if old.is_some() {
                    let what = What::Removed { version_id: None };
                    emit(t, &draft, &[change(&b, &k, what)])?;
                }
                Ok(Commit {
                    previous: old.map(ObjectRecord::into_head),
                    released,
                    version_id,
                    delete_marker: marker,
                })
            })
        })
        .await
    }

    async fn append(
        &self,
        bucket: &str,
        key: &str,
        f: AppendFn,
        v: Versioning,
    ) -> Result<(ObjectRecord, Commit)> {
        let (b, k) = (bucket.to_owned(), key.to_owned());
        let draft = events::current();
        self.blocking(move |m, gate| {
            let _shared = gate.read().expect("bucket gate");
            let okey = keys::object(&b, &k);
            Self::transact(m, |t| {
                has_bucket(m, &b)?;
                let stored = get_obj(t, &okey)?;
                let old = stored
                    .clone()
                    .map(|r| full_record(t, &okey, r))
                    .transpose()?;
                let mut new = f(old.as_ref())?;
                let fresh = appended_segments(old.as_ref(), &new)?;
                add_refs(t, fresh, Refs::Fresh)?;
                let mut commit = Commit::default();
                if v != Versioning::Off {
                    // A new version that shares the current one's chunks; the current one is
                    // retired as a put retires it (its references dropped if it goes).
                    let kept = new.segments.len() - fresh.len();
                    add_refs(t, &new.segments[..kept], Refs::Shared)?;
                    let (_, id) = retire_current(
                        m,
                        t,
                        &b,
                        &k,
                        &okey,
                        stored.as_ref(),
                        v,
                        &mut commit.released,
                    )?;
                    new.version_id = id.clone();
                    commit.version_id = id;
                }
                put_obj(t, &okey, &split(&new)?, has_payload(stored.as_ref()))?;
                emit(t, &draft, &[written(&b, &k, &new)])?;
                commit.previous = stored.map(ObjectRecord::into_head);
                Ok((new, commit))
            })
        })
        .await
    }

    async fn copy(
        &self,
        src: (&str, &str),
        dst: (&str, &str),
        make: RecordFn,
    ) -> Result<(ObjectRecord, Commit)> {
        let (sb, sk, db, dk) = (
            src.0.to_owned(),
            src.1.to_owned(),
            dst.0.to_owned(),
            dst.1.to_owned(),
        );
        let draft = events::current();
        self.blocking(move |m, gate| {
            let _shared = gate.read().expect("bucket gate");
            let (skey, dkey) = (keys::object(&sb, &sk), keys::object(&db, &dk));
            Self::transact(m, |t| {
                has_bucket(m, &db)?;
                let Some(src) = get_obj_full(t, &skey)? else {
                    has_bucket(m, &sb)?;
                    return Err(CatalogError::NoSuchKey);
                };
                let rec = make(&src)?;
                let value = split(&rec)?;
                add_refs(t, &rec.segments, Refs::Shared)?;
                let mut released = vec![];
                let old = get_obj(t, &dkey)?;
                if let Some(old) = &old {
                    drop_refs(t, &old.segments, &mut released)?;
                }
                put_obj(t, &dkey, &value, has_payload(old.as_ref()))?;
                emit(t, &draft, &[written(&db, &dk, &rec)])?;
                Ok((
                    rec,
                    Commit {
                        previous: old.map(ObjectRecord::into_head),
                        released,
                        ..Default::default()
                    },
                ))
            })
        })
        .await
    }

    fn supports_versions(&self) -> bool {
        true
    }

    async fn get_version(
        &self,
        bucket: &str,
        key: &str,
        version_id: &str,
    ) -> Result<Option<ObjectRecord>> {
        let (b, k, id) = (bucket.to_owned(), key.to_owned(), version_id.to_owned());
        self.blocking(move |m, _| {
            has_bucket(m, &b)?;
            let okey = keys::object(&b, &k);
            Self::transact(m, |t| {
                if let Some(cur) = get_obj_full(t, &okey)?
                    && is_version(&cur, &id)
                {
                    return Ok(Some(cur));
                }
                Ok(find_noncurrent(m, t, &b, &k, &id)?.map(|(_, r)| r))
            })
        })
        .await
    }

    async fn newest_version(&self, bucket: &str, key: &str) -> Result<Option<ObjectRecord>> {
        let (b, k) = (bucket.to_owned(), key.to_owned());
        self.blocking(move |m, _| {
            has_bucket(m, &b)?;
            if let Some(cur) = get_obj_stored(m, &keys::object(&b, &k))? {
                return Ok(Some(cur.into_head()));
            }
            match versions_of(m, &b, &k)?.first() {
                Some((_, v)) => Ok(Some(records::decode::<ObjectRecord>(v)?.into_head())),
                None => Ok(None),
            }
        })
        .await
    }

    async fn delete_version(
        &self,
        bucket: &str,
        key: &str,
        version_id: &str,
        check: Option<lode_catalog::RecordCheck>,
    ) -> Result<Commit> {
        let (b, k, id) = (bucket.to_owned(), key.to_owned(), version_id.to_owned());
        let draft = events::current();
        self.blocking(move |m, gate| {
            let _shared = gate.read().expect("bucket gate");
            let okey = keys::object(&b, &k);
            Self::transact(m, |t| {
                has_bucket(m, &b)?;
                let mut released = vec![];
                let (gone_key, removed) = match get_obj(t, &okey)? {
                    Some(cur) if is_version(&cur, &id) => {
                        if let Some(c) = &check {
                            c(&cur)?;
                        }
                        drop_refs(t, &cur.segments, &mut released)?;
                        delete_obj(t, &okey, &cur)?;
                        (vec![], cur)
                    }
                    _ => match find_noncurrent(m, t, &b, &k, &id)? {
                        Some((vkey, rec)) => {
                            if let Some(c) = &check {
                                c(&rec)?;
                            }
                            drop_refs(t, &rec.segments, &mut released)?;
                            t.delete(Table::Versions, &vkey)?;
                            (vkey, rec)
                        }
                        None => return Ok(Commit::default()),
                    },
                };
                promote_newest(m, t, &b, &k, &okey, &gone_key)?;
                let what = What::Removed {
                    version_id: Some(removed.version_id.as_deref().unwrap_or("null")),
                };
                emit(t, &draft, &[change(&b, &k, what)])?;
                Ok(Commit {
                    version_id: removed.version_id.clone(),
                    delete_marker: removed.delete_marker,
                    previous: Some(removed.into_head()),
                    released,
                })
            })
        })
        .await
    }

    async fn update_version(
        &self,
        bucket: &str,
        key: &str,
        version_id: &str,
        f: RecordFn,
    ) -> Result<ObjectRecord> {
        let (b, k, id) = (bucket.to_owned(), key.to_owned(), version_id.to_owned());
        let draft = events::current();
        self.blocking(move |m, _| {
            has_bucket(m, &b)?;
            let okey = keys::object(&b, &k);
            Self::transact(m, |t| {
                if let Some(cur) = get_obj(t, &okey)?
                    && is_version(&cur, &id)
                {
                    let new = rewrite_current(t, &okey, cur, &f)?;
                    emit(t, &draft, &[written(&b, &k, &new)])?;
                    return Ok(new);
                }
                let Some((vkey, rec)) = find_noncurrent(m, t, &b, &k, &id)? else {
                    return Err(CatalogError::NoSuchKey);
                };
                if rec.delete_marker {
                    return Err(CatalogError::NoSuchKey);
                }
                let new = f(&rec)?;
                if new.segments != rec.segments {
                    return Err(CatalogError::Corrupt(
                        "update may not change an object's content".into(),
                    ));
                }
                t.put(Table::Versions, &vkey, &records::encode(&new))?;
                emit(t, &draft, &[written(&b, &k, &new)])?;
                Ok(new)
            })
        })
        .await
    }

    async fn list_versions(&self, bucket: &str, q: &VersionQuery) -> Result<VersionPage> {
        let (b, q) = (bucket.to_owned(), q.clone());
        self.blocking(move |m, _| {
            has_bucket(m, &b)?;
            list_versions_page(m, &b, &q)
        })
        .await
    }

    async fn update(&self, bucket: &str, key: &str, f: RecordFn) -> Result<ObjectRecord> {
        let (b, k) = (bucket.to_owned(), key.to_owned());
        let draft = events::current();
        self.blocking(move |m, _| {
            let okey = keys::object(&b, &k);
            Self::transact(m, |t| {
                let Some(old) = get_obj(t, &okey)? else {
                    return Err(CatalogError::NoSuchKey);
                };
                let new = rewrite_current(t, &okey, old, &f)?;
                emit(t, &draft, &[written(&b, &k, &new)])?;
                Ok(new)
            })
        })
        .await
    }

    async fn list(&self, bucket: &str, q: &ListQuery<'_>) -> Result<ListPage> {
        self.listing(bucket, q, |m, b, q| {
            Ok(head_page(crate::list::list_objects(m, b, q)?))
        })
        .await
    }

    async fn list_briefs(&self, bucket: &str, q: &ListQuery<'_>) -> Result<(ListPage, Vec<Brief>)> {
        self.listing(bucket, q, |m, b, q| {
            let mut briefs = vec![];
            let page = crate::list::list_briefs(m, b, q, &mut |k, (s, c, o)| {
                briefs.push(Brief::new(k, &s, c, o))
            })?;
            Ok((page, briefs))
        })
        .await
    }

    async fn rename(
        &self,
        bucket: &str,
        from: &str,
        to: &str,
        check: RenameCheck,
        v: Versioning,
    ) -> Result<Commit> {
        let (b, f, to) = (bucket.to_owned(), from.to_owned(), to.to_owned());
        let draft = events::current();
        self.blocking(move |m, gate| {
            let _shared = gate.read().expect("bucket gate");
            let (fk, tk) = (keys::object(&b, &f), keys::object(&b, &to));
            Self::transact(m, |t| {
                let Some(src) = get_obj(t, &fk)? else {
                    return Err(CatalogError::NoSuchKey);
                };
                if fk == tk {
                    // Onto itself: nothing moves (POSIX), once the check passes.
                    check(&src, Some(&src))?;
                    return Ok(Commit::default());
                }
                let mut released = vec![];
                let old = get_obj(t, &tk)?;
                check(&src, old.as_ref())?;
                // The target's current record goes (unversioned) or is retired as a put
                // retires it; the moved record is the target's new version.
                let (_, version_id) =
                    retire_current(m, t, &b, &to, &tk, old.as_ref(), v, &mut released)?;
                let mut moved = full_record(t, &fk, src.clone())?;
                if v != Versioning::Off {
                    // A new version of `to`, made now (lifecycle times the retired one from it).
                    moved.version_id = version_id.clone();
                    moved.last_modified_ms = now_ms();
                }
                put_obj(t, &tk, &split(&moved)?, has_payload(old.as_ref()))?;
                delete_obj(t, &fk, &src)?;
                let gone = if v != Versioning::Off {
                    // The source gets a delete marker (its current version moved away).
                    let (seq, id) = retire_current(m, t, &b, &f, &fk, None, v, &mut released)?;
                    let vkey = keys::version(&b, &f, &version_suffix(seq, id.as_deref()));
                    t.put(
                        Table::Versions,
                        &vkey,
                        &records::encode(&delete_marker(id.clone())),
                    )?;
                    Some(id)
                } else {
                    None
                };
                let removed = match &gone {
                    Some(id) => What::MarkerCreated {
                        version_id: id.as_deref(),
                    },
                    None => What::Removed { version_id: None },
                };
                emit(
                    t,
                    &draft,
                    &[change(&b, &f, removed), written(&b, &to, &moved)],
                )?;
                Ok(Commit {
                    previous: old.map(ObjectRecord::into_head),
                    released,
                    version_id,
                    delete_marker: false,
                })
            })
        })
        .await
    }

    async fn rename_prefix(
        &self,
        bucket: &str,
        from: &str,
        to: &str,
        max_key_len: usize,
    ) -> Result<(usize, Vec<ChunkLoc>)> {
        let (b, f, to) = (bucket.to_owned(), from.to_owned(), to.to_owned());
        let draft = events::current();
        self.blocking(move |m, gate| {
            let _shared = gate.read().expect("bucket gate");
            let base = keys::bucket_prefix(&b).len();
            let range = |p: &str| {
                let s = keys::object(&b, p);
                let e = keys::prefix_successor(&s);
                (s, e)
            };
            let (ts, te) = range(&to);
            let (fs, fe) = range(&f);
            Self::transact(m, |t| {
                let mut released = vec![];
                for (k, _) in m.scan(Table::Objects, &ts, te.as_deref(), 2)? {
                    if k[base..] != *to.as_bytes() {
                        return Err(CatalogError::DirectoryNotEmpty);
                    }
                    if let Some(old) = get_obj(t, &k)? {
                        drop_refs(t, &old.segments, &mut released)?;
                        delete_obj(t, &k, &old)?;
                    }
                }
                let moved = m.scan(Table::Objects, &fs, fe.as_deref(), usize::MAX)?;
                if moved.is_empty() {
                    return Err(CatalogError::NoSuchKey);
                }
                for (k, _) in &moved {
                    let suffix = &k[fs.len()..];
                    if to.len() + suffix.len() > max_key_len {
                        return Err(CatalogError::KeyTooLong);
                    }
                    // Tracked read: a concurrent write to this key aborts the rename.
                    let Some(v) = t.get_for_update(Table::Objects, k)? else {
                        continue;
                    };
                    let mut nk = ts.clone();
                    nk.extend_from_slice(suffix);
                    // The value moves as stored; its payload, if any, with it.
                    t.put(Table::Objects, &nk, &v)?;
                    t.delete(Table::Objects, k)?;
                    let rec = records::decode::<ObjectRecord>(&v)?;
                    if draft.is_some() {
                        let old = String::from_utf8_lossy(&k[base..]).into_owned();
                        let new = String::from_utf8_lossy(&nk[base..]).into_owned();
                        let gone = What::Removed { version_id: None };
                        emit(
                            t,
                            &draft,
                            &[change(&b, &old, gone), written(&b, &new, &rec)],
                        )?;
                    }
                    if rec.has_detached() {
                        let Some(p) = t.get_for_update(Table::Inline, k)? else {
                            return Err(CatalogError::Corrupt(
                                "an object record's inline payload is missing".into(),
                            ));
                        };
                        t.put(Table::Inline, &nk, &p)?;
                        t.delete(Table::Inline, k)?;
                    }
                }
                Ok((moved.len(), released))
            })
        })
        .await
    }

    async fn remove_dir(&self, bucket: &str, prefix: &str) -> Result<Vec<ChunkLoc>> {
        let (b, p) = (bucket.to_owned(), prefix.to_owned());
        let draft = events::current();
        self.blocking(move |m, _| {
            let s = keys::object(&b, &p);
            let e = keys::prefix_successor(&s);
            Self::transact(m, |t| {
                let under = m.scan(Table::Objects, &s, e.as_deref(), 2)?;
                if under.is_empty() {
                    return Err(CatalogError::NoSuchKey);
                }
                if under.iter().any(|(k, _)| *k != s) {
                    return Err(CatalogError::DirectoryNotEmpty);
                }
                let mut released = vec![];
                if let Some(old) = get_obj(t, &s)? {
                    drop_refs(t, &old.segments, &mut released)?;
                    delete_obj(t, &s, &old)?;
                    let what = What::Removed { version_id: None };
                    emit(t, &draft, &[change(&b, &p, what)])?;
                }
                Ok(released)
            })
        })
        .await
    }

    async fn create_upload(
        &self,
        bucket: &str,
        key: &str,
        id: &str,
        rec: UploadRecord,
    ) -> Result<()> {
        let (b, k, i) = (bucket.to_owned(), key.to_owned(), id.to_owned());
        self.blocking(move |m, gate| {
            let _shared = gate.read().expect("bucket gate");
            Self::transact(m, |t| {
                has_bucket(m, &b)?;
                t.put(
                    Table::Uploads,
                    &keys::upload(&b, &k, &i),
                    &records::encode(&rec),
                )?;
                Ok(())
            })
        })
        .await
    }

    async fn upload(&self, bucket: &str, key: &str, id: &str) -> Result<UploadRecord> {
        let uk = keys::upload(bucket, key, id);
        let b = bucket.to_owned();
        self.blocking(move |m, _| match m.get(Table::Uploads, &uk)? {
            Some(v) => Ok(records::decode(&v)?),
            None => has_bucket(m, &b).and(Err(CatalogError::NoSuchUpload)),
        })
        .await
    }

    async fn put_part(
        &self,
        bucket: &str,
        key: &str,
        id: &str,
        n: u32,
        part: PartRecord,
    ) -> Result<Vec<ChunkLoc>> {
        let uk = keys::upload(bucket, key, id);
        let pk = keys::part(id, n);
        self.blocking(move |m, _| {
            let value = records::encode(&part);
            Self::transact(m, |t| {
                let Some(up) = t.get_for_update(Table::Uploads, &uk)? else {
                    return Err(CatalogError::NoSuchUpload);
                };
                // Rewrite the upload record: Complete and Abort read it for update, so a part
                // committed after their scan of the parts makes them retry and see it
                // (otherwise the part would be orphaned, its chunks leaked).
                t.put(Table::Uploads, &uk, &up)?;
                add_refs(t, &part.segments, Refs::Fresh)?;
                let mut released = vec![];
                if let Some(old) = get_rec::<PartRecord>(t, Table::Parts, &pk)? {
                    drop_refs(t, &old.segments, &mut released)?;
                }
                t.put(Table::Parts, &pk, &value)?;
                Ok(released)
            })
        })
        .await
    }

    async fn list_parts(
        &self,
        _bucket: &str,
        _key: &str,
        id: &str,
        after: u32,
        max: usize,
    ) -> Result<(Vec<(u32, PartRecord)>, bool)> {
        let start = keys::part(id, after.saturating_add(1));
        let end = keys::prefix_successor(&keys::part_prefix(id));
        let rows = self
            .blocking(move |m, _| {
                Ok(m.scan(Table::Parts, &start, end.as_deref(), max.saturating_add(1))?)
            })
            .await?;
        let truncated = rows.len() > max;
        let parts = rows
            .into_iter()
            .take(max)
            .map(|(k, v)| Ok((part_number(&k)?, records::decode(&v)?)))
            .collect::<Result<Vec<_>>>()?;
        Ok((parts, truncated))
    }

    async fn list_uploads(&self, bucket: &str, q: &UploadQuery) -> Result<UploadPage> {
        let b = bucket.to_owned();
        let q = q.clone();
        self.blocking(move |m, _| {
            has_bucket(m, &b)?;
            let prefix = q.prefix;
            let base = keys::bucket_prefix(&b);
            let mut full = base.clone();
            full.extend_from_slice(prefix.as_bytes());
            let mut c = m.cursor(Table::Uploads)?;
            let start = match &q.key_marker {
                Some(km) if km.as_str() >= prefix.as_str() => keys::object(&b, km),
                _ => full.clone(),
            };
            c.seek(&start);
            let mut page = UploadPage::default();
            let mut fold = PageFold::new(
                &prefix,
                q.delimiter.as_deref(),
                q.key_marker.as_deref(),
                q.max,
            );
            while let Some((k, v)) = c.current() {
                if !k.starts_with(&full) {
                    break;
                }
                let Some((key, id)) = keys::split_upload(&k[base.len()..]) else {
                    c.next();
                    continue;
                };
                let key = String::from_utf8_lossy(key).into_owned();
                let id = String::from_utf8_lossy(id).into_owned();
                let skip = match (&q.key_marker, &q.id_marker) {
                    (Some(km), Some(im)) => key < *km || (key == *km && id <= *im),
                    (Some(km), None) => key <= *km,
                    _ => false,
                };
                if skip {
                    c.next();
                    continue;
                }
                match fold.offer(&key) {
                    Step::Take => {
                        page.last = Some((key.clone(), id.clone()));
                        page.uploads.push((key, id, records::decode(v)?));
                        c.next();
                    }
                    Step::Skip => c.next(),
                    Step::Prefix { listed } => {
                        let cp = fold.skipping().expect("a prefix is being skipped");
                        if listed {
                            page.last = Some((cp.to_owned(), String::new()));
                        }
                        match keys::prefix_successor(cp.as_bytes()) {
                            Some(next) => c.seek(&[&base[..], &next].concat()),
                            None => break,
                        }
                    }
                    Step::Full => break,
                }
            }
            c.status()?;
            (page.prefixes, page.truncated) = fold.finish();
            Ok(page)
        })
        .await
    }

    async fn abort(&self, bucket: &str, key: &str, id: &str) -> Result<Aborted> {
        let uk = keys::upload(bucket, key, id);
        let tomb_key = keys::aborted(id);
        let (b, k, id) = (bucket.to_owned(), key.to_owned(), id.to_owned());
        self.blocking(move |m, _| {
            let tomb = records::encode(&AbortedUpload {
                bucket: b.clone(),
                key: k.clone(),
                aborted_ms: now_ms(),
            });
            let out = Self::transact(m, |t| {
                if t.get_for_update(Table::Uploads, &uk)?.is_none() {
                    has_bucket(m, &b)?;
                    return match get_rec::<AbortedUpload>(t, Table::System, &tomb_key)? {
                        Some(a) if a.bucket == b && a.key == k => Ok(Aborted::Before),
                        _ => Err(CatalogError::NoSuchUpload),
                    };
                }
                let mut freed = vec![];
                drop_upload(m, t, &uk, &id, &mut freed)?;
                t.put(Table::System, &tomb_key, &tomb)?;
                Ok(Aborted::Now(freed))
            })?;
            if matches!(out, Aborted::Now(_))
                && let Err(e) = prune_aborted(m)
            {
                tracing::warn!(error = %e, "pruning aborted-upload tombstones failed");
            }
            Ok(out)
        })
        .await
    }

    async fn complete(
        &self,
        bucket: &str,
        key: &str,
        id: &str,
        cond: &Cond,
        f: CompleteFn,
    ) -> Result<(ObjectRecord, Commit)> {
        let (b, k, id, cond) = (
            bucket.to_owned(),
            key.to_owned(),
            id.to_owned(),
            cond.clone(),
        );
        let draft = events::current();
        self.blocking(move |m, gate| {
            let _shared = gate.read().expect("bucket gate");
            let uk = keys::upload(&b, &k, &id);
            let okey = keys::object(&b, &k);
            let prefix = keys::part_prefix(&id);
            let end = keys::prefix_successor(&prefix);
            Self::transact(m, |t| {
                has_bucket(m, &b)?;
                let Some(up) = get_rec::<UploadRecord>(t, Table::Uploads, &uk)? else {
                    return Err(CatalogError::NoSuchUpload);
                };
                let mut parts: BTreeMap<u32, PartRecord> = BTreeMap::new();
                for (pk, _) in m.scan(Table::Parts, &prefix, end.as_deref(), usize::MAX)? {
                    // Read for update: a concurrent re-upload of the part conflicts.
                    if let Some(p) = get_rec::<PartRecord>(t, Table::Parts, &pk)? {
                        parts.insert(part_number(&pk)?, p);
                    }
                }
                let old = get_obj(t, &okey)?;
                let had_payload = has_payload(old.as_ref());
                let old = old.map(ObjectRecord::into_head);
                cond.check(old.as_ref())?;
                let done = f(UploadState {
                    upload: &up,
                    parts: &parts,
                    current: old.as_ref(),
                })?;
                let value = split(&done.record)?;
                // The used parts' references move to the object; the others are released.
                let mut released = vec![];
                for p in done.unused(&parts) {
                    drop_refs(t, &p.segments, &mut released)?;
                }
                for n in parts.keys() {
                    t.delete(Table::Parts, &keys::part(&id, *n))?;
                }
                let stored = get_obj(t, &okey)?;
                let (_, version_id) = retire_current(
                    m,
                    t,
                    &b,
                    &k,
                    &okey,
                    stored.as_ref(),
                    cond.versioning,
                    &mut released,
                )?;
                t.delete(Table::Uploads, &uk)?;
                let mut record = done.record;
                if version_id.is_some() {
                    record.version_id = version_id.clone();
                    put_obj(t, &okey, &split(&record)?, had_payload)?;
                } else {
                    put_obj(t, &okey, &value, had_payload)?;
                }
                emit(t, &draft, &[written(&b, &k, &record)])?;
                Ok((
                    record,
                    Commit {
                        previous: old,
                        released,
                        version_id,
                        delete_marker: false,
                    },
                ))
            })
        })
        .await
    }

    fn bucket_blocking(&self, name: &str) -> Result<Option<BucketRecord>> {
        Ok(self
            .meta
            .get(Table::Buckets, name.as_bytes())?
            .map(|v| records::decode(&v))
            .transpose()?)
    }

    fn get_blocking(&self, bucket: &str, key: &str) -> Result<Option<ObjectRecord>> {
        get_full(&*self.meta, &keys::object(bucket, key))
    }

    fn allow_blocking_on_this_thread(&self) {
        INLINE_BLOCKING.with(|c| c.set(true));
    }

    fn head_blocking(&self, bucket: &str, key: &str) -> Result<Option<ObjectRecord>> {
        Ok(self
            .meta
            .get(Table::Objects, &keys::object(bucket, key))?
            .map(|v| records::decode_head(&v))
            .transpose()?)
    }

    fn keys_under_blocking(&self, bucket: &str, prefix: &str, limit: usize) -> Result<Vec<String>> {
        let start = keys::object(bucket, prefix);
        let end = keys::prefix_successor(&start);
        let base = keys::bucket_prefix(bucket).len();
        Ok(self
            .meta
            .scan(Table::Objects, &start, end.as_deref(), limit)?
            .into_iter()
            .map(|(k, _)| String::from_utf8_lossy(&k[base..]).into_owned())
            .collect())
    }

    fn list_blocking(&self, bucket: &str, q: &ListQuery<'_>) -> Result<ListPage> {
        Ok(head_page(crate::list::list_objects(
            &*self.meta,
            bucket,
            q,
        )?))
    }

    fn list_summaries_blocking(
        &self,
        bucket: &str,
        q: &ListQuery<'_>,
        f: &mut dyn FnMut(&str, &ObjectSummary<'_>),
    ) -> Result<ListPage> {
        crate::list::list_summaries(&*self.meta, bucket, q, f)
    }

    async fn sys_get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let k = key.to_vec();
        self.blocking(move |m, _| Ok(m.get(Table::System, &k)?))
            .await
    }

    async fn sys_scan(&self, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let p = prefix.to_vec();
        self.blocking(move |m, _| {
            let end = keys::prefix_successor(&p);
            Ok(m.scan(Table::System, &p, end.as_deref(), usize::MAX)?)
        })
        .await
    }

    async fn sys_update(&self, key: &[u8], f: SysFn) -> Result<()> {
        let k = key.to_vec();
        self.blocking(move |m, _| {
            Self::transact(m, |t| {
                let cur = t.get_for_update(Table::System, &k)?;
                match f(cur.as_deref())? {
                    Some(v) => t.put(Table::System, &k, &v)?,
                    None => t.delete(Table::System, &k)?,
                }
                Ok(())
            })
        })
        .await
    }

    fn supports_events(&self) -> bool {
        true
    }

    async fn outbox_add(&self, dest: &str, body: Vec<u8>) -> Result<u64> {
        let seq = events::next_seq();
        let k = outbox_key(dest, seq);
        self.blocking(move |m, _| Self::transact(m, |t| Ok(t.put(Table::System, &k, &body)?)))
            .await?;
        Ok(seq)
    }

    async fn outbox_scan(
        &self,
        dest: &str,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<Outboxed>> {
        let p = outbox_prefix(dest);
        let start = match after {
            Some(a) if a < u64::MAX => outbox_key(dest, a + 1),
            Some(_) => return Ok(vec![]),
            None => p.clone(),
        };
        self.blocking(move |m, _| {
            let end = keys::prefix_successor(&p);
            let found = m.scan(Table::System, &start, end.as_deref(), limit)?;
            let mut out = Vec::with_capacity(found.len());
            for (k, body) in found {
                let seq = k[p.len()..]
                    .try_into()
                    .map(u64::from_be_bytes)
                    .map_err(|_| CatalogError::Corrupt("an outbox key".into()))?;
                events::seq_at_least(seq);
                out.push(Outboxed { seq, body });
            }
            Ok(out)
        })
        .await
    }

    async fn outbox_remove(&self, dest: &str, seqs: &[u64]) -> Result<()> {
        let ks: Vec<Vec<u8>> = seqs.iter().map(|s| outbox_key(dest, *s)).collect();
        self.blocking(move |m, _| {
            Self::transact(m, |t| {
                for k in &ks {
                    t.delete(Table::System, k)?;
                }
                Ok(())
            })
        })
        .await
    }

    async fn outbox_len(&self, dest: &str) -> Result<u64> {
        let p = outbox_prefix(dest);
        self.blocking(move |m, _| {
            let end = keys::prefix_successor(&p);
            let mut c = m.cursor(Table::System)?;
            c.seek(&p);
            let mut n = 0u64;
            while let Some((k, _)) = c.current() {
                if end.as_deref().is_some_and(|e| k >= e) {
                    break;
                }
                n += 1;
                c.next();
            }
            c.status()?;
            Ok(n)
        })
        .await
    }
}
