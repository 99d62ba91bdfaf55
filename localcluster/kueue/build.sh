#!/usr/bin/env bash
# Build (or reuse) Kueue for the local cluster, cached outside the repository:
#   $ELASTICJOB_CACHE/kueue/<version>/bin/kueue   the controller manager (main package ./cmd/kueue)
#   $ELASTICJOB_CACHE/kueue/<version>/crds/       its CRDs (config/components/crd/bases)
#   $ELASTICJOB_CACHE/kueue/<version>/webhook/    its webhook manifests (config/components/webhook)
# Built from the sigs.k8s.io/kueue Go module through the module proxy. Skipped when the binary is
# already there.
set -euo pipefail

# The versions' one home (localcluster/versions.env); ELASTICJOB_KUEUE_VERSION overrides.
# shellcheck source=../versions.env
source "$(dirname "$0")/../versions.env"
KUEUE_VERSION="${ELASTICJOB_KUEUE_VERSION:-$KUEUE_VERSION}"
CACHE="${ELASTICJOB_CACHE:-$HOME/.cache/elasticjob}"
DIR="$CACHE/kueue/$KUEUE_VERSION"

log() { echo "kueue-build: $*" >&2; }
die() { log "error: $*"; exit 1; }

if [[ -x "$DIR/bin/kueue" && -d "$DIR/crds" && -f "$DIR/webhook/manifests.yaml" ]]; then
  log "Kueue $KUEUE_VERSION already built in $DIR (reused)"
  exit 0
fi
command -v go >/dev/null || die "Go is needed to build Kueue; install Go >= 1.25"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false
started=$SECONDS
mkdir -p "$DIR"
src="$(go mod download -json "sigs.k8s.io/kueue@$KUEUE_VERSION" |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')"
[[ -d "$src/config/components/crd/bases" ]] || die "no CRDs in $src/config/components/crd/bases"

rm -rf "$DIR/crds.partial" "$DIR/webhook"
cp -r "$src/config/components/crd/bases" "$DIR/crds.partial"
chmod -R u+w "$DIR/crds.partial"
mkdir -p "$DIR/webhook"
cp "$src/config/components/webhook/manifests.yaml" "$DIR/webhook/manifests.yaml"
chmod u+w "$DIR/webhook/manifests.yaml"
if [[ -x "$DIR/bin/kueue" ]]; then
  rm -rf "$DIR/crds"
  mv "$DIR/crds.partial" "$DIR/crds"
  log "Kueue $KUEUE_VERSION binary reused; CRDs and webhook manifests copied"
  exit 0
fi

log "building Kueue $KUEUE_VERSION (a cold build takes several minutes on 2 cores)"
rm -rf "$DIR/bin.partial"
mkdir -p "$DIR/bin.partial"
# The module has no replace directives, so `go install pkg@version` builds it as released.
GOBIN="$DIR/bin.partial" nice -n 10 go install -trimpath \
  -ldflags "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION" \
  "sigs.k8s.io/kueue/cmd/kueue@$KUEUE_VERSION"
rm -rf "$DIR/crds"
mv "$DIR/crds.partial" "$DIR/crds"
mkdir -p "$DIR/bin"
mv "$DIR/bin.partial/kueue" "$DIR/bin/kueue"
rmdir "$DIR/bin.partial"
log "built Kueue $KUEUE_VERSION in $((SECONDS - started)) s: $DIR"
