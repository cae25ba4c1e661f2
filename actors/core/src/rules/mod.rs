//! The rules the vocabulary is written in: where a DaemonSet's pod may run
//! (`placement`), label selectors (`selector`), when a pod is Ready
//! (`readiness`), each pinned to upstream Kubernetes; the startup taint an
//! entrance adds (`startup`); node conditions as members and as taint rules
//! (`conditions`); device members (`devices`). With `vocab` they import
//! nothing above them: `config` holds their settings, so they live here
//! rather than beside the controllers that act on them.

pub mod conditions;
pub mod devices;
pub mod placement;
pub mod readiness;
pub mod selector;
pub mod startup;
