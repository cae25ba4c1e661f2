//! Placement — would this DaemonSet place a pod on this node? — against
//! upstream Kubernetes 1.36: one test binary, one module per subject.
//! `affinity` (node name, nodeSelector, required node affinity), `taints`
//! (tolerations, the DaemonSet controller's default tolerations, transient
//! and managed taints), `evaluate` (exclusions, the steady-state view of
//! taints, how verdicts read) and `props` (properties over generated nodes,
//! templates and configs).

mod affinity;
mod evaluate;
mod props;
mod taints;
