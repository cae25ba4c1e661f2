# Shared by the deploy/local scripts: versions, cache paths, logging.
# Sourced, never executed.

LOCAL_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
GOMOD_DIR="$LOCAL_DIR/gomod"

# The pinned versions are read from the wrapper modules, so go.mod is the one
# place a version is written down.
# Read by bash itself: every script sources this file, a cluster's start
# several times, and a process per version was a tenth of a start's CPU.
mod_version_to() { # var module-dir module-path
  local _a _b _c _rest
  while read -r _a _b _c _rest; do
    if [ "$_a" = require ] && [ "$_b" = "$3" ]; then
      printf -v "$1" '%s' "$_c"
      return 0
    fi
    if [ "$_a" = "$3" ] && [[ "$_b" == v* ]]; then
      printf -v "$1" '%s' "$_b"
      return 0
    fi
  done <"$GOMOD_DIR/$2/go.mod"
  printf -v "$1" '%s' ""
}
mod_version() { # module-dir module-path
  local version
  mod_version_to version "$1" "$2"
  printf '%s\n' "$version"
}
mod_version_to K8S_VERSION kubernetes k8s.io/kubernetes
mod_version_to ETCD_VERSION etcd go.etcd.io/etcd/server/v3
mod_version_to KWOK_VERSION kwok sigs.k8s.io/kwok
mod_version_to HELM_VERSION helm helm.sh/helm/v4

CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/nodegate"
# One token per component, joined by '_': `build` reuses a component's
# binaries from an older cache directory that has the same token, so bumping
# one version rebuilds only that component.
CACHE_KEY="k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}_helm-${HELM_VERSION}"
CACHE_BIN="$CACHE_ROOT/$CACHE_KEY/bin"

# What `up` needs. Helm is separate: only the chart tests and the user need it.
BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubectl etcd kwok)

# Prometheus (the server and promtool) for the monitoring tests only: kept
# in its own version-keyed cache directory, apart from the control plane's,
# so that neither bumping it nor the control plane rebuilds the other. The
# module is github.com/prometheus/prometheus v0.3MM.P, which is Prometheus
# 3.MM.P.
mod_version_to PROMETHEUS_MODULE_VERSION prometheus github.com/prometheus/prometheus
IFS=. read -r _ prometheus_minor prometheus_patch <<<"$PROMETHEUS_MODULE_VERSION"
[[ "${prometheus_minor:-}" =~ ^[0-9]+$ ]] || prometheus_minor=0
PROMETHEUS_VERSION="$((10#$prometheus_minor / 100)).$((10#$prometheus_minor % 100)).${prometheus_patch:-}"
PROMETHEUS_CACHE_BIN="$CACHE_ROOT/prometheus-$PROMETHEUS_MODULE_VERSION/bin"
PROMETHEUS_BINARIES=(prometheus promtool)

# Where prometheus and promtool are: $NODEGATE_LOCAL_BIN when it holds both,
# the version-keyed cache otherwise.
prometheus_dir() {
  if [ -n "${NODEGATE_LOCAL_BIN:-}" ] && [ -x "$NODEGATE_LOCAL_BIN/prometheus" ] &&
    [ -x "$NODEGATE_LOCAL_BIN/promtool" ]; then
    printf '%s\n' "$NODEGATE_LOCAL_BIN"
  else
    printf '%s\n' "$PROMETHEUS_CACHE_BIN"
  fi
}

log() { printf '[deploy/local] %s\n' "$*" >&2; }
# A script's --help: its leading comment block (after the #! line), without
# the comment marks. Read from the file, so that it never falls behind it.
script_help() { # file
  local line
  {
    read -r _ || return 0
    while IFS= read -r line && [ "${line:0:1}" = "#" ]; do
      line=${line#\#}
      printf '%s\n' "${line# }"
    done
  } <"$1"
}
die() { printf '[deploy/local] error: %s\n' "$*" >&2; exit 1; }

# Where the binaries are: $NODEGATE_LOCAL_BIN when the user names a directory
# that already holds them, the version-keyed cache otherwise.
bin_dir() {
  if [ -n "${NODEGATE_LOCAL_BIN:-}" ]; then
    printf '%s\n' "$NODEGATE_LOCAL_BIN"
  else
    printf '%s\n' "$CACHE_BIN"
  fi
}

# Where helm is. With NODEGATE_LOCAL_BIN, helm there is optional: a `helm` on
# PATH will do, and only the tests that render the chart fail without either.
helm_dir() {
  if [ -z "${NODEGATE_LOCAL_BIN:-}" ]; then
    printf '%s\n' "$CACHE_BIN"
  elif [ -x "$NODEGATE_LOCAL_BIN/helm" ]; then
    printf '%s\n' "$NODEGATE_LOCAL_BIN"
  elif command -v helm >/dev/null 2>&1; then
    dirname "$(command -v helm)"
  else
    return 1
  fi
}

# The trace backend of the trace e2e test: a minimal OpenTelemetry Collector
# (deploy/local/gomod/otelcol), built on demand by `build --otelcol` into its
# own version-keyed directory, apart from the control plane's.
mod_version_to OTELCOL_VERSION otelcol go.opentelemetry.io/collector/otelcol
OTELCOL_BIN="$CACHE_ROOT/otelcol-$OTELCOL_VERSION/bin"

# The real node of `up --real-node`: kubelet and kube-proxy (from the
# Kubernetes wrapper module, same version as the control plane), containerd
# with its runc shim and ctr, and runc, built by `build --node` into their own
# version-keyed directory. CNI plugins and iptables come from Debian's
# packages (containernetworking-plugins, iptables).
mod_version_to CONTAINERD_VERSION containerd github.com/containerd/containerd/v2
mod_version_to RUNC_VERSION runc github.com/opencontainers/runc
NODE_BIN="$CACHE_ROOT/node-k8s-${K8S_VERSION}_containerd-${CONTAINERD_VERSION}_runc-${RUNC_VERSION}/bin"
NODE_BINARIES=(kubelet kube-proxy containerd containerd-shim-runc-v2 ctr runc)
# Where Debian's containernetworking-plugins put the CNI plugins.
CNI_BIN_DIR="${NODEGATE_CNI_BIN_DIR:-/usr/lib/cni}"

# The release tools (deploy/release, deploy/local/up --registry, the release
# workflow's check), each built by `build --release-tools`
# (deploy/local/build-release-tools) from its wrapper module into a directory
# keyed by its version: cosign and crane (go-containerregistry at the version
# cosign resolves), syft, the reference registry (distribution), actionlint.
mod_version_to COSIGN_VERSION cosign github.com/sigstore/cosign/v2
mod_version_to CRANE_VERSION cosign github.com/google/go-containerregistry
mod_version_to SYFT_VERSION syft github.com/anchore/syft
mod_version_to REGISTRY_VERSION registry github.com/distribution/distribution/v3
mod_version_to ACTIONLINT_VERSION actionlint github.com/rhysd/actionlint
COSIGN_BIN="$CACHE_ROOT/cosign-${COSIGN_VERSION}_crane-$CRANE_VERSION/bin"
SYFT_BIN="$CACHE_ROOT/syft-$SYFT_VERSION/bin"
REGISTRY_BIN="$CACHE_ROOT/registry-$REGISTRY_VERSION/bin"
ACTIONLINT_BIN="$CACHE_ROOT/actionlint-$ACTIONLINT_VERSION/bin"

# The real node's network: a bridge made before the API server starts, whose
# address is the pods' gateway, the node's IP, and the address the API server
# listens and advertises on (pods reach it through the `kubernetes` Service,
# which kube-proxy maps to that address).
REAL_NODE_NAME="${NODEGATE_REAL_NODE_NAME:-real-node-1}"
REAL_NODE_BRIDGE=nodegate0
REAL_NODE_POD_CIDR=10.88.0.0/16
REAL_NODE_GATEWAY=10.88.0.1
# What the kubelet registers the node with (--register-with-taints).
REAL_NODE_TAINTS="${NODEGATE_REAL_NODE_TAINTS:-nodegate.dev/initializing:NoSchedule}"

# The real Karpenter with its kwok cloud provider (sigs.k8s.io/karpenter/kwok),
# for the Karpenter e2e tests and the scale-up benchmark: built by
# `build --karpenter` (deploy/local/build-karpenter) from the wrapper module
# deploy/local/gomod/karpenter into its own version-keyed directory, with its
# CRDs copied beside the binary; started and stopped by deploy/local/karpenter.
# Karpenter's go.mod needs a newer Go than the machine's: the wrapper's
# `toolchain` line names the one to build with (fetched through the module
# proxy as golang.org/toolchain).
mod_version_to KARPENTER_VERSION karpenter sigs.k8s.io/karpenter
KARPENTER_TOOLCHAIN=$(awk '$1 == "toolchain" { print $2; exit }' "$GOMOD_DIR/karpenter/go.mod")
KARPENTER_BIN="$CACHE_ROOT/karpenter-$KARPENTER_VERSION/bin"
# The CRDs the kwok provider needs, as paths inside the module.
KARPENTER_CRDS=(
  kwok/charts/crds/karpenter.sh_nodepools.yaml
  kwok/charts/crds/karpenter.sh_nodeclaims.yaml
  kwok/charts/crds/karpenter.sh_nodeoverlays.yaml
  kwok/apis/crds/karpenter.kwok.sh_kwoknodeclasses.yaml
)

# Where the karpenter binary and its crds/ are: $NODEGATE_LOCAL_BIN when it
# holds both, the version-keyed cache otherwise.
karpenter_dir() {
  if [ -n "${NODEGATE_LOCAL_BIN:-}" ] && [ -x "$NODEGATE_LOCAL_BIN/karpenter" ] &&
    [ -d "$NODEGATE_LOCAL_BIN/crds" ]; then
    printf '%s\n' "$NODEGATE_LOCAL_BIN"
  else
    printf '%s\n' "$KARPENTER_BIN"
  fi
}

# N free loopback ports below the kernel's ephemeral range, never one that
# another cluster's script chose in the last two minutes (the registry `up`
# keeps too), printed on one line.
free_ports() { # count
  python3 - "$1" <<'PY'
import fcntl, os, random, socket, sys, tempfile, time
want = int(sys.argv[1])
try:
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        ephemeral_low = int(f.read().split()[0])
except (OSError, ValueError, IndexError):
    ephemeral_low = 32768
low, high = 20000, max(20100, ephemeral_low)
registry = os.path.join(tempfile.gettempdir(), "nodegate-local-ports")
with open(registry + ".lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    now = time.time()
    recent = {}
    try:
        with open(registry) as f:
            for line in f:
                port, at = line.split()
                if now - float(at) < 120:
                    recent[int(port)] = float(at)
    except (OSError, ValueError):
        pass
    chosen = []
    while len(chosen) < want:
        port = random.randrange(low, high)
        if port in recent or port in chosen:
            continue
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
        finally:
            s.close()
        chosen.append(port)
    for port in chosen:
        recent[port] = now
    with open(registry, "w") as f:
        for port, at in recent.items():
            f.write(f"{port} {at}\n")
print(" ".join(map(str, chosen)))
PY
}

# --- Processes: stop only what this cluster started.
#
# Every process a cluster starts carries the cluster's token in its
# environment (NODEGATE_LOCAL_ID, kept in DIR/id) and is recorded in
# DIR/pids/NAME as "PID START BOOT": its start time in clock ticks since boot
# (field 22 of /proc/PID/stat) and the boot id. A recorded process is signalled
# only when all three still match and its environment carries the token; a
# pid that was reused, or a file that was forged, is dropped, never signalled.
# Where the machine lets us make cgroups (a cgroup2 mount we may write to), a
# cluster also gets its own cgroup, DIR/cgroup names it, each component a
# child of it: stopping signals exactly the processes in that cgroup (shims
# and other children that made their own session included), then
# `cgroup.kill` takes whatever is left.

# The reads below start no process (bash's own `read` and `mapfile`): a
# cluster's start-up asks whether its components are alive dozens of times,
# and a process for each read was most of the CPU `up` itself used.

# The kernel's id of this boot, in BOOT_ID, read once per script.
BOOT_ID=""
boot_id_load() {
  [ -n "$BOOT_ID" ] || read -r BOOT_ID 2>/dev/null </proc/sys/kernel/random/boot_id || BOOT_ID=unknown
}
boot_id() { boot_id_load; printf '%s\n' "$BOOT_ID"; }

# Sets the variable VAR to field N (1-based, as proc(5) counts) of
# /proc/PID/stat; the command name (field 2) may hold spaces and
# parentheses, so counting starts after its last ')'.
proc_stat_field_to() { # var pid n
  local _stat="" _rest
  read -r -d '' _stat 2>/dev/null <"/proc/$2/stat"
  [ -n "$_stat" ] || return 1
  _rest=${_stat##*) }
  local -a _f
  read -r -a _f <<<"$_rest"
  [ "$3" -ge 3 ] && [ -n "${_f[$(($3 - 3))]:-}" ] || return 1
  printf -v "$1" '%s' "${_f[$(($3 - 3))]}"
}
proc_stat_field() { # pid n
  local field
  proc_stat_field_to field "$1" "$2" || return 1
  printf '%s\n' "$field"
}

# The cgroup2 mount a cluster's cgroup goes under, when there is one.
cgroup2_mount() { awk '$3 == "cgroup2" { print $2; exit }' /proc/self/mounts 2>/dev/null; }

# Makes DIR/id (the token) and, where possible, the cluster's cgroup.
cluster_identity_init() { # state-dir
  local dir=$1 id root cg
  id=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
  [ -n "$id" ] || die "could not make a token for the cluster in $dir"
  printf '%s\n' "$id" >"$dir/id"
  root=$(cgroup2_mount)
  if [ -n "$root" ] && [ -w "$root" ]; then
    cg="$root/nodegate-local/$id"
    if mkdir -p "$cg" 2>/dev/null && [ -e "$cg/cgroup.kill" ]; then
      printf '%s\n' "$cg" >"$dir/cgroup"
    else
      rmdir "$cg" 2>/dev/null || true
    fi
  fi
}

# Sets the variable VAR to the cluster's token (DIR/id).
cluster_id_to() { # var state-dir
  local _id=""
  read -r _id 2>/dev/null <"$2/id" || [ -n "$_id" ] || return 1
  [[ "$_id" =~ ^[0-9a-f]{24}$ ]] || return 1
  printf -v "$1" '%s' "$_id"
}
cluster_id() { # state-dir
  local id
  cluster_id_to id "$1" || return 1
  printf '%s\n' "$id"
}

# The cgroup of the cluster (no argument) or of one component; empty when the
# cluster has none. Only a path under the cgroup2 mount that names the
# cluster's own token is believed.
cluster_cgroup() { # state-dir [name]
  local cg id root
  [ -f "$1/cgroup" ] || return 0
  cg=$(cat "$1/cgroup") id=$(cluster_id "$1") || return 0
  root=$(cgroup2_mount)
  [ -n "$root" ] && [ "$cg" = "$root/nodegate-local/$id" ] && [ -d "$cg" ] || return 0
  if [ $# -ge 2 ]; then printf '%s/%s\n' "$cg" "$2"; else printf '%s\n' "$cg"; fi
}

# Starts `command...` in its own session, in the component's cgroup, with the
# cluster's token, its output going to DIR/logs/NAME.log (appended with
# --append); records it in DIR/pids/NAME and prints its pid.
proc_launch() { # state-dir name [--append] command...
  local dir=$1 name=$2 append=0 id cg pid start
  shift 2
  if [ "${1:-}" = --append ]; then append=1; shift; fi
  [ $# -gt 0 ] || die "proc_launch $name: no command"
  id=$(cluster_id "$dir") || die "no cluster token in $dir/id (was it started by deploy/local/up?)"
  [ ! -e "$dir/pids/$name" ] || die "$name already runs in $dir (pids/$name)"
  cg=$(cluster_cgroup "$dir" "$name")
  [ -z "$cg" ] || mkdir -p "$cg" || die "could not make the cgroup $cg"
  mkdir -p "$dir/pids" "$dir/logs"
  local log="$dir/logs/$name.log"
  [ "$append" = 1 ] || : >"$log"
  # The child joins the cgroup and takes the token before it runs the
  # command, so nothing of the command ever runs outside them.
  NODEGATE_LOCAL_ID=$id setsid bash -c '
    if [ -n "$1" ]; then echo "$$" >"$1/cgroup.procs" || exit 126; fi
    shift
    exec "$@"' nodegate-local-launch "$cg" "$@" >>"$log" 2>&1 </dev/null &
  pid=$!
  start=$(proc_stat_field "$pid" 22) || die "$name (pid $pid) exited at once; see $log"
  printf '%s %s %s\n' "$pid" "$start" "$(boot_id)" >"$dir/pids/$name"
  printf '%s\n' "$pid"
}

# The pid of NAME when the recorded process is still the one that was
# started (pid, start time, boot id and the token all match); otherwise
# nothing, and a status of 1.
proc_pid() { # state-dir name
  local dir=$1 name=$2 pid start boot id now
  [ -f "$dir/pids/$name" ] || return 1
  read -r pid start boot <"$dir/pids/$name" || true
  boot_id_load
  [[ "$pid" =~ ^[0-9]+$ ]] && [[ "${start:-}" =~ ^[0-9]+$ ]] && [ "${boot:-}" = "$BOOT_ID" ] || return 1
  proc_stat_field_to now "$pid" 22 && [ "$now" = "$start" ] || return 1
  cluster_id_to id "$dir" || return 1
  # While a process execs (the launcher becomes env, env the component),
  # the kernel shows an empty environment for a moment: read again before
  # calling it someone else's.
  local i carries=1
  for ((i = 0; i < 20; i++)); do
    carries=0
    environ_has_token "$pid" "$id" || carries=$?
    [ "$carries" = 2 ] || break
    sleep 0.05
  done
  [ "$carries" = 0 ] || return 1
  printf '%s\n' "$pid"
}

# Whether PID's environment holds the entry NODEGATE_LOCAL_ID=ID, each entry
# compared whole (a value holding a newline cannot pass for the token): 0
# yes; 1 no, or no such process; 2 an empty environment (a process mid-exec).
environ_has_token() { # pid id
  local -a environ=()
  local entry
  mapfile -d '' -t environ 2>/dev/null <"/proc/$1/environ" || return 1
  [ ${#environ[@]} -gt 0 ] || return 2
  for entry in "${environ[@]}"; do
    [ "$entry" != "NODEGATE_LOCAL_ID=$2" ] || return 0
  done
  return 1
}

proc_alive() { proc_pid "$1" "$2" >/dev/null; }

# The pids in a cgroup and all its descendants.
cgroup_pids() { # cgroup-dir
  [ -d "$1" ] || return 0
  find "$1" -name cgroup.procs -exec cat {} + 2>/dev/null
}

cgroup_populated() { # cgroup-dir
  [ -d "$1" ] && grep -qx 'populated 1' "$1/cgroup.events" 2>/dev/null
}

# Removes a cgroup and its descendants, deepest first (each must be empty).
cgroup_remove() { # cgroup-dir
  [ -d "$1" ] || return 0
  find "$1" -depth -type d -exec rmdir {} + 2>/dev/null || true
}

# Sends SIG to NAME: to every process of its cgroup, or else to the verified
# pid, and to its process group only when that group is the pid's own.
proc_signal() { # state-dir name signal
  local dir=$1 name=$2 sig=$3 cg pid p sent=1
  cg=$(cluster_cgroup "$dir" "$name")
  if [ -n "$cg" ] && [ -d "$cg" ]; then
    for p in $(cgroup_pids "$cg"); do kill "-$sig" "$p" 2>/dev/null && sent=0; done
    return $sent
  fi
  pid=$(proc_pid "$dir" "$name") || return 1
  if [ "$(proc_stat_field "$pid" 5)" = "$pid" ]; then
    kill "-$sig" -- "-$pid" 2>/dev/null
  else
    kill "-$sig" "$pid" 2>/dev/null
  fi
}

# Stops NAME: SIG (TERM by default), then after GRACE seconds whatever is
# left of it is killed. A record that no longer names the process it
# recorded is dropped without a signal.
proc_stop() { # state-dir name [signal] [grace-seconds]
  local dir=$1 name=$2 sig=${3:-TERM} grace=${4:-5} cg pid i
  cg=$(cluster_cgroup "$dir" "$name")
  pid=$(proc_pid "$dir" "$name") || pid=""
  if [ -z "$pid" ] && [ -f "$dir/pids/$name" ] && [ -z "$cg" ]; then
    log "$name: the recorded process is gone or is not this cluster's (pids/$name); not signalled"
  fi
  if [ -n "$pid" ] || cgroup_populated "$cg"; then
    proc_signal "$dir" "$name" "$sig" || true
    # A stopped process (SIGSTOP) acts on TERM only once continued.
    proc_signal "$dir" "$name" CONT || true
    for ((i = 0; i < grace * 10; i++)); do
      if [ -n "$cg" ]; then cgroup_populated "$cg" || break; else proc_alive "$dir" "$name" || break; fi
      sleep 0.1
    done
    if [ -n "$cg" ] && cgroup_populated "$cg"; then
      [ "$sig" = KILL ] || log "$name ignored SIG$sig for ${grace}s; killing it"
      echo 1 >"$cg/cgroup.kill" 2>/dev/null || true
      for ((i = 0; i < 50; i++)); do cgroup_populated "$cg" || break; sleep 0.1; done
    elif [ -z "$cg" ] && proc_alive "$dir" "$name"; then
      [ "$sig" = KILL ] || log "$name (pid $pid) ignored SIG$sig for ${grace}s; killing it"
      proc_signal "$dir" "$name" KILL || true
      for ((i = 0; i < 50; i++)); do proc_alive "$dir" "$name" || break; sleep 0.1; done
    fi
  fi
  [ -z "$cg" ] || cgroup_remove "$cg"
  rm -f "$dir/pids/$name"
}

# The pids of every process that carries the cluster's token in its
# environment: what is left of it when it has no cgroup (a shim that made
# its own session, say).
token_pids() { # state-dir
  local id p
  id=$(cluster_id "$1") || return 0
  for p in /proc/[0-9]*; do
    if environ_has_token "${p#/proc/}" "$id"; then printf '%s\n' "${p#/proc/}"; fi
  done
  return 0
}

# After every component was stopped: anything still in the cluster's cgroup
# (or, without one, still carrying its token) is killed, and the cgroup
# removed.
cluster_sweep() { # state-dir
  local dir=$1 cg p i
  cg=$(cluster_cgroup "$dir")
  if [ -n "$cg" ]; then
    if cgroup_populated "$cg"; then
      echo 1 >"$cg/cgroup.kill" 2>/dev/null || true
      for ((i = 0; i < 50; i++)); do cgroup_populated "$cg" || break; sleep 0.1; done
    fi
    cgroup_remove "$cg"
    rmdir "$(dirname "$cg")" 2>/dev/null || true
  else
    for p in $(token_pids "$dir"); do
      [ "$p" = "$$" ] || kill -KILL "$p" 2>/dev/null || true
    done
  fi
}

# The real node's bridge carries the alias "nodegate-local:TOKEN:DIR" of the
# cluster that made it.
bridge_alias() { printf 'nodegate-local:%s:%s\n' "$(cluster_id "$1")" "$1"; }
bridge_alias_now() { cat "/sys/class/net/$REAL_NODE_BRIDGE/ifalias" 2>/dev/null; }
bridge_owner_dir() {
  local a
  a=$(bridge_alias_now)
  case "$a" in nodegate-local:*:*) a=${a#nodegate-local:}; printf '%s\n' "${a#*:}" ;; esac
}
bridge_is_ours() { # state-dir
  local id
  id=$(cluster_id "$1") || return 1
  [ "$(bridge_alias_now)" = "nodegate-local:$id:$1" ]
}

# Whether any process recorded in a state directory is still the one that
# was started there.
cluster_running() { # state-dir
  local f
  for f in "$1"/pids/*; do
    [ -f "$f" ] || continue
    proc_alive "$1" "${f##*/}" && return 0
  done
  [ -n "$(cluster_cgroup "$1")" ] && cgroup_populated "$(cluster_cgroup "$1")" && return 0
  return 1
}
