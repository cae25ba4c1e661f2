//! The rules the core judges by, those from upstream Kubernetes pinned to it
//! (docs/architecture.md, "The core's folders"). With `vocab` they import
//! nothing above them: `config` holds their settings, so they live here
//! rather than beside the controllers that act on them.

pub mod conditions;
pub mod devices;
pub mod placement;
pub mod readiness;
pub mod selector;
pub mod startup;
