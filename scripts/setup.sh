#!/usr/bin/env bash
# Everything a fresh machine needs for the demo and the tests, idempotent and quick when done.
# System packages come from Debian, Python packages into .venv at the repo root.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v etcd >/dev/null || need_apt+=(etcd-server)
command -v etcdctl >/dev/null || need_apt+=(etcd-client)
command -v ip >/dev/null || need_apt+=(iproute2)
command -v openssl >/dev/null || need_apt+=(openssl)
command -v prometheus >/dev/null || need_apt+=(prometheus)
command -v hadolint >/dev/null || true  # hadolint is fetched by the Dockerfile lint step
if ((${#need_apt[@]})); then
  echo "setup: installing ${need_apt[*]} from Debian" >&2
  export DEBIAN_FRONTEND=noninteractive
  flock /tmp/elasticjob-apt.lock apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends "${need_apt[@]}" >/dev/null 2>&1 || {
    flock /tmp/elasticjob-apt.lock apt-get -o DPkg::Lock::Timeout=600 update >/dev/null
    flock /tmp/elasticjob-apt.lock apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends "${need_apt[@]}" >/dev/null
  }
  # Debian starts the packaged services; we start our own etcd and Prometheus per test.
  pkill -x etcd 2>/dev/null || true
  pkill -x prometheus 2>/dev/null || true
fi

if [[ ! -x .venv/bin/python ]]; then
  python3 -m venv .venv
fi
# Exact versions from requirements/dev.lock (what the benchmarks were measured on; refresh with
# scripts/lock.sh), then the project itself, editable, without touching those pins.
stamp=.venv/.elasticjob-installed
want="$(cat pyproject.toml requirements/dev.lock | sha256sum | cut -d' ' -f1)"
if [[ ! -f $stamp || "$(cat "$stamp")" != "$want" ]]; then
  echo "setup: installing Python packages into .venv (requirements/dev.lock)" >&2
  .venv/bin/pip install --quiet -r requirements/dev.lock
  .venv/bin/pip install --quiet --no-deps -e .
  .venv/bin/pip check >&2 || { echo "setup: requirements/dev.lock does not satisfy pyproject.toml; run scripts/lock.sh" >&2; exit 1; }
  echo "$want" >"$stamp"
fi
