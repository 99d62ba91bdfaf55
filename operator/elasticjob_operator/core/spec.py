"""The typed ``ElasticJob`` spec, parsed once from the object body (pure: no Kubernetes client).

The CRD's schema applies defaults and rejects most mistakes before the operator sees an object;
``parse_spec`` re-checks what the operator relies on, so an object stored before a schema change
(or created with validation off) fails with ``SpecError`` naming the field instead of crashing.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from elasticjob_agent.protocol import defaults
from elasticjob_agent.protocol.endpoints import Endpoint, parse_endpoints
from elasticjob_agent.protocol.failure_policy import (
    FailurePolicy,
    FailurePolicyError,
    parse_policy,
)
from elasticjob_agent.protocol.hang_timeout import AutoSettings, HangTimeoutError
from elasticjob_agent.protocol.integers import IntegerError, bounded_int
from elasticjob_agent.protocol.keys import KEY_PREFIX_RULE, is_key_prefix
from elasticjob_agent.protocol.restarts import JOB_MAX_RESTARTS_DEFAULT

from .checkpointing import (
    CheckpointSpec,
    CheckpointSpecError,
    parse_checkpoint,
    with_checkpoint_memory,
)
from .kueue_names import EXTRAS_PRIORITY_ANNOTATION, PRIORITY_LABEL, QUEUE_LABEL
from .stragglers_spec import HealthSpec, HealthSpecError, parse_health

TRAINER_CONTAINER = "trainer"
MIN_PROGRESS_TIMEOUT_SECONDS = 10
"""Shortest ``spec.progressTimeoutSeconds``: a few monitor intervals and report polls, so one
slow step on a loaded node is not mistaken for a hang."""


_KUEUE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$")
"""A LocalQueue's or WorkloadPriorityClass's name."""


class SpecError(ValueError):
    """The spec cannot be run as written; the message names the field and what to fix."""


class KueueSpecError(SpecError):
    """The job's Kueue settings are contradictory or malformed; the message names the field."""


@dataclass(frozen=True)
class KueueSpec:
    """How a job is queued (``None`` on ``JobSpec.kueue`` when it is not)."""

    queue_name: str
    """The LocalQueue in the job's namespace."""
    priority_class: str | None = None
    """WorkloadPriorityClass of the core (the job's ``kueue.x-k8s.io/priority-class`` label)."""
    extras_priority_class: str | None = None
    """WorkloadPriorityClass of the extras (:data:`EXTRAS_PRIORITY_ANNOTATION`)."""


def parse_kueue(spec: Mapping[str, Any], metadata: Mapping[str, Any]) -> KueueSpec | None:
    """The job's queueing from ``spec.queueName`` and the job's labels/annotations.

    ``spec.queueName`` and the label ``kueue.x-k8s.io/queue-name`` may both be set only to the
    same value. Raises :class:`KueueSpecError` naming the field otherwise.
    """
    labels = metadata.get("labels") or {}
    annotations = metadata.get("annotations") or {}
    from_spec = spec.get("queueName")
    from_label = labels.get(QUEUE_LABEL)
    for field, value in (("spec.queueName", from_spec), (f"label {QUEUE_LABEL}", from_label)):
        if value is not None and (not isinstance(value, str) or not _KUEUE_NAME.match(value)):
            raise KueueSpecError(f"{field} must name a LocalQueue (a DNS label), got {value!r}")
    if from_spec and from_label and from_spec != from_label:
        raise KueueSpecError(
            f"spec.queueName ({from_spec!r}) and the job's label {QUEUE_LABEL} ({from_label!r}) "
            "disagree: set one of them, or both to the same LocalQueue"
        )
    queue = from_spec or from_label
    if not queue:
        return None
    priority = labels.get(PRIORITY_LABEL) or None
    extras = annotations.get(EXTRAS_PRIORITY_ANNOTATION) or None
    for field, value in ((f"label {PRIORITY_LABEL}", priority),
                         (f"annotation {EXTRAS_PRIORITY_ANNOTATION}", extras)):  # fmt: skip
        if value is not None and not _KUEUE_NAME.match(str(value)):
            raise KueueSpecError(f"{field} must name a WorkloadPriorityClass, got {value!r}")
    return KueueSpec(str(queue), priority, extras)


class EtcdMode(StrEnum):
    MANAGED = "Managed"
    EXTERNAL = "External"


class CleanPodPolicy(StrEnum):
    NONE = "None"
    """Leave every pod when the job finishes."""
    RUNNING = "Running"
    """Delete pods that are still running; keep finished ones for their logs."""
    ALL = "All"
    """Delete every pod."""


@dataclass(frozen=True)
class RendezvousSpec:
    join_timeout_seconds: int = defaults.RDZV_JOIN_TIMEOUT_SECONDS
    last_call_timeout_seconds: int = defaults.RDZV_LAST_CALL_TIMEOUT_SECONDS
    close_timeout_seconds: int = defaults.RDZV_CLOSE_TIMEOUT_SECONDS
    heartbeat_seconds: int = defaults.RDZV_HEARTBEAT_SECONDS


@dataclass(frozen=True)
class EtcdSpec:
    mode: EtcdMode = EtcdMode.MANAGED
    endpoints: tuple[Endpoint, ...] = ()
    """External mode only: the client endpoints, parsed (``host:port`` in the spec; the
    operator adds TLS from ``tls_secret_name``)."""
    image: str = "quay.io/coreos/etcd:v3.5.17"
    key_prefix: str = defaults.KEY_PREFIX
    resources: Mapping[str, Any] | None = None
    insecure: bool = False
    """Managed mode: serve etcd in plain HTTP without client certificates (only for agent
    images that predate TLS; any pod that reaches it can then read and write it)."""
    tls_secret_name: str | None = None
    """External mode: Secret with ``ca.crt``, ``tls.crt`` and ``tls.key`` (a client
    certificate) for a TLS etcd; ``None``: plain HTTP."""
    node_selector: Mapping[str, str] | None = None
    """Managed mode: the etcd pod's ``nodeSelector``; ``None``: the template's, less its GPU
    entries (``manifests.etcd_placement``)."""
    tolerations: tuple[Mapping[str, Any], ...] | None = None
    """Managed mode: the etcd pod's tolerations; ``None``: the template's, less its GPU ones."""
    affinity: Mapping[str, Any] | None = None
    """Managed mode: the etcd pod's affinity; ``None``: the template's node affinity, less its
    GPU terms."""
    priority_class_name: str | None = None
    """Managed mode: the etcd pod's priority class; ``None``: the template's."""

    @property
    def tls(self) -> bool:
        """Whether the agents and the operator speak TLS to this etcd."""
        if self.mode is EtcdMode.MANAGED:
            return not self.insecure
        return self.tls_secret_name is not None


@dataclass(frozen=True)
class NcclSpec:
    collective_timeout_seconds: int = defaults.NCCL_COLLECTIVE_TIMEOUT_SECONDS
    heartbeat_timeout_seconds: int = defaults.NCCL_HEARTBEAT_TIMEOUT_SECONDS
    async_error_handling: int = defaults.NCCL_ASYNC_ERROR_HANDLING
    monitoring: bool = defaults.NCCL_MONITORING


@dataclass(frozen=True)
class RunPolicy:
    suspend: bool = False
    active_deadline_seconds: int | None = None
    ttl_seconds_after_finished: int | None = None
    clean_pod_policy: CleanPodPolicy = CleanPodPolicy.RUNNING


MAX_SPARES = 100
"""The CRD's maximum of ``spec.spares`` (checked again here for bodies that bypassed it)."""


@dataclass(frozen=True)
class JobSpec:
    """What the user asked for. ``min_nodes``/``max_nodes`` default to ``replicas``."""

    replicas: int
    min_nodes: int
    max_nodes: int
    nproc_per_node: int | str
    """An integer, or ``"gpu"``: one worker per GPU of the trainer container."""
    device: str
    """``"gpu"`` or ``"cpu"``."""
    max_restarts: int
    monitor_interval_seconds: float
    stall_timeout_seconds: int
    rendezvous: RendezvousSpec
    etcd: EtcdSpec
    nccl: NcclSpec
    run_policy: RunPolicy
    template: Mapping[str, Any]
    """The pod template as written (a deep copy; builders copy again before changing it)."""
    progress_timeout_seconds: int | None = None
    """Restart a group in which no rank reported a step for this long (reason ``hang``);
    ``None``: off."""
    kueue: KueueSpec | None = None
    """Queueing through Kueue (``spec.queueName`` or the job's label; see ``kueue.py``)."""
    checkpoint: CheckpointSpec | None = None
    """The agents' in-memory checkpoints (``spec.checkpoint``, ``checkpointing.py``)."""
    spares: int = 0
    """Hot spares: worker pods beyond ``replicas`` that stand by warm (``spares.py``)."""

    @property
    def worker_pods(self) -> int:
        """How many worker pods the job keeps: ``replicas`` plus ``spares``."""
        return self.replicas + self.spares

    progress_auto: AutoSettings | None = None
    """``spec.progress`` (mode ``Auto``): the hang timeout is learned from the step intervals;
    ``None``: fixed (``progress_timeout_seconds``) or off."""
    failure_policy: FailurePolicy = dataclasses.field(default_factory=FailurePolicy)
    """``spec.failurePolicy``: what a failure that would spend the budget does instead."""
    health: HealthSpec = dataclasses.field(default_factory=HealthSpec)
    """``spec.health``: stragglers (``stragglers_spec.py``)."""

    @property
    def trainer_index(self) -> int:
        """Index of the trainer container in ``template.spec.containers``."""
        return trainer_container_index(self.template["spec"]["containers"])


def trainer_container_index(containers: list[Any]) -> int:
    if len(containers) == 1:
        return 0
    for i, container in enumerate(containers):
        if isinstance(container, Mapping) and container.get("name") == TRAINER_CONTAINER:
            return i
    raise SpecError(
        "spec.template.spec.containers: with more than one container, name the training one "
        f"{TRAINER_CONTAINER!r}"
    )


def parse_spec(spec: Mapping[str, Any], *, etcd_image: str | None = None) -> JobSpec:
    """Parse and check ``spec``; raise ``SpecError`` naming the first bad field.

    ``etcd_image``: the managed etcd's image when ``spec.etcd.image`` is unset (the operator's
    setting, from the chart); ``None``: ``EtcdSpec.image``."""
    if not isinstance(spec, Mapping):
        raise SpecError("spec must be an object")
    replicas = _int(spec, "replicas", "spec.replicas", minimum=1, required=True)
    min_nodes = _int(spec, "minNodes", "spec.minNodes", minimum=1, default=replicas)
    max_nodes = _int(spec, "maxNodes", "spec.maxNodes", minimum=1, default=replicas)
    if not min_nodes <= replicas <= max_nodes:
        raise SpecError(
            f"spec.replicas ({replicas}) must lie within [spec.minNodes, spec.maxNodes] = "
            f"[{min_nodes}, {max_nodes}]"
        )
    spares = _int(spec, "spares", "spec.spares", minimum=0, default=0)
    if spares > MAX_SPARES:
        raise SpecError(f"spec.spares must be <= {MAX_SPARES}, got {spares}")
    device = spec.get("device", "gpu")
    if device not in ("gpu", "cpu"):
        raise SpecError(f"spec.device must be 'gpu' or 'cpu', got {device!r}")
    nproc = spec.get("nprocPerNode", 1)
    if isinstance(nproc, bool) or not (
        (isinstance(nproc, int) and 1 <= nproc <= 1024) or nproc == "gpu"
    ):
        raise SpecError(
            f"spec.nprocPerNode must be an integer from 1 to 1024 or 'gpu', got {nproc!r}"
        )
    if nproc == "gpu" and device != "gpu":
        raise SpecError("spec.nprocPerNode: 'gpu' needs spec.device 'gpu'")
    interval = spec.get("monitorIntervalSeconds", 1)
    if isinstance(interval, bool) or not isinstance(interval, int | float) or interval <= 0:
        raise SpecError(f"spec.monitorIntervalSeconds must be a positive number, got {interval!r}")
    template = spec.get("template")
    if not isinstance(template, Mapping) or not isinstance(template.get("spec"), Mapping):
        raise SpecError("spec.template.spec is required (a pod spec with the trainer container)")
    containers = template["spec"].get("containers")
    if not isinstance(containers, list) or not containers:
        raise SpecError("spec.template.spec.containers must list at least the trainer container")
    trainer = containers[trainer_container_index(containers)]
    command = trainer.get("command") if isinstance(trainer, Mapping) else None
    if not isinstance(command, list) or not command or not all(isinstance(c, str) for c in command):
        raise SpecError(
            "spec.template.spec.containers[trainer].command must hold the training command, "
            "e.g. [python, train.py]"
        )
    args = trainer.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise SpecError("spec.template.spec.containers[trainer].args must be a list of strings")
    try:
        checkpoint = parse_checkpoint(spec.get("checkpoint"))
        if checkpoint is not None:
            with_checkpoint_memory(trainer.get("resources"), checkpoint.memory_limit)
    except CheckpointSpecError as exc:
        raise SpecError(str(exc)) from None
    return JobSpec(
        checkpoint=checkpoint,
        replicas=replicas,
        spares=spares,
        min_nodes=min_nodes,
        max_nodes=max_nodes,
        nproc_per_node=nproc,
        device=device,
        max_restarts=_int(
            spec, "maxRestarts", "spec.maxRestarts", minimum=0, default=JOB_MAX_RESTARTS_DEFAULT
        ),
        monitor_interval_seconds=float(interval),
        stall_timeout_seconds=_int(
            spec, "stallTimeoutSeconds", "spec.stallTimeoutSeconds", minimum=1, default=300
        ),
        rendezvous=_rendezvous(_section(spec, "rendezvous")),
        progress_timeout_seconds=_int(
            spec,
            "progressTimeoutSeconds",
            "spec.progressTimeoutSeconds",
            minimum=MIN_PROGRESS_TIMEOUT_SECONDS,
            default=None,
        ),
        etcd=_etcd(_section(spec, "etcd"), etcd_image),
        nccl=_nccl(_section(spec, "nccl")),
        run_policy=_run_policy(_section(spec, "runPolicy")),
        template=copy.deepcopy(dict(template)),
        progress_auto=_progress(spec),
        failure_policy=_failure_policy(spec),
        health=_health(spec),
    )


def _health(spec: Mapping[str, Any]) -> HealthSpec:
    try:
        return parse_health(spec.get("health"))
    except HealthSpecError as exc:
        raise SpecError(str(exc)) from None


def _failure_policy(spec: Mapping[str, Any]) -> FailurePolicy:
    """``spec.failurePolicy``; the CRD checks its shape, this also compiles each pattern (which
    CEL cannot) and names the field of the first that RE2 refuses."""
    try:
        return parse_policy(spec.get("failurePolicy"), "spec.failurePolicy")
    except FailurePolicyError as exc:
        raise SpecError(str(exc)) from None


def _progress(spec: Mapping[str, Any]) -> AutoSettings | None:
    raw = spec.get("progress")
    if raw is None:
        return None
    if not isinstance(raw, Mapping) or raw.get("mode") != "Auto":
        raise SpecError(
            "spec.progress.mode must be Auto (a fixed timeout is progressTimeoutSeconds)"
        )
    if spec.get("progressTimeoutSeconds") is not None:
        raise SpecError(
            "spec.progress (the automatic hang timeout) and spec.progressTimeoutSeconds "
            "(a fixed one) exclude each other: set one"
        )
    try:
        return AutoSettings.from_spec(raw, "spec.progress")
    except (HangTimeoutError, TypeError) as exc:
        raise SpecError(str(exc)) from None


def _section(spec: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = spec.get(key) or {}
    if not isinstance(value, Mapping):
        raise SpecError(f"spec.{key} must be an object")
    return value


def _rendezvous(raw: Mapping[str, Any]) -> RendezvousSpec:
    path = "spec.rendezvous."
    result = RendezvousSpec(
        join_timeout_seconds=_int(
            raw, "joinTimeoutSeconds", path, minimum=1, default=defaults.RDZV_JOIN_TIMEOUT_SECONDS
        ),
        last_call_timeout_seconds=_int(
            raw,
            "lastCallTimeoutSeconds",
            path,
            minimum=0,
            default=defaults.RDZV_LAST_CALL_TIMEOUT_SECONDS,
        ),
        close_timeout_seconds=_int(
            raw, "closeTimeoutSeconds", path, minimum=1, default=defaults.RDZV_CLOSE_TIMEOUT_SECONDS
        ),
        heartbeat_seconds=_int(
            raw, "heartbeatSeconds", path, minimum=1, default=defaults.RDZV_HEARTBEAT_SECONDS
        ),
    )
    if result.last_call_timeout_seconds >= result.join_timeout_seconds:
        raise SpecError(
            "spec.rendezvous.lastCallTimeoutSeconds must be < spec.rendezvous.joinTimeoutSeconds"
        )
    return result


def _endpoints(raw: Any) -> tuple[Endpoint, ...]:
    """``spec.etcd.endpoints``: ``host:port`` entries, read by the agents' own parser."""
    if not isinstance(raw, list) or not all(isinstance(e, str) for e in raw):
        raise SpecError(f"spec.etcd.endpoints must be a list of host:port, got {raw!r}")
    parsed: list[Endpoint] = []
    for i, text in enumerate(raw):
        if "://" in text or "," in text:
            raise SpecError(
                f"spec.etcd.endpoints[{i}] must be one host:port, got {text!r} (no scheme: "
                "spec.etcd.tlsSecretName turns TLS on)"
            )
        try:
            parsed.extend(parse_endpoints(text, default_port=None))
        except ValueError as exc:
            raise SpecError(f"spec.etcd.endpoints[{i}]: {exc}") from None
    return tuple(parsed)


def _etcd(raw: Mapping[str, Any], default_image: str | None = None) -> EtcdSpec:
    try:
        mode = EtcdMode(raw.get("mode", "Managed"))
    except ValueError:
        raise SpecError(
            f"spec.etcd.mode must be 'Managed' or 'External', got {raw.get('mode')!r}"
        ) from None
    endpoints = _endpoints(raw.get("endpoints") or [])
    if mode is EtcdMode.EXTERNAL and not endpoints:
        raise SpecError(
            "spec.etcd.endpoints must list at least one host:port when spec.etcd.mode is External"
        )
    if mode is EtcdMode.MANAGED and endpoints:
        raise SpecError("spec.etcd.endpoints must be empty when spec.etcd.mode is Managed")
    prefix = raw.get("keyPrefix", defaults.KEY_PREFIX)
    if not isinstance(prefix, str) or not is_key_prefix(prefix):
        raise SpecError(f"spec.etcd.keyPrefix {KEY_PREFIX_RULE}, got {prefix!r}")
    image = raw.get("image", default_image or EtcdSpec.image)
    if not isinstance(image, str) or not image:
        raise SpecError("spec.etcd.image must be a non-empty image reference")
    resources = raw.get("resources")
    if resources is not None and not isinstance(resources, Mapping):
        raise SpecError("spec.etcd.resources must be an object (requests/limits)")
    insecure = raw.get("insecure", False)
    if not isinstance(insecure, bool):
        raise SpecError(f"spec.etcd.insecure must be true or false, got {insecure!r}")
    secret = raw.get("tlsSecretName")
    if secret is not None and (not isinstance(secret, str) or not _DNS_SUBDOMAIN.match(secret)):
        raise SpecError(f"spec.etcd.tlsSecretName must name a Secret, got {secret!r}")
    if mode is EtcdMode.MANAGED and secret is not None:
        raise SpecError(
            "spec.etcd.tlsSecretName is for External mode; a managed etcd gets its "
            "certificates from the operator"
        )
    if mode is EtcdMode.EXTERNAL and insecure:
        raise SpecError("spec.etcd.insecure is for Managed mode; External mode uses tlsSecretName")
    placement = _etcd_placement(raw)
    if mode is EtcdMode.EXTERNAL and placement:
        raise SpecError(
            f"spec.etcd.{next(iter(placement))} is for Managed mode; the operator does not "
            "place an external etcd"
        )
    return EtcdSpec(
        mode=mode,
        endpoints=endpoints,
        image=image,
        key_prefix=prefix,
        resources=copy.deepcopy(dict(resources)) if resources else None,
        insecure=insecure,
        tls_secret_name=secret,
        node_selector=placement.get("nodeSelector"),
        tolerations=placement.get("tolerations"),
        affinity=placement.get("affinity"),
        priority_class_name=placement.get("priorityClassName"),
    )


def _etcd_placement(raw: Mapping[str, Any]) -> dict[str, Any]:
    """``spec.etcd``'s placement fields that are set, checked and copied (by CRD name)."""
    placement: dict[str, Any] = {}
    selector = raw.get("nodeSelector")
    if selector is not None:
        if not isinstance(selector, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in selector.items()
        ):
            raise SpecError(
                f"spec.etcd.nodeSelector must map label keys to string values, got {selector!r}"
            )
        placement["nodeSelector"] = dict(selector)
    tolerations = raw.get("tolerations")
    if tolerations is not None:
        if not isinstance(tolerations, list):
            raise SpecError(f"spec.etcd.tolerations must be a list, got {tolerations!r}")
        for i, toleration in enumerate(tolerations):
            if not isinstance(toleration, Mapping):
                raise SpecError(f"spec.etcd.tolerations[{i}] must be an object, got {toleration!r}")
        placement["tolerations"] = tuple(copy.deepcopy(dict(t)) for t in tolerations)
    affinity = raw.get("affinity")
    if affinity is not None:
        if not isinstance(affinity, Mapping):
            raise SpecError(f"spec.etcd.affinity must be an object, got {affinity!r}")
        placement["affinity"] = copy.deepcopy(dict(affinity))
    priority = raw.get("priorityClassName")
    if priority is not None:
        if not isinstance(priority, str) or not _DNS_SUBDOMAIN.match(priority):
            raise SpecError(
                f"spec.etcd.priorityClassName must name a PriorityClass, got {priority!r}"
            )
        placement["priorityClassName"] = priority
    return placement


_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


def _nccl(raw: Mapping[str, Any]) -> NcclSpec:
    path = "spec.nccl."
    monitoring = raw.get("monitoring", defaults.NCCL_MONITORING)
    if not isinstance(monitoring, bool):
        raise SpecError(f"spec.nccl.monitoring must be true or false, got {monitoring!r}")
    async_handling = _int(
        raw, "asyncErrorHandling", path, minimum=0, default=defaults.NCCL_ASYNC_ERROR_HANDLING
    )
    if async_handling > 3:
        raise SpecError(f"spec.nccl.asyncErrorHandling must be 0-3, got {async_handling}")
    return NcclSpec(
        collective_timeout_seconds=_int(
            raw,
            "collectiveTimeoutSeconds",
            path,
            minimum=1,
            default=defaults.NCCL_COLLECTIVE_TIMEOUT_SECONDS,
        ),
        heartbeat_timeout_seconds=_int(
            raw,
            "heartbeatTimeoutSeconds",
            path,
            minimum=1,
            default=defaults.NCCL_HEARTBEAT_TIMEOUT_SECONDS,
        ),
        async_error_handling=async_handling,
        monitoring=monitoring,
    )


def _run_policy(raw: Mapping[str, Any]) -> RunPolicy:
    path = "spec.runPolicy."
    suspend = raw.get("suspend", False)
    if not isinstance(suspend, bool):
        raise SpecError(f"spec.runPolicy.suspend must be true or false, got {suspend!r}")
    try:
        policy = CleanPodPolicy(raw.get("cleanPodPolicy", "Running"))
    except ValueError:
        raise SpecError(
            "spec.runPolicy.cleanPodPolicy must be None, Running or All, "
            f"got {raw.get('cleanPodPolicy')!r}"
        ) from None
    return RunPolicy(
        suspend=suspend,
        active_deadline_seconds=_int(raw, "activeDeadlineSeconds", path, minimum=1, default=None),
        ttl_seconds_after_finished=_int(
            raw, "ttlSecondsAfterFinished", path, minimum=0, default=None
        ),
        clean_pod_policy=policy,
    )


def _int(
    raw: Mapping[str, Any],
    key: str,
    path: str,
    *,
    minimum: int,
    default: int | None = None,
    required: bool = False,
) -> Any:
    """Read an integer field; ``path`` is the full field name or the parent path ending in '.'."""
    name = path + key if path.endswith(".") else path
    if key not in raw or raw[key] is None:
        if required:
            raise SpecError(f"{name} is required")
        return default
    value = raw[key]
    try:
        return bounded_int(value, minimum)
    except IntegerError as exc:
        if exc.out_of_range:
            raise SpecError(f"{name} must be >= {minimum}, got {value}") from None
        raise SpecError(f"{name} must be an integer, got {value!r}") from None


def parse_job(body: Mapping[str, Any], *, etcd_image: str | None = None) -> JobSpec:
    """The spec of the job ``body``, Kueue's part included (``spec.queueName`` and the job's
    labels and annotations): the one parse of a reconcile step. Raises ``SpecError``.
    ``etcd_image`` as in ``parse_spec``."""
    spec = body.get("spec") or {}
    return dataclasses.replace(
        parse_spec(spec, etcd_image=etcd_image), kueue=parse_kueue(spec, body.get("metadata") or {})
    )


def generation_of(body: Mapping[str, Any]) -> int:
    """The job's ``metadata.generation`` (0 when absent)."""
    return int((body.get("metadata") or {}).get("generation") or 0)
