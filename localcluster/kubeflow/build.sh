#!/usr/bin/env bash
# Build (or reuse) Kubeflow's training operator for benchmarks on the local cluster, cached
# outside the repository (it is a peer we measure against, never a dependency of the product):
#   $ELASTICJOB_CACHE/kubeflow/<version>/bin/training-operator   main package ./cmd/training-operator.v1
#   $ELASTICJOB_CACHE/kubeflow/<version>/crds/                   manifests/base/crds (PyTorchJob, ...)
#   $ELASTICJOB_CACHE/kubeflow/<version>/webhook/manifests.yaml  manifests/base/webhook
# Built from the github.com/kubeflow/training-operator Go module through the module proxy.
# Skipped when the binary is already there.
set -euo pipefail

# The versions' one home (localcluster/versions.env); ELASTICJOB_KUBEFLOW_VERSION overrides.
# shellcheck source=../versions.env
source "$(dirname "$0")/../versions.env"
KUBEFLOW_VERSION="${ELASTICJOB_KUBEFLOW_VERSION:-$KUBEFLOW_VERSION}"
CACHE="${ELASTICJOB_CACHE:-$HOME/.cache/elasticjob}"
DIR="$CACHE/kubeflow/$KUBEFLOW_VERSION"
MODULE=github.com/kubeflow/training-operator

log() { echo "kubeflow-build: $*" >&2; }
die() { log "error: $*"; exit 1; }

if [[ -x "$DIR/bin/training-operator" && -d "$DIR/crds" && -f "$DIR/webhook/manifests.yaml" ]]; then
  log "training operator $KUBEFLOW_VERSION already built in $DIR (reused)"
  exit 0
fi
command -v go >/dev/null || die "Go is needed to build Kubeflow's training operator; install Go >= 1.22"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false
started=$SECONDS
mkdir -p "$DIR"
src="$(go mod download -json "$MODULE@$KUBEFLOW_VERSION" |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')"
[[ -f "$src/manifests/base/crds/kubeflow.org_pytorchjobs.yaml" ]] ||
  die "no PyTorchJob CRD in $src/manifests/base/crds"

rm -rf "$DIR/crds.partial" "$DIR/webhook"
mkdir -p "$DIR/crds.partial" "$DIR/webhook"
# kustomization.yaml is not a CRD: copy the CRDs only, so `kubectl apply -f crds/` takes them all.
cp "$src"/manifests/base/crds/kubeflow.org_*.yaml "$DIR/crds.partial/"
cp "$src/manifests/base/webhook/manifests.yaml" "$DIR/webhook/manifests.yaml"
chmod -R u+w "$DIR/crds.partial" "$DIR/webhook"
if [[ -x "$DIR/bin/training-operator" ]]; then
  rm -rf "$DIR/crds"
  mv "$DIR/crds.partial" "$DIR/crds"
  log "training operator $KUBEFLOW_VERSION binary reused; CRDs and webhook manifests copied"
  exit 0
fi

log "building the training operator $KUBEFLOW_VERSION (a cold build takes several minutes on 2 cores)"
rm -rf "$DIR/bin.partial"
mkdir -p "$DIR/bin.partial"
# The module has no replace directives, so `go install pkg@version` builds it as released.
GOBIN="$DIR/bin.partial" nice -n 10 go install -trimpath -ldflags "-s -w" \
  "$MODULE/cmd/training-operator.v1@$KUBEFLOW_VERSION"
rm -rf "$DIR/crds"
mv "$DIR/crds.partial" "$DIR/crds"
mkdir -p "$DIR/bin"
mv "$DIR/bin.partial/training-operator.v1" "$DIR/bin/training-operator"
rmdir "$DIR/bin.partial"
log "built the training operator $KUBEFLOW_VERSION in $((SECONDS - started)) s: $DIR"
