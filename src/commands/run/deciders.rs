//! Starts the deciders beside the gates, each in its own decider shell. The
//! closing and replace deciders always run: what they do follows the
//! configuration in force, which a reload may change; the net
//! (`--taint-new-nodes`) and the canary (`canary`) follow the settings read
//! at start.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use nodegate_actors::decider_shell::{self, Publish};
use nodegate_actors::router::Router;
use nodegate_core::canary::decider::Canaries;
use nodegate_core::closing::decider::Closing;
use nodegate_core::closing::replacing::decider::Replacer;
use nodegate_core::deciders::Decider;
use nodegate_core::net::decider::Net;
use tokio::sync::watch;

use crate::cluster::server_time::SystemClock;
use crate::cluster::writer::Writer;
use crate::serve::metrics::Metrics;
use crate::settings::config::RunSettings;

/// A decider's task, to wait for at shutdown.
pub type Task = Pin<Box<dyn Future<Output = ()> + Send>>;

/// What every decider shell is started with.
struct Shells<'a> {
    router: &'a Arc<Router>,
    executor: &'a Arc<Writer>,
    clock: &'a Arc<SystemClock>,
    stop: &'a watch::Receiver<bool>,
}

impl Shells<'_> {
    fn start<D: Decider>(&self, decider: D, publish: Option<Publish<D>>) -> Task {
        let handle = decider_shell::start(
            decider,
            self.router,
            Arc::clone(self.executor),
            Arc::clone(self.clock),
            publish,
            self.stop.clone(),
        );
        Box::pin(async move {
            let _ = handle.await;
        })
    }
}

/// Starts every decider; their tasks, to wait for at shutdown.
pub fn start(
    settings: &RunSettings,
    router: &Arc<Router>,
    executor: &Arc<Writer>,
    clock: &Arc<SystemClock>,
    metrics: &Arc<Metrics>,
    stop: &watch::Receiver<bool>,
) -> Vec<Task> {
    let shells = Shells {
        router,
        executor,
        clock,
        stop,
    };
    let mut tasks = Vec::new();
    if settings.net.enabled {
        tasks.push(shells.start(Net::new(settings.net.window), None));
    }
    let m = Arc::clone(metrics);
    let gauges: Publish<Closing> = Box::new(move |closing, cx| {
        for (rule, nodes) in closing.rules().matching() {
            m.conditions.matching(&rule, nodes);
        }
        m.regate.regated_ages(&closing.regated_ages(cx));
        m.regate.gauges(closing.regate_gauges(cx));
    });
    tasks.push(shells.start(Closing::default(), Some(gauges)));
    tasks.push(shells.start(Replacer::default(), None));
    if settings.gate.canary.is_some() {
        let m = Arc::clone(metrics);
        // A follower decides nothing about canaries: it reports none.
        let gauges: Publish<Canaries> = Box::new(move |canaries, cx| {
            let (in_flight, waiting) = if cx.may_write {
                (canaries.in_flight(), canaries.waiting().count())
            } else {
                (0, 0)
            };
            m.canary.gauges(in_flight, waiting);
        });
        tasks.push(shells.start(Canaries::default(), Some(gauges)));
    }
    tasks
}
