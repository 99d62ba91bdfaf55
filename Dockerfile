# The ElasticJob operator image: Python 3.11 slim, the operator and its dependencies in a venv,
# running as an unprivileged user. The agent goes into the user's training image instead (see
# examples/training-image/ and docs/packaging.md).
#
#   docker build -t elasticjob-operator:0.1.0 .
#
# A build argument selects the base: PYTHON_IMAGE (any Debian-like image with python 3.11,
# venv and pip; the local cluster builds on its own Debian minbase, docs/packaging.md).
#
# The base image is pinned to an exact patch release; pin its digest too in your registry mirror
# (docker buildx imagetools inspect python:3.11.11-slim-bookworm) for byte-for-byte rebuilds.
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
# The venv lives at the same path in both stages: its scripts' shebangs point into it.
RUN python -m venv /opt/elasticjob
# First the exact versions the project tests with (requirements/operator.lock: the operator
# extra only, no torch, no test tools), in a layer that survives source changes.
COPY requirements/operator.lock requirements/
RUN /opt/elasticjob/bin/pip install -r requirements/operator.lock
# Then this checkout, as the wheel a release publishes, without touching those pins.
COPY pyproject.toml README.md ./
COPY agent/ agent/
COPY operator/ operator/
RUN /opt/elasticjob/bin/pip wheel --no-deps -w dist . \
    && /opt/elasticjob/bin/pip install --no-deps dist/elasticjob-*.whl \
    && /opt/elasticjob/bin/pip check \
    && /opt/elasticjob/bin/elasticjob-operator --help >/dev/null

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="elasticjob-operator" \
      org.opencontainers.image.description="Kubernetes operator for elastic PyTorch training" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/elasticjob/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
RUN groupadd --system --gid 10001 elasticjob \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin elasticjob
COPY --from=build /opt/elasticjob /opt/elasticjob
# Numeric, so Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
USER 10001:10001
WORKDIR /tmp
# 8080: Prometheus /metrics; 8081: liveness /healthz (the chart's probes).
EXPOSE 8080 8081
ENTRYPOINT ["elasticjob-operator"]
