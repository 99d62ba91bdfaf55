"""Deterministic names and labels of everything the operator creates for a job (pure).

Every object's name follows from the job and from counters kept in the job's status, so a
restarted operator recreates nothing twice: a create that meets an existing name is a no-op.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

from elasticjob_agent.protocol import defaults
from elasticjob_agent.protocol.keys import validate_run_id

GROUP = "elasticjob.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "ElasticJob"
PLURAL = "elasticjobs"

LABEL_JOB = f"{GROUP}/job-name"
LABEL_ROLE = f"{GROUP}/role"
LABEL_INDEX = f"{GROUP}/replica-index"
LABEL_ATTEMPT = f"{GROUP}/attempt"
LABEL_ETCD_GENERATION = f"{GROUP}/etcd-generation"
ANNOTATION_JOINED = f"{GROUP}/joined-round"
"""Set on a worker pod once its agent was seen in a completed rendezvous round."""
ANNOTATION_STOOD_BY = f"{GROUP}/stood-by"
"""Set on a worker pod once its agent was seen standing by as a hot spare."""

ROLE_WORKER = "worker"
ROLE_ETCD = "etcd"

ETCD_CLIENT_PORT = defaults.ETCD_CLIENT_PORT
ETCD_METRICS_PORT = 2381

# The etcd TLS files, named once. A Secret holds them under these keys (kubernetes.io/tls's
# names plus the CA), and pods mount them under the same names: the workers the client pair
# in ETCD_TLS_DIR, the managed etcd its server pair in ETCD_SERVER_TLS_DIR.
TLS_CA = "ca.crt"
TLS_CERT = "tls.crt"
TLS_KEY = "tls.key"
TLS_FILES = (TLS_CA, TLS_CERT, TLS_KEY)
TLS_CLIENT_CERT = "client.crt"
"""The job's own Secret (managed etcd) holds the server pair as ``TLS_CERT``/``TLS_KEY`` and
the agents' client pair under these two keys."""
TLS_CLIENT_KEY = "client.key"
ETCD_TLS_DIR = "/etc/elasticjob/etcd-tls"
"""Where worker pods mount the etcd client files (``TLS_CA``, ``TLS_CERT``, ``TLS_KEY``)."""
ETCD_SERVER_TLS_DIR = "/etc/etcd/tls"
"""Where the managed etcd pod mounts its server files."""
"""Plain-HTTP ``/health`` and ``/metrics`` of the managed etcd (its readiness probe)."""
HEALTH_PORT_NAME = "health"

_POD_NAME = re.compile(r"^(?P<job>.+)-worker-(?P<index>\d+)-(?P<attempt>\d+)$")


def worker_pod_name(job: str, index: int, attempt: int) -> str:
    """``<job>-worker-<index>-<attempt>``: a replacement takes the next attempt (a new name)."""
    return f"{job}-worker-{index}-{attempt}"


def parse_worker_pod_name(name: str) -> tuple[int, int] | None:
    """``(index, attempt)`` of a worker pod name, or ``None`` when it is not one."""
    match = _POD_NAME.match(name)
    if match is None:
        return None
    return int(match["index"]), int(match["attempt"])


def etcd_pod_name(job: str, generation: int) -> str:
    """A recreated managed etcd gets the next generation (fresh data, fresh name)."""
    return f"{job}-etcd-{generation}"


def etcd_service_name(job: str) -> str:
    return f"{job}-etcd"


def etcd_tls_secret_name(job: str) -> str:
    """Secret holding the managed etcd's CA, server and client certificates (``pki.py``)."""
    return f"{job}-etcd-tls"


def workers_network_policy_name(job: str) -> str:
    return f"{job}-workers"


def etcd_network_policy_name(job: str) -> str:
    return f"{job}-etcd"


def workers_service_name(job: str) -> str:
    """Headless Service over the worker pods."""
    return f"{job}-workers"


def worker_selector(job: str) -> dict[str, str]:
    return {LABEL_JOB: job, LABEL_ROLE: ROLE_WORKER}


def etcd_selector(job: str) -> dict[str, str]:
    return {LABEL_JOB: job, LABEL_ROLE: ROLE_ETCD}


def selector_string(labels: dict[str, str]) -> str:
    """A label selector in the string form of ``status.selector`` (scale subresource)."""
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def run_id(namespace: str, name: str, uid: str) -> str:
    """The rendezvous id of one job incarnation: ``<namespace>-<name>-<uid prefix>``.

    A job deleted and created again under the same name gets a new uid, hence a new run id, so it
    never meets the rendezvous keys of its predecessor in a shared etcd.
    """
    base = f"{namespace}-{name}"
    if len(base) > 200:
        base = base[:180] + "-" + hashlib.sha256(base.encode()).hexdigest()[:12]
    return validate_run_id(f"{base}-{uid.replace('-', '')[:8]}")


@dataclass(frozen=True)
class JobRef:
    """The identity of the owning ``ElasticJob``."""

    namespace: str
    name: str
    uid: str

    @property
    def run_id(self) -> str:
        return run_id(self.namespace, self.name, self.uid)

    def owner_reference(self) -> dict[str, Any]:
        return {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
