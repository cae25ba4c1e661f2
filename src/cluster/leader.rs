//! Leader election on a coordination.k8s.io/v1 Lease, with client-go's
//! meaning of `--lease-duration`, `--renew-deadline` and `--retry-period`
//! (docs/operations.md, High availability). The leader stops writing once
//! `--renew-deadline` has passed since the start of its last successful
//! renewal, before any follower may take the lease (`--lease-duration` after
//! it last saw it change): two replicas never both believe they lead unless
//! their clocks run at very different rates, and even then every write is
//! conditional. This module writes nothing but its own Lease.
//!
//! Why not the kube-lease-manager crate (0.13 supports kube 5): it counts
//! whole seconds only, has no renew deadline (a leader cut off from the API
//! server keeps believing it leads until it reaches the server again), and
//! a follower sleeps until the holder's lease runs out without looking at it,
//! so a released lease is not taken over at once.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use kube::runtime::watcher;
use rand::Rng;
use tokio::sync::{Notify, watch};

use crate::cluster::server_time::ServerTime;
use crate::settings::config::LeaderElection;

mod leadership;
pub use leadership::{LEADER_LOST_AFTER, Leadership};

mod record;
use record::record_duration;
pub use record::{LeaseRecord, identity, may_take, next_record};

/// Runs the election for one Lease.
pub struct Elector {
    api: Api<Lease>,
    name: String,
    namespace: String,
    identity: String,
    lease_duration: Duration,
    renew_deadline: Duration,
    retry_period: Duration,
    /// The record as last read, its resourceVersion, and when (locally) it
    /// last changed.
    observed: Option<(LeaseRecord, String, Instant)>,
    /// The Lease as this replica last wrote it, while no answer since has
    /// shown another write: the next renewal is written on its
    /// resourceVersion without reading first (client-go's fast path).
    written: Option<Lease>,
    /// Where the Lease's server-stamped times go as evidence of the API
    /// server's clock.
    server_time: Arc<ServerTime>,
}

enum Attempt {
    Holding,
    HeldByOther {
        holder: String,
        expires: Instant,
        /// The Lease changed since this replica last read it: its holder
        /// renewed.
        renewed: bool,
    },
    /// Another replica wrote the Lease between our read and our write: the
    /// ordinary race of two followers, not worth a warning.
    Raced(String),
    Failed(String),
}

/// How a phase of [`Elector::run`] ends: `Continue` on to the other phase
/// (leading after campaigning, campaigning again after losing the lease),
/// `Break` when `shutdown` changed (a leader has released the lease by then).
type Phase = ControlFlow<()>;

impl Elector {
    pub fn new(
        client: kube::Client,
        namespace: &str,
        settings: &LeaderElection,
        identity: String,
        server_time: Arc<ServerTime>,
    ) -> Self {
        Elector {
            api: Api::namespaced(client, namespace),
            name: settings.lease_name.clone(),
            namespace: namespace.to_string(),
            identity,
            lease_duration: settings.lease_duration,
            renew_deadline: settings.renew_deadline,
            retry_period: settings.retry_period,
            observed: None,
            written: None,
            server_time,
        }
    }

    fn lease_ref(&self) -> String {
        format!("lease {}/{}", self.namespace, self.name)
    }

    /// Campaigns, leads, and campaigns again after losing the lease, until
    /// `shutdown` changes (or its sender is dropped); then, if leading,
    /// stops writing and releases the lease. `on_gain` runs each time this
    /// replica becomes leader, after `leadership` says so, and again after
    /// any renewal that [`Leadership::renewed`] says the gates must hear of.
    pub async fn run(
        mut self,
        leadership: Arc<Leadership>,
        on_gain: impl Fn() + Send,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let changed = Arc::new(Notify::new());
        let changes = watch_lease(self.api.clone(), self.name.clone(), Arc::clone(&changed));
        let lease_watch = tokio::spawn(changes);
        leadership.watching(self.lease_ref(), self.lease_duration);
        tracing::info!(identity = %self.identity, lease = %self.lease_ref(), "campaigning for leadership");
        loop {
            let campaign = self.campaign(&leadership, &on_gain, &mut shutdown, &changed);
            if campaign.await.is_break() {
                break;
            }
            let lead = self.lead(&leadership, &on_gain, &mut shutdown);
            if lead.await.is_break() {
                break;
            }
        }
        lease_watch.abort();
    }

    /// Follower: tries now, then whenever the lease changes, the lease we saw
    /// would expire, or a (jittered) retry period passed, until this replica
    /// holds the lease (`Continue`, `leadership` set and `on_gain` run)
    /// or `shutdown` changes.
    async fn campaign(
        &mut self,
        leadership: &Leadership,
        on_gain: &(impl Fn() + Send),
        shutdown: &mut watch::Receiver<bool>,
        changed: &Notify,
    ) -> Phase {
        loop {
            let started = Instant::now();
            // How long to wait, and whether a change of the Lease ends the wait.
            let (wait, on_change) = match self.try_acquire_or_renew().await {
                Attempt::Holding => {
                    leadership.renewed(started, Instant::now(), started + self.renew_deadline);
                    tracing::info!(identity = %self.identity, lease = %self.lease_ref(), "became leader");
                    on_gain();
                    return Phase::Continue(());
                }
                Attempt::HeldByOther {
                    holder,
                    expires,
                    renewed,
                } => {
                    tracing::debug!(%holder, "lease held by another replica");
                    if renewed && !holder.is_empty() {
                        leadership.saw_holder_alive();
                    } else {
                        leadership.saw_trouble(format!(
                            "the lease is held by {holder:?}, which has not renewed it since this replica started watching"
                        ));
                    }
                    (self.follower_wait(Some(expires)), true)
                }
                Attempt::Raced(why) => {
                    tracing::debug!(lease = %self.lease_ref(), %why, "lost a race for the lease");
                    // Another replica wrote the Lease: it is alive.
                    leadership.saw_holder_alive();
                    (self.follower_wait(None), true)
                }
                Attempt::Failed(error) => {
                    tracing::warn!(lease = %self.lease_ref(), %error, "cannot acquire the lease; retrying");
                    leadership.saw_trouble(format!("this replica cannot acquire it: {error}"));
                    (self.follower_wait(None), false)
                }
            };
            tokio::select! {
                _ = shutdown.changed() => return Phase::Break(()),
                _ = changed.notified(), if on_change => {}
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Leader: renews every retry period until the lease is lost — another
    /// holder, or no renewal within the renew deadline — (`Continue`,
    /// `leadership` stepped down) or `shutdown` changes: then it stops
    /// writing and releases the lease.
    async fn lead(
        &mut self,
        leadership: &Leadership,
        on_gain: &(impl Fn() + Send),
        shutdown: &mut watch::Receiver<bool>,
    ) -> Phase {
        loop {
            tokio::select! {
                _ = shutdown.changed() => {
                    // Stop writing first: the lease must never be free
                    // while this replica could still write.
                    leadership.step_down();
                    // Logged before the release: a follower may take the
                    // lease (and say so) before the release's answer lands.
                    tracing::info!(lease = %self.lease_ref(), "stopped leading (shutting down); releasing the lease");
                    self.release().await;
                    return Phase::Break(());
                }
                _ = tokio::time::sleep(self.retry_period) => {}
            }
            let started = Instant::now();
            match self.try_acquire_or_renew().await {
                Attempt::Holding => {
                    // A renewal that lands after the deadline lapsed is
                    // still safe (the write was conditional), but gates
                    // refused meanwhile must hear they may write again.
                    // The lapse is judged when the answer lands, not when
                    // the request left (Lease requests can take seconds).
                    let answered = Instant::now();
                    if leadership.renewed(started, answered, started + self.renew_deadline) {
                        tracing::info!(lease = %self.lease_ref(), "leading again after a late renewal or a refused write");
                        on_gain();
                    }
                }
                Attempt::HeldByOther { holder, .. } => {
                    leadership.step_down();
                    tracing::warn!(%holder, lease = %self.lease_ref(), "lost leadership: the lease has another holder");
                    return Phase::Continue(());
                }
                Attempt::Raced(error) | Attempt::Failed(error) => {
                    if leadership.is_leader() {
                        tracing::warn!(lease = %self.lease_ref(), %error, "cannot renew the lease; retrying");
                    } else {
                        leadership.step_down();
                        tracing::warn!(
                            lease = %self.lease_ref(),
                            %error,
                            renew_deadline = ?self.renew_deadline,
                            "lost leadership: no renewal within the renew deadline"
                        );
                        return Phase::Continue(());
                    }
                }
            }
        }
    }

    /// How long a follower sleeps: a retry period with up to 20% jitter (so
    /// replicas do not move in step), but no later than just after the lease
    /// it saw expires.
    fn follower_wait(&self, expires: Option<Instant>) -> Duration {
        let jitter = self
            .retry_period
            .mul_f64(rand::rng().random_range(0.0..0.2));
        let retry = self.retry_period + jitter;
        let expiry = expires.map(|at| at.saturating_duration_since(Instant::now()));
        expiry.map_or(retry, |e| retry.min(e + Duration::from_millis(1)))
    }

    /// One conditional write on the Lease this replica last wrote; or, when
    /// it has none or the server refuses that write, one read and, when this
    /// replica may hold the lease, one conditional write. Bounded by the
    /// renew deadline.
    async fn try_acquire_or_renew(&mut self) -> Attempt {
        let deadline = self.renew_deadline;
        let attempt = tokio::time::timeout(deadline, self.attempt()).await;
        attempt.unwrap_or_else(|_| {
            Attempt::Failed(format!("no answer from the API server within {deadline:?}"))
        })
    }

    async fn attempt(&mut self) -> Attempt {
        if let Some(renewal) = self.renew_written().await {
            return renewal;
        }
        let lease = match self.api.get_opt(&self.name).await {
            Ok(Some(l)) => l,
            Ok(None) => return self.create().await,
            Err(e) => return Attempt::Failed(format!("reading {}: {e}", self.lease_ref())),
        };
        // Only the Lease's creationTimestamp is evidence here (semantics.md
        // §5.3): its managedFields may have been written by anyone with
        // write access to it.
        self.server_time.saw_object(&lease.metadata);
        let record = LeaseRecord::from_lease(&lease);
        let version = lease.metadata.resource_version.clone().unwrap_or_default();
        let now = Instant::now();
        let (renewed, observed_at) = match &self.observed {
            Some((_, v, at)) if *v == version => (false, *at),
            seen => (seen.is_some(), now),
        };
        self.observed = Some((record.clone(), version.clone(), observed_at));
        if !may_take(
            &record,
            &self.identity,
            observed_at,
            self.lease_duration,
            now,
        ) {
            return Attempt::HeldByOther {
                expires: observed_at + record_duration(&record, self.lease_duration),
                holder: record.holder,
                renewed,
            };
        }
        let mut updated = lease;
        updated.spec = Some(self.record_now(Some(&record)));
        // `replace` sends the resourceVersion just read: a concurrent writer
        // makes this a 409, never a lost update.
        let params = PostParams::default();
        match self.api.replace(&self.name, &params, &updated).await {
            Ok(written) => self.holding(&written),
            Err(kube::Error::Api(e)) if e.code == 409 => Attempt::Raced(format!(
                "{} changed while this replica was writing it",
                self.lease_ref()
            )),
            Err(e) => Attempt::Failed(format!("updating {}: {e}", self.lease_ref())),
        }
    }

    /// The renewal without a read: the Lease as this replica last wrote it,
    /// renewed, written on that resourceVersion. The server takes it only
    /// if nobody wrote the Lease since, so it still names this replica, as
    /// a read would have shown. Halves a renewal's requests: under a loaded
    /// API server, a read and a write answered slowly one after the other
    /// could outlast the renew deadline where one write does not.
    ///
    /// `None` when there is nothing to renew this way, or when the server
    /// refused the write ([`read_after`]: 409, someone else wrote or
    /// deleted the Lease — the object keeps its uid, which a re-created
    /// Lease does not have —, or any other 4xx): the caller reads and
    /// decides as a follower would, so a renewal after another client's
    /// write is a write, a read and a write, all within the renew deadline.
    /// When the server is overloaded or failing (429, 5xx) or did not answer
    /// (a broken connection, the deadline), the attempt fails and the
    /// written Lease is kept, adding no read to the load: if the write did
    /// land, the next try is a 409 and reads.
    async fn renew_written(&mut self) -> Option<Attempt> {
        let mut renewed = self.written.clone()?;
        let record = LeaseRecord::from_lease(&renewed);
        renewed.spec = Some(self.record_now(Some(&record)));
        match self
            .api
            .replace(&self.name, &PostParams::default(), &renewed)
            .await
        {
            Ok(written) => Some(self.holding(&written)),
            Err(e) if read_after(&e) => {
                tracing::debug!(lease = %self.lease_ref(), error = %e, "renewal without a read refused; reading the lease");
                self.written = None;
                None
            }
            Err(e) => Some(Attempt::Failed(format!(
                "updating {}: {e}",
                self.lease_ref()
            ))),
        }
    }

    async fn create(&mut self) -> Attempt {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                namespace: Some(self.namespace.clone()),
                ..Default::default()
            },
            spec: Some(self.record_now(None)),
        };
        match self.api.create(&PostParams::default(), &lease).await {
            Ok(written) => self.holding(&written),
            Err(kube::Error::Api(e)) if e.code == 409 => Attempt::Raced(format!(
                "{} was created by another replica meanwhile",
                self.lease_ref()
            )),
            Err(kube::Error::Api(e)) if e.code == 404 => Attempt::Failed(format!(
                "cannot create {}: namespace {} does not exist (set --lease-namespace)",
                self.lease_ref(),
                self.namespace
            )),
            Err(e) => Attempt::Failed(format!("creating {}: {e}", self.lease_ref())),
        }
    }

    fn record_now(&self, old: Option<&LeaseRecord>) -> LeaseSpec {
        next_record(old, &self.identity, self.lease_duration, Timestamp::now())
    }

    fn holding(&mut self, written: &Lease) -> Attempt {
        // This replica's own write: its managedFields entry was just stamped
        // by the server (semantics.md §5.3).
        self.server_time.saw_own_write(&written.metadata);
        let version = written.metadata.resource_version.clone();
        let record = LeaseRecord::from_lease(written);
        self.observed = Some((record, version.unwrap_or_default(), Instant::now()));
        self.written = Some(written.clone());
        Attempt::Holding
    }

    /// Empties the holder (client-go's release) if this replica still holds
    /// the lease, so a follower may take it at once. Best effort, bounded:
    /// if it fails, the followers wait for the lease to expire.
    async fn release(&mut self) {
        self.written = None;
        let release = async {
            let mut lease = match self.api.get_opt(&self.name).await {
                Ok(Some(l)) => l,
                Ok(None) => return Ok(()),
                Err(e) => return Err(format!("reading {}: {e}", self.lease_ref())),
            };
            let Some(spec) = lease.spec.as_mut() else {
                return Ok(());
            };
            if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
                return Ok(());
            }
            spec.holder_identity = None;
            spec.lease_duration_seconds = Some(1);
            spec.renew_time = Some(MicroTime(Timestamp::now()));
            self.api
                .replace(&self.name, &PostParams::default(), &lease)
                .await
                .map(|_| ())
                .map_err(|e| format!("updating {}: {e}", self.lease_ref()))
        };
        match tokio::time::timeout(self.renew_deadline, release).await {
            Ok(Ok(())) => tracing::info!(lease = %self.lease_ref(), "released the lease"),
            Ok(Err(error)) => {
                tracing::warn!(%error, "cannot release the lease; followers wait for it to expire");
            }
            Err(_) => tracing::warn!(
                lease = %self.lease_ref(),
                "releasing the lease timed out; followers wait for it to expire"
            ),
        }
    }
}

/// Whether a refused renewal without a read is followed by a read: the API
/// server answered, and not because it is overloaded or failing (429, 5xx).
fn read_after(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(s) if s.code != 429 && s.code < 500)
}

/// Wakes the campaign whenever the Lease changes, so a released lease is
/// taken over at once rather than at the next retry. Without it (e.g. no
/// RBAC to watch Leases) the election still works, by polling.
async fn watch_lease(api: Api<Lease>, name: String, changed: Arc<Notify>) {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut stream = watcher::watcher(api, config).boxed();
    let mut warned = false;
    while let Some(event) = stream.next().await {
        match event {
            Ok(_) => changed.notify_one(),
            Err(error) => {
                if !std::mem::replace(&mut warned, true) {
                    tracing::warn!(%error, "cannot watch the lease; relying on --retry-period polling");
                }
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests;
