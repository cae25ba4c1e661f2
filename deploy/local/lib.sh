# Shared by the deploy/local scripts: versions, cache paths, logging.
# Sourced, never executed.

LOCAL_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
GOMOD_DIR="$LOCAL_DIR/gomod"

# The pinned versions are read from the wrapper modules, so go.mod is the one
# place a version is written down.
mod_version() { # module-dir module-path
  awk -v m="$2" '$1 == "require" && $2 == m { print $3 } $1 == m && $2 ~ /^v/ { print $2; exit }' \
    "$GOMOD_DIR/$1/go.mod" | head -n 1
}
K8S_VERSION=$(mod_version kubernetes k8s.io/kubernetes)
ETCD_VERSION=$(mod_version etcd go.etcd.io/etcd/server/v3)
KWOK_VERSION=$(mod_version kwok sigs.k8s.io/kwok)
HELM_VERSION=$(mod_version helm helm.sh/helm/v4)

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
PROMETHEUS_MODULE_VERSION=$(mod_version prometheus github.com/prometheus/prometheus)
PROMETHEUS_VERSION=$(printf '%s\n' "$PROMETHEUS_MODULE_VERSION" |
  awk -F. '{ printf "%d.%d.%s", int($2 / 100), $2 % 100, $3 }')
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
OTELCOL_VERSION=$(mod_version otelcol go.opentelemetry.io/collector/otelcol)
OTELCOL_BIN="$CACHE_ROOT/otelcol-$OTELCOL_VERSION/bin"

# The real node of `up --real-node`: kubelet and kube-proxy (from the
# Kubernetes wrapper module, same version as the control plane), containerd
# with its runc shim and ctr, and runc, built by `build --node` into their own
# version-keyed directory. CNI plugins and iptables come from Debian's
# packages (containernetworking-plugins, iptables).
CONTAINERD_VERSION=$(mod_version containerd github.com/containerd/containerd/v2)
RUNC_VERSION=$(mod_version runc github.com/opencontainers/runc)
NODE_BIN="$CACHE_ROOT/node-k8s-${K8S_VERSION}_containerd-${CONTAINERD_VERSION}_runc-${RUNC_VERSION}/bin"
NODE_BINARIES=(kubelet kube-proxy containerd containerd-shim-runc-v2 ctr runc)
# Where Debian's containernetworking-plugins put the CNI plugins.
CNI_BIN_DIR="${NODEGATE_CNI_BIN_DIR:-/usr/lib/cni}"

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
KARPENTER_VERSION=$(mod_version karpenter sigs.k8s.io/karpenter)
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
