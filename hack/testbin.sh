#!/usr/bin/env bash
# Build the test-only control plane (kube-apiserver, kube-scheduler, kube-controller-manager, etcd, kwok, helm)
# from Go modules, only when missing, into a cache directory keyed by the pinned versions. Prints that directory on stdout.
# NVIDIA's nvidia-mig-parted (the external check of every config migctl writes) is built too, into its own
# cache directory keyed by its version, so adding or bumping it never rebuilds the control plane. Prometheus's
# promtool (the check of the chart's alert rules and of the dashboard's PromQL) is built the same way.
#
#   hack/testbin.sh              build what is missing, print the bin dir
#   hack/testbin.sh --path       print the bin dir, build nothing (exit 1 when incomplete)
#   hack/testbin.sh --mig-parted print the nvidia-mig-parted binary, build nothing (exit 1 when missing)
#   hack/testbin.sh --promtool   print the promtool binary, build nothing (exit 1 when missing)
#
# The wrapper modules in hack/testbin/*/ carry the full `replace` block k8s.io/kubernetes needs
# (docs/testing.md explains why). Binaries never enter the repository.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=/dev/null
source "$here/testbin/versions.env"

key="k8s-${KUBERNETES_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}_helm-${HELM_VERSION}"
cache_root="${MIGCTL_TESTBIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/migctl-testbin}"
bin="$cache_root/$key"
tools=(kube-apiserver kube-scheduler kube-controller-manager etcd kwok helm)
# kwok (unlike kwokctl) has no built-in stages: it needs the Stage objects from its own module's
# kustomize/stage/ tree as config. We copy the version-matched "fast" node/pod stages plus heartbeat.
stages=kwok-stages.yaml
mig_parted="$cache_root/mig-parted-${MIG_PARTED_VERSION}/nvidia-mig-parted"
promtool="$cache_root/promtool-${PROMETHEUS_VERSION}/promtool"

complete() {
  local t
  for t in "${tools[@]}"; do [[ -x "$bin/$t" ]] || return 1; done
  [[ -s "$bin/$stages" ]]
}

if [[ "${1:-}" == "--path" ]]; then
  complete || exit 1
  echo "$bin"
  exit 0
fi

if [[ "${1:-}" == "--mig-parted" ]]; then
  [[ -x "$mig_parted" ]] || exit 1
  echo "$mig_parted"
  exit 0
fi

if [[ "${1:-}" == "--promtool" ]]; then
  [[ -x "$promtool" ]] || exit 1
  echo "$promtool"
  exit 0
fi

if complete && [[ -x "$mig_parted" ]] && [[ -x "$promtool" ]]; then
  echo "$bin"
  exit 0
fi

command -v go >/dev/null || { echo "testbin: Go is not installed; cannot build the control plane" >&2; exit 3; }

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-mod=readonly -trimpath"
mkdir -p "$bin"
log() { echo "testbin: $*" >&2; }

build() { # build <wrapper dir> <out name> <package> [ldflags]
  local dir="$1" out="$2" pkg="$3" ldflags="${4:-}"
  [[ -x "$bin/$out" ]] && return 0
  log "building $out ($pkg)"
  local start=$SECONDS
  (cd "$here/testbin/$dir" && go build -o "$bin/$out.tmp" -ldflags "-s -w $ldflags" "$pkg")
  mv "$bin/$out.tmp" "$bin/$out"
  log "built $out in $((SECONDS - start))s"
}

kminor="${KUBERNETES_VERSION#*.}"; kminor="${kminor%%.*}"
kver="-X k8s.io/component-base/version.gitVersion=v${KUBERNETES_VERSION} \
-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${kminor}"

build etcd etcd go.etcd.io/etcd/server/v3
build k8s kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$kver"
build k8s kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler "$kver"
# kube-controller-manager: its resourceclaim controller turns ResourceClaimTemplates into claims (DRA tests).
build k8s kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager "$kver"
build kwok kwok sigs.k8s.io/kwok/cmd/kwok
build helm helm helm.sh/helm/v3/cmd/helm \
  "-X helm.sh/helm/v3/internal/version.version=v${HELM_VERSION} -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=${kminor} \
-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=${kminor}"

if [[ ! -s "$bin/$stages" ]]; then
  kwok_dir="$(cd "$here/testbin/kwok" && go mod download -json sigs.k8s.io/kwok | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  [[ -d "$kwok_dir" ]] || { log "cannot find the sigs.k8s.io/kwok module source"; exit 1; }
  {
    for f in node/fast/node-initialize node/heartbeat/node-heartbeat \
             pod/fast/pod-ready pod/fast/pod-complete pod/fast/pod-delete; do
      echo "---"
      cat "$kwok_dir/kustomize/stage/$f.yaml"
    done
  } >"$bin/$stages.tmp"
  mv "$bin/$stages.tmp" "$bin/$stages"
  log "wrote $stages from $kwok_dir"
fi

# mig-parted links go-nvml, which needs cgo (it dlopens libnvidia-ml only when NVML is used; `assert
# --valid-config` never does). `go install ...@version` cannot be used: it asks the proxy for the module's
# version list, which the proxy refuses for this module; the pinned wrapper module asks only for the version.
if [[ ! -x "$mig_parted" ]]; then
  command -v "${CC:-gcc}" >/dev/null || { log "nvidia-mig-parted needs a C compiler (cgo); none found"; exit 3; }
  mkdir -p "$(dirname "$mig_parted")"
  log "building nvidia-mig-parted v${MIG_PARTED_VERSION}"
  start=$SECONDS
  (cd "$here/testbin/mig-parted" && CGO_ENABLED=1 go build -o "$mig_parted.tmp" -ldflags "-s -w" \
    github.com/NVIDIA/mig-parted/cmd/nvidia-mig-parted)
  mv "$mig_parted.tmp" "$mig_parted"
  log "built nvidia-mig-parted in $((SECONDS - start))s"
fi

# promtool: pure Go. Prometheus tags its Go module v0.<major><minor as two digits>.<patch>: v0.316.0 is
# Prometheus 3.16.0. The wrapper module pins it and its dependencies like the others; it needs Go >= 1.26.7
# (Prometheus's own go.mod says so).
if [[ ! -x "$promtool" ]]; then
  mkdir -p "$(dirname "$promtool")"
  log "building promtool (Prometheus module v${PROMETHEUS_VERSION})"
  start=$SECONDS
  (cd "$here/testbin/promtool" && go build -o "$promtool.tmp" -ldflags "-s -w \
-X github.com/prometheus/common/version.Version=${PROMETHEUS_VERSION}" github.com/prometheus/prometheus/cmd/promtool)
  mv "$promtool.tmp" "$promtool"
  log "built promtool in $((SECONDS - start))s"
fi

complete
echo "$bin"
