//! Versioned buckets on RADOS. A key's versions live beside it in its partition, so every
//! versioned commit is still one guarded op on one object:
//! * `o<key>` (and `d<key>`) is the current version, as in an unversioned bucket: reads,
//!   HEADs and listings of a versioned bucket cost what they cost in any other;
//! * `v<key>␁␁<suffix>` is a noncurrent version or a delete marker, stored whole (inline
//!   bytes inside). The suffix is the version id (`null` versions: the inverted sequence
//!   number and `null`), so a key's versions sort newest first;
//! * `h<key>` is the key's version head: the highest sequence number given to one of its
//!   versions (new ids are above it) and the suffix of its noncurrent `null` version, if any.
//!
//! Every versioned commit of a key (put, delete, Complete, removal of a version) rewrites
//! `h<key>` with a higher sequence number and is guarded on its value (`omap_cmp`) and on
//! `o<key>`'s: commits of one key are serialized, commits of different keys never conflict.
//! A key's `null` version is found through its head, so a Suspended write reads one entry,
//! not the key's versions.

use super::*;
use lode_catalog::{
    VersionEntry, VersionPage, VersionQuery, Versioning, delete_marker, is_version, new_version_id,
    version_seq, version_suffix,
};

/// The key of a noncurrent version or delete marker of `key`.
fn vkey(key: &str, suffix: &str) -> Vec<u8> {
    tagged(b'v', &[&esc(key.as_bytes()), suffix.as_bytes()])
}

/// The prefix of every version entry of `key`.
fn vprefix(key: &str) -> Vec<u8> {
    let mut k = tagged(b'v', &[&esc(key.as_bytes())]);
    k.extend_from_slice(&SEP);
    k
}

/// The key of `key`'s version head.
fn hkey(key: &str) -> Vec<u8> {
    tagged(b'h', &[&esc(key.as_bytes())])
}

fn corrupt(what: &str) -> CatalogError {
    CatalogError::Corrupt(what.into())
}

/// A key's version head (`h<key>`): `floor` as 16 hex digits, then the `null` suffix.
#[derive(Debug, Default, Clone, PartialEq)]
struct VHead {
    /// The highest sequence number given to a version of the key.
    floor: u64,
    /// The suffix of its noncurrent `null` version (or `null` delete marker).
    null: Option<String>,
}

impl VHead {
    fn parse(raw: Option<&[u8]>) -> Result<Self> {
        let Some(raw) = raw else {
            return Ok(Self::default());
        };
        let s = std::str::from_utf8(raw).map_err(|_| corrupt("bad version head"))?;
        let floor = s
            .get(..16)
            .and_then(|h| u64::from_str_radix(h, 16).ok())
            .ok_or_else(|| corrupt("bad version head"))?;
        Ok(Self {
            floor,
            null: s.get(16..).filter(|n| !n.is_empty()).map(str::to_owned),
        })
    }

    fn encode(&self) -> Vec<u8> {
        format!("{:016x}{}", self.floor, self.null.as_deref().unwrap_or("")).into_bytes()
    }
}

/// What a versioned commit writes besides its new current record or delete marker.
#[derive(Default)]
struct Retired {
    set: Vec<(Vec<u8>, Vec<u8>)>,
    rm: Vec<Vec<u8>>,
    released: Vec<ChunkLoc>,
    head: VHead,
    /// The new version's sequence number and id (`None`: the `null` version).
    seq: u64,
    version_id: Option<String>,
}

/// Under `v`, retires the current version `old` (whole) of `key` before a new version or a
/// delete marker takes its place (as the KV catalog's `retire_current`): kept as a noncurrent
/// version, unless the bucket is Suspended and it is the `null` one, which is released; in
/// Suspended the noncurrent `null` version (`null`, read through `head`) goes too.
fn retire(
    key: &str,
    old: Option<&ObjectRecord>,
    head: &VHead,
    null: Option<&ObjectRecord>,
    v: Versioning,
) -> Result<Retired> {
    let mut r = Retired {
        head: head.clone(),
        ..Default::default()
    };
    let mut floor = head.floor;
    if let Some(old) = old {
        let seq = version_seq(old, None).max(floor.saturating_add(1));
        floor = floor.max(seq);
        if v == Versioning::Enabled || old.version_id.is_some() {
            let suffix = version_suffix(seq, old.version_id.as_deref());
            if old.version_id.is_none() {
                r.head.null = Some(suffix.clone());
            }
            r.set.push((vkey(key, &suffix), records::encode(old)));
        } else {
            r.released.extend(chunks_of(&old.segments));
        }
    }
    if v == Versioning::Suspended
        && let Some(s) = &head.null
    {
        r.rm.push(vkey(key, s));
        if let Some(n) = null {
            r.released.extend(chunks_of(&n.segments));
        }
        r.head.null = None;
    }
    let (seq, id) = new_version_id(floor);
    r.head.floor = seq;
    r.seq = seq;
    r.version_id = (v == Versioning::Enabled).then_some(id);
    Ok(r)
}

/// The entry of `key`'s noncurrent `null` version named by `head` (`Some(None)`: none), read
/// from the partition of `at` (`Ok(None)` when that partition changed its range or state
/// since: read again).
async fn read_null(
    inner: &Inner,
    bucket: &str,
    key: &str,
    head: &VHead,
    at: &Snapshot,
) -> Result<Option<Option<(Vec<u8>, Bytes)>>> {
    let Some(s) = &head.null else {
        return Ok(Some(None));
    };
    let vk = vkey(key, s);
    let r = inner
        .read_keys(bucket, &pos(key), std::slice::from_ref(&vk))
        .await?;
    if r.oid != at.oid || r.epoch != at.epoch {
        return Ok(None);
    }
    Ok(Some(find(&r.vals, &vk).map(|v| (vk, v))))
}

/// Sets `rm` minus the keys `set` writes (a key both removed and set is set).
fn removals(rm: Vec<Vec<u8>>, set: &[(Vec<u8>, Vec<u8>)]) -> Vec<Vec<u8>> {
    rm.into_iter()
        .filter(|k| !set.iter().any(|(s, _)| s == k))
        .collect()
}

impl Inner {
    /// A put (`new`) or a delete (`None`: a delete marker) of `bucket/key` in a versioned
    /// bucket (`cond.versioning` not `Off`): one op that retires the current version, writes
    /// the new one and the key's head, guarded on `o<key>` and `h<key>`.
    pub(crate) async fn commit_versioned(
        &self,
        bucket: &str,
        key: &str,
        cond: &Cond,
        new: Option<&ObjectRecord>,
    ) -> Result<Commit> {
        let (k, d, h) = (okey(key), dkey(key), hkey(key));
        for _ in 0..RETRIES {
            let s = self
                .read_keys(bucket, &pos(key), &[k.clone(), d.clone(), h.clone()])
                .await?;
            let cur_raw = find(&s.vals, &k);
            let h_raw = find(&s.vals, &h);
            let stored: Option<ObjectRecord> = cur_raw.as_deref().map(decode).transpose()?;
            let had_payload = has_payload(stored.as_ref());
            let cur = stored
                .map(|r| join_record(r, find(&s.vals, &d).as_deref()))
                .transpose()?;
            let previous = cur.clone().map(ObjectRecord::into_head);
            cond.check(previous.as_ref())?;
            let head = VHead::parse(h_raw.as_deref())?;
            let null = if cond.versioning == Versioning::Suspended {
                match read_null(self, bucket, key, &head, &s).await? {
                    Some(n) => n,
                    None => continue,
                }
            } else {
                None
            };
            let null_rec: Option<ObjectRecord> =
                null.as_ref().map(|(_, v)| decode(v)).transpose()?;
            let mut r = retire(key, cur.as_ref(), &head, null_rec.as_ref(), cond.versioning)?;
            let mut set = std::mem::take(&mut r.set);
            let mut rm = std::mem::take(&mut r.rm);
            match new {
                Some(rec) => {
                    let mut rec = rec.clone();
                    rec.version_id = r.version_id.clone();
                    let (value, payload) = split_record(&rec)?;
                    set.push((k.clone(), value));
                    match payload {
                        Some(p) => set.push((d.clone(), p)),
                        None if had_payload => rm.push(d.clone()),
                        None => {}
                    }
                }
                None => {
                    if cur.is_some() {
                        rm.push(k.clone());
                        if had_payload {
                            rm.push(d.clone());
                        }
                    }
                    let suffix = version_suffix(r.seq, r.version_id.as_deref());
                    if r.version_id.is_none() {
                        r.head.null = Some(suffix.clone());
                    }
                    let marker = delete_marker(r.version_id.clone());
                    set.push((vkey(key, &suffix), records::encode(&marker)));
                }
            }
            set.push((h.clone(), r.head.encode()));
            let rm = removals(rm, &set);
            let mut op = Self::guarded(&s, &set, &rm)
                .omap_cmp(&k, CmpOp::Eq, cur_raw.as_deref().unwrap_or(b""))
                .omap_cmp(&h, CmpOp::Eq, h_raw.as_deref().unwrap_or(b""));
            if let Some((nk, nv)) = &null {
                op = op.omap_cmp(nk, CmpOp::Eq, nv);
            }
            if self.try_write(&s, op).await? {
                // Every new version counts toward the partition's split.
                self.note_insert(bucket, &s.oid, &pos(key));
                self.committed(bucket, key, new.is_none());
                return Ok(Commit {
                    previous,
                    released: r.released,
                    version_id: r.version_id,
                    delete_marker: new.is_none(),
                });
            }
        }
        Err(CatalogError::Contended)
    }

    /// The keys a versioned Complete reads beside the upload's: the current payload and the
    /// key's head.
    pub(crate) fn complete_reads(key: &str) -> [Vec<u8>; 2] {
        [dkey(key), hkey(key)]
    }

    /// For a Complete in a versioned bucket, read at `s` (`vals`: what it read of the key,
    /// [`Inner::complete_reads`] included): what the op writes besides the new record (which
    /// gets `Retired::version_id`), and what it releases. `Ok(None)`: read again.
    pub(crate) async fn complete_versioned(
        &self,
        bucket: &str,
        key: &str,
        s: &Snapshot,
        vals: &[(Vec<u8>, Bytes)],
        v: Versioning,
    ) -> Result<Option<(CompleteExtra, Option<String>)>> {
        let (k, d, h) = (okey(key), dkey(key), hkey(key));
        let cur = find(vals, &k)
            .as_deref()
            .map(decode)
            .transpose()?
            .map(|r| join_record(r, find(vals, &d).as_deref()))
            .transpose()?;
        let head = VHead::parse(find(vals, &h).as_deref())?;
        let null = if v == Versioning::Suspended {
            match read_null(self, bucket, key, &head, s).await? {
                Some(n) => n,
                None => return Ok(None),
            }
        } else {
            None
        };
        let null_rec: Option<ObjectRecord> = null.as_ref().map(|(_, v)| decode(v)).transpose()?;
        let mut r = retire(key, cur.as_ref(), &head, null_rec.as_ref(), v)?;
        r.set.push((h, r.head.encode()));
        Ok(Some((
            CompleteExtra {
                set: r.set,
                rm: r.rm,
                released: r.released,
            },
            r.version_id,
        )))
    }

    pub(crate) async fn get_version(
        &self,
        bucket: &str,
        key: &str,
        id: &str,
    ) -> Result<Option<ObjectRecord>> {
        let (k, d, h) = (okey(key), dkey(key), hkey(key));
        let mut keys = vec![k.clone(), d.clone(), h.clone()];
        if id != "null" {
            keys.push(vkey(key, id));
        }
        for _ in 0..RETRIES {
            let s = self.read_keys(bucket, &pos(key), &keys).await?;
            if let Some(raw) = find(&s.vals, &k) {
                let rec: ObjectRecord = decode(&raw)?;
                if is_version(&rec, id) {
                    return join_record(rec, find(&s.vals, &d).as_deref()).map(Some);
                }
            }
            if id != "null" {
                return find(&s.vals, &vkey(key, id))
                    .map(|v| decode(&v))
                    .transpose();
            }
            let head = VHead::parse(find(&s.vals, &h).as_deref())?;
            match read_null(self, bucket, key, &head, &s).await? {
                Some(n) => return n.map(|(_, v)| decode(&v)).transpose(),
                None => continue,
            }
        }
        Err(CatalogError::Contended)
    }

    pub(crate) async fn newest_version(
        &self,
        bucket: &str,
        key: &str,
    ) -> Result<Option<ObjectRecord>> {
        let (k, vp) = (okey(key), vprefix(key));
        let l = self
            .locate(bucket, &pos(key), || {
                ReadOp::new()
                    .omap_get_vals_by_keys(std::slice::from_ref(&k))
                    .omap_get_vals(b"", &vp, 1)
            })
            .await?;
        if let Some((_, v)) = l.r.omap_vals_by_keys.unwrap_or_default().first() {
            return Ok(Some(records::decode_head(v)?));
        }
        match l.r.omap_vals.unwrap_or_default().entries.first() {
            Some((_, v)) => Ok(Some(decode::<ObjectRecord>(v)?.into_head())),
            None => Ok(None),
        }
    }

    pub(crate) async fn delete_version(&self, bucket: &str, key: &str, id: &str) -> Result<Commit> {
        let (k, d, h, vp) = (okey(key), dkey(key), hkey(key), vprefix(key));
        let mut keys = vec![k.clone(), d.clone(), h.clone()];
        if id != "null" {
            keys.push(vkey(key, id));
        }
        for _ in 0..RETRIES {
            // The key's current record, head, the version (by id) and its two newest versions
            // (to promote one), at one version of the partition.
            let l = self
                .locate(bucket, &pos(key), || {
                    ReadOp::new()
                        .omap_get_vals_by_keys(&keys)
                        .omap_get_vals(b"", &vp, 2)
                })
                .await?;
            let newest = l.r.omap_vals.clone().unwrap_or_default();
            let s = Snapshot {
                version: l.r.version,
                epoch: l.part.epoch.clone(),
                vals: l.r.omap_vals_by_keys.clone().unwrap_or_default(),
                oid: l.oid,
                part: l.part,
            };
            let cur_raw = find(&s.vals, &k);
            let h_raw = find(&s.vals, &h);
            let mut head = VHead::parse(h_raw.as_deref())?;
            let cur: Option<ObjectRecord> = cur_raw.as_deref().map(decode).transpose()?;
            let mut set: Vec<(Vec<u8>, Vec<u8>)> = vec![];
            let mut rm: Vec<Vec<u8>> = vec![];
            let mut released = vec![];
            // Version entries the op depends on, with the values read.
            let mut cmps: Vec<(Vec<u8>, Bytes)> = vec![];
            let (removed, gone_entry) = match &cur {
                Some(c) if is_version(c, id) => {
                    rm.push(k.clone());
                    if c.has_detached() {
                        rm.push(d.clone());
                    }
                    released.extend(chunks_of(&c.segments));
                    (c.clone(), None)
                }
                _ => {
                    let entry = if id == "null" {
                        match read_null(self, bucket, key, &head, &s).await? {
                            Some(n) => n,
                            None => continue,
                        }
                    } else {
                        let vk = vkey(key, id);
                        find(&s.vals, &vk).map(|v| (vk, v))
                    };
                    let Some((vk, raw)) = entry else {
                        return Ok(Commit::default());
                    };
                    let rec: ObjectRecord = decode(&raw)?;
                    released.extend(chunks_of(&rec.segments));
                    if head.null.as_ref().is_some_and(|n| vk == vkey(key, n)) {
                        head.null = None;
                    }
                    rm.push(vk.clone());
                    cmps.push((vk.clone(), raw));
                    (rec, Some(vk))
                }
            };
            // With no current version left, the newest remaining one becomes current unless
            // it is a delete marker.
            let remaining: Vec<&(Vec<u8>, Bytes)> = newest
                .entries
                .iter()
                .filter(|(x, _)| Some(x) != gone_entry.as_ref())
                .collect();
            let current_left = cur.is_some() && gone_entry.is_some();
            let mut promoted = false;
            if !current_left && let Some((pk, pv)) = remaining.first() {
                let rec: ObjectRecord = decode(pv)?;
                if !rec.delete_marker {
                    let (value, payload) = split_record(&rec)?;
                    set.push((k.clone(), value));
                    if let Some(p) = payload {
                        set.push((d.clone(), p));
                    }
                    if head.null.as_ref().is_some_and(|n| *pk == vkey(key, n)) {
                        head.null = None;
                    }
                    rm.push(pk.clone());
                    cmps.push((pk.clone(), pv.clone()));
                    promoted = true;
                }
            }
            let versions_left = remaining.len() > usize::from(promoted) || newest.more;
            if versions_left || current_left || promoted {
                // A new floor: every version commit of the key changes its head.
                head.floor = head.floor.saturating_add(1);
                set.push((h.clone(), head.encode()));
            } else if h_raw.is_some() {
                rm.push(h.clone());
            }
            let rm = removals(rm, &set);
            let mut op = Self::guarded(&s, &set, &rm)
                .omap_cmp(&k, CmpOp::Eq, cur_raw.as_deref().unwrap_or(b""))
                .omap_cmp(&h, CmpOp::Eq, h_raw.as_deref().unwrap_or(b""));
            for (ck, cv) in &cmps {
                op = op.omap_cmp(ck, CmpOp::Eq, cv);
            }
            if self.try_write(&s, op).await? {
                let current_gone = gone_entry.is_none();
                if promoted && cur.is_none() {
                    self.note_insert(bucket, &s.oid, &pos(key));
                }
                if current_gone || promoted {
                    self.committed(bucket, key, !promoted);
                }
                return Ok(Commit {
                    version_id: removed.version_id.clone(),
                    delete_marker: removed.delete_marker,
                    previous: Some(removed.into_head()),
                    released,
                });
            }
        }
        Err(CatalogError::Contended)
    }

    pub(crate) async fn update_version(
        &self,
        bucket: &str,
        key: &str,
        id: &str,
        f: RecordFn,
    ) -> Result<ObjectRecord> {
        let (k, d, h) = (okey(key), dkey(key), hkey(key));
        let mut keys = vec![k.clone(), d.clone(), h.clone()];
        if id != "null" {
            keys.push(vkey(key, id));
        }
        for _ in 0..RETRIES {
            let s = self.read_keys(bucket, &pos(key), &keys).await?;
            let same = |old: &ObjectRecord, new: &ObjectRecord| {
                if new.segments != old.segments || new.delete_marker != old.delete_marker {
                    return Err(corrupt("update may not change an object's content"));
                }
                Ok(())
            };
            if let Some(raw) = find(&s.vals, &k) {
                let stored: ObjectRecord = decode(&raw)?;
                if is_version(&stored, id) {
                    let whole = join_record(stored, find(&s.vals, &d).as_deref())?;
                    let new = f(&whole)?;
                    same(&whole, &new)?;
                    let (value, payload) = split_record(&new)?;
                    let mut set = vec![(k.clone(), value)];
                    if let Some(p) = payload {
                        set.push((d.clone(), p));
                    }
                    let none: [&[u8]; 0] = [];
                    let op = Self::guarded(&s, &set, &none).omap_cmp(&k, CmpOp::Eq, &raw);
                    if self.try_write(&s, op).await? {
                        self.committed(bucket, key, false);
                        return Ok(new);
                    }
                    continue;
                }
            }
            let entry = if id == "null" {
                let head = VHead::parse(find(&s.vals, &h).as_deref())?;
                match read_null(self, bucket, key, &head, &s).await? {
                    Some(n) => n,
                    None => continue,
                }
            } else {
                let vk = vkey(key, id);
                find(&s.vals, &vk).map(|v| (vk, v))
            };
            let Some((vk, raw)) = entry else {
                return Err(CatalogError::NoSuchKey);
            };
            let rec: ObjectRecord = decode(&raw)?;
            if rec.delete_marker {
                return Err(CatalogError::NoSuchKey);
            }
            let new = f(&rec)?;
            same(&rec, &new)?;
            let none: [&[u8]; 0] = [];
            let op = Self::guarded(&s, &[(&vk, records::encode(&new))], &none).omap_cmp(
                &vk,
                CmpOp::Eq,
                &raw,
            );
            if self.try_write(&s, op).await? {
                return Ok(new);
            }
        }
        Err(CatalogError::Contended)
    }

    /// ListObjectVersions: the `o` (current) and `v` (noncurrent) entries merged in one pass
    /// of two scans along the partition chain, keys in order, each key's current version
    /// first; a common prefix is skipped with one seek of each. O(page), plus the read of the
    /// marker key's current record.
    pub(crate) async fn list_versions(
        &self,
        bucket: &str,
        q: &VersionQuery,
    ) -> Result<VersionPage> {
        let prefix = esc(q.prefix.as_bytes());
        let delim = q.delimiter.as_deref().filter(|d| !d.is_empty());
        let km = q.key_marker.as_deref().filter(|k| *k >= q.prefix.as_str());
        // Where the previous page ended: (escaped key, rank); rank None is the current one.
        let marker: Option<(Vec<u8>, Option<Vec<u8>>)> = match (km, q.version_marker.as_deref()) {
            (Some(k), Some(v)) => {
                let s = self.read_keys(bucket, &pos(k), &[okey(k), hkey(k)]).await?;
                let cur = find(&s.vals, &okey(k))
                    .map(|v| records::decode_head(&v))
                    .transpose()?;
                let rank = match cur {
                    Some(c) if is_version(&c, v) => None,
                    _ if v == "null" => {
                        let head = VHead::parse(find(&s.vals, &hkey(k)).as_deref())?;
                        Some(head.null.unwrap_or_default().into_bytes())
                    }
                    _ => Some(v.as_bytes().to_vec()),
                };
                Some((esc(k.as_bytes()), rank))
            }
            _ => None,
        };
        let mut objs = Stream::new(b'o', &prefix);
        let mut vers = Stream::new(b'v', &prefix);
        if let Some(k) = km {
            objs.after = okey(k);
            vers.after = match &marker {
                Some((_, Some(rank))) => {
                    let mut a = vprefix(k);
                    a.extend_from_slice(rank);
                    a
                }
                Some((_, None)) => tagged(b'v', &[&esc(k.as_bytes())]),
                None => {
                    let mut a = vprefix(k);
                    a.push(HIGH);
                    a
                }
            };
        }
        let mut page = VersionPage::default();
        let mut latest_done: Option<Vec<u8>> = marker.as_ref().map(|(k, _)| k.clone());
        loop {
            let want = (q.max + 1).saturating_sub(page.entries.len() + page.prefixes.len());
            let o = objs.peek(self, bucket, want).await?;
            let v = vers.peek(self, bucket, want).await?;
            let (from_objs, (ekey, _)) = match (o, v) {
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
            let key = String::from_utf8(unesc(&ekey).ok_or_else(|| corrupt("bad index key"))?)
                .map_err(|e| CatalogError::Corrupt(e.to_string()))?;
            let cp_end = delim.and_then(|d| {
                key[q.prefix.len()..]
                    .find(d)
                    .map(|i| q.prefix.len() + i + d.len())
            });
            if let Some(end) = cp_end {
                let cp = key[..end].to_owned();
                if km.is_none_or(|k| cp.as_str() > k) {
                    if page.entries.len() + page.prefixes.len() >= q.max {
                        page.truncated = true;
                        break;
                    }
                    page.next = Some((cp.clone(), None));
                    page.prefixes.push(cp.clone());
                }
                let mut past = okey(&cp);
                past.push(HIGH);
                objs.seek(past);
                let mut past = tagged(b'v', &[&esc(cp.as_bytes())]);
                past.push(HIGH);
                vers.seek(past);
                continue;
            }
            if page.entries.len() + page.prefixes.len() >= q.max {
                page.truncated = true;
                break;
            }
            let (_, value) = if from_objs { objs.pop() } else { vers.pop() };
            let record = if from_objs {
                records::decode_head(&value)?
            } else {
                decode::<ObjectRecord>(&value)?.into_head()
            };
            let is_latest = latest_done.as_deref() != Some(ekey.as_slice());
            latest_done = Some(ekey);
            let id = record.version_id.clone().unwrap_or_else(|| "null".into());
            page.next = Some((key.clone(), Some(id)));
            page.entries.push(VersionEntry {
                key,
                record,
                is_latest,
            });
        }
        if !page.truncated {
            page.next = None;
        }
        Ok(page)
    }
}

/// What a versioned Complete writes besides its record ([`Inner::complete_versioned`]).
pub(crate) struct CompleteExtra {
    pub set: Vec<(Vec<u8>, Vec<u8>)>,
    pub rm: Vec<Vec<u8>>,
    pub released: Vec<ChunkLoc>,
}

/// One tag's entries under a prefix, read along the partition chain a page at a time.
struct Stream {
    filter: Vec<u8>,
    after: Vec<u8>,
    buf: std::collections::VecDeque<(Vec<u8>, Bytes)>,
    more: bool,
    tag: u8,
}

impl Stream {
    fn new(tag: u8, prefix: &[u8]) -> Self {
        Self {
            filter: tagged(tag, &[prefix]),
            after: vec![],
            buf: Default::default(),
            more: true,
            tag,
        }
    }

    /// Goes on after omap key `after`: drops what was read up to it.
    fn seek(&mut self, after: Vec<u8>) {
        self.buf.retain(|(k, _)| *k > after);
        if self.buf.is_empty() && after > self.after {
            self.after = after;
        }
    }

    /// The next entry's (escaped object key, rank: `None` for a current record, the suffix
    /// for a version), reading up to `want` entries when the buffer is empty.
    async fn peek(
        &mut self,
        inner: &Inner,
        bucket: &str,
        want: usize,
    ) -> Result<Option<(Vec<u8>, Option<Vec<u8>>)>> {
        if self.buf.is_empty() && self.more {
            let n = (want.max(1) as u64).min(PAGE);
            let (entries, more) = inner.scan(bucket, &self.after, &self.filter, n).await?;
            self.more = more && !entries.is_empty();
            if let Some((k, _)) = entries.last() {
                self.after = k.clone();
            }
            self.buf.extend(entries);
        }
        let Some((k, _)) = self.buf.front() else {
            return Ok(None);
        };
        let rest = &k[1..];
        if self.tag == b'o' {
            return Ok(Some((rest.to_vec(), None)));
        }
        let i = rest
            .windows(2)
            .position(|w| w == SEP)
            .ok_or_else(|| corrupt("bad version key"))?;
        Ok(Some((rest[..i].to_vec(), Some(rest[i + 2..].to_vec()))))
    }

    fn pop(&mut self) -> (Vec<u8>, Bytes) {
        self.buf.pop_front().expect("peeked")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_round_trip() {
        for h in [
            VHead::default(),
            VHead {
                floor: 0x1234,
                null: Some(format!("{:016x}null", u64::MAX - 7)),
            },
        ] {
            assert_eq!(VHead::parse(Some(&h.encode())).unwrap(), h);
        }
        assert_eq!(VHead::parse(None).unwrap(), VHead::default());
        assert!(VHead::parse(Some(b"xyz")).is_err());
    }

    #[test]
    fn version_entries_sort_beside_their_key() {
        // A key's versions sort newest first, before any longer key's.
        let (a, b) = (vkey("k", "00aa"), vkey("k", "00bb"));
        assert!(a < b && b < vkey("k\u{0}", "00") && b < vkey("k/x", "00"));
        assert!(vprefix("k") < a && a.starts_with(&vprefix("k")));
        // Every entry of a key routes to the key's position.
        assert!(partition::pos_of(&a).starts_with(&pos("k")));
        assert!(partition::pos_of(&a) < pos("k\u{0}").as_slice());
    }
}
