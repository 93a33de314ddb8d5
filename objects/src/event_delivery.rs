//! Delivery of bucket events: one worker per destination reads its outbox (written in the same
//! commits as the changes, `lode_catalog::events`) oldest first, sends each entry through the
//! destination's [`EventTarget`] one at a time (so the events of a key arrive in order), retries
//! a failed send with backoff (0.1 s doubling to 30 s) without skipping it, and removes what
//! was delivered. An entry is removed only after its send succeeded: a crash in between sends
//! it again (at least once). A destination that stays down builds a backlog up to its
//! `max_backlog`; past it, the oldest entries are dropped (and counted) or, per destination,
//! writes that would add one are refused ([`Deliveries::refusing`]).
//!
//! Destinations are the operator's (`lode.toml`, fixed for the process) and the topics made
//! through the SNS-compatible API ([`crate::topics`]): [`Deliveries::sync_topics`] starts a
//! worker for each new topic and stops the worker of each topic removed (its undelivered
//! entries are dropped: nothing can deliver them any more).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use lode_catalog::Catalog;

/// Where a destination's events go (an HTTP webhook; the binary provides it).
#[async_trait::async_trait]
pub trait EventTarget: Send + Sync {
    /// Sends one event message; an error (its reason, for the log and status) is retried.
    async fn send(&self, body: &[u8]) -> Result<(), String>;
}

/// How one destination behaves.
pub struct DestinationConfig {
    pub name: String,
    /// `webhook`, for the status.
    pub kind: String,
    pub target: Arc<dyn EventTarget>,
    pub max_backlog: u64,
    /// When full: refuse writes (`true`) or drop the oldest entries.
    pub refuse_when_full: bool,
    /// A send that takes longer failed.
    pub timeout: Duration,
}

/// Running totals of one destination (metrics, `lode admin notify status`).
#[derive(Default)]
pub struct DestinationStats {
    /// Entries waiting (as last counted: exact when the worker is idle or failing).
    pub backlog: AtomicU64,
    pub delivered: AtomicU64,
    /// Entries that needed more than one attempt.
    pub retried: AtomicU64,
    /// Failed attempts.
    pub failed: AtomicU64,
    /// Entries dropped because the backlog was full.
    pub dropped: AtomicU64,
    pub last_error: std::sync::Mutex<String>,
}

/// One destination and its worker's state.
pub struct Destination {
    pub cfg: DestinationConfig,
    pub stats: DestinationStats,
    wake: tokio::sync::Notify,
    /// The lowest sequence number committed since the worker last read the outbox
    /// (`u64::MAX`: none). Sequence numbers are taken inside commits, so one can commit after
    /// a higher one was delivered: the worker reads from here then, not only past the last
    /// one it delivered. (It reads from past its last delivery otherwise: a queue read from
    /// its start would step over every delivered entry's tombstone, as RocksDB keeps them
    /// until compaction.)
    floor: AtomicU64,
    /// Makes the message to send from an outbox entry.
    expand: fn(&[u8]) -> Vec<u8>,
    /// The topic it was made from (`None`: a `lode.toml` destination).
    topic: Option<crate::topics::Topic>,
    /// A removed or changed topic's worker stops.
    stopped: AtomicBool,
    /// ... and, the topic removed, drops what it had not delivered.
    drop_backlog: AtomicBool,
    /// The gateway is stopping ([`Deliveries::halt`]): the worker ends, its backlog kept.
    halted: AtomicBool,
}

impl Destination {
    fn new(cfg: DestinationConfig, topic: Option<crate::topics::Topic>) -> Self {
        Destination {
            cfg,
            stats: DestinationStats::default(),
            wake: tokio::sync::Notify::new(),
            floor: AtomicU64::new(u64::MAX),
            expand: crate::bucket_events::expand,
            topic,
            stopped: AtomicBool::new(false),
            drop_backlog: AtomicBool::new(false),
            halted: AtomicBool::new(false),
        }
    }
}

/// Makes a topic's destination (its `push-endpoint` and attributes), or says why not.
pub type TopicTargets =
    Box<dyn Fn(&crate::topics::Topic) -> Result<DestinationConfig, String> + Send + Sync>;

/// A destination's figures as `lode admin notify status` shows them.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DestinationStatus {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub queue_arn: String,
    pub topic_arn: String,
    pub backlog: u64,
    pub max_backlog: u64,
    pub when_full: &'static str,
    pub delivered: u64,
    pub retried: u64,
    pub failed: u64,
    pub dropped: u64,
    pub last_error: String,
}

/// Every destination: the configured ones and the topics.
#[derive(Default)]
pub struct Deliveries {
    dests: RwLock<BTreeMap<String, Arc<Destination>>>,
    /// The names of `lode.toml`'s destinations (a topic may not take one).
    fixed: BTreeSet<String>,
    /// The outbox the workers read, once started.
    catalog: OnceLock<Arc<dyn Catalog>>,
    /// How a topic becomes a destination (the binary knows the targets).
    topic_targets: OnceLock<TopicTargets>,
    /// The region events name (`awsRegion`).
    pub region: String,
    /// Stopping: no worker starts any more ([`Deliveries::halt`]).
    halted: AtomicBool,
}

impl Deliveries {
    pub fn new(cfgs: Vec<DestinationConfig>, region: &str) -> Self {
        let fixed = cfgs.iter().map(|c| c.name.clone()).collect();
        let dests = cfgs
            .into_iter()
            .map(|cfg| (cfg.name.clone(), Arc::new(Destination::new(cfg, None))))
            .collect();
        Deliveries {
            dests: RwLock::new(dests),
            fixed,
            catalog: OnceLock::new(),
            topic_targets: OnceLock::new(),
            region: region.to_owned(),
            halted: AtomicBool::new(false),
        }
    }

    fn dests(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Arc<Destination>>> {
        self.dests.read().expect("destinations")
    }

    /// Whether `name` is a destination (configured, or a topic).
    pub fn known(&self, name: &str) -> bool {
        self.dests().contains_key(name)
    }

    /// Whether `name` is one of `lode.toml`'s destinations.
    pub fn is_fixed(&self, name: &str) -> bool {
        self.fixed.contains(name)
    }

    pub fn is_empty(&self) -> bool {
        self.dests().is_empty()
    }

    /// Sets how topics become destinations (once).
    pub fn set_topic_targets(&self, f: TopicTargets) {
        let _ = self.topic_targets.set(f);
    }

    /// What `topic` would be as a destination (checks its attributes).
    pub fn topic_destination(
        &self,
        topic: &crate::topics::Topic,
    ) -> Result<DestinationConfig, String> {
        match self.topic_targets.get() {
            Some(f) => f(topic),
            None => Err("topics are not available here".into()),
        }
    }

    /// Makes the topic destinations `topics` (all there are): a worker for each new or changed
    /// one, none any more for each gone.
    pub fn sync_topics(&self, topics: &[crate::topics::Topic]) {
        let mut dests = self.dests.write().expect("destinations");
        // (Checked under the lock `halt` takes after setting it: either this sees it, or
        // `halt` sees what this adds.)
        if self.halted.load(Ordering::Acquire) {
            return;
        }
        let want: BTreeMap<&str, &crate::topics::Topic> =
            topics.iter().map(|t| (t.name.as_str(), t)).collect();
        let gone: Vec<String> = dests
            .iter()
            .filter(|(n, d)| {
                d.topic.is_some()
                    && want
                        .get(n.as_str())
                        .is_none_or(|t| d.topic.as_ref() != Some(t))
            })
            .map(|(n, _)| n.clone())
            .collect();
        for n in gone {
            if let Some(d) = dests.remove(&n) {
                // A changed topic (SetTopicAttributes) keeps its entries for its new worker.
                let removed = !want.contains_key(n.as_str());
                d.drop_backlog.store(removed, Ordering::Relaxed);
                d.stopped.store(true, Ordering::Relaxed);
                d.wake.notify_one();
            }
        }
        for (name, t) in want {
            if dests.contains_key(name) || self.fixed.contains(name) {
                continue;
            }
            match self.topic_destination(t) {
                Ok(cfg) => {
                    let d = Arc::new(Destination::new(cfg, Some(t.clone())));
                    if let Some(c) = self.catalog.get() {
                        tokio::spawn(run(Arc::clone(&d), Arc::clone(c)));
                    }
                    dests.insert(name.to_owned(), d);
                }
                Err(e) => {
                    tracing::warn!(topic = name, error = %e, "a topic's endpoint is unusable here; it gets no events")
                }
            }
        }
    }

    /// New entries were committed: (destination, sequence number) each.
    pub fn committed(&self, entries: &[(String, u64)]) {
        let dests = self.dests();
        for (n, seq) in entries {
            if let Some(d) = dests.get(n) {
                d.stats.backlog.fetch_add(1, Ordering::Relaxed);
                d.floor.fetch_min(*seq, Ordering::Relaxed);
                d.wake.notify_one();
            }
        }
    }

    /// The first of `names` whose backlog is full and which refuses writes then.
    pub fn refusing<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
        let dests = self.dests();
        names.into_iter().find(|n| {
            dests.get(*n).is_some_and(|d| {
                d.cfg.refuse_when_full
                    && d.stats.backlog.load(Ordering::Relaxed) >= d.cfg.max_backlog
            })
        })
    }

    pub fn status(&self) -> Vec<DestinationStatus> {
        use crate::bucket_events::{RuleKind, arn_of};
        self.dests()
            .values()
            .map(|d| {
                let s = &d.stats;
                DestinationStatus {
                    name: d.cfg.name.clone(),
                    kind: d.cfg.kind.clone(),
                    queue_arn: arn_of(&d.cfg.name, RuleKind::Queue),
                    topic_arn: arn_of(&d.cfg.name, RuleKind::Topic),
                    backlog: s.backlog.load(Ordering::Relaxed),
                    max_backlog: d.cfg.max_backlog,
                    when_full: if d.cfg.refuse_when_full {
                        "refuse"
                    } else {
                        "drop_oldest"
                    },
                    delivered: s.delivered.load(Ordering::Relaxed),
                    retried: s.retried.load(Ordering::Relaxed),
                    failed: s.failed.load(Ordering::Relaxed),
                    dropped: s.dropped.load(Ordering::Relaxed),
                    last_error: s.last_error.lock().expect("last error").clone(),
                }
            })
            .collect()
    }

    /// A graceful stop: every worker ends at its next step (a delivery in flight completes),
    /// nothing undelivered is dropped, and no topic starts a worker any more. The outbox then
    /// goes to the other gateways ([`lode_catalog::Catalog::hand_off`]).
    pub fn halt(&self) {
        self.halted.store(true, Ordering::Release);
        for d in self.dests().values() {
            d.halted.store(true, Ordering::Release);
            d.wake.notify_one();
        }
    }

    /// Starts one worker per destination over `catalog`'s outbox (on the current runtime).
    pub fn start(&self, catalog: Arc<dyn Catalog>) {
        if self.catalog.set(Arc::clone(&catalog)).is_err() {
            return;
        }
        for d in self.dests().values() {
            tokio::spawn(run(Arc::clone(d), Arc::clone(&catalog)));
        }
    }
}

/// Entries read from the outbox at once.
const BATCH: usize = 64;
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// An idle worker looks at its outbox this often even unwoken (entries another process, or a
/// commit whose wake-up was lost, added).
const IDLE_POLL: Duration = Duration::from_secs(1);
/// The worker reads its whole outbox (not only past its last delivery) at least this often.
const WHOLE_READ_EVERY: Duration = Duration::from_secs(30);

async fn run(d: Arc<Destination>, catalog: Arc<dyn Catalog>) {
    let name = d.cfg.name.clone();
    if let Ok(n) = catalog.outbox_len(&name).await {
        d.stats.backlog.store(n, Ordering::Relaxed);
    }
    // The last sequence number delivered (`None`: read from the start: at start, entries of
    // an earlier run wait).
    let mut cursor = None;
    let mut whole_read = tokio::time::Instant::now();
    loop {
        if d.halted.load(Ordering::Acquire) {
            tracing::debug!(destination = %name, "the gateway is stopping: its delivery worker ends");
            return;
        }
        if d.stopped.load(Ordering::Relaxed) {
            // A removed topic: what it had not delivered can never be.
            if d.drop_backlog.load(Ordering::Relaxed)
                && let Ok(n) = catalog.outbox_len(&name).await
                && n > 0
            {
                let _ = drop_oldest(&d, &*catalog, n).await;
            }
            tracing::info!(destination = %name, "topic removed or changed: its delivery worker stops");
            return;
        }
        if whole_read.elapsed() >= WHOLE_READ_EVERY {
            // A safety net beside `floor`: a commit whose request was dropped (its client went
            // away) while the commit went on never names its entries' sequence numbers, and one
            // below the cursor would wait for a restart.
            cursor = None;
            whole_read = tokio::time::Instant::now();
        }
        if let Err(e) = deliver_some(&d, &*catalog, &mut cursor).await {
            tracing::warn!(destination = %name, error = %e, "event outbox unreadable; retrying");
            tokio::time::sleep(IDLE_POLL).await;
        }
    }
}

/// Reads one batch and delivers it (waits when there is none).
async fn deliver_some(
    d: &Destination,
    catalog: &dyn Catalog,
    cursor: &mut Option<u64>,
) -> lode_catalog::Result<()> {
    let name = &d.cfg.name;
    let floor = d.floor.swap(u64::MAX, Ordering::Relaxed);
    let after = match *cursor {
        Some(c) if floor <= c => floor.checked_sub(1),
        c => c,
    };
    let batch = match catalog.outbox_scan(name, after, BATCH).await {
        Ok(b) => b,
        Err(e) => {
            d.floor.fetch_min(floor, Ordering::Relaxed);
            return Err(e);
        }
    };
    if batch.is_empty() {
        if after.is_none() {
            d.stats.backlog.store(0, Ordering::Relaxed);
        }
        let _ = tokio::time::timeout(IDLE_POLL, d.wake.notified()).await;
        return Ok(());
    }
    let mut done = vec![];
    for e in batch {
        let message = (d.expand)(&e.body);
        let mut attempt = 0u32;
        loop {
            let r = match tokio::time::timeout(d.cfg.timeout, d.cfg.target.send(&message)).await {
                Ok(r) => r,
                Err(_) => Err(format!("no answer in {:?}", d.cfg.timeout)),
            };
            match r {
                Ok(()) => {
                    d.stats.delivered.fetch_add(1, Ordering::Relaxed);
                    if attempt > 0 {
                        d.stats.retried.fetch_add(1, Ordering::Relaxed);
                    }
                    done.push(e.seq);
                    *cursor = Some(cursor.map_or(e.seq, |c| c.max(e.seq)));
                    break;
                }
                Err(why) => {
                    d.stats.failed.fetch_add(1, Ordering::Relaxed);
                    if attempt == 0 {
                        tracing::warn!(destination = %name, error = %why, "event delivery failed; retrying");
                    }
                    *d.stats.last_error.lock().expect("last error") = why;
                    // What was delivered goes now: a long outage must not resend it.
                    remove(d, catalog, &mut done).await?;
                    let backlog = catalog.outbox_len(name).await?;
                    d.stats.backlog.store(backlog, Ordering::Relaxed);
                    if !d.cfg.refuse_when_full && backlog > d.cfg.max_backlog {
                        let dropped = drop_oldest(d, catalog, backlog - d.cfg.max_backlog).await?;
                        if dropped.contains(&e.seq) {
                            // This one went with them: read the outbox again.
                            return Ok(());
                        }
                    }
                    if d.stopped.load(Ordering::Relaxed) {
                        return Ok(());
                    }
                    let backoff = Duration::from_millis(100u64 << attempt.min(9)).min(MAX_BACKOFF);
                    attempt += 1;
                    tokio::time::sleep(backoff).await;
                }
            }
        }
    }
    remove(d, catalog, &mut done).await
}

async fn remove(
    d: &Destination,
    catalog: &dyn Catalog,
    done: &mut Vec<u64>,
) -> lode_catalog::Result<()> {
    if done.is_empty() {
        return Ok(());
    }
    catalog.outbox_remove(&d.cfg.name, done).await?;
    let n = done.len() as u64;
    let _ = d
        .stats
        .backlog
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| {
            Some(b.saturating_sub(n))
        });
    done.clear();
    Ok(())
}

/// Drops the `n` oldest entries of the destination's outbox; returns their sequence numbers.
async fn drop_oldest(
    d: &Destination,
    catalog: &dyn Catalog,
    n: u64,
) -> lode_catalog::Result<Vec<u64>> {
    let name = &d.cfg.name;
    let mut gone = vec![];
    while (gone.len() as u64) < n {
        let want = ((n - gone.len() as u64) as usize).min(1024);
        let page = catalog
            .outbox_scan(name, gone.last().copied(), want)
            .await?;
        if page.is_empty() {
            break;
        }
        let seqs: Vec<u64> = page.iter().map(|e| e.seq).collect();
        catalog.outbox_remove(name, &seqs).await?;
        gone.extend(seqs);
    }
    d.stats
        .dropped
        .fetch_add(gone.len() as u64, Ordering::Relaxed);
    let _ = d
        .stats
        .backlog
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| {
            Some(b.saturating_sub(gone.len() as u64))
        });
    tracing::warn!(destination = %name, dropped = gone.len(), "event backlog full: oldest events dropped");
    Ok(gone)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Fails while `down`, records what it got.
    struct Recorder {
        down: std::sync::atomic::AtomicBool,
        got: Mutex<Vec<Vec<u8>>>,
    }

    #[async_trait::async_trait]
    impl EventTarget for Recorder {
        async fn send(&self, body: &[u8]) -> Result<(), String> {
            if self.down.load(Ordering::Relaxed) {
                return Err("down".into());
            }
            self.got.lock().unwrap().push(body.to_vec());
            Ok(())
        }
    }

    impl Recorder {
        fn bodies(&self) -> Vec<String> {
            let got = self.got.lock().unwrap();
            got.iter()
                .map(|b| String::from_utf8(b.clone()).unwrap())
                .collect()
        }
    }

    fn setup(max: u64, refuse: bool) -> (Arc<Recorder>, Deliveries, Arc<dyn Catalog>) {
        let r = Arc::new(Recorder {
            down: true.into(),
            got: Mutex::new(vec![]),
        });
        let d = Deliveries::new(
            vec![DestinationConfig {
                name: "d".into(),
                kind: "test".into(),
                target: r.clone(),
                max_backlog: max,
                refuse_when_full: refuse,
                timeout: Duration::from_secs(5),
            }],
            "r",
        );
        (r, d, Arc::new(lode_catalog_kv::mem_catalog()))
    }

    #[tokio::test]
    async fn topics_start_and_stop_workers_and_a_removed_one_drops_its_backlog() {
        let (r, d, cat) = setup(100, false);
        let target = r.clone();
        d.set_topic_targets(Box::new(move |t| {
            if t.endpoint().is_empty() {
                return Err("no endpoint".into());
            }
            Ok(DestinationConfig {
                name: t.name.clone(),
                kind: "test".into(),
                target: target.clone(),
                max_backlog: 100,
                refuse_when_full: false,
                timeout: Duration::from_secs(5),
            })
        }));
        d.start(cat.clone());
        let topic = |name: &str, url: &str| crate::topics::Topic {
            name: name.into(),
            attributes: [("push-endpoint".to_owned(), url.to_owned())].into(),
            owner: "root".into(),
        };
        // A topic may not take a configured destination's name; one without an endpoint
        // makes no destination.
        d.sync_topics(&[topic("t", "x"), topic("d", "x"), topic("bad", "")]);
        assert!(d.known("t") && d.is_fixed("d") && !d.is_fixed("t") && !d.known("bad"));
        assert_eq!(d.status().len(), 2);
        for i in 0..3 {
            cat.outbox_add("t", format!("t{i}").into_bytes())
                .await
                .unwrap();
        }
        d.committed(&[("t".into(), 0)]);
        let first = Arc::clone(&d.dests()["t"]);
        until(|| first.stats.failed.load(Ordering::Relaxed) >= 1).await;
        // Changed (new attributes): a new worker, the same entries.
        d.sync_topics(&[topic("t", "y")]);
        let tt = Arc::clone(&d.dests()["t"]);
        assert!(!Arc::ptr_eq(&first, &tt));
        until(|| tt.stats.failed.load(Ordering::Relaxed) >= 1).await;
        assert_eq!(cat.outbox_len("t").await.unwrap(), 3);
        assert_eq!(first.stats.dropped.load(Ordering::Relaxed), 0);
        // Removed while its receiver is down: the worker stops, its entries are dropped.
        d.sync_topics(&[]);
        assert!(!d.known("t") && d.known("d"));
        for _ in 0..500 {
            if cat.outbox_len("t").await.unwrap() == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(cat.outbox_len("t").await.unwrap(), 0);
        assert_eq!(tt.stats.dropped.load(Ordering::Relaxed), 3);
        assert!(r.got.lock().unwrap().is_empty());
    }

    async fn until(f: impl Fn() -> bool) {
        for _ in 0..500 {
            if f() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("condition not reached in 5 s");
    }

    #[tokio::test]
    async fn a_down_destination_gets_every_event_in_order_once_back() {
        let (r, d, cat) = setup(100, false);
        for i in 0..5 {
            cat.outbox_add("d", format!("e{i}").into_bytes())
                .await
                .unwrap();
        }
        d.start(cat.clone());
        let dd = Arc::clone(&d.dests()["d"]);
        let s = &dd.stats;
        until(|| s.failed.load(Ordering::Relaxed) >= 2).await;
        assert!(r.got.lock().unwrap().is_empty());
        r.down.store(false, Ordering::Relaxed);
        until(|| r.got.lock().unwrap().len() == 5).await;
        let got = r.bodies();
        assert_eq!(got, ["e0", "e1", "e2", "e3", "e4"]);
        until(|| s.backlog.load(Ordering::Relaxed) == 0).await;
        assert_eq!(cat.outbox_len("d").await.unwrap(), 0);
        assert_eq!(s.delivered.load(Ordering::Relaxed), 5);
        assert_eq!(s.retried.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn a_full_backlog_drops_its_oldest_or_refuses() {
        let (r, d, cat) = setup(3, false);
        for i in 0..6 {
            cat.outbox_add("d", format!("e{i}").into_bytes())
                .await
                .unwrap();
        }
        d.start(cat.clone());
        let dd = Arc::clone(&d.dests()["d"]);
        let s = &dd.stats;
        until(|| s.dropped.load(Ordering::Relaxed) == 3).await;
        r.down.store(false, Ordering::Relaxed);
        until(|| r.got.lock().unwrap().len() == 3).await;
        let got = r.bodies();
        assert_eq!(got, ["e3", "e4", "e5"]);

        let (_r, d, _cat) = setup(2, true);
        assert_eq!(d.refusing(["d"]), None);
        d.committed(&[("d".into(), 1), ("d".into(), 2)]);
        assert_eq!(d.refusing(["d", "other"]), Some("d"));
    }
}
