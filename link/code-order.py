#!/usr/bin/env python3
"""The order of nodegate's code in its release binary.

The kernel maps the binary's code in from its file as it runs, 64 KiB at a
fault, and those pages count in the controller's resident memory. Left to
the linker, the 2,400 functions nodegate runs (3.6 MB) sit among the 17,000
it links (18 MB), so running them maps in 11 MiB. build.rs hands the linker
link/code-order.txt, the functions a benchmark run executes, hottest first,
so they are laid out together at the front of the code.

  link/code-order.py record [--nodes N] [--daemonsets D] [--keep PROFILE]
      Runs tests/scale/run once with the release binary under valgrind's
      callgrind (N = 200, D = 6 by default: every path of a gate, from
      creation to the deadline), and writes link/code-order.txt: the binary's
      functions that executed, by instructions spent in them. --keep also
      leaves the profile at PROFILE, for callgrind_annotate.
  link/code-order.py record --profile PROFILE [--binary BINARY]
      The same from a profile already taken with those valgrind options, of
      BINARY (default: the release binary).
  link/code-order.py check [BINARY]
      How many functions of link/code-order.txt BINARY has (default: the
      release binary in CARGO_TARGET_DIR), and how many bytes of code they
      span in it. Exit 1 when fewer than 98 % are found: each name not found
      is most likely a function that still runs, renamed, outside the
      ordered block (at 94 %, 179 functions that ran sat outside it, in 52
      other 64 KiB blocks).

The names carry the hashes rustc gives symbols: a new toolchain, a changed
dependency or a new version of a nodegate crate renames many of them, and the
linker skips names it does not find (the code stays correct, only less
compact). Run `record` again after such a change; `check` tells when.

Needs valgrind (Debian: `apt-get install valgrind`) and binutils' nm.
"""

import argparse
import bisect
import collections
import math
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
ORDER = ROOT / "link" / "code-order.txt"
# The share of the list `check` must find in a binary.
MIN_FOUND = 0.98
HEADER = (
    "# Functions of nodegate's release binary, hottest first, that a\n"
    "# benchmark run executed: the linker lays them out first (build.rs).\n"
    "# Written by link/code-order.py record; do not edit by hand.\n"
)


def die(msg):
    print(f"code-order: {msg}", file=sys.stderr)
    sys.exit(2)


def target_dir():
    default = pathlib.Path(os.environ.get("XDG_CACHE_HOME", pathlib.Path.home() / ".cache"))
    return pathlib.Path(os.environ.get("CARGO_TARGET_DIR", default / "nodegate" / "target"))


def functions(binary):
    """The binary's functions as (address, size, name), by address."""
    if not shutil.which("nm"):
        die("nm not found: install binutils")
    out = subprocess.run(
        ["nm", "-S", "--defined-only", str(binary)], capture_output=True, text=True
    )
    if out.returncode != 0:
        die(f"nm {binary} failed: {out.stderr.strip()}")
    syms = []
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[2] in "tTwW":
            syms.append((int(parts[0], 16), int(parts[1], 16), parts[3]))
    if not syms:
        die(f"{binary} has no function symbols (was it stripped?)")
    return sorted(syms)


def executed(profile, binary, syms):
    """Instructions spent at each address of BINARY, from a callgrind profile
    written with --dump-instr=yes --compress-pos=no --compress-strings=no
    --demangle=no, at the addresses `nm` gives (a position-independent binary
    is profiled where valgrind loaded it: the offset is the one most of the
    profile's functions agree on)."""
    name = os.path.realpath(binary)
    cost = collections.Counter()
    first = {}
    in_binary = False
    after_call = False
    function = None
    with open(profile, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith("ob="):
                in_binary = os.path.realpath(line[3:].strip()) == name
            elif line.startswith("fn="):
                function = line[3:].strip()
            elif line.startswith("calls="):
                after_call = True  # the next cost line is the callee's, inclusive
            elif line.startswith("0x"):
                parts = line.split()
                ir = 0 if after_call or len(parts) < 3 else int(parts[2])
                after_call = False
                if in_binary:
                    addr = int(parts[0], 16)
                    cost[addr] += ir
                    first[function] = min(addr, first.get(function, addr))
    at = {s[2]: s[0] for s in syms}
    offsets = collections.Counter(a - at[f] for f, a in first.items() if f in at)
    if not offsets:
        die(f"no function of the profile is named as in {binary}: was it built again since?")
    offset = offsets.most_common(1)[0][0]
    return collections.Counter({a - offset: ir for a, ir in cost.items()})


def record(args):
    binary = pathlib.Path(args.binary) if args.binary else target_dir() / "release" / "nodegate"
    if args.profile:
        if not pathlib.Path(args.profile).exists():
            die(f"{args.profile} does not exist")
        syms = functions(binary)
        write_order(binary, syms, executed(args.profile, binary, syms))
        return
    if args.binary:
        die("--binary names the binary a --profile profiled; a run profiles the release binary")
    if not shutil.which("valgrind"):
        die("valgrind not found: install it (Debian: apt-get install valgrind)")
    with tempfile.TemporaryDirectory(prefix="nodegate-code-order.") as tmp:
        profile = pathlib.Path(tmp) / "callgrind.out"
        # GLIBC_TUNABLES as nodegate would set it, so it does not start itself
        # again (callgrind would profile the first process only).
        controller = (
            "env GLIBC_TUNABLES=glibc.malloc.tcache_count=0 valgrind --tool=callgrind"
            " --dump-instr=yes --compress-pos=no --compress-strings=no --demangle=no"
            f" --callgrind-out-file={profile} {{nodegate}} run --timeout {{timeout}}"
            " --taint {taint} --http-addr {http_addr} --debug-addr 127.0.0.1:0"
        )
        cmd = [
            str(ROOT / "tests" / "scale" / "run"),
            "--nodes", str(args.nodes),
            "--daemonsets", str(args.daemonsets),
            "--out", str(pathlib.Path(tmp) / "run.json"),
            "--controller", controller,
        ]
        print(f"code-order: {' '.join(cmd[:5])} … (a scale run under callgrind, ~6 min)", file=sys.stderr)
        # The run's {nodegate} must be the binary read below: a NODEGATE_BIN
        # of the caller's (another build) would profile a different one.
        env = {k: v for k, v in os.environ.items() if k != "NODEGATE_BIN"}
        if subprocess.run(cmd, env=env).returncode != 0:
            die("the scale run failed (output above)")
        if not profile.exists():
            die(f"callgrind wrote no profile at {profile}")
        syms = functions(binary)
        cost = executed(profile, binary, syms)
        if args.keep:
            shutil.copyfile(profile, args.keep)
            print(f"code-order: the profile is at {args.keep}", file=sys.stderr)
    write_order(binary, syms, cost)


def write_order(binary, syms, cost):
    """link/code-order.txt from the instructions spent at each address."""
    starts = [s[0] for s in syms]
    spent = collections.Counter()
    for addr, ir in cost.items():
        i = bisect.bisect_right(starts, addr) - 1
        if i >= 0 and syms[i][0] <= addr < syms[i][0] + max(syms[i][1], 1):
            spent[i] += ir + 1  # +1: a function that ran counts even at 0
    if not spent:
        die(f"no executed address of the profile falls in {binary}'s functions")
    names = [syms[i][2] for i, _ in sorted(spent.items(), key=lambda kv: (-kv[1], kv[0]))]
    ORDER.write_text(HEADER + "".join(n + "\n" for n in names))
    size = sum(syms[i][1] for i in spent)
    print(f"code-order: wrote {ORDER.relative_to(ROOT)}: {len(names)} functions, {size / 1e6:.1f} MB of code")


def listed():
    if not ORDER.exists():
        die(f"{ORDER} is missing: run link/code-order.py record")
    return [l.strip() for l in ORDER.read_text().splitlines() if l.strip() and not l.startswith("#")]


def check(args):
    binary = pathlib.Path(args.binary) if args.binary else target_dir() / "release" / "nodegate"
    if not binary.exists():
        die(f"{binary} does not exist: build it with cargo build --release -p nodegate")
    names = listed()
    syms = functions(binary)
    by_name = {s[2]: s for s in syms}
    found = [by_name[n] for n in names if n in by_name]
    share = len(found) / len(names) if names else 0.0
    print(f"{binary}: {len(found)} of {len(names)} functions of {ORDER.relative_to(ROOT)} ({math.floor(share * 1000) / 10:.1f} %)")
    if found:
        lo = min(s[0] for s in found)
        hi = max(s[0] + s[1] for s in found)
        size = sum(s[1] for s in found)
        print(f"  {size / 1e6:.1f} MB of them, spread over {(hi - lo) / 1e6:.1f} MB of code")
    if share < MIN_FOUND:
        print(
            f"  fewer than {MIN_FOUND * 100:.0f} %: the toolchain, a dependency or a crate version changed the"
            " names; run link/code-order.py record",
            file=sys.stderr,
        )
        sys.exit(1)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("record", help="profile a scale run and write link/code-order.txt")
    r.add_argument("--nodes", type=int, default=200)
    r.add_argument("--daemonsets", type=int, default=6)
    r.add_argument("--keep", metavar="PROFILE", help="also leave callgrind's profile here")
    r.add_argument("--profile", help="read this callgrind profile instead of running")
    r.add_argument("--binary", help="the binary --profile profiled (default: the release binary)")
    c = sub.add_parser("check", help="how much of link/code-order.txt a binary has")
    c.add_argument("binary", nargs="?")
    args = p.parse_args()
    if args.command == "record":
        record(args)
    else:
        check(args)


if __name__ == "__main__":
    main()
