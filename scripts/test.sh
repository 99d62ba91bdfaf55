#!/usr/bin/env bash
# Every test, from a fresh machine, in one command (the README's `make test`; .ci/run calls it).
#
# Most tests wait (for a lease to lapse, a rendezvous round, a pod to start) more than they
# compute, so the suite runs as ten pytest sessions on three runners beside the builds
# (scripts/run_suites.py; the sessions and their order are scripts/suite_plan.py):
#
# 1. What the unit and integration sessions need first: helm, kubectl and the etcd release
#    (cached).
# 2. The builds of the end-to-end sessions run at a lower CPU priority in two stages (Kubernetes,
#    kube-router and the images; then Kueue; cached, seconds when done). Each runner takes the
#    longest session it can run from one queue: with the builds cached, the end-to-end sessions
#    first; on a cold machine the unit and integration sessions while the builds run, then
#    each end-to-end session once the stages it needs are built.
# 3. Each end-to-end session starts local clusters of its own, so sessions never collide.
#
# Each session's log is printed at the end with its start and end time; the run fails if any
# session (or the builds) failed. Extra arguments go to every session (e.g. -x, -k).
set -uo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python

# What the unit and integration sessions need: helm and kubectl (the chart tests), and the etcd
# release the integration sessions run (built once with Go, cached).
localcluster/build.sh --tools-only || exit 1
ELASTICJOB_ETCD="$(localcluster/images/build.sh --etcd-release)" || exit 1
export ELASTICJOB_ETCD
echo "test: integration sessions on $("$ELASTICJOB_ETCD" --version | head -1)" >&2
exec "$py" -m scripts.run_suites "$@"
