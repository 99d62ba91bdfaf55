"""The restart seed of a recreated etcd, as one guarded transaction (pure).

A recreated managed etcd starts empty, while the job's restart count lives on in the operator's
status. The operator writes that count into the new etcd (the *seed*) so the agents continue
from it. Agents may count a restart in the new etcd before the seed lands (the seed race): their
counters then hold the restarts since the recreation, starting from zero. ``plan_seed`` therefore
writes, per reason, the seed *plus* what the agents counted meanwhile, in one transaction guarded
by the mod revision of every counter and by the seed key's absence. A concurrent increment makes
the guard fail and the caller reads again; a seed key that exists means the etcd is seeded
already and nothing is written (idempotent across operator restarts).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from elasticjob_agent.protocol.keys import JobKeys
from elasticjob_agent.protocol.restarts import RestartReason

from . import restarts


@dataclass(frozen=True)
class SeedKeys:
    """Where the restart counters and the seed of one job live in its etcd."""

    seed: str
    counters: Mapping[str, str]
    """Counter key by restart reason."""

    @classmethod
    def of(cls, keys: JobKeys) -> SeedKeys:
        return cls(
            seed=keys.restart_seed,
            counters={r.value: keys.restart_counter(r) for r in RestartReason},
        )


@dataclass(frozen=True)
class Stored:
    value: str
    mod_revision: int


@dataclass(frozen=True)
class SeedTxn:
    guards: Mapping[str, int]
    """Key to its expected mod revision (0: the key must not exist)."""
    puts: Mapping[str, str]


class SeedStateError(ValueError):
    """A counter in etcd holds something other than a non-negative decimal integer."""


def plan_seed(
    keys: SeedKeys, seed: Mapping[str, int], stored: Mapping[str, Stored]
) -> SeedTxn | None:
    """The transaction that seeds ``seed`` into an etcd holding ``stored``; ``None`` when the
    seed is there already. ``stored`` maps keys to values for the seed key and the counters."""
    if keys.seed in stored:
        return None
    guards: dict[str, int] = {keys.seed: 0}
    puts: dict[str, str] = {keys.seed: restarts.seed_json(seed)}
    for reason, key in sorted(keys.counters.items()):
        current = stored.get(key)
        counted = 0
        if current is not None:
            text = current.value.strip()
            if not text.isdigit() or len(text) > 18:
                raise SeedStateError(f"restart counter {key} holds {text[:40]!r}")
            counted = int(text)
        guards[key] = current.mod_revision if current is not None else 0
        add = seed.get(reason, 0)
        if add > 0:
            puts[key] = str(add + counted)
    return SeedTxn(guards, puts)
