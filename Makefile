# The two commands of a fresh machine are `make demo` and `make test` (see README.md).
SHELL := /bin/bash
PY := .venv/bin/python
# Long builds (Kubernetes, helm) are cached here, outside the repository.
export ELASTICJOB_CACHE ?= $(HOME)/.cache/elasticjob

.PHONY: sync-chart setup demo demo-standalone test test-fast test-peer lint fmt cluster-build cluster-up cluster-down bench builds kueue-build

setup:
	@scripts/setup.sh

# The local cluster CLUSTER of `make cluster-up`, `make demo` and `make cluster-down`: NODES
# virtual nodes (the emulator) and REAL_NODES real ones (kubelet, containerd, runc), which run
# the images of `make images`.
CLUSTER ?= dev
NODES ?= 4
REAL_NODES ?= 2

# The main job: the local cluster (left running; `make cluster-down` stops it), the chart
# installed with helm, examples/elasticjob.yaml trained to Succeeded through a worker failure
# and an etcd outage, all on the real nodes.
demo: cluster-up
	$(PY) scripts/demo_cluster.py --cluster $(CLUSTER)

# One node, no Kubernetes: elasticjob-agent --standalone on examples/train.py.
demo-standalone: setup
	@scripts/demo.sh

# Every test (scripts/test.sh): unit + integration while the builds run, then the e2e suite in
# two sessions, each on a cluster of its own (the real-node suites first), two sessions at a time.
test: setup
	@scripts/test.sh

# Everything the tests need, each step cached and skipped when done. Under `make -j3 builds`
# (.ci/run) the image builds (mostly network and disk) run beside the Go builds, which take
# turns on the CPU (Kueue after Kubernetes); apt calls take a lock, so they never collide.
builds: cluster-build images kueue-build

kueue-build: cluster-build
	@localcluster/kueue/build.sh

# The benchmark peer's tooling (tests/e2e/kubeflow): Kubeflow's training operator, built once
# from its Go module (a cold build takes 10-35 minutes on 2 cores), against a local cluster.
# Kept out of `make test`, whose cold run must stay inside CI's 90 minutes; bench/goodput_bench.py
# and bench/failfast_bench.py use the same tooling.
test-peer: setup builds
	@localcluster/kubeflow/build.sh
	$(PY) -m pytest -q -ra tests/e2e/kubeflow

# Unit and etcd integration tests only (no Kubernetes needed).
test-fast: setup
	@localcluster/build.sh --tools-only
	etcd="$$(localcluster/images/build.sh --etcd-release)" && \
		ELASTICJOB_ETCD="$$etcd" $(PY) -m pytest -q -ra tests/unit tests/integration

lint: setup
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/mypy
	PYTHONPATH=agent:operator:localcluster .venv/bin/lint-imports
	PYTHONPATH=agent:operator:localcluster $(PY) scripts/import_cycles.py
	scripts/sync-chart.sh --check

fmt: setup
	.venv/bin/ruff format .
	.venv/bin/ruff check --fix .

cluster-build: setup
	@localcluster/build.sh

# `make cluster-up KUEUE=1` also builds (once) and starts Kueue (docs/shared-clusters.md);
# `make cluster-up REAL_NODES=0` needs no images.
cluster-up: cluster-build $(if $(filter 0,$(REAL_NODES)),,images)
	@$(if $(KUEUE),localcluster/kueue/build.sh && )PYTHONPATH=localcluster $(PY) -m elasticjob_localcluster up --name $(CLUSTER) --nodes $(NODES) --real-nodes $(REAL_NODES) $(if $(KUEUE),--kueue)

cluster-down: setup
	@PYTHONPATH=localcluster $(PY) -m elasticjob_localcluster down --name $(CLUSTER)

# Each benchmark prints its table and ratio against a peer measured in the same run;
# bench/RESULTS.md records the results with the command of each. Operator and cluster benchmarks
# need the local cluster (the operator bench starts one unless ELASTICJOB_BENCH_CLUSTER names one).
bench: setup cluster-build
	$(PY) bench/rendezvous_bench.py
	$(PY) bench/recovery_bench.py
	$(PY) bench/hang_bench.py
	$(PY) bench/cluster_start_bench.py
	$(PY) bench/operator_bench.py
	$(PY) bench/goodput_bench.py --faults node-loss

# Copy crds/ and dashboards/ (the one sources) into the chart.
sync-chart:
	scripts/sync-chart.sh

# etcd of the operator's etcd image as a host binary ($(ELASTICJOB_CACHE)/bin/etcd-<version>,
# built once with Go): what the integration tests run (scripts/test.sh) and the rendezvous
# benchmark's --etcd-binary (bench/RESULTS.md).
.PHONY: etcd-release
etcd-release: setup
	@localcluster/images/build.sh --etcd-release

# The container images of the local cluster (pause, CoreDNS, etcd, the operator from Dockerfile,
# the training example), built without a registry into $(ELASTICJOB_CACHE)/images, cached by
# content (a second run builds nothing); see docs/packaging.md.
.PHONY: images
images: setup
	@localcluster/images/build.sh
