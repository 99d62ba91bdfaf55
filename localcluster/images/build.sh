#!/usr/bin/env bash
# Build the container images of the local cluster (`make images`), cached by content: a second
# run builds nothing. Installs the Debian tools it needs, then runs imagebuild.py (see
# docs/packaging.md, "Images without a registry"). Arguments go to imagebuild.py, e.g.
#   localcluster/images/build.sh pause etcd
set -euo pipefail
cd "$(dirname "$0")"

need_apt=()
for tool in podman:podman buildah:buildah mmdebstrap:mmdebstrap skopeo:skopeo umoci:umoci \
  runc:runc setcap:libcap2-bin gcc:gcc newuidmap:uidmap; do
  command -v "${tool%%:*}" >/dev/null || need_apt+=("${tool#*:}")
done
# The static pause binary links glibc statically.
[[ -f /usr/lib/x86_64-linux-gnu/libc.a || -f /usr/lib/$(uname -m)-linux-gnu/libc.a ]] ||
  need_apt+=(libc6-dev)
if ((${#need_apt[@]})); then
  echo "images: installing ${need_apt[*]} from Debian" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y --no-install-recommends "${need_apt[@]}" >/dev/null 2>&1 || {
    apt-get update >/dev/null
    apt-get install -y --no-install-recommends "${need_apt[@]}" >/dev/null
  }
fi
command -v go >/dev/null || { echo "images: Go is needed (etcd, CoreDNS, the pause source)" >&2; exit 1; }
exec python3 imagebuild.py "$@"
