//! Everything that talks to the Kubernetes API, as adapters only (no
//! controller state lives here): the client every command uses (`client`),
//! compact projections of its objects (`project`, `lean`), the one reader
//! the one-off commands read the cluster through (`snapshot`), the shared
//! watches that feed the router (`watch`, with `relist`), leader election
//! (`leader`), the evidence of the API server's clock they gather
//! (`server_time`), and the one node writer: `patch` builds every
//! conditional patch, `writer` sends it within leadership, the slots, the
//! rate and the timeout, and is the port the gates and the deciders write
//! through (Events, metrics; `term_read` shares its one fresh node read per
//! leadership term). `entrance` puts backfill's taint. `admission_params`
//! keeps the admission policy's parameters while this replica leads.

pub mod admission_params;
pub mod canary;
pub mod client;
pub mod entrance;
pub mod leader;
pub mod lean;
pub mod patch;
pub mod project;
pub mod relist;
pub mod replace;
pub mod server_time;
pub mod snapshot;
pub mod term_read;
pub mod watch;
pub mod writer;
