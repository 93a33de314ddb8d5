//! The event outbox in cluster mode (see [`lode_catalog::events`]).
//!
//! RADOS has no transaction across objects, so an armed commit's entries live where its change
//! does: in the partition object it commits to, in the same guarded op, under omap keys
//! `e<dest>/<seq, 16 hex digits>` (no listing reads them, a split does not move them, a
//! commit's guards never compare them; librados takes omap bounds as C strings, so no NUL).
//!
//! To find them again, every gateway run keeps a **registry** object `lode.events.<run>`:
//! * omap `p<partition oid>`: every partition this run put entries into, written *before* the
//!   first commit that does, so no entry ever sits in a partition its run's registry misses;
//! * omap `e<dest>/<seq>`: entries of its own (a configuration's test event; the entries of a
//!   deleted bucket's partitions, moved there before the partitions go);
//! * xattrs `lode.owner` (the run that answers for it) and `lode.alive` (the time the owner
//!   last renewed it, every [`TICK`]). Every write of the owner to it is guarded by
//!   `lode.owner` being itself. (Plain xattrs, not a RADOS lock: a lock is a class call, and
//!   Lode's cephx caps allow none.)
//!
//! The directory `lode.events` names every registry. Every [`TICK`] each run reads the
//! registries it does not answer for; one not renewed for [`LEASE`] (by this run's clock: the
//! gateways' clocks must agree to within a few seconds, as NTP keeps them) belongs to a run
//! that is gone (killed, partitioned away for longer than the lease). The first live run to
//! take it over (one op guarded by the owner and time it read) **adopts** it: it reads the
//! places that registry names with its own, delivers their entries, renews it meanwhile, and,
//! once none of them holds any entry, removes it. A run that only stalled past its lease finds
//! its registry taken at its next renewal or registration, and starts a new one; it goes on
//! delivering from the places it knew, as the adopter does: some events arrive twice, none is
//! lost.
//!
//! Reading every place for every scan would cost one read per partition ever touched; a place
//! is read on a scan of destination `d` only while it is **hot** for `d`: this run committed an
//! entry for `d` there, a scan found some there, or it was just adopted. A scan from the start
//! (the delivery worker makes one at least every 30 s) reads every place and cools the ones
//! it finds empty.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use lode_catalog::Result;
use lode_catalog::events::{Change, Outboxed};
use lode_rados::{CmpOp, IoCtx, ReadOp, WriteOp};

use crate::{err, lost_race, now_ms};

/// The directory of registries.
const DIRECTORY: &str = "lode.events";
const REGISTRY_PREFIX: &str = "lode.events.";
const OWNER: &str = "lode.owner";
const ALIVE: &str = "lode.alive";
/// A run that has not renewed its registry for this long is taken for gone.
pub(crate) const LEASE: Duration = Duration::from_secs(20);
/// How often a run renews its registry and looks for registries to adopt.
pub(crate) const TICK: Duration = Duration::from_secs(5);
const ENTRY: u8 = b'e';
const PLACE: u8 = b'p';
/// Entries asked per read.
const PAGE: u64 = 1000;

/// Destination names are letters, digits, `-` and `_` (checked with the configuration).
fn prefix(dest: &str) -> Vec<u8> {
    let mut k = vec![ENTRY];
    k.extend_from_slice(dest.as_bytes());
    k.push(b'/');
    k
}

fn entry_key(dest: &str, seq: u64) -> Vec<u8> {
    let mut k = prefix(dest);
    k.extend_from_slice(format!("{seq:016x}").as_bytes());
    k
}

/// An entry key's destination and sequence number.
fn parse(k: &[u8]) -> Option<(&str, u64)> {
    let rest = k.strip_prefix(&[ENTRY])?;
    let (dest, seq) = rest.split_at(rest.len().checked_sub(17)?);
    let seq = std::str::from_utf8(seq.strip_prefix(b"/")?).ok()?;
    Some((
        std::str::from_utf8(dest).ok()?,
        u64::from_str_radix(seq, 16).ok()?,
    ))
}

fn place_key(oid: &str) -> Vec<u8> {
    let mut k = vec![PLACE];
    k.extend_from_slice(oid.as_bytes());
    k
}

/// The outbox entries of one commit, rendered before its op is built.
#[derive(Default)]
pub(crate) struct Entries {
    set: Vec<(Vec<u8>, Vec<u8>)>,
    names: Vec<(String, u64)>,
}

impl Entries {
    /// `op` with the entries set too.
    pub(crate) fn stamp(&self, op: WriteOp) -> WriteOp {
        if self.set.is_empty() {
            op
        } else {
            op.omap_set(&self.set)
        }
    }

    /// The omap entries, for a commit that builds its op elsewhere (group commit).
    pub(crate) fn omap(&self) -> impl Iterator<Item = (Vec<u8>, Vec<u8>)> + '_ {
        self.set.iter().cloned()
    }
}

/// Where a place is read from, per destination.
#[derive(Default)]
struct Hot {
    /// Destinations with (maybe) entries there, each with the generation of its last mark.
    dests: HashMap<String, u64>,
    /// Adopted: read for every destination not in `done` (those a full scan found empty).
    all: bool,
    done: HashSet<String>,
}

impl Hot {
    fn wants(&self, dest: &str) -> bool {
        self.dests.contains_key(dest) || (self.all && !self.done.contains(dest))
    }
}

#[derive(Default)]
struct State {
    started: bool,
    /// Handed off at a graceful stop ([`Outbox::hand_off`]): no more renewals or adoptions.
    handed_off: bool,
    /// This run's registry object (a new one if another run took the last one over).
    registry: String,
    /// Places named in the current registry.
    registered: HashSet<String>,
    /// Every place this run put entries into (in this registry or an earlier one).
    mine: HashSet<String>,
    /// Registries adopted, with the places each names.
    adopted: BTreeMap<String, Vec<String>>,
    hot: HashMap<String, Hot>,
    /// Where each entry read or written lives: (destination, sequence) -> place.
    located: HashMap<(String, u64), String>,
    generation: u64,
}

impl State {
    fn places(&self) -> BTreeSet<String> {
        let mut p: BTreeSet<String> = self.mine.iter().cloned().collect();
        p.insert(self.registry.clone());
        for (reg, places) in &self.adopted {
            p.insert(reg.clone());
            p.extend(places.iter().cloned());
        }
        p
    }

    fn mark(&mut self, place: &str, dest: &str) {
        self.generation += 1;
        let g = self.generation;
        self.hot
            .entry(place.to_owned())
            .or_default()
            .dests
            .insert(dest.to_owned(), g);
    }
}

pub(crate) struct Outbox {
    io: IoCtx,
    state: Mutex<State>,
    start: tokio::sync::Mutex<()>,
    /// Held by an upkeep round: a hand-off waits for the one in flight, whose renewal would
    /// otherwise land after it.
    ticking: tokio::sync::Mutex<()>,
}

fn stamp(ms: i64) -> String {
    format!("{:020}", ms.max(0))
}

impl Outbox {
    pub(crate) fn new(io: IoCtx) -> Self {
        Outbox {
            io,
            state: Mutex::default(),
            start: tokio::sync::Mutex::new(()),
            ticking: tokio::sync::Mutex::new(()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("outbox state")
    }

    fn registry(&self) -> String {
        self.state().registry.clone()
    }

    /// Makes a registry for this run (a new name each time) and names it in the directory.
    async fn new_registry(&self) -> Result<()> {
        let run: u64 = rand::random();
        let reg = format!("{REGISTRY_PREFIX}{run:016x}");
        let op = WriteOp::new()
            .create(true)
            .setxattr(OWNER, &reg)
            .setxattr(ALIVE, stamp(now_ms()));
        self.io.operate_write(&reg, op).await.map_err(err)?;
        self.io
            .operate_write(DIRECTORY, WriteOp::new().omap_set(&[(reg.as_bytes(), b"")]))
            .await
            .map_err(err)?;
        let mut st = self.state();
        st.registry = reg;
        st.registered.clear();
        Ok(())
    }

    /// Makes this run's registry and starts the task that renews it and adopts gone runs'
    /// registries, once. `me` keeps the task alive no longer than the catalog.
    async fn started(&self, me: &std::sync::Weak<crate::Inner>) -> Result<()> {
        if self.state().started {
            return Ok(());
        }
        let _one = self.start.lock().await;
        if self.state().started {
            return Ok(());
        }
        self.new_registry().await?;
        self.state().started = true;
        let me = me.clone();
        tokio::spawn(async move {
            // The first round at once: a gateway restarting adopts what the run before it
            // handed off (or what a run gone for a lease left) before it waits a tick.
            loop {
                let Some(inner) = me.upgrade() else { return };
                if let Err(e) = inner.outbox.tick().await {
                    tracing::warn!(error = %e, "event outbox upkeep failed; retrying");
                }
                drop(inner);
                tokio::time::sleep(TICK).await;
            }
        });
        tracing::debug!(registry = %self.registry(), "event outbox registry made");
        Ok(())
    }

    /// A write to this run's registry, guarded by its ownership; if another run took it over
    /// (this one stalled past its lease), a new registry is made and the write goes there.
    /// Returns the registry written.
    async fn own_write(&self, op: impl Fn() -> WriteOp) -> Result<String> {
        for _ in 0..2 {
            let reg = self.registry();
            let guarded = op().cmpxattr(OWNER, CmpOp::Eq, &reg);
            match self.io.operate_write(&reg, guarded).await {
                Ok(_) => return Ok(reg),
                Err(e) if lost_race(&e) || e.is_not_found() => {
                    tracing::warn!(registry = %reg, "this gateway's event outbox was taken over (it stalled past its lease): starting a new one");
                    self.new_registry().await?;
                }
                Err(e) => return Err(err(e)),
            }
        }
        Err(lode_catalog::CatalogError::Contended)
    }

    /// Renews this run's registry and the adopted ones, adopts the registries of runs gone,
    /// removes adopted ones that are empty.
    async fn tick(&self) -> Result<()> {
        let _round = self.ticking.lock().await;
        if self.state().handed_off {
            return Ok(());
        }
        let now = now_ms();
        self.own_write(|| WriteOp::new().setxattr(ALIVE, stamp(now)))
            .await?;
        // (A new registry, if the last one was taken over, names no place yet: the next
        // commit to each registers it again.)
        let adopted: Vec<String> = self.state().adopted.keys().cloned().collect();
        let me = self.registry();
        for reg in adopted {
            let op = WriteOp::new()
                .cmpxattr(OWNER, CmpOp::Eq, &me)
                .setxattr(ALIVE, stamp(now));
            match self.io.operate_write(&reg, op).await {
                Ok(_) => self.release_if_empty(&reg).await?,
                Err(e) if lost_race(&e) || e.is_not_found() => {
                    tracing::warn!(registry = %reg, "an adopted event outbox went to another gateway");
                    self.state().adopted.remove(&reg);
                }
                Err(e) => return Err(err(e)),
            }
        }
        let listed = self.io.omap_get_all(DIRECTORY).await.map_err(err)?;
        for (k, _) in listed {
            let reg = String::from_utf8_lossy(&k).into_owned();
            if reg == me || self.state().adopted.contains_key(&reg) {
                continue;
            }
            let r = match self.io.operate_read(&reg, ReadOp::new().getxattrs()).await {
                Err(e) if e.is_not_found() => {
                    // Removed by its adopter, which removes its directory entry next; or
                    // a run that died between the two: the entry alone is forgotten.
                    let op = WriteOp::new().omap_rm_keys(&[reg.as_bytes()]);
                    self.io.operate_write(DIRECTORY, op).await.map_err(err)?;
                    continue;
                }
                r => r.map_err(err)?,
            };
            let owner = r.xattr(OWNER).cloned().unwrap_or_default();
            let alive = r.xattr(ALIVE).cloned().unwrap_or_default();
            let seen: i64 = std::str::from_utf8(&alive)
                .ok()
                .and_then(|a| a.parse().ok())
                .unwrap_or(0);
            if now - seen < LEASE.as_millis() as i64 {
                continue;
            }
            let take = WriteOp::new()
                .cmpxattr(OWNER, CmpOp::Eq, &owner)
                .cmpxattr(ALIVE, CmpOp::Eq, &alive)
                .setxattr(OWNER, &me)
                .setxattr(ALIVE, stamp(now));
            match self.io.operate_write(&reg, take).await {
                Ok(_) => self.adopt(&reg).await?,
                // Another run took it first, or its owner came back.
                Err(e) if lost_race(&e) || e.is_not_found() => {}
                Err(e) => return Err(err(e)),
            }
        }
        Ok(())
    }

    /// A graceful stop: this run's registry and those it adopted are marked as not renewed
    /// since the epoch (each write guarded by this run still owning it), so the next tick of
    /// any live gateway, or of this one's successor at its start, adopts them at once instead
    /// of a [`LEASE`] later. Renewals and adoptions stop. An entry this run was delivering
    /// while it stopped may be delivered again by the adopter (at least once, as after a
    /// stall).
    pub(crate) async fn hand_off(&self) -> Result<()> {
        {
            let mut st = self.state();
            if !st.started || std::mem::replace(&mut st.handed_off, true) {
                return Ok(());
            }
        }
        // A round in flight (renewing, adopting) ends first; none starts after `handed_off`.
        let _round = self.ticking.lock().await;
        let (mine, adopted) = {
            let st = self.state();
            (
                st.registry.clone(),
                st.adopted.keys().cloned().collect::<Vec<_>>(),
            )
        };
        let mut handed = 0;
        for reg in std::iter::once(mine.clone()).chain(adopted) {
            let op = WriteOp::new()
                .cmpxattr(OWNER, CmpOp::Eq, &mine)
                .setxattr(ALIVE, stamp(0));
            match self.io.operate_write(&reg, op).await {
                Ok(_) => handed += 1,
                // Taken over already (this run had stalled), or removed by its adopter.
                Err(e) if lost_race(&e) || e.is_not_found() => {}
                Err(e) => return Err(err(e)),
            }
        }
        tracing::info!(
            registry = %mine,
            handed,
            "event outbox handed off: a live gateway adopts it at its next tick"
        );
        Ok(())
    }

    async fn adopt(&self, reg: &str) -> Result<()> {
        let vals = self.io.omap_get_all(reg).await.map_err(err)?;
        let places: Vec<String> = vals
            .iter()
            .filter(|(k, _)| k.first() == Some(&PLACE))
            .map(|(k, _)| String::from_utf8_lossy(&k[1..]).into_owned())
            .collect();
        tracing::info!(
            registry = reg,
            places = places.len(),
            "adopted the event outbox of a gateway run that is gone"
        );
        let mut st = self.state();
        for p in places.iter().chain(std::iter::once(&reg.to_owned())) {
            let h = st.hot.entry(p.clone()).or_default();
            h.all = true;
            h.done.clear();
        }
        st.adopted.insert(reg.to_owned(), places);
        Ok(())
    }

    /// Removes adopted registry `reg` once neither it nor any place it names holds an entry.
    async fn release_if_empty(&self, reg: &str) -> Result<()> {
        let places = self.state().adopted.get(reg).cloned().unwrap_or_default();
        for p in places.iter().map(String::as_str).chain([reg]) {
            let op = ReadOp::new().omap_get_vals(b"", [ENTRY], 1);
            match self.io.operate_read(p, op).await {
                Err(e) if e.is_not_found() => {}
                r => {
                    if !r
                        .map_err(err)?
                        .omap_vals
                        .unwrap_or_default()
                        .entries
                        .is_empty()
                    {
                        return Ok(());
                    }
                }
            }
        }
        let gone = WriteOp::new()
            .cmpxattr(OWNER, CmpOp::Eq, self.registry())
            .remove();
        match self.io.operate_write(reg, gone).await {
            Ok(_) => {}
            Err(e) if lost_race(&e) || e.is_not_found() => {
                self.state().adopted.remove(reg);
                return Ok(());
            }
            Err(e) => return Err(err(e)),
        }
        self.io
            .operate_write(DIRECTORY, WriteOp::new().omap_rm_keys(&[reg.as_bytes()]))
            .await
            .map_err(err)?;
        self.state().adopted.remove(reg);
        tracing::info!(registry = reg, "an adopted event outbox is empty: removed");
        Ok(())
    }

    /// Renders `changes` (under the draft the current task is armed with; nothing if none)
    /// for a commit to partition `oid`, naming `oid` in this run's registry first.
    pub(crate) async fn entries(
        &self,
        me: &std::sync::Weak<crate::Inner>,
        oid: &str,
        changes: &[Change<'_>],
    ) -> Result<Entries> {
        let Some(draft) = lode_catalog::events::current() else {
            return Ok(Entries::default());
        };
        let rendered = lode_catalog::events::render(Some(&*draft), changes);
        if rendered.is_empty() {
            return Ok(Entries::default());
        }
        self.started(me).await?;
        if !self.state().registered.contains(oid) {
            let reg = self
                .own_write(|| WriteOp::new().omap_set(&[(place_key(oid), b"")]))
                .await?;
            let mut st = self.state();
            if st.registry == reg {
                st.registered.insert(oid.to_owned());
            }
            st.mine.insert(oid.to_owned());
        }
        let mut e = Entries::default();
        for (dest, seq, body) in rendered {
            e.set.push((entry_key(&dest, seq), body));
            e.names.push((dest, seq));
        }
        Ok(e)
    }

    /// The commit that carried `e` to `oid` applied.
    pub(crate) fn stored(&self, oid: &str, e: &Entries) {
        if e.names.is_empty() {
            return;
        }
        let mut st = self.state();
        for (dest, seq) in &e.names {
            st.mark(oid, dest);
            st.located.insert((dest.clone(), *seq), oid.to_owned());
        }
    }

    /// Moves the entries among `vals` (a partition's omap, read before the partition goes) to
    /// this run's registry.
    pub(crate) async fn rescue(
        &self,
        me: &std::sync::Weak<crate::Inner>,
        vals: &[(Vec<u8>, bytes::Bytes)],
    ) -> Result<()> {
        let kept: Vec<(&[u8], &[u8])> = vals
            .iter()
            .filter(|(k, _)| k.first() == Some(&ENTRY))
            .map(|(k, v)| (&k[..], &v[..]))
            .collect();
        if kept.is_empty() {
            return Ok(());
        }
        self.started(me).await?;
        let reg = self.own_write(|| WriteOp::new().omap_set(&kept)).await?;
        let mut st = self.state();
        for (k, _) in kept {
            if let Some((dest, seq)) = parse(k) {
                st.mark(&reg, dest);
                st.located.insert((dest.to_owned(), seq), reg.clone());
            }
        }
        Ok(())
    }

    pub(crate) async fn add(
        &self,
        me: &std::sync::Weak<crate::Inner>,
        dest: &str,
        body: Vec<u8>,
    ) -> Result<u64> {
        self.started(me).await?;
        let seq = lode_catalog::events::next_seq();
        let key = entry_key(dest, seq);
        let reg = self
            .own_write(|| WriteOp::new().omap_set(&[(&key, &body)]))
            .await?;
        let mut st = self.state();
        st.mark(&reg, dest);
        st.located.insert((dest.to_owned(), seq), reg);
        Ok(seq)
    }

    pub(crate) async fn scan(
        &self,
        me: &std::sync::Weak<crate::Inner>,
        dest: &str,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<Outboxed>> {
        self.started(me).await?;
        let (places, generation) = {
            let st = self.state();
            let all = st.places();
            let places: Vec<String> = match after {
                None => all.into_iter().collect(),
                Some(_) => all
                    .into_iter()
                    .filter(|p| st.hot.get(p).is_some_and(|h| h.wants(dest)))
                    .collect(),
            };
            (places, st.generation)
        };
        let pre = prefix(dest);
        let start = after.map(|s| entry_key(dest, s)).unwrap_or_default();
        let reads = places.iter().map(|p| {
            let op = ReadOp::new().omap_get_vals(&start, &pre, limit as u64);
            async move { (p, self.io.operate_read(p, op).await) }
        });
        let mut out = vec![];
        for (p, r) in futures::future::join_all(reads).await {
            let mut st = self.state();
            let found = match r {
                Err(e) if e.is_not_found() => {
                    // A deleted bucket's partition (its entries were moved first): a commit
                    // to a partition made again under its name registers it again.
                    st.registered.remove(p.as_str());
                    st.mine.remove(p.as_str());
                    vec![]
                }
                r => r.map_err(err)?.omap_vals.unwrap_or_default().entries,
            };
            if found.is_empty() {
                if after.is_none()
                    && let Some(h) = st.hot.get_mut(p)
                {
                    if h.dests.get(dest).is_some_and(|g| *g <= generation) {
                        h.dests.remove(dest);
                    }
                    h.done.insert(dest.to_owned());
                }
                continue;
            }
            st.mark(p, dest);
            for (k, v) in found {
                if let Some((_, seq)) = parse(&k) {
                    st.located.insert((dest.to_owned(), seq), p.clone());
                    out.push(Outboxed {
                        seq,
                        body: v.to_vec(),
                    });
                }
            }
        }
        out.sort_by_key(|o| o.seq);
        out.dedup_by_key(|o| o.seq);
        out.truncate(limit);
        Ok(out)
    }

    pub(crate) async fn remove(&self, dest: &str, seqs: &[u64]) -> Result<()> {
        let mut by_place: BTreeMap<String, Vec<Vec<u8>>> = BTreeMap::new();
        {
            let st = self.state();
            for s in seqs {
                if let Some(p) = st.located.get(&(dest.to_owned(), *s)) {
                    by_place
                        .entry(p.clone())
                        .or_default()
                        .push(entry_key(dest, *s));
                }
            }
        }
        for (p, keys) in by_place {
            // Never creates a place that went (a deleted bucket's partition).
            let op = WriteOp::new().assert_exists().omap_rm_keys(&keys);
            match self.io.operate_write(&p, op).await {
                Err(e) if !e.is_not_found() => return Err(err(e)),
                _ => {}
            }
        }
        let mut st = self.state();
        for s in seqs {
            st.located.remove(&(dest.to_owned(), *s));
        }
        Ok(())
    }

    pub(crate) async fn len(&self, me: &std::sync::Weak<crate::Inner>, dest: &str) -> Result<u64> {
        self.started(me).await?;
        let places = self.state().places();
        let pre = prefix(dest);
        let mut n = 0u64;
        for p in places {
            let mut after = vec![];
            loop {
                let op = ReadOp::new().omap_get_vals(&after, &pre, PAGE);
                let page = match self.io.operate_read(&p, op).await {
                    Err(e) if e.is_not_found() => break,
                    r => r.map_err(err)?.omap_vals.unwrap_or_default(),
                };
                n += page.entries.len() as u64;
                match page.entries.last() {
                    Some((k, _)) if page.more => after = k.clone(),
                    _ => break,
                }
            }
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_keys_sort_by_sequence_and_parse_back() {
        let (a, b) = (entry_key("hook", 255), entry_key("hook", 4096));
        assert!(a < b && a.starts_with(&prefix("hook")) && !a.contains(&0));
        assert!(!entry_key("hook-2", 1).starts_with(&prefix("hook")));
        assert_eq!(parse(&b), Some(("hook", 4096)));
        assert_eq!(parse(&entry_key("a_b", u64::MAX)), Some(("a_b", u64::MAX)));
        assert_eq!(parse(b"ohook/0000000000000001"), None);
        assert_eq!(parse(b"e"), None);
    }
}
