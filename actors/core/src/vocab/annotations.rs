//! Every `nodegate.dev/*` name nodegate reads or writes (docs/configuration.md,
//! "Annotations"): interface, set by people or read by scripts.

/// The prefix of every annotation nodegate reads and writes on its objects
/// (a projection keeps only a DaemonSet's annotations under it).
pub const PREFIX: &str = "nodegate.dev/";

// On a Node, set by nodegate.

/// When nodegate's untaint patch opened the node (RFC 3339, milliseconds);
/// the late-taint net and backfill leave a node opened before alone.
pub const OPENED_AT: &str = "nodegate.dev/opened-at";

/// Why nodegate opened the node: `ready`, `timeout`, `manual` or `external`.
pub const OPENED_BY: &str = "nodegate.dev/opened-by";

/// The deadline a gate passed with `--on-timeout` keep or replace: the taint
/// stays and this marks the node for a person to look at.
pub const TIMED_OUT: &str = "nodegate.dev/timed-out";

/// When the gate of a node that got its taint after creation started (an
/// entrance or a re-gate wrote it): the deadline counts from here instead of
/// from the node's creationTimestamp.
pub const GATED_SINCE: &str = "nodegate.dev/gated-since";

/// Why nodegate last re-gated the node: the members it waits for again,
/// comma separated, or `reboot`.
pub const REGATED_FOR: &str = "nodegate.dev/regated-for";

/// The `conditionTaints` rules whose taint nodegate put on the node, comma
/// separated, written in the same patch as the taint: `remove: whenCleared`
/// takes off only a taint listed here (a taint someone else put on under
/// the rule's key is theirs).
pub const CONDITION_TAINTS: &str = "nodegate.dev/condition-taints";

/// The boot id (`status.nodeInfo.bootID`, empty if none) the node had when
/// nodegate re-gated it for an announced reboot (semantics.md §6.10): its
/// gate holds until the node reports another and its members are Ready since.
pub const AWAITING_REBOOT: &str = "nodegate.dev/awaiting-reboot";

/// `--on-timeout=replace` (semantics.md §5.8): when nodegate asked the
/// node's owner to replace it (RFC 3339), written before the owner is
/// deleted; what the replace budget counts.
pub const REPLACE_REQUESTED: &str = "nodegate.dev/replace-requested";

/// Why nodegate asked for the replacement: what the node waited for, and
/// what was done (its NodeClaim or Machine deleted, or cordoned).
pub const REPLACE_REASON: &str = "nodegate.dev/replace-reason";

/// `open` or `keep`: nodegate did not replace the node because a member it
/// waits for is broken cluster-wide, and `--replace-fallback` chose this
/// instead. The gate opens the node on `open`.
pub const REPLACE_FALLBACK: &str = "nodegate.dev/replace-fallback";

/// When nodegate wrote `replace-fallback` (RFC 3339): one written before
/// the node's current gate started is of an earlier gate and not read.
pub const REPLACE_FALLBACK_AT: &str = "nodegate.dev/replace-fallback-at";

// On a Node, set by people.

/// Any value (a reason, say): a reboot of this node is coming; with
/// `--reboot-announcements annotation` nodegate re-gates it before the
/// reboot, within `--regate-max-unavailable` (semantics.md §6.10). Acted on
/// once per announcement: remove it after the reboot.
pub const REBOOT_PENDING: &str = "nodegate.dev/reboot-pending";

/// `"true"`: the gate decides and journals but writes nothing for this node
/// until the annotation goes (semantics.md §6.6).
pub const SUSPEND: &str = "nodegate.dev/suspend";

/// `"true"`: open this node now, whatever its members (`opened-by: manual`);
/// the opening patch removes it.
pub const OPEN: &str = "nodegate.dev/open";

/// `"true"` on a Node: no entrance puts the startup taint on it and the
/// re-gating does not watch it. A gate already running on it still opens.
/// The same key as [`DAEMONSET_IGNORE`], with a different meaning.
pub const NODE_IGNORE: &str = "nodegate.dev/ignore";

// On a DaemonSet or a Pod, set by their owners.

/// `"true"` on a DaemonSet: no gate waits for it, whatever the node.
/// The same key as [`NODE_IGNORE`], with a different meaning.
pub const DAEMONSET_IGNORE: &str = "nodegate.dev/ignore";

/// On a DaemonSet: the CSI drivers its pod registers (`NAME[,NAME]`); the
/// member is Ready only once the node's CSINode lists them (semantics.md
/// §6.7).
pub const CSI_DRIVER: &str = "nodegate.dev/csi-driver";

/// `"true"` on a member pod: it declares itself done, and counts as Ready
/// without a Ready condition (an init or warm-up pod without a probe;
/// semantics.md §6.7).
pub const POD_READY: &str = "nodegate.dev/ready";

// Not an annotation, but of the same family.

/// The `reportingController` of the Events nodegate writes.
pub const REPORTING_CONTROLLER: &str = "nodegate.dev/nodegate";
