"""Stragglers: which node's compute time per step stays above the others' (pure, no clock).

Each agent reports its node's compute time per step (``computeSeconds``, the median over its
local ranks of their recent steps; ``elasticjob_agent.progress.step_timer``). ``judge`` compares
every node with the median of the *other* nodes (so that in a job of two the slow one is not
half its own baseline) and keeps one ``StragglerEntry`` per node that stands out:

- above ``factor`` times that median: a candidate (``aboveSince``); still above after
  ``windowSeconds``: a straggler (``detectedAt``); back at or below before that: forgotten;
- a straggler at or below again: ``belowSince``; still there after ``windowSeconds``:
  recovered (the entry goes); above again before that: a straggler still;
- a node without a figure in this step (no report, a restart, a spare standing by) keeps its
  entry as it is: no evidence is no verdict; a node that holds no pod of the job any more
  loses it, unless it was replaced (then the job avoids it: ``stragglers_status``).

With ``spec.health.preflight``, ``judge_preflight`` compares the nodes' pre-flight checks
(``preflightSeconds``) the same way, but at once (no window), and only nodes without an entry;
an entry it makes stays while the node holds a pod of the job (training timings do not clear
it), or until the node is replaced.

A job with fewer than two nodes with a figure compares nothing and reports nothing. A node
whose figure is below ``MIN_COMPUTE_SECONDS`` is never slow: at that scale the clock's jitter
is the difference.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from statistics import median

from .observed import Observed, PodView
from .stragglers_spec import StragglerSpec
from .stragglers_status import MAX_ENTRIES, PREFLIGHT, StragglerEntry

MIN_COMPUTE_SECONDS = 0.001
"""A node computing less than this per step is never a straggler (timer noise)."""


@dataclass(frozen=True)
class NodeFigure:
    node: str
    pods: tuple[PodView, ...]
    """The job's current pods on the node that reported a figure, by name."""
    seconds: float
    """The median of their figures."""


@dataclass(frozen=True)
class Verdict:
    entries: tuple[StragglerEntry, ...]
    detected: tuple[StragglerEntry, ...] = ()
    """Nodes found stragglers in this step."""
    recovered: tuple[StragglerEntry, ...] = ()
    """Stragglers that were fast again for the window, in this step."""


def node_of(pod: PodView) -> str:
    return pod.node or pod.name


def node_figures(
    observed: Observed, pods: Iterable[PodView], run_id: str, *, preflight: bool = False
) -> dict[str, NodeFigure]:
    """Each node's compute time per step (``preflight``: its pre-flight check's time), from
    the reports of ``run_id`` of ``pods`` (the job's current worker pods) that carry one; pods
    being deleted do not count."""
    by_node: dict[str, list[tuple[PodView, float]]] = defaultdict(list)
    for pod in sorted(pods, key=lambda p: p.name):
        found = observed.reports.get(pod.name)
        if pod.deleting or found is None or found.run_id != run_id:
            continue
        seconds = found.preflight_seconds if preflight else found.compute_seconds
        if seconds is not None:
            by_node[node_of(pod)].append((pod, seconds))
    return {
        node: NodeFigure(node, tuple(p for p, _ in seen), median(s for _, s in seen))
        for node, seen in by_node.items()
    }


def judge(
    entries: Iterable[StragglerEntry],
    figures: Mapping[str, NodeFigure],
    present: frozenset[str],
    spec: StragglerSpec,
    now: float,
) -> Verdict:
    """The next entries from the stored ones, this step's ``figures`` and the nodes that hold
    a current pod of the job (``present``). Total: never raises."""
    kept: dict[str, StragglerEntry] = {}
    detected: list[StragglerEntry] = []
    recovered: list[StragglerEntry] = []
    old = {entry.node: entry for entry in entries}
    comparable = len(figures) >= 2
    for node, entry in old.items():
        if entry.replaced_at is not None:
            kept[node] = entry
        elif node in present and (
            entry.check == PREFLIGHT or node not in figures or not comparable
        ):
            kept[node] = entry  # found by its check, or no evidence in this step
    if comparable:
        for node, figure in sorted(figures.items()):
            baseline = median(f.seconds for n, f in figures.items() if n != node)
            slow = figure.seconds >= MIN_COMPUTE_SECONDS and figure.seconds > spec.factor * baseline
            prior = old.get(node)
            if prior is not None and (prior.replaced_at is not None or prior.check == PREFLIGHT):
                continue  # replaced (an old pod back in the job), or found by its check
            seen = StragglerEntry(node, figure.pods[0].name, figure.seconds, baseline, now)
            if prior is None:
                if slow:
                    kept[node] = seen
            elif prior.detected_at is None:
                if slow and now - prior.above_since >= spec.window_seconds:
                    found = replace(seen, above_since=prior.above_since, detected_at=now)
                    kept[node] = found
                    detected.append(found)
                elif slow:
                    kept[node] = prior
            elif slow:
                kept[node] = replace(prior, below_since=None)
            elif prior.below_since is None:
                kept[node] = replace(prior, below_since=now)
            elif now - prior.below_since >= spec.window_seconds:
                recovered.append(replace(seen, above_since=prior.above_since))
            else:
                kept[node] = prior
    return Verdict(_bounded(kept.values()), tuple(detected), tuple(recovered))


def judge_preflight(
    entries: Iterable[StragglerEntry],
    figures: Mapping[str, NodeFigure],
    spec: StragglerSpec,
    now: float,
) -> Verdict:
    """``entries`` plus a straggler for each node without an entry whose pre-flight check took
    more than ``factor`` times the other nodes' median: at once (the check is one measurement,
    already the median of its runs). Fewer than two figures compare nothing."""
    kept = {entry.node: entry for entry in entries}
    detected: list[StragglerEntry] = []
    if len(figures) >= 2:
        for node, figure in sorted(figures.items()):
            baseline = median(f.seconds for n, f in figures.items() if n != node)
            if node in kept or not figure.seconds > spec.factor * baseline:
                continue
            found = StragglerEntry(
                node, figure.pods[0].name, figure.seconds, baseline, now, now, check=PREFLIGHT
            )
            kept[node] = found
            detected.append(found)
    return Verdict(_bounded(kept.values()), tuple(detected))


def _bounded(entries: Iterable[StragglerEntry]) -> tuple[StragglerEntry, ...]:
    """Current nodes first (by name), then replaced ones, newest first, up to ``MAX_ENTRIES``."""
    current = sorted((e for e in entries if e.replaced_at is None), key=lambda e: e.node)
    gone = sorted(
        (e for e in entries if e.replaced_at is not None), key=lambda e: -(e.replaced_at or 0.0)
    )
    return tuple([*current, *gone][:MAX_ENTRIES])
