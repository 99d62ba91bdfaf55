#!/usr/bin/env bash
# Every test, from a fresh machine, in one command (the README's `make test`; .ci/run calls it).
#
# Most tests wait (for a lease to lapse, a rendezvous round, a pod to start) more than they
# compute, so the suites run as six pytest sessions in three lanes, at most three at a time:
#
#   lane   at once, beside the builds          once the builds are done
#   a      -                                   e2e-realnodes: tests/e2e/realnodes but E2E_MOVED
#   b      unit+integration (all but agent)    e2e-operator: tests/e2e/operator
#   c      integration-agent                   e2e-rest: every other directory of tests/e2e,
#                                              then e2e-moved: E2E_MOVED
#
# E2E_MOVED are real-node modules run in lane c, on a cluster of their own, so that the lanes
# end at about the same time (the real-node suite alone is the longest session).
#
# 1. What the unit and integration suites need first: helm, kubectl and the etcd release
#    (cached).
# 2. The builds of the end-to-end suites (Kubernetes, images, Kueue; cached, seconds when done)
#    run at a lower CPU priority beside the first sessions of lanes b and c, so that a cold
#    machine builds while the fast suites test.
# 3. Each end-to-end session starts a local cluster of its own, so sessions never collide.
#
# Each session's log is printed at the end with its start and end time; the run fails if any
# session (or the builds) failed. Extra arguments go to every session (e.g. -x, -k).
set -uo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
SECONDS=0
logs="$(mktemp -d -t elasticjob-test.XXXXXX)"
say() { echo "test: [$SECONDS s] $*" >&2; }

# tests/e2e/kubeflow is the benchmark peer's tooling (`make test-peer`: its cold build is long),
# in no session.
E2E_OWN=(tests/e2e/realnodes tests/e2e/operator)
E2E_SKIP=(tests/e2e/kubeflow)
E2E_MOVED=(tests/e2e/realnodes/test_realnodes_resize.py)
SESSIONS=(unit+integration integration-agent e2e-realnodes e2e-operator e2e-rest e2e-moved)

pids=()
trap 'kill "${pids[@]}" 2>/dev/null; exit 130' INT TERM

# run NAME ARGS...: one pytest session in the foreground, its log in $logs/NAME.log and
# "exit start end" in $logs/NAME.status. --durations: the slowest tests, so a run that nears
# CI's limit shows where the time went.
run() {
  local name=$1 began=$SECONDS
  shift
  say "$name started (log $logs/$name.log)"
  "$py" -m pytest -q -ra --durations=15 "$@" >"$logs/$name.log" 2>&1
  echo "$? $began $SECONDS" >"$logs/$name.status"
  say "$name finished"
}

# after_builds: wait until the builds are done (the main shell writes builds.status); false
# when they failed. Bounded by CI's own limit: a build that never ends fails the run.
after_builds() {
  local waited=0
  until [[ -f $logs/builds.status ]]; do
    sleep 2
    ((waited += 2))
    ((waited < 5400)) || return 1
  done
  [[ $(cat "$logs/builds.status") == 0 ]]
}

# What the unit and integration suites need: helm and kubectl (the chart tests), and the etcd
# release the integration suites run (built once with Go, cached).
localcluster/build.sh --tools-only || exit 1
ELASTICJOB_ETCD="$(localcluster/images/build.sh --etcd-release)" || exit 1
export ELASTICJOB_ETCD
say "integration suites on $("$ELASTICJOB_ETCD" --version | head -1)"

ignores=()
for dir in "${E2E_OWN[@]}" "${E2E_SKIP[@]}"; do ignores+=(--ignore="$dir"); done
moved=()
for path in "${E2E_MOVED[@]}"; do moved+=(--ignore="$path"); done
(after_builds && run e2e-realnodes "$@" tests/e2e/realnodes "${moved[@]}") &
pids+=($!)
(
  run unit+integration "$@" tests/unit tests/integration --ignore=tests/integration/agent
  after_builds && run e2e-operator "$@" tests/e2e/operator
) &
pids+=($!)
(
  run integration-agent "$@" tests/integration/agent
  after_builds && run e2e-rest "$@" tests/e2e "${ignores[@]}"
  after_builds && run e2e-moved "$@" "${E2E_MOVED[@]}"
) &
pids+=($!)

# make's own lock on apt and the content caches keep these builds from colliding with anything.
nice -n 10 make -j3 --output-sync=line builds >"$logs/builds.log" 2>&1
built=$?
echo "$built" >"$logs/builds.status"
say "builds finished (exit $built)"
grep -E "took|reused|built|cached" "$logs/builds.log" | tail -40 >&2
((built == 0)) || cat "$logs/builds.log"

wait
failed=$((built != 0))
for name in "${SESSIONS[@]}"; do
  [[ -f $logs/$name.log ]] || continue
  read -r code began ended <"$logs/$name.status" || code=1
  echo "===== $name (exit $code, from $began s to $ended s) =====" >&2
  cat "$logs/$name.log"
  ((code == 0)) || failed=1
done
for name in "${SESSIONS[@]}"; do
  [[ -f $logs/$name.status ]] && read -r code began ended <"$logs/$name.status" &&
    say "$name: exit $code, from $began s to $ended s"
done
say "all suites finished (failed: $failed)"
((failed == 0))
