"""One job's reconcile step: observe, plan (pure), apply. No kopf here; handlers.py drives it.

The step is level-triggered: it reads the whole state every time, so a missed event or an operator
restart costs at most one interval. The status this loop wrote last is kept in memory because the
watch that refreshes the job's body may lag behind our own writes.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import aiohttp

from . import cadence, kueue, manifests, metrics, names, pki, planning, probes, progress
from .kube import ConflictKubeError, Kube, KubeError, PermanentKubeError
from .manifests import owned_by
from .names import JobRef
from .netpol import PolicySettings, build_network_policies
from .observed import Observed, PodPhase, PodView
from .refusals import Refusals
from .spec import EtcdMode, JobSpec, SpecError, parse_spec
from .stall import StallSettings
from .status import JobStatus, Phase, never_lower

REJECTED_BACKOFF_MAX = 60.0
"""Longest wait between steps while the API server keeps refusing a request."""
WRITE_ATTEMPTS = 4
"""Status writes tried per step when the job keeps changing under us (409 each time)."""

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoopSettings:
    """How often a job is reconciled and how patient the probes are."""

    interval: float = 2.0
    """Seconds between steps of an active job (stall detection resolution)."""
    idle_interval: float = 10.0
    """Seconds between steps of a finished or suspended job."""
    probe_timeout: float = 1.0
    """Timeout of one health or etcd probe (counted from when it holds a ``ProbeGate`` slot)."""
    probe_wait: float = 0.25
    """How long a step waits for its probes' answers. A round of probes still out after that
    (an agent or etcd that does not answer holds it up to ``probe_timeout``, a busy operator's
    queue longer) ends in the background and its answers go into the next step; the step plans
    on with what it knew, so one silent pod never holds up a job's reconcile (its Events, its
    replacements) by the probe timeout. A late round wakes the job only when etcd did not
    answer (the outage clock starts at once); any other late answer waits for the job's next
    step, since waking for each would double the steps of an operator that is already late."""
    cadence: cadence.CadenceSettings = field(default_factory=cadence.CadenceSettings)
    """Probe periods of a steady job (``cadence.py``)."""
    stall: StallSettings = field(default_factory=StallSettings)
    policies: PolicySettings | None = None
    """Create the job's NetworkPolicies letting these peers in; ``None``: create none."""


@dataclass(frozen=True)
class OwnedPod:
    """An entry of the pod index: the owning job's uid and the reduced pod."""

    owner_uid: str
    view: PodView


@dataclass(frozen=True)
class StepResult:
    status: JobStatus
    next_interval: float
    delete_requested: bool = False


class JobLoop:
    """Reconciles one ElasticJob incarnation (namespace, name, uid)."""

    def __init__(
        self,
        kube: Kube,
        session: aiohttp.ClientSession,
        job: JobRef,
        settings: LoopSettings,
        clock: Callable[[], float] = time.time,
        *,
        gate: probes.ProbeGate | None = None,
        jobs: Callable[[], int] = lambda: 1,
        wake: Callable[[], None] = lambda: None,
    ) -> None:
        """``jobs``: how many jobs the operator runs now (the budgets of steady probes and of
        progress samples are shared by all of them). ``wake``: run the job's next step now
        (called when a round of probes that outlived its step ends)."""
        self._jobs = jobs
        self._wake = wake
        self._round: asyncio.Future[_Round] | None = None
        """The job's round of probes in flight or finished and not yet read (one at a time)."""
        self._wake_after_round = False
        self._kube = kube
        self._gate = gate or probes.ProbeGate(0)
        self._session = session
        self._job = job
        self._settings = settings
        self._clock = clock
        self._written: JobStatus | None = None
        self._written_json: dict[str, Any] | None = None
        self._resource_version: str | None = None
        """The job's ``resourceVersion`` our next status write expects."""
        self._rejections = 0
        """Steps in a row in which the API server refused a request (for the back-off)."""
        self._tls: probes.EtcdTls | None = None
        """How this step speaks TLS to the job's etcd (``None``: plain HTTP)."""
        self._policies_created = False
        self._tls_cache: tuple[str, probes.EtcdTls] | None = None
        """The context made from the Secret (by its name), kept: the Secret never changes."""
        self._probed = _Probed()
        """The latest answers of the job's agents and etcd, and when they were taken."""
        self._refusals = Refusals()
        self._calm = cadence.Calm()
        self._inputs: object = None
        """What the job's objects looked like at the previous step (a change breaks the calm)."""

    async def step(
        self,
        body: Mapping[str, Any],
        pods: Iterable[OwnedPod],
        lost_nodes: frozenset[str],
        services: frozenset[str],
    ) -> StepResult:
        """One reconcile step; raises ``SpecError`` (unusable spec) or ``KubeError`` (API)."""
        pods = list(pods)
        confirmed = await self._confirm_steady(body, pods, lost_nodes, services)
        if confirmed is not None:
            return confirmed
        started = time.monotonic()
        result = "error"
        try:
            outcome = await self._step(body, pods, lost_nodes, services)
            result = "ok"
            return outcome
        except SpecError:
            result = "invalid"
            raise
        finally:
            metrics.RECONCILES.labels(result).inc()
            metrics.RECONCILE_SECONDS.observe(time.monotonic() - started)

    async def _confirm_steady(
        self,
        body: Mapping[str, Any],
        pods: list[OwnedPod],
        lost_nodes: frozenset[str],
        services: frozenset[str],
    ) -> StepResult | None:
        """A steady job between two polls of its agents: probe its etcd only. When etcd
        answers and none of the job's objects changed, nothing the plan reads has moved (the
        reports are the same ones), so no plan is made and nothing is written. ``None``: make a
        full step (something changed, the agents are due, or etcd did not answer)."""
        if self._written is None:
            return None
        views = [p.view for p in pods if p.owner_uid == self._job.uid]
        now = self._clock()
        cadence_settings = self._settings.cadence
        if self._inputs_of(body, views, lost_nodes, services) != self._inputs or not (
            cadence.steady(self._calm, now, cadence_settings)
        ):
            return None
        due = self._due(True, now)
        if due.reports or not self._probed.endpoints:
            return None
        if due.etcd or self._round is not None:
            last = self._probed
            if not await self._probed_in_time({}, last.endpoints, reports=False, etcd=True):
                # Still out: its answers go into a later step (``_round_ended``).
                return StepResult(self._written, self._settings.interval)
            done = self._finished_round()
            if done.reports is not None or done.endpoints != last.endpoints:
                self._round = _finished(done)  # news for the plan: the full step reads it
                return None
            result = {True: "ok", False: "restless", None: "no_verdict"}[done.etcd]
            metrics.STEADY_CHECKS.labels(result).inc()
            if done.etcd is False:
                self._round = _finished(done)  # the full step reads the verdict
                self._calm = cadence.Calm()  # and looks at everything, now
                return None
            self._absorb([done])  # no verdict: asked again after one interval (``_due``)
        due = self._due(True, self._clock())
        # A probe already due (a verdict-less round read late) is made at the next step, now.
        return StepResult(self._written, 0.0 if due.etcd or due.reports else due.wait)

    def _inputs_of(
        self,
        body: Mapping[str, Any],
        views: Iterable[PodView],
        lost_nodes: frozenset[str],
        services: frozenset[str],
    ) -> object:
        """What a change of the job's objects that breaks the calm looks like."""
        views = list(views)
        generation = int((body.get("metadata") or {}).get("generation") or 0)
        return (
            generation,
            _digest(v for v in views if v.role == names.ROLE_WORKER),
            _digest(v for v in views if v.role == names.ROLE_ETCD),
            lost_nodes,
            services,
        )

    async def _step(
        self,
        body: Mapping[str, Any],
        pods: Iterable[OwnedPod],
        lost_nodes: frozenset[str],
        services: frozenset[str],
    ) -> StepResult:
        job = self._job
        spec = kueue.attach(parse_spec(body.get("spec") or {}), body)
        stored = JobStatus.from_json(body.get("status"))
        status = never_lower(self._written, stored) if self._written is not None else stored
        if self._resource_version is None:
            self._resource_version = (body.get("metadata") or {}).get("resourceVersion")
        generation = int((body.get("metadata") or {}).get("generation") or 0)

        views = [p.view for p in pods if p.owner_uid == job.uid]
        workers = tuple(v for v in views if v.role == names.ROLE_WORKER)
        etcd_pods = tuple(v for v in views if v.role == names.ROLE_ETCD)
        rejection: planning.Rejection | None = None
        tls: probes.EtcdTls | None = None
        if not status.phase.finished:
            try:
                await self._ensure_policies(spec)
                tls = await self._etcd_tls(spec)
            except PermanentKubeError as exc:
                rejection = planning.Rejection(exc.what, exc.status, exc.server_message or str(exc))
        self._tls = tls
        inputs = self._inputs_of(body, views, lost_nodes, services)
        changed, self._inputs = inputs != self._inputs, inputs
        probe_at = self._clock()
        steady = not changed and cadence.steady(self._calm, probe_at, self._settings.cadence)
        due = self._due(steady, probe_at)
        observed = await self._observe(spec, status, workers, etcd_pods, lost_nodes, due=due)
        now = self._clock()
        plan = planning.plan(
            job,
            spec=spec,
            generation=generation,
            status=status,
            observed=observed,
            now=now,
            settings=self._stall_settings(),
            services=services,
        )
        new_status = plan.status
        if plan.commit_first:
            new_status = await self._write_status(new_status)
        delete_requested = False
        refused: str | None = None
        for action in plan.actions:
            try:
                if isinstance(action, planning.CreateObject):
                    # After a refusal by an admission webhook (Kueue down), create nothing more.
                    if refused is None:
                        refused = await self._create(action.manifest)
                    continue
                new_status, deleted = await self._apply(action, new_status)
            except PermanentKubeError as exc:
                # Not retried silently: the first refusal becomes a condition and an Event.
                rejection = rejection or planning.Rejection(
                    exc.what, exc.status, exc.server_message or str(exc)
                )
                continue
            delete_requested = delete_requested or deleted
        new_status, rejected = planning.note_rejection(
            new_status, rejection, now=now, generation=generation
        )
        events = [*plan.events, *([rejected] if rejected is not None else [])]
        if refused is not None:
            new_status, refusal = kueue.report_refusal(new_status, status, refused)
            events += [planning.Event(*refusal)] if refusal else []
        self._rejections = self._rejections + 1 if rejection is not None else 0
        new_status = await self._write_status(new_status)
        for event in events:
            try:
                await self._kube.post_event(job, event.type, event.reason, event.message, now)
            except KubeError as exc:
                log.warning(
                    "job %s/%s: cannot post event %s: %s",
                    job.namespace,
                    job.name,
                    event.reason,
                    exc,
                )
        if plan.new_stall is not None:
            metrics.stall_started(job.namespace, job.name, plan.new_stall)
        metrics.publish(job.namespace, job.name, new_status)
        idle = new_status.phase.finished or new_status.phase is Phase.SUSPENDED
        interval = self._settings.idle_interval if idle else self._settings.interval
        running = {p.name for p in workers if p.ip and p.phase is PodPhase.RUNNING}
        is_calm = cadence.calm(
            running=new_status.phase is Phase.RUNNING,
            stalled=new_status.stall is not None,
            etcd_reachable=self._probed.etcd,
            expects_etcd=bool(self._probed.endpoints),
            reports=observed.reports,
            refused=len(observed.invalid_reports),
            no_verdict=len(self._probed.reports.no_verdict & running),
            running_workers=len(running),
            run_id=new_status.run_id,
        )
        self._calm = cadence.next_calm(self._calm, is_calm, changed, now)
        if not idle and cadence.steady(self._calm, now, self._settings.cadence):
            interval = self._due(True, now).wait
        if self._rejections:
            interval = min(REJECTED_BACKOFF_MAX, interval * 2 ** min(self._rejections, 6))
        return StepResult(new_status, interval, delete_requested)

    async def _create(self, manifest: Mapping[str, Any]) -> str | None:
        """Create an object; an admission webhook that cannot be called (Kueue down) is returned
        as a message for status and Events instead of raised: retrying hides it from the user."""
        try:
            await self._kube.create(manifest)
        except KubeError as exc:
            message = kueue.refusal_message(manifest, str(exc))
            if message is None:
                raise
            log.warning("job %s/%s: %s", self._job.namespace, self._job.name, message)
            return message
        return None

    async def _apply(self, action: planning.Action, status: JobStatus) -> tuple[JobStatus, bool]:
        """Run one action; returns the status (the seed's record) and whether the job was
        deleted. Raises ``KubeError``."""
        job = self._job
        if isinstance(action, planning.CreateObject):
            await self._kube.create(action.manifest)
        elif isinstance(action, planning.DeletePod):
            await self._kube.delete_pod(job.namespace, action.name, force=action.force)
        elif isinstance(action, planning.MarkJoined):
            await self._kube.annotate_pod(
                job.namespace, action.pod, {names.ANNOTATION_JOINED: str(action.round)}
            )
        elif isinstance(action, planning.MarkStoodBy):
            await self._kube.annotate_pod(
                job.namespace, action.pod, {names.ANNOTATION_STOOD_BY: "true"}
            )
        elif isinstance(action, planning.WriteSeed):
            if await probes.write_seed(
                self._session, action.endpoint, action.keys, action.seed, tls=self._tls
            ):
                etcd = status.etcd
                status = status.evolve(
                    etcd=type(etcd)(
                        etcd.generation,
                        etcd.ready_generation,
                        action.generation,
                        etcd.unreachable_since,
                    )
                )
                log.info(
                    "job %s/%s: restart seed written to etcd generation %d: %s",
                    job.namespace,
                    job.name,
                    action.generation,
                    dict(action.seed),
                )
        elif isinstance(action, planning.DeleteJob):
            await self._kube.delete_job(job)
            return status, True
        return status, False

    async def _poll_agents(
        self, targets: dict[str, str], within: float, now: float
    ) -> probes.Reports:
        """Every agent of ``targets`` but those refused lately (``refusals.py``), whose last
        refusal stands."""
        held = self._refusals.held(targets, now)
        polled = {n: ip for n, ip in targets.items() if n not in held}
        reports = await probes.fetch_reports(self._session, polled, within, gate=self._gate)
        self._refusals.record(polled, reports.invalid, targets, now)
        reports.invalid.update(held)
        return reports

    def _stall_settings(self) -> StallSettings:
        stall = self._settings.stall
        period = progress.sample_period(
            stall.progress_sample, self._jobs(), stall.progress_writes_per_second
        )
        return stall if period == stall.progress_sample else replace(stall, progress_sample=period)

    def _due(self, steady: bool, now: float) -> cadence.Due:
        probed = self._probed
        settings = cadence.within_budget(
            self._settings.cadence, self._jobs(), max(1, len(probed.targets))
        )
        last_etcd = probed.etcd_at
        if last_etcd is not None and probed.etcd_retry:
            last_etcd -= max(0.0, settings.etcd_interval - self._settings.interval)
        return cadence.due(
            steady_now=steady,
            last_reports=probed.reports_at,
            last_etcd=last_etcd,
            now=now,
            interval=self._settings.interval,
            settings=settings,
        )

    async def _observe(
        self,
        spec: JobSpec,
        status: JobStatus,
        workers: tuple[PodView, ...],
        etcd_pods: tuple[PodView, ...],
        lost_nodes: frozenset[str],
        *,
        due: cadence.Due,
    ) -> Observed:
        if status.phase.finished:
            self._probed = _Probed()
            self._round = None  # a round still out ends unread
            return Observed(workers=workers, etcd_pods=etcd_pods, lost_nodes=lost_nodes)
        kueue_reason = await self._kueue_reason(spec, workers)
        targets = {p.name: p.ip for p in workers if p.ip and p.phase is PodPhase.RUNNING}
        endpoints: list[str] = []
        if spec.etcd.mode is EtcdMode.EXTERNAL:
            endpoints = [str(e) for e in spec.etcd.endpoints]
        else:
            current = max(etcd_pods, key=lambda p: p.index, default=None)
            if current is not None and current.ip and current.phase is PodPhase.RUNNING:
                endpoints = [f"{current.ip}:{names.ETCD_CLIENT_PORT}"]
        # A steady job reuses its latest answers between probes, only for the same pods at the
        # same addresses and the same etcd (a change of either makes the job watchful anyway).
        # Answers come in rounds (``_probed_in_time``): a round that finished since the last
        # step is read first, and a new one asks only what it did not answer.
        fresh = [self._finished_round()] if self._round is not None and self._round.done() else []
        self._absorb(fresh)
        last = self._probed
        poll_reports = due.reports or targets != last.targets
        probe_etcd = bool(endpoints) and (due.etcd or endpoints != last.endpoints)
        if fresh and fresh[0].reports is not None and fresh[0].targets == targets:
            poll_reports = False
        if fresh and fresh[0].probed_etcd and fresh[0].endpoints == endpoints:
            probe_etcd = False
        if (poll_reports or probe_etcd) and await self._probed_in_time(
            targets, endpoints, reports=poll_reports, etcd=probe_etcd
        ):
            fresh.append(self._finished_round())
            self._absorb(fresh[-1:])
        probed = self._probed
        # The plan sees an etcd verdict only from a probe of this etcd since the last step
        # (``None`` otherwise), so no outage clock moves on old news.
        etcd_reachable = next(
            (r.etcd for r in reversed(fresh) if r.probed_etcd and r.endpoints == endpoints), None
        )
        if not endpoints:
            current = max(etcd_pods, key=lambda p: p.index, default=None)
            if current is not None and current.phase is PodPhase.FAILED:
                etcd_reachable = False
        # Answers of pods that are gone or moved are not theirs any more.
        polled = probed.targets
        reports = probes.Reports(
            {n: r for n, r in probed.reports.valid.items() if polled.get(n) == targets.get(n)},
            {n: w for n, w in probed.reports.invalid.items() if polled.get(n) == targets.get(n)},
        )
        if not endpoints:
            self._probed = replace(probed, endpoints=[], etcd=None)
        return Observed(
            workers=workers,
            etcd_pods=etcd_pods,
            reports=reports.valid,
            invalid_reports=reports.invalid,
            lost_nodes=lost_nodes,
            etcd_reachable=etcd_reachable,
            reports_fresh=any(r.reports is not None for r in fresh),
            kueue_reason=kueue_reason,
        )

    async def _probed_in_time(
        self, targets: Mapping[str, str], endpoints: list[str], *, reports: bool, etcd: bool
    ) -> bool:
        """Start a round of probes (unless one is out already) and wait for it up to
        ``probe_wait``; whether the round is finished (``_round_ended`` when it is not)."""
        task = self._round
        if task is None:
            now = self._clock()
            task = self._round = asyncio.ensure_future(
                self._probe_round(dict(targets), list(endpoints), reports, etcd, now)
            )
            task.add_done_callback(self._round_ended)
        if not task.done():
            await asyncio.wait({task}, timeout=self._settings.probe_wait)
        if task.done():
            return True
        self._wake_after_round = True
        return False

    def _round_ended(self, task: asyncio.Future[_Round]) -> None:
        late, self._wake_after_round = self._wake_after_round, False
        if late and not task.cancelled() and task.exception() is None:
            done = task.result()
            if done.probed_etcd and done.etcd is False:
                self._wake()

    def _finished_round(self) -> _Round:
        """The finished round's answers; the next round may start."""
        task, self._round = self._round, None
        assert task is not None and task.done()
        return task.result()

    async def _probe_round(
        self, targets: dict[str, str], endpoints: list[str], reports: bool, etcd: bool, at: float
    ) -> _Round:
        timeout = self._settings.probe_timeout
        got, verdict = await asyncio.gather(
            self._poll_agents(targets, timeout, at) if reports else _nothing(),
            probes.probe_etcd(self._session, endpoints, timeout, self._tls, gate=self._gate)
            if etcd
            else _nothing(),
        )
        return _Round(at, targets, got if reports else None, endpoints, etcd, verdict)

    def _absorb(self, rounds: Iterable[_Round]) -> None:
        """Take the answers of finished rounds into the job's latest ones."""
        for done in rounds:
            probed = self._probed
            if done.reports is not None:
                probed = replace(
                    probed, targets=done.targets, reports=done.reports, reports_at=done.at
                )
            if done.probed_etcd and done.etcd is None and done.endpoints == probed.endpoints:
                # No verdict (the operator was starved, ``probes.STARVED``): the last one
                # stands, and etcd is asked again after one interval rather than a steady
                # period. Treating it as a failure made the job watchful for ``settle``
                # seconds, thirty times the probes of a steady job, which starves the loop
                # further: at 1000 jobs that feedback took the operator down.
                probed = replace(probed, etcd_at=done.at, etcd_retry=True)
            elif done.probed_etcd:
                probed = replace(
                    probed,
                    endpoints=done.endpoints,
                    etcd=done.etcd,
                    etcd_at=done.at,
                    etcd_retry=False,
                )
            self._probed = probed

    async def _kueue_reason(self, spec: JobSpec, workers: tuple[PodView, ...]) -> str | None:
        """Kueue's reason the core is not admitted, read from its Workload while a core pod is
        gated; ``None`` when unknown (not queued, no Workload yet, or no read access)."""
        if spec.kueue is None or not any(p.gated and kueue.is_core(spec, p.index) for p in workers):
            return None
        try:
            workload = await self._kube.get_workload(
                self._job.namespace, kueue.group_name(self._job)
            )
        except KubeError as exc:
            log.debug("job %s/%s: %s", self._job.namespace, self._job.name, exc)
            return None
        return kueue.workload_reason(workload)

    async def _ensure_policies(self, spec: JobSpec) -> None:
        """Create the job's NetworkPolicies once per loop (a create that finds them is a no-op;
        they are owned by the job and never change)."""
        settings = self._settings.policies
        if settings is None or self._policies_created:
            return
        for policy in build_network_policies(
            self._job,
            settings.operator,
            settings.prometheus,
            managed_etcd=spec.etcd.mode is EtcdMode.MANAGED,
        ):
            await self._kube.create(policy)
        self._policies_created = True

    async def _etcd_tls(self, spec: JobSpec) -> probes.EtcdTls | None:
        """The operator's TLS to the job's etcd; for a managed etcd, first creates the job's
        certificates (once: an existing Secret is read, never regenerated). Raises
        ``KubeError`` (``PermanentKubeError`` when the Secret cannot be used)."""
        job = self._job
        secret = manifests.etcd_tls_secret(job, spec)
        if secret is None:
            return None
        if self._tls_cache is not None and self._tls_cache[0] == secret:
            return self._tls_cache[1]
        managed = spec.etcd.mode is EtcdMode.MANAGED
        what = f"use Secret {job.namespace}/{secret}"
        found = await self._kube.get_secret(job.namespace, secret)
        if found is None and managed:
            made = pki.generate(
                job.name, job.namespace, names.etcd_service_name(job.name), datetime.now(UTC)
            )
            await self._kube.create(manifests.build_etcd_tls_secret(job, made.secret_data()))
            log.info(
                "job %s/%s: etcd certificates created in Secret %s", job.namespace, job.name, secret
            )
            found = await self._kube.get_secret(job.namespace, secret)  # whoever won a race
        if found is None:
            raise PermanentKubeError(
                f"{what}: not found",
                404,
                "the Secret does not exist (spec.etcd.tlsSecretName)",
                what,
            )
        if managed and found.controller_uid != job.uid:
            # Someone else's certificates would let them read the job's etcd: refuse.
            raise PermanentKubeError(
                f"{what}: not owned by this job",
                409,
                "a Secret of that name exists and is "
                "not owned by this job; delete it or rename the job",
                what,
            )
        try:
            if managed:
                made_pki = pki.JobPki.from_secret_data(found.data)
                service = f"{names.etcd_service_name(job.name)}.{job.namespace}.svc"
                tls = probes.client_tls(
                    made_pki.ca_cert, made_pki.client_cert, made_pki.client_key, service
                )
            else:
                data = found.data
                missing = [k for k in names.TLS_FILES if k not in data]
                if missing:
                    raise ValueError(f"the Secret lacks {', '.join(missing)}")
                tls = probes.client_tls(*(data[k] for k in names.TLS_FILES))
        except (ValueError, ssl.SSLError) as exc:
            raise PermanentKubeError(f"{what}: {exc}", 422, str(exc), what) from exc
        self._tls_cache = (secret, tls)
        return tls

    async def _write_status(self, status: JobStatus) -> JobStatus:
        """Write ``status`` guarded by ``resourceVersion``; on a conflict re-read the job, raise
        our counters to the stored ones (``never_lower``) and try again. Returns what was
        written (``status`` itself unless a conflict merged something in)."""
        job = self._job
        data = status.to_json()
        if data == self._written_json:
            return status
        for _ in range(WRITE_ATTEMPTS):
            try:
                version = await self._kube.patch_job_status(job, data, self._resource_version)
            except ConflictKubeError:
                stored = await self._kube.get_job(job.namespace, job.name)
                meta = (stored or {}).get("metadata") or {}
                if stored is None or meta.get("uid") != job.uid:
                    raise KubeError(f"job {job.namespace}/{job.name} is gone") from None
                self._resource_version = meta.get("resourceVersion")
                status = never_lower(status, JobStatus.from_json(stored.get("status")))
                data = status.to_json()
                continue
            self._resource_version = version
            self._written = status
            self._written_json = data
            return status
        raise KubeError(f"status of {job.namespace}/{job.name}: conflicts on every attempt")

    def forget_written(self) -> None:
        """Re-read the status from the body on the next step (after an error)."""
        self._written = None
        self._written_json = None
        self._resource_version = None

    def adopt(self, job: Mapping[str, Any] | None) -> None:
        """Start from the stored job (read fresh when the loop starts)."""
        status = JobStatus.from_json((job or {}).get("status"))
        self._written = status
        self._written_json = status.to_json()
        self._resource_version = ((job or {}).get("metadata") or {}).get("resourceVersion")


@dataclass(frozen=True)
class _Probed:
    """A job's latest probe answers (``cadence.py`` decides when to renew them)."""

    targets: Mapping[str, str] = field(default_factory=dict)
    """The pods ``{name: ip}`` the reports were fetched from."""
    reports: probes.Reports = field(default_factory=probes.Reports)
    reports_at: float | None = None
    endpoints: list[str] = field(default_factory=list)
    etcd: bool | None = None
    etcd_at: float | None = None
    etcd_retry: bool = False
    """The probe at ``etcd_at`` gave no verdict: ask again after one interval."""


@dataclass(frozen=True)
class _Round:
    """What one round of probes asked and what came back."""

    at: float
    targets: dict[str, str]
    reports: probes.Reports | None
    """``None``: the agents were not polled in this round."""
    endpoints: list[str]
    probed_etcd: bool
    etcd: bool | None


def _finished(done: _Round) -> asyncio.Future[_Round]:
    future: asyncio.Future[_Round] = asyncio.get_running_loop().create_future()
    future.set_result(done)
    return future


async def _nothing() -> None:
    return None


def _digest(pods: Iterable[PodView]) -> tuple[tuple[Any, ...], ...]:
    """What a pod change that matters to the cadence looks like (not its every field)."""
    return tuple(
        sorted(
            (p.name, p.phase, p.ip, p.ready, p.deleting, p.node, p.start_failure is not None)
            for p in pods
        )
    )


def owned_pod(body: Mapping[str, Any], view: PodView) -> OwnedPod | None:
    """Index entry for a pod: ``None`` when no ElasticJob controls it."""
    refs = (body.get("metadata") or {}).get("ownerReferences") or []
    for ref in refs:
        if ref.get("kind") == names.KIND and ref.get("controller") and owned_by(body, ref["uid"]):
            return OwnedPod(str(ref["uid"]), view)
    return None


__all__ = ["JobLoop", "LoopSettings", "OwnedPod", "SpecError", "StepResult", "owned_pod"]
