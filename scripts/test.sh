#!/usr/bin/env bash
# Every test, in two pytest sessions side by side: the end-to-end suite (mostly waiting on its
# local cluster) and the unit and etcd integration suites (their own etcd servers). Together
# they take about as long as the e2e suite alone. Each prints its summary and duration; the run
# fails if either fails. Extra arguments go to both sessions (e.g. -x, -k).
set -uo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
# The integration suites run the etcd release the operator deploys (built once, cached).
ELASTICJOB_ETCD="$(localcluster/images/build.sh --etcd-release)" || exit 1
export ELASTICJOB_ETCD
echo "test: integration suites on $("$ELASTICJOB_ETCD" --version | head -1)" >&2
log="$(mktemp -t elasticjob-e2e.XXXXXX.log)"
SECONDS=0
# tests/e2e/kubeflow is the benchmark peer's tooling: `make test-peer` (its cold build is long).
# --durations: the slowest e2e tests, so a run that nears CI's limit shows where the time went.
"$py" -m pytest -q -ra --durations=15 "$@" tests/e2e --ignore=tests/e2e/kubeflow >"$log" 2>&1 &
e2e=$!
trap 'kill "$e2e" 2>/dev/null' INT TERM
"$py" -m pytest -q -ra "$@" tests/unit tests/integration
fast=$?
echo "test: unit + integration finished in $SECONDS s (exit $fast); waiting for e2e" >&2
wait "$e2e"
slow=$?
echo "===== tests/e2e (exit $slow, log $log) =====" >&2
cat "$log"
echo "test: all suites finished in $SECONDS s (unit+integration exit $fast, e2e exit $slow)" >&2
((fast == 0 && slow == 0))
