#!/usr/bin/env bash
# Build the container images of the local cluster (`make images`), cached by content: a second
# run builds nothing. Installs the Debian tools it needs, then runs imagebuild (see
# docs/packaging.md, "Images without a registry"). Arguments go to imagebuild, e.g.
#   localcluster/images/build.sh pause etcd
set -euo pipefail
cd "$(dirname "$0")"

need_apt=()
# podman with runc (crun fails on this cgroup layout) and CNI bridge networking (the image tests
# run containers in their own network namespace); mmdebstrap for the base; gcc and glibc's static
# library for the pause binary; setcap for CoreDNS's file capability.
for tool in podman:podman runc:runc mmdebstrap:mmdebstrap setcap:libcap2-bin gcc:gcc \
  iptables:iptables /usr/lib/cni/bridge:containernetworking-plugins \
  /usr/lib/x86_64-linux-gnu/libc.a:libc6-dev; do
  path="${tool%%:*}"
  if [[ "$path" == /* ]]; then [[ -e "$path" ]] && continue; else command -v "$path" >/dev/null && continue; fi
  need_apt+=("${tool#*:}")
done
if ((${#need_apt[@]})); then
  echo "images: installing ${need_apt[*]} from Debian" >&2
  export DEBIAN_FRONTEND=noninteractive
  flock /tmp/elasticjob-apt.lock apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends "${need_apt[@]}" >/dev/null 2>&1 || {
    flock /tmp/elasticjob-apt.lock apt-get -o DPkg::Lock::Timeout=600 update >/dev/null
    flock /tmp/elasticjob-apt.lock apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends "${need_apt[@]}" >/dev/null
  }
fi
command -v go >/dev/null || { echo "images: Go is needed (etcd, CoreDNS, the pause source)" >&2; exit 1; }
exec python3 -m imagebuild "$@"
