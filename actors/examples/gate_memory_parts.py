#!/usr/bin/env python3
"""Where gate_memory's peak heap goes, per gate, by part.

    heaptrack -o /tmp/gm "$CARGO_TARGET_DIR"/release/examples/gate_memory 2000 6
    heaptrack_print -f /tmp/gm.zst --print-peaks 0 --print-allocators 0 \\
        --print-temporary 0 --print-leaks 0 \\
        -F /tmp/gm.stacks --flamegraph-cost-type peak
    actors/examples/gate_memory_parts.py /tmp/gm.stacks 2000

Each stack heaptrack folded (outermost frame first, the bytes it held at the
peak last) goes to the first part below whose frames it contains. Frames
tokio inlined away land in "other".
"""
import sys

PARTS = [
    ("timer tasks, one per armed timer (send_after)",
     lambda j: "send_after" in j or (is_spawn(j) and ("arm_reexamine" in j or "NodeActor$LT$E$C$C$GT$::run" in j))),
    ("the shared timer wheel", lambda j: "wheel::" in j),
    ("journal: entry slots, string table, first pod versions", lambda j: "journal::" in j),
    ("ractor: mailbox channels made with the actor",
     lambda j: "mpsc::chan::channel" in j or "ActorProperties::new" in j),
    ("ractor: actor cell, links", lambda j: "ActorCell::new" in j or "SupervisionTree" in j),
    ("ractor: the actor's task", lambda j: "ActorRuntime" in j or (is_spawn(j) and "ractor" in j)),
    ("gate state: maps, members and their strings", lambda j: "nodegate_core::gate" in j),
    ("pods: the router's index and PodInfo (shared with the gates)",
     lambda j: "pod_upserted" in j or "upsert_pod" in j),
    ("node: the router's index and NodeInfo (shared), registration",
     lambda j: any(k in j for k in ("node_upserted", "upsert_node", "testutil", "gate_memory::node", "Router::register"))),
    ("node actor: other", lambda j: "NodeActor" in j),
    ("driver: the pod versions it built", lambda j: "gate_memory::main" in j),
]


def is_spawn(j):
    return "task::spawn" in j or "spawn_named" in j or "Cell$LT$T$C$S$GT$::new" in j


def main():
    path, gates = sys.argv[1], int(sys.argv[2])
    totals = {}
    with open(path) as f:
        for line in f:
            stack, _, value = line.rstrip("\n").rpartition(" ")
            if not value.isdigit():
                continue
            part = next((name for name, hit in PARTS if hit(stack)),
                        "other (tokio runtime, unsymbolized: mostly the actor's task and message blocks)")
            totals[part] = totals.get(part, 0) + int(value)
    total = sum(totals.values())
    print(f"peak heap {total / 2**20:.2f} MiB, {total / gates / 1024:.1f} KiB per gate")
    for name, value in sorted(totals.items(), key=lambda kv: -kv[1]):
        print(f"{value / gates / 1024:6.2f} KiB  {name}")


if __name__ == "__main__":
    main()
