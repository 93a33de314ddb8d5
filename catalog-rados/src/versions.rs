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
//!
//! An append in a versioned bucket makes a new version that shares the current one's chunks.
//! Those are counted here, per key (they are never shared with another key, and a key's
//! versions share its partition): the head is marked `shared`, and an op that would release
//! a version's chunks of such a key reads the key's versions and releases only the chunks
//! that none of them still holds. Keys never appended to pay nothing. The mark stays until
//! the key's versions are all gone. A rename moves a version to another key, so it refuses a
//! key so marked, as source or target ([`CatalogError::SharedVersions`]).

use super::*;
use lode_catalog::events::What;
use lode_catalog::{
    VersionEntry, VersionPage, VersionQuery, Versioning, delete_marker, is_version, retirement,
    version_suffix,
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

/// [`vprefix`] of an escaped key.
fn vprefix_esc(ekey: &[u8]) -> Vec<u8> {
    let mut k = tagged(b'v', &[ekey]);
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

/// A key's version head (`h<key>`): `floor` as 16 hex digits, `+` if `shared`, then the
/// `null` suffix.
#[derive(Debug, Default, Clone, PartialEq)]
struct VHead {
    /// The highest sequence number given to a version of the key.
    floor: u64,
    /// The suffix of its noncurrent `null` version (or `null` delete marker).
    null: Option<String>,
    /// Versions of the key may share chunks (an append made one).
    shared: bool,
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
        let rest = s.get(16..).unwrap_or("");
        let (shared, rest) = match rest.strip_prefix('+') {
            Some(r) => (true, r),
            None => (false, rest),
        };
        Ok(Self {
            floor,
            null: Some(rest).filter(|n| !n.is_empty()).map(str::to_owned),
            shared,
        })
    }

    fn encode(&self) -> Vec<u8> {
        format!(
            "{:016x}{}{}",
            self.floor,
            if self.shared { "+" } else { "" },
            self.null.as_deref().unwrap_or("")
        )
        .into_bytes()
    }
}

/// What a versioned commit writes as the key's new current version.
pub(crate) enum NewVersion<'a> {
    /// A put of this record.
    Put(&'a ObjectRecord),
    /// An append: the record `f` makes of the current one (sharing its chunks).
    Append(&'a AppendFn),
    /// A delete: a delete marker.
    Marker,
}

/// The chunks that `key`'s versions hold after an op that writes `set` and removes `rm`:
/// `before` is what the key held as read (its `o` entry and every `v` entry).
fn held_after(
    key: &str,
    before: &[(Vec<u8>, Bytes)],
    set: &[(Vec<u8>, Vec<u8>)],
    rm: &[Vec<u8>],
) -> Result<Vec<ChunkLoc>> {
    let (k, vp) = (okey(key), vprefix(key));
    let ours = |x: &[u8]| *x == *k || x.starts_with(&vp);
    let mut held = vec![];
    let kept = before
        .iter()
        .filter(|(x, _)| !rm.contains(x) && !set.iter().any(|(s, _)| s == x))
        .map(|(x, v)| (x.as_slice(), &v[..]));
    let written = set.iter().map(|(x, v)| (x.as_slice(), v.as_slice()));
    for (x, v) in kept.chain(written) {
        if ours(x) {
            held.extend(chunks_of(&decode::<ObjectRecord>(v)?.segments));
        }
    }
    Ok(held)
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

impl Retired {
    /// The entry of `key`'s delete marker with the new version's id (a `null` one becomes the
    /// head's `null`).
    fn marker(&mut self, key: &str) -> (Vec<u8>, Vec<u8>) {
        let suffix = version_suffix(self.seq, self.version_id.as_deref());
        if self.version_id.is_none() {
            self.head.null = Some(suffix.clone());
        }
        let marker = delete_marker(self.version_id.clone());
        (vkey(key, &suffix), records::encode(&marker))
    }
}

/// Under `v`, retires the current version `old` (whole) of `key` before a new version or a
/// delete marker takes its place, as [`retirement`] plans it (`null`: the noncurrent `null`
/// version's record, read through `head`).
fn retire(
    key: &str,
    old: Option<&ObjectRecord>,
    head: &VHead,
    null: Option<&ObjectRecord>,
    v: Versioning,
) -> Result<Retired> {
    debug_assert!(
        v != Versioning::Off,
        "an unversioned write retires nothing here"
    );
    let plan = retirement(old, head.floor, head.null.is_some(), v);
    let mut r = Retired {
        head: head.clone(),
        ..Default::default()
    };
    if let Some(old) = old {
        if let Some(suffix) = plan.keep_as {
            if old.version_id.is_none() {
                r.head.null = Some(suffix.clone());
            }
            r.set.push((vkey(key, &suffix), records::encode(old)));
        } else if plan.release_old {
            r.released.extend(chunks_of(&old.segments));
        }
    }
    if plan.drop_null
        && let Some(s) = &head.null
    {
        r.rm.push(vkey(key, s));
        if let Some(n) = null {
            r.released.extend(chunks_of(&n.segments));
        }
        r.head.null = None;
    }
    r.head.floor = plan.seq;
    r.seq = plan.seq;
    r.version_id = plan.version_id;
    Ok(r)
}

/// The entry of `key`'s noncurrent `null` version named by `head` (`Some(None)`: none), read
/// with the key's head from the partition of `at` (`Ok(None)` when that partition changed its
/// range or state, or the head changed, since: read again).
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
    let (vk, hk) = (vkey(key, s), hkey(key));
    let r = inner
        .read_keys(bucket, &pos(key), &[vk.clone(), hk.clone()])
        .await?;
    if r.oid != at.oid
        || r.epoch != at.epoch
        || VHead::parse(find(&r.vals, &hk).as_deref())? != *head
    {
        return Ok(None);
    }
    Ok(Some(find(&r.vals, &vk).map(|v| (vk, v))))
}

/// Every version entry of `key` (`v<key>…`), read from the partition of `at` while the key's
/// head stays `head` (`Ok(None)`: the partition or the head changed since `at`: read again).
async fn all_versions(
    inner: &Inner,
    bucket: &str,
    key: &str,
    head: &VHead,
    at: &Snapshot,
) -> Result<Option<Vec<(Vec<u8>, Bytes)>>> {
    let (vp, hk) = (vprefix(key), hkey(key));
    let mut out = vec![];
    let mut after = vp.clone();
    loop {
        let l = inner
            .locate(bucket, &pos(key), || {
                ReadOp::new()
                    .omap_get_vals_by_keys(std::slice::from_ref(&hk))
                    .omap_get_vals(&after, &vp, 1024)
            })
            .await?;
        let h = l.r.omap_vals_by_keys.unwrap_or_default();
        if l.oid != at.oid
            || l.part.epoch != at.epoch
            || VHead::parse(find(&h, &hk).as_deref())? != *head
        {
            return Ok(None);
        }
        let page = l.r.omap_vals.unwrap_or_default();
        if let Some((k, _)) = page.entries.last() {
            after = k.clone();
        }
        out.extend(page.entries);
        if !page.more {
            return Ok(Some(out));
        }
    }
}

/// In a key whose versions share chunks (`head.shared`, `head` as read at `s`), drops from
/// `released` every chunk that one of its versions still holds after an op that writes `set`
/// and removes `rm` (`cur`: the key's `o` entry as read). `Ok(false)`: read again.
#[allow(clippy::too_many_arguments)]
async fn keep_held(
    inner: &Inner,
    bucket: &str,
    key: &str,
    head: &VHead,
    shared: bool,
    s: &Snapshot,
    cur: Option<&Bytes>,
    set: &[(Vec<u8>, Vec<u8>)],
    rm: &[Vec<u8>],
    released: &mut Vec<ChunkLoc>,
) -> Result<bool> {
    if !shared || released.is_empty() {
        return Ok(true);
    }
    let Some(mut before) = all_versions(inner, bucket, key, head, s).await? else {
        return Ok(false);
    };
    if let Some(c) = cur {
        before.push((okey(key), c.clone()));
    }
    let held: std::collections::HashSet<ChunkLoc> =
        held_after(key, &before, set, rm)?.into_iter().collect();
    released.retain(|c| !held.contains(c));
    Ok(true)
}

/// What a read of version `id` of `key` asks for: its current record and payload, its head,
/// and the version's entry (unless `id` is `null`, found through the head).
fn version_reads(key: &str, id: &str) -> Vec<Vec<u8>> {
    let mut keys = vec![okey(key), dkey(key), hkey(key)];
    if id != "null" {
        keys.push(vkey(key, id));
    }
    keys
}

/// The noncurrent entry of version `id` of `key` (`Some(None)`: none) from what `s` read (its
/// `v` key, unless `id` is `null`, which is found through `head`); `Ok(None)`: read again.
async fn noncurrent(
    inner: &Inner,
    bucket: &str,
    key: &str,
    id: &str,
    head: &VHead,
    s: &Snapshot,
) -> Result<Option<Option<(Vec<u8>, Bytes)>>> {
    if id == "null" {
        return read_null(inner, bucket, key, head, s).await;
    }
    let vk = vkey(key, id);
    Ok(Some(find(&s.vals, &vk).map(|v| (vk, v))))
}

/// Sets `rm` minus the keys `set` writes (a key both removed and set is set).
fn removals(rm: Vec<Vec<u8>>, set: &[(Vec<u8>, Vec<u8>)]) -> Vec<Vec<u8>> {
    rm.into_iter()
        .filter(|k| !set.iter().any(|(s, _)| s == k))
        .collect()
}

impl Inner {
    /// The key of `key`'s version head, for ops outside this module that read it.
    pub(crate) fn head_key(key: &str) -> Vec<u8> {
        hkey(key)
    }

    /// For an op outside this module that removes `key`'s current record (`cur`, read at `s`
    /// with the key's head `h_raw`) and nothing else of the key: drops from `released` every
    /// chunk one of the key's versions still holds. `Ok(false)`: read again.
    pub(crate) async fn keep_held_by_versions(
        &self,
        bucket: &str,
        key: &str,
        h_raw: Option<&[u8]>,
        s: &Snapshot,
        cur: &Bytes,
        released: &mut Vec<ChunkLoc>,
    ) -> Result<bool> {
        let head = VHead::parse(h_raw)?;
        let gone = [okey(key)];
        keep_held(
            self,
            bucket,
            key,
            &head,
            head.shared,
            s,
            Some(cur),
            &[],
            &gone,
            released,
        )
        .await
    }

    /// A put, an append or a delete (a delete marker) of `bucket/key` in a versioned bucket
    /// (`cond.versioning` not `Off`): one op that retires the current version, writes the new
    /// one and the key's head, guarded on `o<key>` and `h<key>`. Returns the new current
    /// record (with its version id) too.
    pub(crate) async fn commit_versioned(
        &self,
        bucket: &str,
        key: &str,
        cond: &Cond,
        write: NewVersion<'_>,
    ) -> Result<(Commit, Option<ObjectRecord>)> {
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
            let mut new = match write {
                NewVersion::Put(rec) => Some(rec.clone()),
                NewVersion::Append(f) => {
                    let n = f(cur.as_ref())?;
                    appended_segments(cur.as_ref(), &n)?;
                    Some(n)
                }
                NewVersion::Marker => None,
            };
            let mut r = retire(key, cur.as_ref(), &head, null_rec.as_ref(), cond.versioning)?;
            if matches!(write, NewVersion::Append(_))
                && cur
                    .as_ref()
                    .is_some_and(|c| chunks_of(&c.segments).next().is_some())
            {
                // The new version shares the current one's chunks.
                r.head.shared = true;
            }
            let mut set = std::mem::take(&mut r.set);
            let mut rm = std::mem::take(&mut r.rm);
            match &mut new {
                Some(rec) => {
                    rec.version_id = r.version_id.clone();
                    let (value, payload) = split_record(rec)?;
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
                    set.push(r.marker(key));
                }
            }
            set.push((h.clone(), r.head.encode()));
            let rm = removals(rm, &set);
            let (shared, cur_val) = (r.head.shared, cur_raw.as_ref());
            if !keep_held(
                self,
                bucket,
                key,
                &head,
                shared,
                &s,
                cur_val,
                &set,
                &rm,
                &mut r.released,
            )
            .await?
            {
                continue;
            }
            let mut op = Self::guarded(&s, &set, &rm)
                .omap_cmp(&k, CmpOp::Eq, cur_raw.as_deref().unwrap_or(b""))
                .omap_cmp(&h, CmpOp::Eq, h_raw.as_deref().unwrap_or(b""));
            if let Some((nk, nv)) = &null {
                op = op.omap_cmp(nk, CmpOp::Eq, nv);
            }
            let ev = match &new {
                Some(rec) => self.events(&s.oid, &[written(bucket, key, rec)]).await?,
                None => {
                    let version_id = r.version_id.as_deref();
                    let what = What::MarkerCreated { version_id };
                    self.events(&s.oid, &[change(bucket, key, what)]).await?
                }
            };
            if self.try_write(&s, ev.stamp(op)).await? {
                self.outbox.stored(&s.oid, &ev);
                // Every new version counts toward the partition's split.
                self.note_insert(bucket, &s.oid, &pos(key));
                let commit = Commit {
                    previous,
                    released: r.released,
                    version_id: r.version_id,
                    delete_marker: new.is_none(),
                };
                return Ok((commit, new));
            }
        }
        Err(CatalogError::Contended)
    }

    /// A rename in a versioned bucket (`v` not `Off`; `from` and `to` differ): one op that
    /// moves `from`'s current version to `to` as its new version, retires `to`'s current one
    /// as a put would, and puts a delete marker at `from`, guarded on both keys' `o` and `h`.
    /// Keys whose versions share chunks are refused ([`CatalogError::SharedVersions`]).
    pub(crate) async fn rename_versioned(
        &self,
        bucket: &str,
        from: &str,
        to: &str,
        check: RenameCheck,
        v: Versioning,
    ) -> Result<Commit> {
        let (fk, fd, fh) = (okey(from), dkey(from), hkey(from));
        let (tk, td, th) = (okey(to), dkey(to), hkey(to));
        let keys = [&fk, &fd, &fh, &tk, &td, &th].map(|k| k.clone());
        for _ in 0..RETRIES {
            let s = self.read_keys(bucket, &pos(from), &keys).await?;
            let Some(src_raw) = find(&s.vals, &fk) else {
                return Err(CatalogError::NoSuchKey);
            };
            if !s.part.holds(&pos(to)) {
                return Err(CatalogError::CrossPartition);
            }
            let src: ObjectRecord = decode(&src_raw)?;
            let dst_raw = find(&s.vals, &tk);
            let old: Option<ObjectRecord> = dst_raw.as_deref().map(decode).transpose()?;
            // Guarded below on both values: the check holds for what the op moves and retires.
            check(&src, old.as_ref())?;
            let (fh_raw, th_raw) = (find(&s.vals, &fh), find(&s.vals, &th));
            let (fhead, thead) = (
                VHead::parse(fh_raw.as_deref())?,
                VHead::parse(th_raw.as_deref())?,
            );
            if fhead.shared || thead.shared {
                return Err(CatalogError::SharedVersions);
            }
            let (mut fnull, mut tnull) = (None, None);
            if v == Versioning::Suspended {
                let (Some(f), Some(t)) = (
                    read_null(self, bucket, from, &fhead, &s).await?,
                    read_null(self, bucket, to, &thead, &s).await?,
                ) else {
                    continue;
                };
                (fnull, tnull) = (f, t);
            }
            let null_of = |n: &Option<(Vec<u8>, Bytes)>| -> Result<Option<ObjectRecord>> {
                n.as_ref().map(|(_, v)| decode(v)).transpose()
            };
            let old_full = old
                .clone()
                .map(|r| join_record(r, find(&s.vals, &td).as_deref()))
                .transpose()?;
            let mut rt = retire(to, old_full.as_ref(), &thead, null_of(&tnull)?.as_ref(), v)?;
            let mut rf = retire(from, None, &fhead, null_of(&fnull)?.as_ref(), v)?;
            let mut set = std::mem::take(&mut rt.set);
            set.append(&mut rf.set);
            let mut rm = std::mem::take(&mut rt.rm);
            rm.append(&mut rf.rm);
            // The moved version, with its payload, as `to`'s new current one (made now, as any
            // new version: lifecycle times `to`'s retired version from it).
            let mut moved = join_record(src.clone(), find(&s.vals, &fd).as_deref())?;
            moved.version_id = rt.version_id.clone();
            moved.last_modified_ms = now_ms();
            let (value, payload) = split_record(&moved)?;
            set.push((tk.clone(), value));
            match payload {
                Some(p) => set.push((td.clone(), p)),
                None if has_payload(old.as_ref()) => rm.push(td.clone()),
                None => {}
            }
            rm.push(fk.clone());
            if src.has_detached() {
                rm.push(fd.clone());
            }
            set.push(rf.marker(from));
            set.push((fh.clone(), rf.head.encode()));
            set.push((th.clone(), rt.head.encode()));
            let rm = removals(rm, &set);
            let mut op = Self::guarded(&s, &set, &rm)
                .omap_cmp(&fk, CmpOp::Eq, &src_raw)
                .omap_cmp(&tk, CmpOp::Eq, dst_raw.as_deref().unwrap_or(b""))
                .omap_cmp(&fh, CmpOp::Eq, fh_raw.as_deref().unwrap_or(b""))
                .omap_cmp(&th, CmpOp::Eq, th_raw.as_deref().unwrap_or(b""));
            for (nk, nv) in fnull.iter().chain(tnull.iter()) {
                op = op.omap_cmp(nk, CmpOp::Eq, nv);
            }
            let marker = What::MarkerCreated {
                version_id: rf.version_id.as_deref(),
            };
            let changes = [change(bucket, from, marker), written(bucket, to, &moved)];
            let ev = self.events(&s.oid, &changes).await?;
            if self.try_write(&s, ev.stamp(op)).await? {
                self.outbox.stored(&s.oid, &ev);
                self.note_insert(bucket, &s.oid, &pos(to));
                rt.released.append(&mut rf.released);
                return Ok(Commit {
                    previous: old.map(ObjectRecord::into_head),
                    released: rt.released,
                    version_id: rt.version_id,
                    delete_marker: false,
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
        // The Complete's own record replaces `o<key>`: nothing of it is held by a version.
        let mut gone = r.rm.clone();
        gone.push(k.clone());
        let cur_val = find(vals, &k);
        if !keep_held(
            self,
            bucket,
            key,
            &head,
            head.shared,
            s,
            cur_val.as_ref(),
            &r.set,
            &gone,
            &mut r.released,
        )
        .await?
        {
            return Ok(None);
        }
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
        let keys = version_reads(key, id);
        for _ in 0..RETRIES {
            let s = self.read_keys(bucket, &pos(key), &keys).await?;
            // A point read, as a GET's: counted for splits for load ([`crate::heat`]).
            self.note_load(bucket, &s.oid, &s.pos, false);
            if let Some(raw) = find(&s.vals, &k) {
                let rec: ObjectRecord = decode(&raw)?;
                if is_version(&rec, id) {
                    return join_record(rec, find(&s.vals, &d).as_deref()).map(Some);
                }
            }
            let head = VHead::parse(find(&s.vals, &h).as_deref())?;
            match noncurrent(self, bucket, key, id, &head, &s).await? {
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

    pub(crate) async fn delete_version(
        &self,
        bucket: &str,
        key: &str,
        id: &str,
        check: Option<lode_catalog::RecordCheck>,
    ) -> Result<Commit> {
        let (k, d, h, vp) = (okey(key), dkey(key), hkey(key), vprefix(key));
        let keys = version_reads(key, id);
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
                bucket: bucket.to_owned(),
                pos: pos(key),
                version: l.r.version,
                epoch: l.part.epoch.clone(),
                vals: l.r.omap_vals_by_keys.clone().unwrap_or_default(),
                oid: l.oid,
                part: l.part,
            };
            let cur_raw = find(&s.vals, &k);
            let h_raw = find(&s.vals, &h);
            let read_head = VHead::parse(h_raw.as_deref())?;
            let mut head = read_head.clone();
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
                    let Some(entry) = noncurrent(self, bucket, key, id, &head, &s).await? else {
                        continue;
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
            if let Some(c) = &check {
                // Guarded below on the value it saw: it holds for what the op removes.
                c(&removed)?;
            }
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
            let shared = read_head.shared;
            if !keep_held(
                self,
                bucket,
                key,
                &read_head,
                shared,
                &s,
                cur_raw.as_ref(),
                &set,
                &rm,
                &mut released,
            )
            .await?
            {
                continue;
            }
            let mut op = Self::guarded(&s, &set, &rm)
                .omap_cmp(&k, CmpOp::Eq, cur_raw.as_deref().unwrap_or(b""))
                .omap_cmp(&h, CmpOp::Eq, h_raw.as_deref().unwrap_or(b""));
            for (ck, cv) in &cmps {
                op = op.omap_cmp(ck, CmpOp::Eq, cv);
            }
            let what = What::Removed {
                version_id: Some(removed.version_id.as_deref().unwrap_or("null")),
            };
            let ev = self.events(&s.oid, &[change(bucket, key, what)]).await?;
            if self.try_write(&s, ev.stamp(op)).await? {
                self.outbox.stored(&s.oid, &ev);
                if promoted && cur.is_none() {
                    self.note_insert(bucket, &s.oid, &pos(key));
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
        let keys = version_reads(key, id);
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
                    let ev = self.events(&s.oid, &[written(bucket, key, &new)]).await?;
                    if self.try_write(&s, ev.stamp(op)).await? {
                        self.outbox.stored(&s.oid, &ev);
                        return Ok(new);
                    }
                    continue;
                }
            }
            let head = VHead::parse(find(&s.vals, &h).as_deref())?;
            let Some(entry) = noncurrent(self, bucket, key, id, &head, &s).await? else {
                continue;
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
            let ev = self.events(&s.oid, &[written(bucket, key, &new)]).await?;
            if self.try_write(&s, ev.stamp(op)).await? {
                self.outbox.stored(&s.oid, &ev);
                return Ok(new);
            }
        }
        Err(CatalogError::Contended)
    }

    /// ListObjectVersions: the `o` (current) and `v` (noncurrent) entries merged, keys in
    /// order, each key's current version first, read in windows ([`Inner::window`]) in which
    /// both are read at one version of one partition and every key is whole, so that a version
    /// moving from current to noncurrent meanwhile is listed once. A common prefix is skipped
    /// with one seek. O(page), plus the read of the marker key's current record.
    pub(crate) async fn list_versions(
        &self,
        bucket: &str,
        q: &VersionQuery,
    ) -> Result<VersionPage> {
        let prefix = esc(q.prefix.as_bytes());
        let km = q.key_marker.as_deref().filter(|k| *k >= q.prefix.as_str());
        let mut fold = PageFold::new(&q.prefix, q.delimiter.as_deref(), km, q.max);
        // Where the previous page ended: (escaped key, rank, where its older versions start);
        // rank None is the current one.
        let marker: Option<Marker> = match (km, q.version_marker.as_deref()) {
            (Some(k), Some(v)) => {
                let s = self.read_keys(bucket, &pos(k), &[okey(k), hkey(k)]).await?;
                let cur = find(&s.vals, &okey(k))
                    .map(|v| records::decode_head(&v))
                    .transpose()?;
                let head = VHead::parse(find(&s.vals, &hkey(k)).as_deref())?;
                // The noncurrent versions older than the marker start after `older`: the
                // marker's own entry, or for a marker that is the current version, where it
                // will sort once it is retired (its id; for the `null` one, above the key's
                // floor), so that one retired meanwhile is not listed again.
                let (rank, older) = match cur {
                    Some(c) if is_version(&c, v) => {
                        let older = match &c.version_id {
                            Some(id) => [vprefix(k), id.as_bytes().to_vec()].concat(),
                            None => [
                                vprefix(k),
                                format!("{:016x}", u64::MAX - head.floor).into_bytes(),
                                vec![HIGH],
                            ]
                            .concat(),
                        };
                        (None, older)
                    }
                    _ => {
                        let r = if v == "null" {
                            head.null.unwrap_or_default().into_bytes()
                        } else {
                            v.as_bytes().to_vec()
                        };
                        (Some(r.clone()), [vprefix(k), r].concat())
                    }
                };
                Some((esc(k.as_bytes()), rank, older))
            }
            _ => None,
        };
        let filters = (tagged(b'o', &[&prefix]), tagged(b'v', &[&prefix]));
        let mut next = Some(match km {
            None => Cursor {
                o_after: vec![],
                v_after: vec![],
                pos: prefix.clone(),
            },
            Some(k) => Cursor {
                o_after: okey(k),
                v_after: match &marker {
                    Some((_, _, older)) => older.clone(),
                    None => [vprefix(k), vec![HIGH]].concat(),
                },
                pos: esc(k.as_bytes()),
            },
        });
        let mut buf: std::collections::VecDeque<Item> = Default::default();
        let mut page = VersionPage::default();
        let mut latest_done: Option<Vec<u8>> = marker.as_ref().map(|(k, ..)| k.clone());
        loop {
            let Some(item) = buf.pop_front() else {
                let Some(c) = next.take() else { break };
                let want = fold.wanted();
                let (items, after) = self.window(bucket, &c, &filters, want as u64).await?;
                buf.extend(items);
                next = after;
                continue;
            };
            let key = String::from_utf8(unesc(&item.ekey).ok_or_else(|| corrupt("bad index key"))?)
                .map_err(|e| CatalogError::Corrupt(e.to_string()))?;
            match fold.offer(&key) {
                Step::Take => {}
                // Under a common prefix passed over (the buffer drops those; see below).
                Step::Skip => continue,
                Step::Prefix { listed } => {
                    let cp = fold.skipping().expect("a prefix is being skipped");
                    if listed {
                        page.next = Some((cp.to_owned(), None));
                    }
                    // Past every key under the prefix: what was read of it, and the next reads.
                    let ecp = esc(cp.as_bytes());
                    buf.retain(|i| !i.ekey.starts_with(&ecp));
                    if buf.is_empty()
                        && let Some(c) = &mut next
                    {
                        let past = |t: u8| [tagged(t, &[&ecp]), vec![HIGH]].concat();
                        c.o_after = c.o_after.clone().max(past(b'o'));
                        c.v_after = c.v_after.clone().max(past(b'v'));
                        c.pos = c.pos.clone().max([ecp, vec![HIGH]].concat());
                    }
                    continue;
                }
                Step::Full => break,
            }
            let record = if item.rank.is_none() {
                records::decode_head(&item.value)?
            } else {
                decode::<ObjectRecord>(&item.value)?.into_head()
            };
            let is_latest = latest_done.as_deref() != Some(item.ekey.as_slice());
            latest_done = Some(item.ekey);
            let id = record.version_id.clone().unwrap_or_else(|| "null".into());
            page.next = Some((key.clone(), Some(id)));
            page.entries.push(VersionEntry {
                key,
                record,
                is_latest,
            });
        }
        (page.prefixes, page.truncated) = fold.finish();
        if !page.truncated {
            page.next = None;
        }
        Ok(page)
    }

    /// One window of a version listing from `c`: up to about `n` entries of each of the `o`
    /// and `v` ranges under `filters`, read from one partition at one version (the second read
    /// asserts the first's version), merged, cut to whole keys (a single key with more
    /// versions than a window comes in pieces; its newest entries come first, so a version
    /// that moves from current to noncurrent between two pieces is not listed twice). Returns
    /// the entries and where the next window starts (`None`: the listing is done).
    async fn window(
        &self,
        bucket: &str,
        c: &Cursor,
        filters: &(Vec<u8>, Vec<u8>),
        n: u64,
    ) -> Result<(Vec<Item>, Option<Cursor>)> {
        let n = n.clamp(1, PAGE);
        let mut c = c.clone();
        // Both ranges in one op: one version of the partition.
        let l = self
            .locate(bucket, &c.pos, || {
                ReadOp::new()
                    .omap_get_vals(&c.o_after, &filters.0, n)
                    .omap_get_vals2(&c.v_after, &filters.1, n)
            })
            .await?;
        let vpage = l.r.omap_vals2.unwrap_or_default();
        let opage = l.r.omap_vals.unwrap_or_default();
        let hi = l.part.hi.clone();
        // Entries past the partition's end are a split's leftovers.
        let inside = |k: &[u8]| hi.as_deref().is_none_or(|h| partition::pos_of(k) < h);
        // The entries inside, and whether the read stopped short.
        let split = |page: lode_rados::OmapPage| -> Result<(Vec<Item>, bool)> {
            let n_read = page.entries.len();
            let mut items = vec![];
            for (k, v) in page.entries {
                if !inside(&k) {
                    return Ok((items, false));
                }
                items.push(Item::of(&k, v)?);
            }
            Ok((items, page.more && n_read > 0))
        };
        let (o_items, o_more) = split(opage)?;
        let (v_items, v_more) = split(vpage)?;
        let mut all: Vec<Item> = o_items.into_iter().chain(v_items).collect();
        all.sort_by(|a, b| (&a.ekey, &a.rank).cmp(&(&b.ekey, &b.rank)));
        if o_more || v_more {
            // What both reads cover: up to the smaller of the last entries of the reads
            // that stopped short, then whole keys only (unless one key is all there is).
            // The `o` read covers its last key whole (a key's current record comes before
            // its versions, which the `v` read has up to its own last entry).
            let all_of_key = Some(vec![HIGH]);
            let lasts = [
                o_more
                    .then(|| all.iter().rfind(|i| i.rank.is_none()))
                    .flatten()
                    .map(|i| (i.ekey.clone(), all_of_key.clone())),
                v_more
                    .then(|| all.iter().rfind(|i| i.rank.is_some()))
                    .flatten()
                    .map(|i| (i.ekey.clone(), i.rank.clone())),
            ];
            let end = lasts
                .into_iter()
                .flatten()
                .min()
                .expect("a read that stopped short returned entries");
            all.retain(|i| (&i.ekey, &i.rank) <= (&end.0, &end.1));
            // Whole keys only, unless one key is all there is; a key is whole when it is
            // below the end's, or the end covers all of it.
            let whole = if all.iter().any(|i| i.ekey != end.0) {
                all.retain(|i| i.ekey != end.0);
                true
            } else {
                end.1 == all_of_key
            };
            let last = all.last().expect("at least the first entry is kept");
            let v_after = match (&last.rank, whole) {
                (Some(r), false) => [vprefix_esc(&last.ekey), r.clone()].concat(),
                _ => [vprefix_esc(&last.ekey), vec![HIGH]].concat(),
            };
            let next = Cursor {
                o_after: tagged(b'o', &[&last.ekey]),
                v_after,
                pos: last.ekey.clone(),
            };
            return Ok((all, Some(next)));
        }
        // Both ranges are done in this partition: the next one, if the prefix goes on.
        let beyond = hi
            .as_deref()
            .is_some_and(|h| !partition::prefix_below(partition::pos_of(&filters.0), h));
        // The next partition holds nothing below `h`: the cursor's omap keys stay as they
        // are (raising them to the last keys read here would skip what it holds below a
        // split's leftovers, which the reads may have run into).
        let next = match hi {
            Some(h) if beyond => {
                c.pos = h;
                Some(c)
            }
            _ => None,
        };
        Ok((all, next))
    }
}

/// Where a previous page of a version listing ended: the escaped key, its rank (`None`: the
/// current record) and the `v` key after which its older versions start.
type Marker = (Vec<u8>, Option<Vec<u8>>, Vec<u8>);

/// Where the next window of a version listing starts: after these omap keys of the `o` and
/// `v` ranges, in the partition holding escaped position `pos`.
#[derive(Clone)]
struct Cursor {
    o_after: Vec<u8>,
    v_after: Vec<u8>,
    pos: Vec<u8>,
}

/// One entry of a version listing: its escaped key, rank (`None`: the current record, else the
/// version's suffix) and value.
struct Item {
    ekey: Vec<u8>,
    rank: Option<Vec<u8>>,
    value: Bytes,
}

impl Item {
    fn of(k: &[u8], value: Bytes) -> Result<Self> {
        let rest = &k[1..];
        if k[0] == b'o' {
            return Ok(Self {
                ekey: rest.to_vec(),
                rank: None,
                value,
            });
        }
        let i = rest
            .windows(2)
            .position(|w| w == SEP)
            .ok_or_else(|| corrupt("bad version key"))?;
        Ok(Self {
            ekey: rest[..i].to_vec(),
            rank: Some(rest[i + 2..].to_vec()),
            value,
        })
    }
}

/// What a versioned Complete writes besides its record ([`Inner::complete_versioned`]).
pub(crate) struct CompleteExtra {
    pub set: Vec<(Vec<u8>, Vec<u8>)>,
    pub rm: Vec<Vec<u8>>,
    pub released: Vec<ChunkLoc>,
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
                shared: false,
            },
            VHead {
                floor: 9,
                null: Some(format!("{:016x}null", u64::MAX - 7)),
                shared: true,
            },
            VHead {
                floor: 9,
                null: None,
                shared: true,
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
