#!/usr/bin/env python3
"""Runs the workspace's test binaries that `cargo test --no-run` built.

    tests/lanes.py BUILD_JSON

BUILD_JSON is the `--message-format=json` output of that build. Every binary
that is not an end-to-end test (its name does not start with `e2e_`) runs
first, one after another (they take seconds). The end-to-end binaries then run
LANES at a time (NODEGATE_E2E_LANES, default 2), each with NODEGATE_E2E_THREADS
tests at a time (default 2), the longest first: each end-to-end test starts
its own cluster, and most of their time is spent waiting on one; those in
ALONE run last, by themselves. A binary's
output is printed whole when it ends, so lanes never interleave. The exit
status is 1 when any binary failed, after all have run.

Run the binaries as cargo would: with CARGO_MANIFEST_DIR set to their
package's directory (the tests find the repository through it).
"""

import json
import os
import subprocess
import sys
import tempfile
import threading
import time

# Run alone, after the others: the chaos scenarios stop and starve real
# processes and judge timing against deadlines, which a second cluster on the
# same two cores would blur; the real-node canary test starts and cleans up
# a real kubelet and containerd (bridge, iptables, mounts, process kills by
# state directory), and twice a kwok cluster running beside it lost its
# processes and state directory while it did (cause not yet found).
ALONE = ["e2e_canary_real", "e2e_chaos"]

# A binary still running after this long is stopped and counted as failed:
# a hung test must fail the run, not hold it for ever. The slowest binary
# takes about 340 s.
BINARY_TIMEOUT = int(os.environ.get("NODEGATE_E2E_BINARY_TIMEOUT", "1200"))

# Slowest first, from the timings of earlier runs; a binary not named here
# runs after these, in name order.
LONGEST_FIRST = [
    "e2e_gate",
    "e2e_differential",
    "e2e_regate",
    "e2e_karpenter",
    "e2e_conditions",
    "e2e_operations",
    "e2e_reload",
    "e2e_deploy",
    "e2e_monitoring",
    "e2e_traces",
    "e2e_webhook",
]


def binaries(build_json):
    """(name, executable, package dir) of every test binary built."""
    found = []
    seen = set()
    with open(build_json) as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            msg = json.loads(line)
            if msg.get("reason") != "compiler-artifact":
                continue
            exe = msg.get("executable")
            if not exe or not msg.get("profile", {}).get("test") or exe in seen:
                continue
            seen.add(exe)
            name = msg["target"]["name"]
            pkg_dir = os.path.dirname(msg["manifest_path"])
            found.append((name, exe, pkg_dir))
    return found


def run(name, exe, pkg_dir, threads):
    env = dict(os.environ, CARGO_MANIFEST_DIR=pkg_dir)
    started = time.monotonic()
    with tempfile.TemporaryFile(mode="w+") as out:
        proc = subprocess.Popen(
            [exe, f"--test-threads={threads}"],
            cwd=pkg_dir,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            code = proc.wait(timeout=BINARY_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            code = 1
            out.write(f"\nlanes: {name} still running after {BINARY_TIMEOUT}s: killed\n")
        out.seek(0)
        text = out.read()
    return code, text, time.monotonic() - started


def main():
    build_json = sys.argv[1]
    lanes = int(os.environ.get("NODEGATE_E2E_LANES", "2"))
    threads = os.environ.get("NODEGATE_E2E_THREADS", "2")
    all_bins = binaries(build_json)
    if not all_bins:
        print("lanes: no test binary in the build output", file=sys.stderr)
        return 1
    quick = [b for b in all_bins if not b[0].startswith("e2e_")]
    e2e = [b for b in all_bins if b[0].startswith("e2e_")]
    rank = {n: i for i, n in enumerate(LONGEST_FIRST)}
    e2e.sort(key=lambda b: (rank.get(b[0], len(rank)), b[0]))

    failed = []
    lock = threading.Lock()

    def report(name, code, text, secs):
        with lock:
            print(f"---- {name} ({secs:.0f}s) ----")
            print(text, end="" if text.endswith("\n") else "\n")
            if code != 0:
                failed.append(name)
            sys.stdout.flush()

    for name, exe, pkg_dir in quick:
        report(name, *run(name, exe, pkg_dir, threads))

    alone = [b for b in e2e if b[0] in ALONE]
    queue = [b for b in e2e if b[0] not in ALONE]

    def lane():
        while True:
            with lock:
                if not queue:
                    return
                name, exe, pkg_dir = queue.pop(0)
            report(name, *run(name, exe, pkg_dir, threads))

    workers = [threading.Thread(target=lane) for _ in range(max(1, lanes))]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    for name, exe, pkg_dir in alone:
        report(name, *run(name, exe, pkg_dir, threads))

    if failed:
        print(f"lanes: FAILED: {', '.join(failed)}", file=sys.stderr)
        return 1
    print(f"lanes: {len(all_bins)} test binaries passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
