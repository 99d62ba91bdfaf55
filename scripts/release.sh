#!/usr/bin/env bash
# Release recipe: build and check the Python distribution (wheel + sdist), build the operator and
# training-example images, package the chart, and (only with --publish) publish all of it.
# See docs/packaging.md, "Releasing".
#
#   scripts/release.sh                      # dry run: build and check everything, publish nothing
#   scripts/release.sh --dist-only          # only the wheel and sdist, checked in a fresh venv
#   scripts/release.sh --publish            # the real release (needs the credentials below)
#
# Environment: ELASTICJOB_REGISTRY (default ghcr.io/elasticjob) names where images and the chart
# go; ENGINE (docker or podman, default: whichever exists); PYTHON_IMAGE and BASE_IMAGE override
# the operator's and the training example's base (e.g. a mirror; a dry run here uses the local
# cluster's bases); BUILD_OPTS adds options to both image builds (e.g. a CA bundle volume).
# --publish uploads with twine (TWINE_USERNAME/TWINE_PASSWORD or a ~/.pypirc token) and pushes
# with the engine's and helm's own registry logins. The version is the one in pyproject.toml;
# the git tree must be clean and tagged v<version> for --publish.
set -euo pipefail
cd "$(dirname "$0")/.."

publish=0
dist_only=0
for arg in "$@"; do
  case "$arg" in
    --publish) publish=1 ;;
    --dist-only) dist_only=1 ;;
    -h | --help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "release: unknown argument $arg (see --help)" >&2; exit 2 ;;
  esac
done

log() { echo "release: $*" >&2; }
die() { log "error: $*"; exit 1; }

version="$(python3 -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')"
chart_version="$(sed -n 's/^version: *//p' charts/elasticjob-operator/Chart.yaml)"
app_version="$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' charts/elasticjob-operator/Chart.yaml)"
registry="${ELASTICJOB_REGISTRY:-ghcr.io/elasticjob}"
[[ "$app_version" == "$version" ]] ||
  die "charts/elasticjob-operator/Chart.yaml appVersion $app_version != pyproject version $version"

if ((publish)); then
  [[ -z "$(git status --porcelain)" ]] || die "the git tree is not clean"
  [[ "$(git describe --exact-match --tags HEAD 2>/dev/null)" == "v$version" ]] ||
    die "HEAD is not tagged v$version"
fi

# 1. The distribution, from a clean copy of the sources (no build/ or egg-info leftovers).
dist="dist/$version"
rm -rf "$dist"
mkdir -p "$dist"
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
cp -r pyproject.toml README.md agent operator "$stage/"
find "$stage" \( -name __pycache__ -o -name '*.egg-info' \) -prune -exec rm -rf {} +
python3 -m venv "$stage/.build"
"$stage/.build/bin/pip" install --quiet "setuptools>=69"
(cd "$stage" && .build/bin/python - "$OLDPWD/$dist" <<'EOF'
import sys
from setuptools import build_meta

out = sys.argv[1]
print(build_meta.build_wheel(out))
print(build_meta.build_sdist(out))
EOF
) >&2
wheel="$(ls "$dist"/elasticjob-"$version"-py3-none-any.whl)"
log "built $wheel and $(ls "$dist"/elasticjob-"$version".tar.gz)"

# 2. Check the wheel as a user gets it: a fresh venv, both entry points, the torchrun handler.
python3 -m venv "$stage/check"
"$stage/check/bin/pip" install --quiet "$wheel"
"$stage/check/bin/elasticjob-agent" --help >/dev/null
"$stage/check/bin/python" - <<'EOF'
from importlib.metadata import entry_points

names = [e.name for e in entry_points(group="torchrun.handlers")]
assert "etcd-v3" in names, names
EOF
"$stage/check/bin/pip" install --quiet "${wheel}[operator]"
"$stage/check/bin/elasticjob-operator" --help >/dev/null
log "the wheel installs and both entry points run"
((dist_only)) && { log "done (--dist-only): $dist"; exit 0; }

# 3. Images and the chart.
engine="${ENGINE:-$(command -v docker || command -v podman || true)}"
[[ -n "$engine" ]] || die "no container engine: install docker or podman, or set ENGINE"
operator_ref="$registry/elasticjob-operator:$version"
training_ref="$registry/training-example:$version"
read -r -a base_args <<<"${BUILD_OPTS:-}"
[[ -n "${PYTHON_IMAGE:-}" ]] && base_args+=(--build-arg "PYTHON_IMAGE=$PYTHON_IMAGE")
"$engine" build --tag "$operator_ref" "${base_args[@]}" .
context="$stage/training-context"
mkdir -p "$context/training-image/wheels"
cp examples/train.py examples/train_dcp.py examples/train-text.txt "$context/"
cp examples/training-image/Dockerfile "$context/training-image/"
cp "$wheel" "$context/training-image/wheels/"
read -r -a base_args <<<"${BUILD_OPTS:-}"
[[ -n "${BASE_IMAGE:-}" ]] && base_args+=(--build-arg "BASE_IMAGE=$BASE_IMAGE")
"$engine" build --tag "$training_ref" "${base_args[@]}" \
  --build-arg "ELASTICJOB_SPEC=/wheels/$(basename "$wheel")" \
  --file "$context/training-image/Dockerfile" "$context"
helm package charts/elasticjob-operator --destination "$dist" >&2
log "built $operator_ref, $training_ref, $dist/elasticjob-operator-$chart_version.tgz"

if ((!publish)); then
  log "dry run: nothing published (--publish uploads $dist to PyPI, pushes both images and the chart to oci://$registry/charts)"
  exit 0
fi
python3 -m venv "$stage/twine"
"$stage/twine/bin/pip" install --quiet twine
"$stage/twine/bin/twine" check "$dist"/elasticjob-"$version"*
"$stage/twine/bin/twine" upload "$dist"/elasticjob-"$version"*
"$engine" push "$operator_ref"
"$engine" push "$training_ref"
helm push "$dist/elasticjob-operator-$chart_version.tgz" "oci://$registry/charts"
log "published elasticjob $version: PyPI, $operator_ref, $training_ref, oci://$registry/charts"
