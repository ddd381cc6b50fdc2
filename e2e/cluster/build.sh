#!/usr/bin/env bash
# Builds the local test cluster's binaries from the upstream Go modules into .cache/bin.
# Each tool is rebuilt only when its tools module (go.mod/go.sum/sources) or the Go
# version changes; the cached path costs a few hashes.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BIN=${DEPLOYCTL_BIN:-$ROOT/.cache/bin}
TOOLS=$ROOT/e2e/cluster/tools
mkdir -p "$BIN"

command -v go >/dev/null || { echo "build.sh: 'go' is not on PATH; install Go >= 1.26 to build the test cluster" >&2; exit 1; }

export CGO_ENABLED=0 GOFLAGS="-trimpath -mod=mod"
K8S_VERSION=$(sed -n 's/^require k8s.io\/kubernetes \(v[0-9.]*\)$/\1/p' "$TOOLS/kubernetes/go.mod")

stamp_of() { # the inputs that decide a tool's bytes: its module, the Go version, the ldflags
  (cd "$1" && cat go.mod go.sum *.go 2>/dev/null; go version; echo "$2") | sha256sum | cut -c1-16
}

# build TOOL_DIR PACKAGE OUTPUT [LDFLAGS]
build() {
  local dir=$1 pkg=$2 out=$3 ldflags=${4:-}
  local want; want=$(stamp_of "$dir" "$ldflags")
  if [[ -x $BIN/$out && -f $BIN/.$out.stamp && $(cat "$BIN/.$out.stamp") == "$want" ]]; then
    return 0
  fi
  echo "build.sh: building $out from $pkg (cold builds take minutes on 2 cores)" >&2
  local t0=$SECONDS
  (cd "$dir" && go build -ldflags "-s -w $ldflags" -o "$BIN/$out.tmp" "$pkg")
  mv "$BIN/$out.tmp" "$BIN/$out"
  echo "$want" > "$BIN/.$out.stamp"
  echo "build.sh: $out built in $((SECONDS - t0)) s" >&2
}

minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
K8S_LDFLAGS="-X k8s.io/component-base/version.gitVersion=$K8S_VERSION \
 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor \
 -X k8s.io/component-base/version.gitTreeState=clean \
 -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION \
 -X k8s.io/component-base/version/verflag.programName=kubernetes"

# helm stamps its own version and, as the default for `helm template` and the lint rules,
# the Kubernetes version of its client-go; unset, it assumes Kubernetes v1.20.
HELM_VERSION=$(sed -n 's/^require helm.sh\/helm\/v3 \(v[0-9.]*\)$/\1/p' "$TOOLS/helm/go.mod")
HELM_K8S_MINOR=$(sed -n 's/^\s*k8s.io\/client-go v0\.\([0-9]*\)\..*/\1/p' "$TOOLS/helm/go.mod")
HELM_LDFLAGS="-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION \
 -X helm.sh/helm/v3/internal/version.gitTreeState=clean \
 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$HELM_K8S_MINOR \
 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$HELM_K8S_MINOR"

build_tool() {
  case $1 in
    sim) build "$ROOT/e2e/simulator" . vllm-sim ;;
    etcd) build "$TOOLS/etcd" . etcd ;;
    kube-apiserver|kube-controller-manager|kube-scheduler|kubectl)
      build "$TOOLS/kubernetes" "k8s.io/kubernetes/cmd/$1" "$1" "$K8S_LDFLAGS" ;;
    kwok) build "$TOOLS/kwok" sigs.k8s.io/kwok/cmd/kwok kwok ;;
    helm) build "$TOOLS/helm" helm.sh/helm/v3/cmd/helm helm "$HELM_LDFLAGS" ;;
    ray-operator) build "$TOOLS/kuberay" github.com/ray-project/kuberay/ray-operator ray-operator ;;
    source-controller) build "$TOOLS/flux-source" github.com/fluxcd/source-controller source-controller ;;
    kustomize-controller) build "$TOOLS/flux-kustomize" github.com/fluxcd/kustomize-controller kustomize-controller ;;
    # promtool checks and unit-tests the rendered alert rules; the server, from the same module, is
    # the canary's metrics source `prometheus` in the e2e tests (started on loopback, no UI assets).
    prometheus) build "$TOOLS/prometheus" github.com/prometheus/prometheus/cmd/promtool promtool
      build "$TOOLS/prometheus" github.com/prometheus/prometheus/cmd/prometheus prometheus ;;
    # No binary: the module's CRD files, which the PodMonitor tests apply, into the module cache.
    prometheus-crds) (cd "$TOOLS/prometheus-operator" && go mod download github.com/prometheus-operator/prometheus-operator) ;;
    # No binary either: the Gateway API's CRD files (HTTPRoute), for the canary weighed on a route.
    gateway-api-crds) (cd "$TOOLS/gateway-api" && go mod download sigs.k8s.io/gateway-api) ;;
    *) echo "build.sh: unknown tool '$1'" >&2; exit 2 ;;
  esac
}

build_each() { for tool in "$@"; do build_tool "$tool"; done; }

if [[ $# -gt 0 ]]; then
  build_each "$@"
  exit 0
fi
# Everything, in two streams at once: one go build leaves a core idle while it downloads modules
# and links, so a cold build of both streams side by side takes less wall time than one after the
# other (docs/testing.md, "A fresh clone's first build"). Go's module and build caches are safe to
# share between concurrent builds. The Kubernetes binaries stay in one stream: the later ones reuse
# what kube-apiserver compiled.
STREAM_KUBERNETES="sim etcd kube-apiserver kube-controller-manager kube-scheduler kubectl prometheus-crds gateway-api-crds prometheus"
STREAM_OTHERS="kwok helm ray-operator source-controller kustomize-controller"
# shellcheck disable=SC2086 # the lists split into tool names on purpose
build_each $STREAM_KUBERNETES &
kubernetes=$!
# shellcheck disable=SC2086
build_each $STREAM_OTHERS &
others=$!
failed=0
wait "$kubernetes" || failed=1
wait "$others" || failed=1
exit "$failed"
