//! Splits for load: a partition that is written in one key range while it is read in another
//! is split between the two, so that the reads go to an object nobody writes.
//!
//! A read of a RADOS object waits for the writes in flight on that object (the OSD orders them
//! by its object lock), and each write of an index partition lasts a replicated commit. A
//! dataset read by a training job (HEADs and GETs of `samples/...`) while an ingest writes new
//! keys (`ingest/...`) and checkpoints land (`ckpt/...`) in the same bucket shares one partition
//! until the bucket holds [`crate::PartitionConfig::split_keys`] keys, and every read of a sample
//! queues behind the ingest's commits. RGW does not have this wait (a HEAD reads the object's own
//! head object); Bigtable, Spanner and DynamoDB split a hot range by load the same way as here.
//!
//! Each gateway watches, per partition and per [`WINDOW`], the commits it makes there (the
//! lowest and highest key written) and the point reads it makes there (a sample of their keys).
//! When both are busy ([`MIN_WRITES`], [`MIN_READS`]) and at least 90% of the sampled reads fall
//! above the highest key written (or below the lowest), for [`STREAK`] windows in a row (a load
//! that lasts, not one burst of a benchmark's phases), the partition is split there in the
//! background: above the writes at the shortest boundary past the highest key written
//! ([`separator`]), so that keys written later just above it stay with the writes; below them
//! at the lowest key written. Nothing else changes (the split is the size split's, with its crash
//! safety). A partition is split for load at most once per [`EVERY`] by a gateway, and reads
//! and writes that interleave in one range never split it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The span over which reads and writes are counted.
pub(crate) const WINDOW: Duration = Duration::from_secs(1);
/// Commits in a window for a partition to count as written.
pub(crate) const MIN_WRITES: u32 = 10;
/// Point reads in a window for a partition to count as read.
pub(crate) const MIN_READS: u32 = 50;
/// Windows in a row that must each ask for a split (a load that lasts, not a burst).
pub(crate) const STREAK: u32 = 3;
/// A partition is split for load at most this often (by one gateway).
pub(crate) const EVERY: Duration = Duration::from_secs(60);
/// Read keys sampled per window (the first ones).
const SAMPLE: usize = 32;
/// Longer read keys are counted but not sampled (so a window holds at most 8 KiB of keys).
const SAMPLED_KEY_MAX: usize = 256;
/// At most this many partitions are watched; a further one empties the map (but for the
/// splits running). With [`SAMPLE`], at most 32 MiB in all.
const WATCHED: usize = 4096;

/// The shortest position `s` with `a < s <= b` (`a < b`, escaped keys): `a`'s common prefix
/// with `b` and the next byte up from `a`'s, if that is below `b`'s and the result a valid
/// escaped key; else `b`. A boundary there keeps keys written later just above `a` (the next
/// shard of an ingest, say) on `a`'s side.
pub(crate) fn separator(a: &[u8], b: &[u8]) -> Vec<u8> {
    let n = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    if n < a.len() && n < b.len() && a[n] < 0xff && a[n] + 1 < b[n] {
        let mut s = a[..n].to_vec();
        s.push(a[n] + 1);
        if crate::unesc(&s).is_some() {
            return s;
        }
    }
    b.to_vec()
}

/// One partition's window.
struct Window {
    bucket: String,
    start: Instant,
    writes: u32,
    lo: Vec<u8>,
    hi: Vec<u8>,
    reads: u32,
    sample: Vec<Vec<u8>>,
    last_split: Option<Instant>,
    running: bool,
    /// Windows in a row, up to the last one closed, that asked for a split.
    streak: u32,
}

impl Window {
    fn new(bucket: &str, now: Instant) -> Self {
        Self {
            bucket: bucket.to_owned(),
            start: now,
            writes: 0,
            lo: vec![],
            hi: vec![],
            reads: 0,
            sample: vec![],
            last_split: None,
            running: false,
            streak: 0,
        }
    }

    /// Where the window that just ended asks to split, if anywhere: between the highest key
    /// written and the lowest read above it, or at the lowest key written (reads below it).
    fn judge(&self) -> Option<Vec<u8>> {
        if self.writes < MIN_WRITES || self.reads < MIN_READS || self.sample.is_empty() {
            return None;
        }
        let n = self.sample.len();
        let above = self.sample.iter().filter(|r| **r > self.hi);
        let below = self.sample.iter().filter(|r| **r < self.lo);
        if above.clone().count() * 10 >= n * 9 {
            let first = above.min()?;
            Some(separator(&self.hi, first))
        } else if below.count() * 10 >= n * 9 {
            // At the lowest key written: keys written later above it (an ingest going up)
            // join the writes, and no read of the sample is cut off from the others.
            Some(self.lo.clone())
        } else {
            None
        }
    }
}

/// What this gateway saw of each partition's load lately.
#[derive(Default)]
pub(crate) struct Heat {
    map: Mutex<HashMap<String, Window>>,
}

impl Heat {
    /// Notes a commit (`write`) or a point read of escaped key `pos` in partition `oid`;
    /// returns the bucket and the position at which to split the partition for load now (the
    /// caller splits it, then calls [`Heat::done`]).
    pub(crate) fn note(
        &self,
        bucket: &str,
        oid: &str,
        pos: &[u8],
        write: bool,
    ) -> Option<(String, Vec<u8>)> {
        self.note_at(bucket, oid, pos, write, Instant::now())
    }

    fn note_at(
        &self,
        bucket: &str,
        oid: &str,
        pos: &[u8],
        write: bool,
        now: Instant,
    ) -> Option<(String, Vec<u8>)> {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= WATCHED && !map.contains_key(oid) {
            map.retain(|_, w| w.running);
        }
        // No allocation for a partition already watched (every read and commit passes here).
        if !map.contains_key(oid) {
            map.insert(oid.to_owned(), Window::new(bucket, now));
        }
        let w = map.get_mut(oid).expect("just inserted");
        let mut due = None;
        let took = now.duration_since(w.start);
        if took >= WINDOW {
            // A window stretched by a pause (no op for a while) does not show a sustained load.
            let cut = if took <= 2 * WINDOW { w.judge() } else { None };
            let streak = if cut.is_some() { w.streak + 1 } else { 0 };
            let (last, running) = (w.last_split, w.running);
            *w = Window {
                last_split: last,
                running,
                streak,
                ..Window::new(bucket, now)
            };
            if let Some(c) = cut
                && w.streak >= STREAK
                && !w.running
                && w.last_split.is_none_or(|t| now.duration_since(t) >= EVERY)
            {
                w.running = true;
                w.last_split = Some(now);
                w.streak = 0;
                due = Some((w.bucket.clone(), c));
            }
        }
        if write {
            if w.writes == 0 || pos < w.lo.as_slice() {
                w.lo = pos.to_vec();
            }
            if w.writes == 0 || pos > w.hi.as_slice() {
                w.hi = pos.to_vec();
            }
            w.writes += 1;
        } else {
            w.reads += 1;
            if w.sample.len() < SAMPLE && pos.len() <= SAMPLED_KEY_MAX {
                w.sample.push(pos.to_vec());
            }
        }
        due
    }

    /// How many splits for load are running.
    pub(crate) fn running(&self) -> usize {
        self.map
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .filter(|w| w.running)
            .count()
    }

    /// The split for load of `oid` ended (done or not).
    pub(crate) fn done(&self, oid: &str) {
        if let Some(w) = self
            .map
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(oid)
        {
            w.running = false;
        }
    }

    /// Forgets the partitions of a bucket (deleted), but for splits running.
    pub(crate) fn forget(&self, bucket: &str) {
        self.map
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|_, w| w.bucket != bucket || w.running);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `k` windows from `t` on, each of `writes` commits (keys from `w`) and `reads`
    /// reads (keys from `r`) interleaved (each closed by the next one's first note, which must
    /// ask nothing), then closes the last with one more note; returns what that note asked.
    fn windows(
        h: &Heat,
        t: Instant,
        k: u32,
        writes: u32,
        w: impl Fn(u32) -> String,
        reads: u32,
        r: impl Fn(u32) -> String,
    ) -> Option<(String, Vec<u8>)> {
        for j in 0..k {
            let start = t + WINDOW * j;
            for i in 0..writes.max(reads) {
                let at = if i == 0 { start } else { start + WINDOW / 2 };
                if i < writes {
                    assert_eq!(h.note_at("b", "p", w(i).as_bytes(), true, at), None);
                }
                if i < reads {
                    assert_eq!(h.note_at("b", "p", r(i).as_bytes(), false, at), None);
                }
            }
        }
        h.note_at("b", "p", b"x", false, t + WINDOW * k)
    }

    fn ingest(i: u32) -> String {
        format!("ingest/{i:04}")
    }

    fn samples(i: u32) -> String {
        format!("samples/{i:04}")
    }

    #[test]
    fn reads_above_the_writes_split_past_the_highest_key_written_after_a_streak() {
        let h = Heat::default();
        let t = Instant::now();
        // One window short of the streak asks nothing.
        assert_eq!(windows(&h, t, STREAK - 1, 20, ingest, 100, samples), None);
        let h = Heat::default();
        // Ingest keys written later (`ingest/0020`...) stay below `j`.
        let got = windows(&h, t, STREAK, 20, ingest, 100, samples);
        assert_eq!(got, Some(("b".into(), b"j".to_vec())));
        // Not again while it runs, nor within EVERY of it.
        let t2 = t + WINDOW * (STREAK + 1);
        assert_eq!(windows(&h, t2, STREAK, 20, ingest, 100, samples), None);
        h.done("p");
        let t3 = t2 + WINDOW * (STREAK + 1);
        assert_eq!(windows(&h, t3, STREAK, 20, ingest, 100, samples), None);
        // After EVERY, a load that lasts splits again.
        let t4 = t + EVERY + WINDOW;
        assert!(windows(&h, t4, STREAK, 20, ingest, 100, samples).is_some());
    }

    #[test]
    fn reads_below_the_writes_split_at_the_lowest_key_written() {
        let h = Heat::default();
        let got = windows(
            &h,
            Instant::now(),
            STREAK,
            20,
            |i| format!("shard-{:06}", 5000 + i),
            100,
            |i| format!("shard-{:06}", i * 7),
        );
        assert_eq!(got, Some(("b".into(), b"shard-005000".to_vec())));
    }

    #[test]
    fn a_pause_breaks_the_streak() {
        let t = Instant::now();
        let end = t + WINDOW * (STREAK - 1);
        // Without a pause, one more window completes the streak...
        let h = Heat::default();
        assert_eq!(windows(&h, t, STREAK - 1, 20, ingest, 100, samples), None);
        assert!(windows(&h, end, 1, 20, ingest, 100, samples).is_some());
        // ...after a pause of 5 s it starts over.
        let h = Heat::default();
        assert_eq!(windows(&h, t, STREAK - 1, 20, ingest, 100, samples), None);
        let later = end + Duration::from_secs(5);
        assert_eq!(windows(&h, later, 1, 20, ingest, 100, samples), None);
        assert_eq!(
            windows(&h, later + WINDOW, STREAK - 2, 20, ingest, 100, samples),
            None
        );
    }

    #[test]
    fn separators_are_short_valid_and_between() {
        assert_eq!(separator(b"ingest/ff", b"samples/0"), b"j");
        assert_eq!(separator(b"data/0100", b"data/0500"), b"data/02");
        // No room between the differing bytes, or `a` a prefix of `b`: `b`.
        assert_eq!(separator(b"shard-004950", b"shard-005000"), b"shard-005000");
        assert_eq!(separator(b"ingest", b"ingest/x"), b"ingest/x");
        // Escapes differ in their second byte only (`\0` -> 1 2, `\1` -> 1 3): no room.
        assert_eq!(separator(&[b'a', 1, 2], &[b'a', 1, 3]), vec![b'a', 1, 3]);
        for (a, b) in [(&b"a"[..], &b"b"[..]), (b"ab", b"b"), (b"a\xff", b"b")] {
            let s = separator(a, b);
            assert!(a < s.as_slice() && s.as_slice() <= b, "{a:?} {s:?} {b:?}");
        }
    }

    #[test]
    fn interleaved_or_quiet_ranges_are_not_split() {
        let t = Instant::now();
        let k = STREAK + 2;
        // Reads and writes over the same keys.
        let h = Heat::default();
        let same = windows(
            &h,
            t,
            k,
            50,
            |i| format!("k{:04}", i * 2),
            200,
            |i| format!("k{i:04}"),
        );
        assert_eq!(same, None);
        // Too few writes, or too few reads, in each window.
        let h = Heat::default();
        let few = windows(
            &h,
            t,
            k,
            MIN_WRITES - 1,
            |i| format!("a{i}"),
            200,
            |i| format!("z{i}"),
        );
        assert_eq!(few, None);
        let h = Heat::default();
        let few = windows(
            &h,
            t,
            k,
            50,
            |i| format!("a{i}"),
            MIN_READS - 1,
            |i| format!("z{i}"),
        );
        assert_eq!(few, None);
        // 20% of the reads in the written range.
        let h = Heat::default();
        let mixed = windows(
            &h,
            t,
            k,
            50,
            |i| format!("a{i:03}"),
            100,
            |i| {
                if i % 5 == 0 {
                    format!("a{i:03}")
                } else {
                    format!("z{i:03}")
                }
            },
        );
        assert_eq!(mixed, None);
    }
}
