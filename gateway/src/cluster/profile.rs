//! Cluster mode: the whole cluster's IO profile on any gateway.
//!
//! Every gateway registers itself in the cluster with a lease and publishes its own profile
//! there, every [`PUBLISH_EVERY`]: the omap of `lode.gateways` (index pool, the namespace's)
//! maps the gateway's id to a small JSON record (its S3 and admin addresses, start time, lease
//! end), and the object `lode.profile.<id>` holds its latest profile snapshot (a plain object
//! written whole: a snapshot is tens of KiB, too large and too often rewritten for omap). Any
//! gateway answers `/api/profile?scope=cluster` by reading the registry, keeping the gateways
//! whose lease has not run out, and adding up their snapshots ([`Snapshot::merge`]). A gateway
//! that stops or dies drops out when its lease ends; a registration long expired is removed,
//! with its snapshot, by whichever gateway notices. The profile is at most one publishing
//! period old.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lode_rados::{IoCtx, ReadOp, WriteOp};
use serde::{Deserialize, Serialize};

use crate::profile::{Profile, Snapshot};

const REGISTRY: &str = "lode.gateways";
/// How often a gateway renews its lease and publishes its profile.
pub const PUBLISH_EVERY: Duration = Duration::from_secs(2);
/// A registration whose lease has not been renewed for this long is no longer counted.
pub const LEASE: Duration = Duration::from_secs(10);
/// A registration expired for this long is removed, with its snapshot.
const FORGET_AFTER: Duration = Duration::from_secs(600);

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// One gateway's registration.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Registration {
    pub id: String,
    pub s3: String,
    pub admin: String,
    pub started_ms: u64,
    pub lease_until_ms: u64,
}

/// This gateway's place in the cluster's registry.
pub struct Registry {
    io: IoCtx,
    me: Registration,
    profile: Arc<Profile>,
}

fn profile_oid(id: &str) -> String {
    format!("lode.profile.{id}")
}

impl Registry {
    /// A registry in `io` (the index pool's namespace) for this gateway.
    pub fn new(io: IoCtx, s3: String, admin: String, profile: Arc<Profile>) -> Self {
        let id = format!("{:016x}", rand::random::<u64>());
        let started_ms = now_ms();
        Self {
            io,
            me: Registration {
                id,
                s3,
                admin,
                started_ms,
                lease_until_ms: 0,
            },
            profile,
        }
    }

    /// This gateway's id in the registry.
    pub fn id(&self) -> &str {
        &self.me.id
    }

    /// Publishes this gateway's profile and renews its lease (profile first: a gateway that
    /// is listed has a snapshot).
    pub async fn publish(&self) -> anyhow::Result<()> {
        let snap = serde_json::to_vec(&self.profile.snapshot())?;
        self.io.write_full(&profile_oid(&self.me.id), snap).await?;
        let mut me = self.me.clone();
        me.lease_until_ms = now_ms() + LEASE.as_millis() as u64;
        let v = serde_json::to_vec(&me)?;
        self.io
            .operate_write(REGISTRY, WriteOp::new().omap_set(&[(me.id.as_bytes(), v)]))
            .await?;
        Ok(())
    }

    /// Publishes every [`PUBLISH_EVERY`] until the process ends.
    pub fn spawn(self: &Arc<Self>) {
        let me = Arc::clone(self);
        tokio::spawn(async move {
            loop {
                if let Err(e) = me.publish().await {
                    tracing::warn!(error = %e, "publishing this gateway's profile failed (retried)");
                }
                tokio::time::sleep(PUBLISH_EVERY).await;
            }
        });
    }

    /// The gateways whose lease is live; removes registrations long expired.
    pub async fn live(&self) -> anyhow::Result<Vec<Registration>> {
        let entries = match self.io.omap_get_all(REGISTRY).await {
            Err(e) if e.is_not_found() => vec![],
            r => r?,
        };
        let now = now_ms();
        let mut live = vec![];
        let mut stale: Vec<Vec<u8>> = vec![];
        for (k, v) in entries {
            let Ok(r) = serde_json::from_slice::<Registration>(&v) else {
                continue;
            };
            if r.lease_until_ms >= now {
                live.push(r);
            } else if now - r.lease_until_ms > FORGET_AFTER.as_millis() as u64 {
                stale.push(k);
                let _ = self.io.remove(&profile_oid(&r.id)).await;
            }
        }
        if !stale.is_empty() {
            let _ = self
                .io
                .operate_write(REGISTRY, WriteOp::new().omap_rm_keys(&stale))
                .await;
        }
        live.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(live)
    }
}

#[async_trait::async_trait]
impl crate::profile::ClusterProfile for Registry {
    async fn cluster_snapshot(&self) -> Result<Snapshot, Box<dyn std::error::Error + Send + Sync>> {
        Ok(self.snapshot_of_live().await?)
    }
}

impl Registry {
    /// The cluster's profile: the snapshots of every live gateway, added up.
    async fn snapshot_of_live(&self) -> anyhow::Result<Snapshot> {
        let live = self.live().await?;
        let mut parts = vec![];
        let mut ids = vec![];
        for r in &live {
            let data = if r.id == self.me.id {
                // This gateway's own, fresh.
                parts.push(self.profile.snapshot());
                ids.push(r.id.clone());
                continue;
            } else {
                match self
                    .io
                    .operate_read(&profile_oid(&r.id), ReadOp::new().stat().read(0, 8 << 20))
                    .await
                {
                    Ok(d) => d.data.unwrap_or_default(),
                    Err(e) if e.is_not_found() => continue,
                    Err(e) => return Err(e.into()),
                }
            };
            match serde_json::from_slice::<Snapshot>(&data) {
                Ok(s) => {
                    parts.push(s);
                    ids.push(r.id.clone());
                }
                Err(e) => {
                    tracing::warn!(gateway = %r.id, error = %e, "an unreadable profile snapshot")
                }
            }
        }
        Ok(Snapshot::merge(&parts, ids))
    }
}
