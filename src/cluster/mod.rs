//! Everything that talks to the Kubernetes API: the client every command
//! uses (`client`), compact projections of its objects (`project`), the
//! shared watches that feed the router (`watch`), leader election (`leader`),
//! the evidence of the API server's clock they gather (`server_time`),
//! and the one write path every gate uses
//! (`patch` builds the conditional patch, `writer` sends it, `executor`
//! carries out a gate's effects within the concurrency limits), and the
//! path every taint nodegate puts on takes (`entrance`; the late-taint net,
//! `net`, and re-gating, `regate`, are its users), and the condition rules'
//! taints (`conditions`).

pub mod client;
pub mod conditions;
pub mod csi;
pub mod entrance;
pub mod executor;
pub mod leader;
pub mod lean;
pub mod net;
pub mod patch;
pub mod project;
pub mod regate;
pub mod relist;
pub mod server_time;
pub mod watch;
pub mod writer;
