"""kopf handlers: indexes of the job's pods, Services and lost nodes, and one daemon per job.

Thin by design: the daemon parses nothing itself and decides nothing; it feeds the indexes to
``reconciler.JobLoop`` and maps our errors to kopf's retry semantics. Importing this module
registers the handlers with kopf's default registry.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable
from typing import Any, TypeVar

import kopf

from . import collector, metrics, probes
from .core import names, retry
from .core.conditions import ConditionType, set_condition
from .core.names import JobRef
from .core.node_conditions import NodeCondition, bad_conditions
from .core.observed import node_lost, pod_view
from .core.spec import SpecError, generation_of
from .kube import Kube, KubeError, PermanentKubeError
from .reconciler import JobLoop, OwnedPod, owned_pod
from .settings import OperatorSettings

T = TypeVar("T")

log = logging.getLogger(__name__)


class _QuietWakeups(logging.Filter):
    """Drop kopf's per-event success line of ``job_changed`` (it fires on every status write)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Handler 'job_changed' succeeded")


logging.getLogger("kopf.objects").addFilter(_QuietWakeups())

_wakeups: dict[tuple[str, str], asyncio.Event] = {}
"""Per job (namespace, name): set when something it owns changed, so its loop runs at once."""


_gone: set[str] = set()
"""Uids of deleted jobs whose loop has not ended yet (see ``_without_finalizer``)."""


def _wake(namespace: str | None, job: str | None) -> None:
    if namespace and job:
        event = _wakeups.get((namespace, job))
        if event is not None:
            event.set()


@kopf.on.startup()
async def startup(*, settings: kopf.OperatorSettings, memo: Any, **_: Any) -> None:
    ours = OperatorSettings.from_env()
    settings.posting.enabled = False  # we post our own Events, with meaningful reasons
    settings.peering.standalone = True  # one replica (the chart's Deployment uses Recreate)
    # No handler needs a finalizer (``_without_finalizer``); naming the one earlier versions
    # added lets kopf remove it from the jobs that still carry it.
    settings.persistence.finalizer = f"{names.GROUP}/operator"
    settings.watching.server_timeout = 300
    settings.scanning.disabled = True  # no CRD watching: RBAC needs no customresourcedefinitions
    memo.settings = ours
    memo.kube = await Kube.connect()
    memo.session = probes.new_session()
    memo.gate = probes.ProbeGate(ours.probe_concurrency)
    metrics.serve(ours.metrics_port)
    collector.tune(metrics.observe_gc)  # here, so that `kopf run` gets it too
    log.info("elasticjob-operator started: %s", ours)


@kopf.on.cleanup()
async def cleanup(*, memo: Any, **_: Any) -> None:
    await memo.session.close()
    await memo.kube.close()


# Every handler below is a coroutine, however short: kopf runs a plain function in a thread
# pool, which costs a thread hand-off per watch event (thousands a minute at 1000 jobs) and
# would set the loop's asyncio.Event (``_wake``) from another thread, which is not safe.


@kopf.index("pods", labels={names.LABEL_JOB: kopf.PRESENT})
async def elasticjob_pods(
    *, body: kopf.Body, namespace: str | None, labels: kopf.Labels, **_: Any
) -> dict[tuple[str, str], OwnedPod] | None:
    """Pods of ElasticJobs by (namespace, job name), reduced to what planning reads."""
    job = labels.get(names.LABEL_JOB)
    view = pod_view(body)
    entry = owned_pod(body, view) if view is not None else None
    _wake(namespace, job)
    if entry is None or job is None or namespace is None:
        return None
    return {(namespace, job): entry}


@kopf.index("services", labels={names.LABEL_JOB: kopf.PRESENT})
async def elasticjob_services(
    *, namespace: str | None, name: str, labels: kopf.Labels, **_: Any
) -> dict[tuple[str, str], str] | None:
    job = labels.get(names.LABEL_JOB)
    _wake(namespace, job)
    return None if job is None or namespace is None else {(namespace, job): name}


@kopf.index("nodes")
async def elasticjob_lost_nodes(*, body: kopf.Body, name: str, **_: Any) -> dict[str, bool]:
    """Each node's lost flag (``Ready`` not True). Only its name and readiness are kept."""
    return {name: node_lost(body)}


_bad_seen: dict[str, tuple[NodeCondition, ...]] = {}
"""Each bad node's conditions as last indexed: a change wakes every job's loop."""


@kopf.index("nodes")
async def elasticjob_bad_nodes(
    *, body: kopf.Body, name: str, memo: Any, **_: Any
) -> dict[str, tuple[NodeCondition, ...]]:
    """Each node's bad conditions (``ELASTICJOB_BAD_NODE_CONDITIONS``), empty for a healthy
    node (kopf keeps an object's last value when its index handler returns ``None``, so a node
    that turns healthy must say so). A node that turns bad or healthy wakes every job (rare:
    jobs move off it at once)."""
    settings: OperatorSettings | None = getattr(memo, "settings", None)
    bad = bad_conditions(body, settings.node_conditions if settings is not None else ())
    if _bad_seen.get(name, ()) != bad:
        if bad:
            _bad_seen[name] = bad
        else:
            _bad_seen.pop(name, None)
        for event in _wakeups.values():
            event.set()
    return {name: bad}


@kopf.on.event(names.GROUP, names.VERSION, names.PLURAL)
async def job_changed(
    *, type: str | None, namespace: str | None, name: str, uid: str, **_: Any
) -> None:
    """Any change of the job (spec edit, kubectl scale) wakes its loop; a deletion ends it."""
    if type == "DELETED" and (namespace, name) in _wakeups:
        _gone.add(uid)
    _wake(namespace, name)


@kopf.daemon(names.GROUP, names.VERSION, names.PLURAL, cancellation_timeout=10.0)
async def reconcile_job(
    *,
    namespace: str | None,
    name: str,
    uid: str,
    body: kopf.Body,
    stopped: kopf.DaemonStopped,
    memo: Any,
    logger: logging.Logger | logging.LoggerAdapter[Any],
    **kwargs: Any,
) -> None:
    """The per-job loop: reconcile, detect stalls, repeat every interval or on a change.

    kopf passes the indexes above as keyword arguments named after their functions.
    """
    if namespace is None:
        raise kopf.PermanentError("ElasticJob is namespaced; got an object without a namespace")
    pods_index: kopf.Index[tuple[str, str], OwnedPod] = kwargs["elasticjob_pods"]
    services_index: kopf.Index[tuple[str, str], str] = kwargs["elasticjob_services"]
    nodes_index: kopf.Index[str, bool] = kwargs["elasticjob_lost_nodes"]
    bad_index: kopf.Index[str, tuple[NodeCondition, ...]] = kwargs["elasticjob_bad_nodes"]
    settings: OperatorSettings = memo.settings
    job = JobRef(namespace, name, uid)
    wake = _wakeups.setdefault((namespace, name), asyncio.Event())
    loop = JobLoop(
        memo.kube,
        memo.session,
        job,
        settings.loop,
        gate=memo.gate,
        jobs=lambda: len(_wakeups),
        wake=wake.set,
    )
    stored = await memo.kube.get_job(namespace, name)
    loop.adopt(stored)
    logger.info("reconcile loop started for %s/%s (uid %s)", namespace, name, uid)
    failed_spec_generation: int | None = None
    errors = 0
    """Steps in a row that raised an API error (``retry.py`` decides the wait)."""
    try:
        while not stopped and uid not in _gone:
            wake.clear()
            generation = generation_of(body)
            interval = settings.loop.interval
            if failed_spec_generation != generation:
                try:
                    result = await _unless_stopped(
                        stopped,
                        loop.step(
                            body,
                            list(pods_index.get((namespace, name), [])),
                            frozenset(n for n, lost in _flatten(nodes_index) if lost),
                            frozenset(services_index.get((namespace, name), [])),
                            node_conditions={n: c for n, s in bad_index.items() for c in s if c},
                        ),
                    )
                    if result is None:
                        break
                    interval = result.next_interval
                    errors = 0
                    if result.delete_requested:
                        logger.info("ttlSecondsAfterFinished elapsed: job deleted")
                        return
                except SpecError as exc:
                    failed_spec_generation = generation
                    logger.error("invalid spec, fix it to continue: %s", exc)
                    await _report_invalid(memo.kube, job, str(exc), body, generation)
                except PermanentKubeError as exc:
                    interval = retry.backed_off(settings.loop.interval, errors, rejected=True)
                    errors += 1
                    logger.error(
                        "API rejected a request (will retry after %.0f s): %s", interval, exc
                    )
                    loop.forget_written()
                except KubeError as exc:
                    interval = retry.backed_off(settings.loop.interval, errors, rejected=False)
                    errors += 1
                    logger.warning("API error (will retry): %s", exc)
                    loop.forget_written()
            await _sleep(stopped, wake, interval)
    finally:
        _wakeups.pop((namespace, name), None)
        deleted = uid in _gone or (
            stopped.reason is not None
            and bool(stopped.reason & kopf.DaemonStoppingReason.RESOURCE_DELETED)
        )
        _gone.discard(uid)
        if deleted:
            metrics.forget(namespace, name)


def _without_finalizer(daemon: Any, registry: kopf.OperatorRegistry | None = None) -> None:
    """Register ``daemon`` so that it puts no finalizer on the jobs it serves.

    kopf gives every daemon a finalizer so that it can stop the daemon before the object goes.
    Ours would buy nothing: every object of a job carries an ownerReference to it, so the
    garbage collector removes them, and the operator keeps nothing else per job but its metric
    series. And it costs much: with the operator gone (``helm uninstall``), nobody removes the
    finalizer, so deleting a job, or the CRD, hangs. Without it the loop ends on the job's
    DELETED event instead (``job_changed``), and a job that still carries the finalizer of an
    earlier version loses it at the operator's first sight of it (kopf removes a finalizer no
    handler requires).
    """
    spawning = (registry or kopf.get_default_registry())._spawning
    spawning._handlers = [
        dataclasses.replace(h, requires_finalizer=False) if h.fn is daemon else h
        for h in spawning._handlers
    ]


_without_finalizer(reconcile_job)


def _flatten(index: kopf.Index[str, bool]) -> list[tuple[str, bool]]:
    return [(node, lost) for node, store in index.items() for lost in store]


async def _unless_stopped(stopped: kopf.DaemonStopped, step: Awaitable[T]) -> T | None:
    """``step``'s result, or ``None`` once the daemon is asked to stop (the step is cancelled).

    A step can wait seconds on probes of pods that are going away; a deleted job must not wait
    for them (every write of a step is idempotent, so cutting one short loses nothing).
    """
    work = asyncio.ensure_future(step)
    stop = asyncio.ensure_future(stopped.wait())
    try:
        await asyncio.wait({work, stop}, return_when=asyncio.FIRST_COMPLETED)
        if work.done():
            return work.result()
    finally:
        stop.cancel()
        if not work.done():
            work.cancel()
    await asyncio.wait({work})  # let the cancelled step unwind (its error is moot)
    return None


async def _sleep(stopped: kopf.DaemonStopped, wake: asyncio.Event, seconds: float) -> None:
    """Sleep ``seconds``, less when the job's objects change or the daemon is stopped."""
    waiters = [asyncio.ensure_future(wake.wait()), asyncio.ensure_future(stopped.wait())]
    try:
        await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
    # Changes arrive in bursts (a pod's phase, then its IP): let them settle a little.
    if wake.is_set() and not stopped:
        await asyncio.sleep(0.2)


async def _report_invalid(
    kube: Kube, job: JobRef, message: str, body: kopf.Body, generation: int
) -> None:
    now = time.time()
    stored = (body.get("status") or {}).get("conditions") or []
    conditions = set_condition(
        [c for c in stored if isinstance(c, dict)],
        ConditionType.INVALID_SPEC,
        True,
        "InvalidSpec",
        message,
        now=now,
        generation=generation,
    )
    try:
        await kube.patch_job_status(
            job,
            {
                "phase": "Failed",
                "reason": "InvalidSpec",
                "message": message,
                "conditions": conditions,
            },
        )
        await kube.post_event(job, "Warning", "InvalidSpec", message, now)
    except KubeError as exc:
        log.warning("cannot report invalid spec of %s/%s: %s", job.namespace, job.name, exc)
