#!/usr/bin/env python3
"""The real node's iptables state: what existed before it started, and the
removal of exactly what was made since.

    host_iptables.py record FILE     writes the chains and the rules of every
                                     table (IPv4 and IPv6) as they are now
    host_iptables.py conflicts FILE  prints the recorded chains a kube-proxy
                                     or kubelet of ours would take over
    host_iptables.py remove FILE     removes the chains a kube-proxy or
                                     kubelet makes that are not in FILE, and
                                     the rules that jump to them

Rules are read with `iptables -S` and split with shell quoting rules
(shlex), then deleted with `iptables -D` as an argument list: nothing is
ever handed to a shell. A chain or rule that FILE lists is never touched.
"""

import json
import shlex
import subprocess
import sys

COMMANDS = ("iptables", "ip6tables")
TABLES = ("filter", "nat", "mangle")

# The chains kube-proxy (iptables mode) and the kubelet make under fixed
# names, and the prefixes of those kube-proxy makes per Service and endpoint
# and deletes when it does not know them: a host that has any of these runs
# another kube-proxy or kubelet, which ours would fight.
FIXED = {
    "KUBE-SERVICES", "KUBE-EXTERNAL-SERVICES", "KUBE-NODEPORTS", "KUBE-POSTROUTING",
    "KUBE-MARK-MASQ", "KUBE-MARK-DROP", "KUBE-FORWARD", "KUBE-PROXY-FIREWALL",
    "KUBE-PROXY-CANARY", "KUBE-FIREWALL", "KUBE-KUBELET-CANARY", "KUBE-IPTABLES-HINT",
    "KUBE-LOAD-BALANCER",
}
PREFIXES = ("KUBE-SVC-", "KUBE-SVL-", "KUBE-SEP-", "KUBE-EXT-", "KUBE-FW-", "KUBE-XLB-")


def kube_made(chain):
    return chain in FIXED or chain.startswith(PREFIXES)


def rules(cmd, table):
    try:
        out = subprocess.run([cmd, "-t", table, "-S"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.splitlines()


def snapshot():
    state = {}
    for cmd in COMMANDS:
        for table in TABLES:
            lines = rules(cmd, table)
            if lines is None:
                continue
            chains = [l.split()[1] for l in lines if l.startswith(("-N ", "-P "))]
            state[f"{cmd} {table}"] = {"chains": chains, "rules": [l for l in lines if l.startswith("-A ")]}
    return state


def target(words):
    for flag in ("-j", "-g"):
        if flag in words:
            i = words.index(flag)
            if i + 1 < len(words):
                return words[i + 1]
    return None


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("record", "conflicts", "remove"):
        print(__doc__, file=sys.stderr)
        return 2
    what, path = sys.argv[1], sys.argv[2]
    if what == "record":
        with open(path, "w") as f:
            json.dump(snapshot(), f)
        return 0
    with open(path) as f:
        before = json.load(f)
    if what == "conflicts":
        for key, tbl in sorted(before.items()):
            for c in tbl["chains"]:
                if kube_made(c):
                    print(f"{key} {c}")
        return 0
    failed = 0
    for key, now in snapshot().items():
        cmd, table = key.split()
        had = before.get(key, {"chains": [], "rules": []})
        had_chains, had_rules = set(had["chains"]), set(had["rules"])
        # Only chains of the names our kube-proxy and kubelet make: a KUBE-*
        # chain another program made while the node ran is not ours either.
        ours = [c for c in now["chains"] if kube_made(c) and c not in had_chains]
        if not ours:
            continue
        mine = set(ours)
        # Jumps into our chains from chains that are not ours (built-in or
        # another program's): made after our chain existed, so ours.
        for line in now["rules"]:
            if line in had_rules:
                continue
            words = shlex.split(line)
            if len(words) < 2 or words[1] in mine or target(words) not in mine:
                continue
            r = subprocess.run([cmd, "-t", table, "-D"] + words[1:], capture_output=True, text=True)
            if r.returncode != 0:
                failed += 1
                print(f"{cmd} -t {table}: could not delete {line!r}: {r.stderr.strip()}", file=sys.stderr)
        for flag in ("-F", "-X"):
            for c in ours:
                r = subprocess.run([cmd, "-t", table, flag, c], capture_output=True, text=True)
                if r.returncode != 0:
                    failed += 1
                    print(f"{cmd} -t {table} {flag} {c}: {r.stderr.strip()}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
