#!/usr/bin/env bash
# Every test, from a fresh machine, in one command (the README's `make test`; .ci/run calls it).
#
#   1. What the unit and integration suites need: helm, kubectl and the etcd release (cached).
#   2. The unit and etcd integration suites start at once. Beside them, the builds of the
#      end-to-end suite (Kubernetes, images, Kueue; cached, seconds when done) run at a lower CPU
#      priority, so that a cold machine builds while the fast suites test.
#   3. Once built, the end-to-end suite runs as two pytest sessions, each on a local cluster of
#      its own: the real-node suites (E2E_SPLIT) at once, the rest once the unit and integration
#      suites are done. So no more than two sessions test at a time, the load the suites are
#      known to pass under, and the real-node suites (the longest) start first.
#
# Each session's log is printed at the end with its start and end time; the run fails if any
# session (or the builds) failed. Extra arguments go to every session (e.g. -x, -k).
set -uo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
SECONDS=0
logs="$(mktemp -d -t elasticjob-test.XXXXXX)"
say() { echo "test: [$SECONDS s] $*" >&2; }

# The first end-to-end session: the suites on real nodes (the heaviest), then the cluster's,
# Kueue's and the dashboard's, so that both sessions end at about the same time (the second
# starts only when the unit and integration suites end); the second takes every other
# directory of tests/e2e (the operator's). tests/e2e/kubeflow is the benchmark peer's tooling
# (`make test-peer`: its cold build is long), in neither.
E2E_SPLIT=(tests/e2e/realnodes tests/e2e/images tests/e2e/chart tests/e2e/cluster tests/e2e/kueue
  tests/e2e/observability)
E2E_SKIP=(tests/e2e/kubeflow)

pids=()
declare -A started
trap 'kill "${pids[@]}" 2>/dev/null; exit 130' INT TERM

# session NAME ARGS...: a pytest session in the background, its log in $logs/NAME.log and
# "exit start end" in $logs/NAME.status.
session() {
  local name=$1
  shift
  (
    local began=$SECONDS
    "$py" -m pytest -q -ra "$@" >"$logs/$name.log" 2>&1
    echo "$? $began $SECONDS" >"$logs/$name.status"
  ) &
  pids+=($!)
  started[$name]=$!
  say "$name started (log $logs/$name.log)"
}

# What the unit and integration suites need: helm and kubectl (the chart tests), and the etcd
# release the integration suites run (built once with Go, cached).
localcluster/build.sh --tools-only || exit 1
ELASTICJOB_ETCD="$(localcluster/images/build.sh --etcd-release)" || exit 1
export ELASTICJOB_ETCD
say "integration suites on $("$ELASTICJOB_ETCD" --version | head -1)"
session unit+integration --durations=20 "$@" tests/unit tests/integration

# make's own lock on apt and the content caches keep these builds from colliding with anything.
nice -n 10 make -j3 --output-sync=line builds >"$logs/builds.log" 2>&1
built=$?
say "builds finished (exit $built)"
grep -E "took|reused|built|cached" "$logs/builds.log" | tail -40 >&2

if ((built == 0)); then
  ignores=()
  for dir in "${E2E_SPLIT[@]}" "${E2E_SKIP[@]}"; do ignores+=(--ignore="$dir"); done
  # --durations: the slowest tests, so a run that nears CI's limit shows where the time went.
  session e2e-realnodes --durations=15 "$@" "${E2E_SPLIT[@]}"
  wait "${started[unit+integration]}"
  say "unit+integration finished"
  session e2e-rest --durations=15 "$@" tests/e2e "${ignores[@]}"
else
  cat "$logs/builds.log"
fi

wait
failed=$((built != 0))
for name in unit+integration e2e-realnodes e2e-rest; do
  [[ -f $logs/$name.log ]] || continue
  read -r code began ended <"$logs/$name.status" || code=1
  echo "===== $name (exit $code, from $began s to $ended s) =====" >&2
  cat "$logs/$name.log"
  ((code == 0)) || failed=1
done
for name in unit+integration e2e-realnodes e2e-rest; do
  [[ -f $logs/$name.status ]] && read -r code began ended <"$logs/$name.status" &&
    say "$name: exit $code, from $began s to $ended s"
done
say "all suites finished (failed: $failed)"
((failed == 0))
