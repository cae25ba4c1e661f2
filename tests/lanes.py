#!/usr/bin/env python3
"""Runs the workspace's test binaries that `cargo test --no-run` built.

    tests/lanes.py BUILD_JSON

BUILD_JSON is the `--message-format=json` output of that build. Every binary
that is not an end-to-end test (its name does not start with `e2e_`) runs in a
lane of its own, one after another, beside the end-to-end lanes: together
they take seconds of CPU, but `cli` waits half a minute on servers that do not
answer, time the end-to-end lanes use. The end-to-end binaries run
LANES at a time (NODEGATE_E2E_LANES, default 3), each with NODEGATE_E2E_THREADS
tests at a time (default 2), the longest first (by the times of the last run,
kept in TIMES_FILE; by LONGEST_FIRST before there are any): each end-to-end
test starts its own cluster, and most of their time is spent waiting on one.

Two binaries are placed, not queued:

- the container image's build (deploy/image/build; with tests/run's lab
  profile seconds of CPU after a commit, minutes from nothing) starts in the background just before the first binary that needs the image
  (NEEDS_IMAGE) starts, not before: a run of binaries that need no image
  never pays for it;
- the chaos binary (e2e_chaos) starts once every binary that needs the image
  has started and the image build has ended (the build never runs beside
  it), and once what is left in the queue would take about as long as it
  (so it overlaps the last lanes rather than running alone after them).

A binary's output is printed whole when it ends, so lanes never interleave;
each ends with its time, and a summary sorted by time ends the run, with the
CPU each binary used itself (with the nodegate processes it ran) and in the
clusters it started (deploy/local/down reads each component's cgroup into
NODEGATE_LOCAL_CPU_LOG), and how busy the machine was: where a slow run's
time went. The exit
status is 1 when any binary (or the image build) failed, after all have run.

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

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Started when the queue is short enough (see the module's text), never
# beside the image build.
CHAOS = "e2e_chaos"

# The binaries whose tests run deploy/image/build (the image's own checks;
# the real-node deployment tests import the image into a real containerd;
# e2e_release and e2e_deploy's registry test run deploy/release, whose
# linux/amd64 image is this build and whose linux/arm64 one they share).
NEEDS_IMAGE = ["e2e_image", "e2e_deploy", "e2e_release"]

# A binary still running after this long is stopped and counted as failed:
# a hung test must fail the run, not hold it for ever. The slowest binary
# (e2e_deploy) took about 460 s in the last full runs; its registry test
# waits for both builds of the image (amd64, then the arm64 cross build),
# which take seconds after a commit with tests/run's lab profile and minutes
# from nothing, and only then starts its cluster.
BINARY_TIMEOUT = int(os.environ.get("NODEGATE_E2E_BINARY_TIMEOUT", "1800"))
# On a machine with empty caches the binaries that need the image wait for
# its builds from nothing (a cold CI with the release profile killed
# e2e_deploy at 1800 s while its registry test still waited for the arm64
# cross build): they get twice as long.
IMAGE_BINARY_TIMEOUT = 2 * BINARY_TIMEOUT

# Each binary's time in the last run that ran it, to order the next run
# (longest first) and to decide when the chaos binary starts.
TIMES_FILE = os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
    "nodegate",
    "e2e-times.json",
)

# Slowest first, from the timings of earlier runs: the order when
# TIMES_FILE has no time for a binary (those it has go first, by time); a
# binary in neither runs after these, in name order.
LONGEST_FIRST = [
    "e2e_chaos",
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
# The time assumed for a binary never timed (seconds).
UNTIMED = 60.0


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


def load_times():
    try:
        with open(TIMES_FILE) as f:
            return {k: float(v) for k, v in json.load(f).items()}
    except (OSError, ValueError, AttributeError):
        return {}


def save_times(times):
    try:
        os.makedirs(os.path.dirname(TIMES_FILE), exist_ok=True)
        tmp = TIMES_FILE + ".tmp"
        with open(tmp, "w") as f:
            json.dump(times, f, indent=1, sort_keys=True)
        os.replace(tmp, TIMES_FILE)
    except OSError as e:
        print(f"lanes: cannot keep the times in {TIMES_FILE}: {e}", file=sys.stderr)


def wait_with_cpu(proc, timeout):
    """Waits for `proc` at most `timeout` s: (exit code, its CPU seconds and
    its reaped children's), or raises subprocess.TimeoutExpired."""
    deadline = time.monotonic() + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return proc.returncode, usage.ru_utime + usage.ru_stime
        if time.monotonic() > deadline:
            raise subprocess.TimeoutExpired(proc.args, timeout)
        time.sleep(0.2)


def busy_seconds():
    """CPU seconds the whole machine has been busy since boot (/proc/stat)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def cluster_cpu(log_path):
    """{tag: {component: seconds}} from the lines deploy/local/down wrote."""
    out = {}
    try:
        with open(log_path) as f:
            for line in f:
                parts = line.split()
                if len(parts) != 3:
                    continue
                try:
                    secs = float(parts[2])
                except ValueError:
                    continue
                comp = out.setdefault(parts[0], {})
                comp[parts[1]] = comp.get(parts[1], 0.0) + secs
    except OSError:
        pass
    return out


def run(name, exe, pkg_dir, threads, cpu_log):
    timeout = IMAGE_BINARY_TIMEOUT if name in NEEDS_IMAGE else BINARY_TIMEOUT
    env = dict(
        os.environ,
        CARGO_MANIFEST_DIR=pkg_dir,
        NODEGATE_LOCAL_CPU_LOG=cpu_log,
        NODEGATE_LOCAL_CPU_TAG=name,
    )
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
            code, cpu = wait_with_cpu(proc, timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, cpu = wait_with_cpu(proc, 60)
            code = 1
            out.write(f"\nlanes: {name} still running after {timeout}s: killed\n")
        out.seek(0)
        text = out.read()
    return code, text, time.monotonic() - started, cpu


class ImageBuild:
    """deploy/image/build in the background, started once, on demand."""

    def __init__(self, t0):
        self.t0 = t0
        self.proc = None
        self.log = None
        self.started = None
        self.secs = None
        self.code = None
        self.cpu = 0.0
        self.done = threading.Event()

    def start(self, why):
        if self.proc is not None:
            return
        self.started = time.monotonic()
        print(f"lanes: {self.started - self.t0:.0f}s: image build started (for {why})", flush=True)
        self.log = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            [os.path.join(ROOT, "deploy/image/build")],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=self.log,
        )
        threading.Thread(target=self._wait, daemon=True).start()

    def _wait(self):
        self.code, self.cpu = wait_with_cpu(self.proc, float("inf"))
        self.secs = time.monotonic() - self.started
        self.done.set()

    def wait(self):
        """Waits for a started build; True when none was started."""
        if self.proc is None:
            return True
        self.done.wait()
        return self.code == 0

    def report(self):
        """Prints the build's summary (or its failure); False if it failed."""
        if self.proc is None:
            return True
        self.wait()
        self.log.seek(0)
        text = self.log.read()
        if self.code == 0:
            print(f"== image ({self.secs:.0f}s, beside the lanes):")
            keep = [l for l in text.splitlines() if any(w in l for w in ("summary", "digest", "revision", "packages"))]
            print("\n".join(keep[:8]))
            return True
        print(f"== the image build failed ({self.secs:.0f}s):")
        print("\n".join(text.splitlines()[-30:]))
        return False


def main():
    build_json = sys.argv[1]
    lanes = max(1, int(os.environ.get("NODEGATE_E2E_LANES", "3")))
    threads = os.environ.get("NODEGATE_E2E_THREADS", "2")
    all_bins = binaries(build_json)
    if not all_bins:
        print("lanes: no test binary in the build output", file=sys.stderr)
        return 1
    t0 = time.monotonic()
    times = load_times()
    quick = [b for b in all_bins if not b[0].startswith("e2e_")]
    e2e = [b for b in all_bins if b[0].startswith("e2e_")]
    rank = {n: i for i, n in enumerate(LONGEST_FIRST)}

    def estimate(name):
        return times.get(name, UNTIMED)

    e2e.sort(
        key=lambda b: (
            b[0] not in times,
            -times.get(b[0], 0.0),
            rank.get(b[0], len(rank)),
            b[0],
        )
    )

    failed = []
    took = {}
    cpu_of = {}
    lock = threading.Lock()
    busy_at_start = busy_seconds()
    cpu_log_file = tempfile.NamedTemporaryFile(prefix="nodegate-cluster-cpu-", delete=False)
    cpu_log_file.close()
    cpu_log = cpu_log_file.name

    def report(name, code, text, secs, cpu):
        with lock:
            print(f"---- {name} ({secs:.0f}s, ended at {time.monotonic() - t0:.0f}s) ----")
            print(text, end="" if text.endswith("\n") else "\n")
            took[name] = secs
            cpu_of[name] = cpu
            if code != 0:
                failed.append(name)
            sys.stdout.flush()

    def quick_lane():
        for name, exe, pkg_dir in quick:
            report(name, *run(name, exe, pkg_dir, threads, cpu_log))

    image = ImageBuild(t0)
    chaos = [b for b in e2e if b[0] == CHAOS]
    queue = [b for b in e2e if b[0] != CHAOS]

    def next_binary():
        """The binary a free lane runs next, or None when none is left."""
        while True:
            with lock:
                image_pending = [i for i, b in enumerate(queue) if b[0] in NEEDS_IMAGE]
                image_idle = image.proc is None or image.done.is_set()
                # With the other lanes draining the queue beside it, chaos
                # ends about when they do.
                left = sum(estimate(b[0]) for b in queue)
                chaos_due = chaos and left <= estimate(CHAOS) * (lanes - 1)
                if chaos and not image_pending and image_idle and (chaos_due or not queue):
                    return chaos.pop()
                if queue:
                    # Chaos is due but waits for the image: what needs the
                    # image goes first.
                    b = queue.pop(image_pending[0] if chaos_due and image_pending else 0)
                    if b[0] in NEEDS_IMAGE:
                        image.start(b[0])
                    return b
                if not chaos:
                    return None
            # Only chaos is left, behind the image build: wait for it.
            image.wait()

    def lane():
        while True:
            b = next_binary()
            if b is None:
                return
            name, exe, pkg_dir = b
            if name == CHAOS:
                print(f"lanes: {time.monotonic() - t0:.0f}s: {CHAOS} started", flush=True)
            report(name, *run(name, exe, pkg_dir, threads, cpu_log))

    workers = [threading.Thread(target=quick_lane)]
    workers += [threading.Thread(target=lane) for _ in range(lanes)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    if not image.report():
        failed.append("deploy/image/build")

    times.update(took)
    save_times(times)
    wall = time.monotonic() - t0
    clusters = cluster_cpu(cpu_log)
    try:
        os.unlink(cpu_log)
    except OSError:
        pass
    print(f"== test binaries by time (lanes: {wall:.0f}s); CPU s: the binary's own (with the nodegate it ran), its clusters'")
    for name, secs in sorted(took.items(), key=lambda kv: -kv[1]):
        own = cpu_of.get(name, 0.0)
        theirs = sum(clusters.get(name, {}).values())
        print(f"  {secs:7.1f}s  {own:7.1f} {theirs:7.1f}  {name}{'  FAILED' if name in failed else ''}")
    busy_now = busy_seconds()
    if busy_at_start is not None and busy_now is not None:
        busy = busy_now - busy_at_start
        cores = os.cpu_count() or 1
        by_component = {}
        for comps in clusters.values():
            for comp, secs in comps.items():
                by_component[comp] = by_component.get(comp, 0.0) + secs
        parts = ", ".join(f"{c} {s:.0f}" for c, s in sorted(by_component.items(), key=lambda kv: -kv[1]))
        print(
            f"== CPU over the lanes: {busy:.0f} s busy of {wall * cores:.0f} ({cores} cores, "
            f"{100 * busy / max(wall * cores, 1):.0f}%): test binaries {sum(cpu_of.values()):.0f} s, "
            f"clusters {sum(by_component.values()):.0f} s ({parts or 'none recorded'}), "
            f"image build {image.cpu:.0f} s"
        )
    sys.stdout.flush()
    if failed:
        print(f"lanes: FAILED: {', '.join(failed)}", file=sys.stderr)
        return 1
    print(f"lanes: {len(all_bins)} test binaries passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
