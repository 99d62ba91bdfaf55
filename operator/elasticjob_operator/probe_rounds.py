"""A job's probes of its agents and its etcd, in rounds: when they are due (``cadence.py``), what
a round asks, and the latest answers the plan reads.

A round runs in the background: a step waits for it up to ``LoopSettings.probe_wait`` and plans
on with what it knew; a round that finishes later is read by the next step (and wakes the job at
once only when etcd did not answer, so that the outage clock starts).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

import aiohttp

from . import metrics, probes
from .core import cadence
from .core.loop_settings import LoopSettings
from .core.refusals import Refusals


@dataclass(frozen=True)
class Probed:
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
class Answers:
    """What a step's probes tell its plan."""

    reports: probes.Reports
    """Reports of the pods that are still where they were polled."""
    etcd_reachable: bool | None
    """The verdict of a probe of this etcd since the last step; ``None``: none."""
    reports_fresh: bool
    """Whether a round since the last step polled the agents."""


@dataclass(frozen=True)
class Steady:
    """The verdict on a steady job between two full steps."""

    wait: float | None
    """Seconds until the next step; ``None``: make a full step now."""
    restless: bool = False
    """etcd did not answer: the job is watchful again (its calm is broken)."""


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


class ProbeRounds:
    """One job's rounds of probes (one round out at a time) and their latest answers."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        settings: LoopSettings,
        clock: Callable[[], float],
        *,
        gate: probes.ProbeGate,
        jobs: Callable[[], int],
        wake: Callable[[], None],
    ) -> None:
        """``jobs``: how many jobs the operator runs now (the budget of steady probes is shared
        by all of them). ``wake``: run the job's next step now (called when a round of probes
        that outlived its step ends without an answer from etcd)."""
        self._session = session
        self._settings = settings
        self._clock = clock
        self._gate = gate
        self._jobs = jobs
        self._wake = wake
        self._round: asyncio.Future[_Round] | None = None
        """The job's round of probes in flight or finished and not yet read (one at a time)."""
        self._wake_after_round = False
        self._refusals = Refusals()
        self.probed = Probed()
        """The latest answers of the job's agents and etcd, and when they were taken."""

    def due(self, steady: bool, now: float) -> cadence.Due:
        """Which probes are due now, and when the next one is."""
        probed = self.probed
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

    def reset(self) -> None:
        """Forget every answer (a finished job); a round still out ends unread."""
        self.probed = Probed()
        self._round = None

    async def steady(self, due: cadence.Due, tls: probes.EtcdTls | None) -> Steady:
        """A steady job between two polls of its agents whose objects did not change: probe its
        etcd only, when due. ``Steady.wait`` is the wait before the next step when nothing the
        plan reads has moved; ``None``: make a full step (the agents are due, etcd did not
        answer, or a round brought news)."""
        if due.reports or not self.probed.endpoints:
            return Steady(None)
        if due.etcd or self._round is not None:
            last = self.probed
            if not await self._in_time({}, last.endpoints, tls, reports=False, etcd=True):
                # Still out: its answers go into a later step (``_round_ended``).
                return Steady(self._settings.interval)
            done = self._finished_round()
            if done.reports is not None or done.endpoints != last.endpoints:
                self._round = _finished(done)  # news for the plan: the full step reads it
                return Steady(None)
            result = {True: "ok", False: "restless", None: "no_verdict"}[done.etcd]
            metrics.STEADY_CHECKS.labels(result).inc()
            if done.etcd is False:
                self._round = _finished(done)  # the full step reads the verdict
                return Steady(None, restless=True)
            self._absorb([done])  # no verdict: asked again after one interval (``due``)
        due = self.due(True, self._clock())
        # A probe already due (a verdict-less round read late) is made at the next step, now.
        return Steady(0.0 if due.etcd or due.reports else due.wait)

    async def answers(
        self,
        targets: Mapping[str, str],
        endpoints: list[str],
        due: cadence.Due,
        tls: probes.EtcdTls | None,
    ) -> Answers:
        """The answers for a full step: of the agents at ``targets`` and the etcd at
        ``endpoints``, probed when due or moved.

        A steady job reuses its latest answers between probes, only for the same pods at the
        same addresses and the same etcd (a change of either makes the job watchful anyway).
        A round that finished since the last step is read first, and a new one asks only what
        it did not answer."""
        fresh = [self._finished_round()] if self._round is not None and self._round.done() else []
        self._absorb(fresh)
        last = self.probed
        poll_reports = due.reports or targets != last.targets
        probe_etcd = bool(endpoints) and (due.etcd or endpoints != last.endpoints)
        if fresh and fresh[0].reports is not None and fresh[0].targets == targets:
            poll_reports = False
        if fresh and fresh[0].probed_etcd and fresh[0].endpoints == endpoints:
            probe_etcd = False
        if (poll_reports or probe_etcd) and await self._in_time(
            targets, endpoints, tls, reports=poll_reports, etcd=probe_etcd
        ):
            fresh.append(self._finished_round())
            self._absorb(fresh[-1:])
        probed = self.probed
        # The plan sees an etcd verdict only from a probe of this etcd since the last step
        # (``None`` otherwise), so no outage clock moves on old news.
        etcd_reachable = next(
            (r.etcd for r in reversed(fresh) if r.probed_etcd and r.endpoints == endpoints), None
        )
        # Answers of pods that are gone or moved are not theirs any more.
        polled = probed.targets
        reports = probes.Reports(
            {n: r for n, r in probed.reports.valid.items() if polled.get(n) == targets.get(n)},
            {n: w for n, w in probed.reports.invalid.items() if polled.get(n) == targets.get(n)},
        )
        if not endpoints:
            self.probed = replace(probed, endpoints=[], etcd=None)
        return Answers(reports, etcd_reachable, any(r.reports is not None for r in fresh))

    async def _in_time(
        self,
        targets: Mapping[str, str],
        endpoints: list[str],
        tls: probes.EtcdTls | None,
        *,
        reports: bool,
        etcd: bool,
    ) -> bool:
        """Start a round of probes (unless one is out already) and wait for it up to
        ``probe_wait``; whether the round is finished (``_round_ended`` when it is not)."""
        task = self._round
        if task is None:
            now = self._clock()
            task = self._round = asyncio.ensure_future(
                self._probe_round(
                    dict(targets), list(endpoints), tls, reports=reports, etcd=etcd, at=now
                )
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
        if task is None or not task.done():
            raise RuntimeError("no finished round of probes to read")
        return task.result()

    async def _probe_round(
        self,
        targets: dict[str, str],
        endpoints: list[str],
        tls: probes.EtcdTls | None,
        *,
        reports: bool,
        etcd: bool,
        at: float,
    ) -> _Round:
        timeout = self._settings.probe_timeout
        got, verdict = await asyncio.gather(
            self._poll_agents(targets, timeout, at) if reports else _nothing(),
            probes.probe_etcd(self._session, endpoints, timeout, tls, gate=self._gate)
            if etcd
            else _nothing(),
        )
        return _Round(at, targets, got if reports else None, endpoints, etcd, verdict)

    def _absorb(self, rounds: Iterable[_Round]) -> None:
        """Take the answers of finished rounds into the job's latest ones."""
        for done in rounds:
            probed = self.probed
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
            self.probed = probed

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


def _finished(done: _Round) -> asyncio.Future[_Round]:
    future: asyncio.Future[_Round] = asyncio.get_running_loop().create_future()
    future.set_result(done)
    return future


async def _nothing() -> None:
    return None
