//! `lode fsck`: checks, offline, that the extents the allocator considers used are exactly the
//! extents that objects and multipart parts reference, with the right reference counts, inside
//! the devices and never overlapping. `--repair` fixes reference counts and releases leaked
//! extents in one transaction. `--verify-data` also reads every chunk and checks its crc32c.
//! Small objects' bytes, stored beside their records (the `inline` table), are checked both
//! ways too: every record that has inline bytes finds them at the right length, and no payload
//! is left without its record (`--repair` removes those).

use std::collections::BTreeMap;
use std::sync::Arc;

use lode_blob::ChunkRef;
use lode_datapath::Datapath;
use lode_metadata::records::{self, ExtentRecord, ObjectRecord, PartRecord, Segment};
use lode_metadata::{MetaError, MetadataStore, Table, keys, transact};

/// What fsck found.
#[derive(Debug, Default, serde::Serialize)]
pub struct Report {
    pub objects: u64,
    pub parts: u64,
    pub chunks_referenced: u64,
    pub extents_recorded: u64,
    pub bytes_referenced: u64,
    /// Extent records that nothing references (space leaked).
    pub leaked: Vec<(u32, u64, u32)>,
    /// Referenced chunks with no extent record (space that could be handed out twice).
    pub unrecorded: Vec<(u32, u64, u32)>,
    /// Extent records whose reference count differs from the references found.
    pub wrong_refs: Vec<(u32, u64, u32, u32)>,
    /// Extents that overlap another one or lie outside their device.
    pub bad_extents: Vec<String>,
    /// Chunks whose crc32c did not match (with `--verify-data`): (bucket/key or part, dev, offset).
    pub corrupt: Vec<String>,
    /// Objects whose inline bytes are missing or of the wrong length (bucket/key).
    pub payload_missing: Vec<String>,
    /// Inline bytes that no object record has (bucket/key): `--repair` removes them.
    pub payload_orphans: Vec<String>,
    pub repaired: bool,
}

impl Report {
    pub fn is_clean(&self) -> bool {
        self.leaked.is_empty()
            && self.unrecorded.is_empty()
            && self.wrong_refs.is_empty()
            && self.bad_extents.is_empty()
            && self.corrupt.is_empty()
            && self.payload_missing.is_empty()
            && self.payload_orphans.is_empty()
    }
}

fn chunks(segs: &[Segment]) -> impl Iterator<Item = &lode_metadata::records::ChunkLoc> {
    segs.iter().filter_map(|s| match s {
        Segment::Chunk(c) => Some(c),
        Segment::Inline(_) | Segment::Detached(_) => None,
    })
}

/// Scans the metadata (and with `dp`, the data) and optionally repairs reference counts.
pub async fn run(
    meta: Arc<dyn MetadataStore>,
    device_sizes: &[u64],
    dp: Option<Arc<Datapath>>,
    repair: bool,
) -> Result<Report, MetaError> {
    let mut rep = Report::default();
    // (dev, offset) -> (len, references found)
    let mut found: BTreeMap<(u32, u64), (u32, u32)> = BTreeMap::new();
    let mut to_verify: Vec<(String, ChunkRef)> = vec![];
    // Object key -> the length of the inline bytes its record says are stored beside it.
    let mut want_payload: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
    // Noncurrent versions hold their chunks as current records do (their inline bytes are
    // inside the value: no payload beside them).
    for (table, is_obj) in [
        (Table::Objects, true),
        (Table::Parts, false),
        (Table::Versions, false),
    ] {
        let mut c = meta.cursor(table)?;
        c.seek(&[]);
        while let Some((k, v)) = c.current() {
            let segs = if table == Table::Versions {
                rep.objects += 1;
                records::decode::<ObjectRecord>(v)?.segments
            } else if is_obj {
                rep.objects += 1;
                let r = records::decode::<ObjectRecord>(v)?;
                let detached: u64 = r
                    .segments
                    .iter()
                    .map(|s| match s {
                        Segment::Detached(n) => u64::from(*n),
                        _ => 0,
                    })
                    .sum();
                if r.has_detached() {
                    want_payload.insert(k.to_vec(), detached);
                }
                r.segments
            } else {
                rep.parts += 1;
                records::decode::<PartRecord>(v)?.segments
            };
            let name = String::from_utf8_lossy(k).replace('\0', "/");
            for ch in chunks(&segs) {
                rep.chunks_referenced += 1;
                rep.bytes_referenced += u64::from(ch.data_len);
                let e = found
                    .entry((ch.dev, ch.offset))
                    .or_insert((ch.alloc_len, 0));
                e.1 += 1;
                if dp.is_some() {
                    to_verify.push((name.clone(), lode_objects::chunk_ref(ch)));
                }
            }
            c.next();
        }
        c.status()?;
    }
    let mut recorded: BTreeMap<(u32, u64), ExtentRecord> = BTreeMap::new();
    {
        let mut c = meta.cursor(Table::Extents)?;
        c.seek(&[]);
        while let Some((k, v)) = c.current() {
            let (dev, off) =
                keys::parse_extent(k).ok_or_else(|| MetaError::Corrupt("bad extent key".into()))?;
            recorded.insert((dev, off), records::decode(v)?);
            c.next();
        }
        c.status()?;
    }
    rep.extents_recorded = recorded.len() as u64;
    let name_of = |k: &[u8]| String::from_utf8_lossy(k).replace('\0', "/");
    let mut orphan_keys: Vec<Vec<u8>> = vec![];
    {
        let mut c = meta.cursor(Table::Inline)?;
        c.seek(&[]);
        while let Some((k, v)) = c.current() {
            match want_payload.remove(k) {
                Some(n) if n == v.len() as u64 => {}
                Some(_) => rep.payload_missing.push(name_of(k)),
                None => {
                    rep.payload_orphans.push(name_of(k));
                    orphan_keys.push(k.to_vec());
                }
            }
            c.next();
        }
        c.status()?;
    }
    rep.payload_missing
        .extend(want_payload.keys().map(|k| name_of(k)));
    rep.payload_missing.sort();
    for (&(dev, off), r) in &recorded {
        match found.get(&(dev, off)) {
            None => rep.leaked.push((dev, off, r.len)),
            Some(&(_, n)) if n != r.refs => rep.wrong_refs.push((dev, off, r.refs, n)),
            _ => {}
        }
    }
    for (&(dev, off), &(len, _)) in &found {
        if !recorded.contains_key(&(dev, off)) {
            rep.unrecorded.push((dev, off, len));
        }
    }
    // Bounds and overlaps over everything that is, or should be, in use.
    let mut all: Vec<(u32, u64, u32)> = found.iter().map(|(&(d, o), &(l, _))| (d, o, l)).collect();
    all.extend(rep.leaked.iter().copied());
    all.sort_unstable();
    for w in all.windows(2) {
        let (a, b) = (w[0], w[1]);
        if a.0 == b.0 && a.1 + u64::from(a.2) > b.1 {
            rep.bad_extents.push(format!(
                "dev {} extents at {} and {} overlap",
                a.0, a.1, b.1
            ));
        }
    }
    for &(d, o, l) in &all {
        if device_sizes
            .get(d as usize)
            .is_none_or(|&s| o + u64::from(l) > s)
        {
            rep.bad_extents
                .push(format!("dev {d} extent {o}+{l} lies outside the device"));
        }
    }
    if let Some(dp) = &dp {
        for (name, ch) in &to_verify {
            if let Err(e) = dp.read_chunk(ch).await {
                rep.corrupt.push(format!(
                    "{name}: dev {} offset {}: {e}",
                    ch.id.space, ch.id.index
                ));
            }
        }
    }
    if repair
        && (!rep.leaked.is_empty()
            || !rep.wrong_refs.is_empty()
            || !rep.unrecorded.is_empty()
            || !orphan_keys.is_empty())
    {
        let (leaked, wrong, unrec) = (
            rep.leaked.clone(),
            rep.wrong_refs.clone(),
            rep.unrecorded.clone(),
        );
        let found = found.clone();
        transact::<_, MetaError>(&*meta, |t| {
            for k in &orphan_keys {
                t.delete(Table::Inline, k)?;
            }
            for &(d, o, _) in &leaked {
                t.delete(Table::Extents, &keys::extent(d, o))?;
            }
            for &(d, o, _, n) in &wrong {
                let len = found[&(d, o)].0;
                t.put(
                    Table::Extents,
                    &keys::extent(d, o),
                    &records::encode(&ExtentRecord { len, refs: n }),
                )?;
            }
            for &(d, o, l) in &unrec {
                let n = found[&(d, o)].1;
                t.put(
                    Table::Extents,
                    &keys::extent(d, o),
                    &records::encode(&ExtentRecord { len: l, refs: n }),
                )?;
            }
            Ok(())
        })?;
        rep.repaired = true;
    }
    Ok(rep)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lode_metadata::MemMetadataStore;
    use lode_metadata::records::{Checksums, ChunkLoc, ObjectMeta};

    fn obj(chunks: &[(u32, u64)]) -> Vec<u8> {
        records::encode(&ObjectRecord {
            size: 0,
            etag: String::new(),
            last_modified_ms: 0,
            meta: ObjectMeta::default(),
            checksums: Checksums::default(),
            segments: chunks
                .iter()
                .map(|&(dev, offset)| {
                    Segment::Chunk(ChunkLoc {
                        dev,
                        offset,
                        alloc_len: 4096,
                        data_len: 10,
                        crc32c: 0,
                    })
                })
                .collect(),
            parts: vec![],
            upload_id: None,
            version_id: None,
            delete_marker: false,
        })
    }

    fn ext(m: &dyn MetadataStore, dev: u32, off: u64, refs: u32) {
        let mut t = m.begin();
        t.put(
            Table::Extents,
            &keys::extent(dev, off),
            &records::encode(&ExtentRecord { len: 4096, refs }),
        )
        .unwrap();
        t.commit().unwrap();
    }

    #[tokio::test]
    async fn finds_and_repairs_leaks_refcounts_and_unrecorded_extents() {
        let m: Arc<dyn MetadataStore> = Arc::new(MemMetadataStore::new());
        let mut t = m.begin();
        t.put(
            Table::Objects,
            &keys::object("b", "a"),
            &obj(&[(0, 0), (0, 4096)]),
        )
        .unwrap();
        t.put(Table::Objects, &keys::object("b", "copy"), &obj(&[(0, 0)]))
            .unwrap();
        t.commit().unwrap();
        ext(&*m, 0, 0, 2); // right
        ext(&*m, 0, 8192, 1); // leaked
        // (0, 4096) is referenced but unrecorded.
        let r = run(Arc::clone(&m), &[1 << 20], None, false).await.unwrap();
        assert_eq!(r.leaked, vec![(0, 8192, 4096)]);
        assert_eq!(r.unrecorded, vec![(0, 4096, 4096)]);
        assert!(r.wrong_refs.is_empty() && !r.is_clean());
        ext(&*m, 0, 0, 1); // now wrong
        let r = run(Arc::clone(&m), &[1 << 20], None, true).await.unwrap();
        assert_eq!(r.wrong_refs, vec![(0, 0, 1, 2)]);
        assert!(r.repaired);
        let r = run(Arc::clone(&m), &[1 << 20], None, false).await.unwrap();
        assert!(r.is_clean(), "{r:?}");
        assert_eq!(r.extents_recorded, 2);
    }

    #[tokio::test]
    async fn reports_overlaps_and_out_of_bounds() {
        let m: Arc<dyn MetadataStore> = Arc::new(MemMetadataStore::new());
        let mut t = m.begin();
        t.put(
            Table::Objects,
            &keys::object("b", "a"),
            &obj(&[(0, 0), (0, 2048), (1, 0)]),
        )
        .unwrap();
        t.commit().unwrap();
        let r = run(m, &[1 << 20], None, false).await.unwrap();
        assert_eq!(r.bad_extents.len(), 2, "{:?}", r.bad_extents);
    }

    /// Inline bytes stored beside their record: a record whose bytes are gone or of the wrong
    /// length is reported (nothing to repair it from), bytes no record has are reported and
    /// removed by `--repair`.
    #[tokio::test]
    async fn checks_inline_payloads_both_ways() {
        let m: Arc<dyn MetadataStore> = Arc::new(MemMetadataStore::new());
        let rec = |body: &[u8]| ObjectRecord {
            size: body.len() as u64,
            etag: String::new(),
            last_modified_ms: 0,
            meta: ObjectMeta::default(),
            checksums: Checksums::default(),
            segments: vec![Segment::Inline(body.to_vec())],
            parts: vec![],
            upload_id: None,
            version_id: None,
            delete_marker: false,
        };
        let mut t = m.begin();
        for (key, body, payload) in [
            ("ok", &b"hello"[..], Some(&b"hello"[..])),
            ("gone", b"lost", None),
            ("short", b"abcdef", Some(&b"abc"[..])),
        ] {
            let (value, _) = records::split_inline(&rec(body));
            t.put(Table::Objects, &keys::object("b", key), &value)
                .unwrap();
            if let Some(p) = payload {
                t.put(Table::Inline, &keys::object("b", key), p).unwrap();
            }
        }
        t.put(Table::Inline, &keys::object("b", "stray"), b"zz")
            .unwrap();
        t.commit().unwrap();
        let r = run(Arc::clone(&m), &[1 << 20], None, true).await.unwrap();
        assert_eq!(r.payload_missing, vec!["b/gone", "b/short"]);
        assert_eq!(r.payload_orphans, vec!["b/stray"]);
        assert!(r.repaired && !r.is_clean());
        let r = run(Arc::clone(&m), &[1 << 20], None, false).await.unwrap();
        assert!(r.payload_orphans.is_empty(), "{r:?}");
        assert_eq!(r.payload_missing.len(), 2);
        assert!(
            m.get(Table::Inline, &keys::object("b", "ok"))
                .unwrap()
                .is_some()
        );
    }
}
