"""The etcd key layout of one job run: everything lives under ``<prefix>/<run_id>/``.

One etcd can serve many jobs (and many runs of one job) because no key is shared between two
``(prefix, run_id)`` pairs. The operator writes the seed of the restart counters here after it
recreates a lost etcd, so this layout is a contract between the agent and the operator.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from elasticjob_agent.protocol.defaults import KEY_PREFIX
from elasticjob_agent.protocol.restarts import RestartReason

DEFAULT_PREFIX = KEY_PREFIX

KEY_PREFIX_RULE = "must start with '/' and not end with '/'"
"""What ``is_key_prefix`` checks, for error messages."""

_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")


def validate_run_id(run_id: str) -> str:
    """Return ``run_id`` if it is usable in a key, else raise ``ValueError`` saying what to fix."""
    if not _RUN_ID.match(run_id):
        raise ValueError(
            f"invalid rendezvous id {run_id!r}: use 1-253 characters of letters, digits, "
            "'.', '_' or '-', starting with a letter or digit"
        )
    return run_id


def is_key_prefix(prefix: str) -> bool:
    """Whether ``prefix`` can root a job's keys: ``KEY_PREFIX_RULE``."""
    return prefix.startswith("/") and not prefix.endswith("/")


@dataclass(frozen=True)
class JobKeys:
    """Key names for one run: every key starts with ``root + '/'``."""

    prefix: str
    run_id: str

    def __post_init__(self) -> None:
        if not is_key_prefix(self.prefix):
            raise ValueError(f"invalid key prefix {self.prefix!r}: it {KEY_PREFIX_RULE}")
        validate_run_id(self.run_id)

    @property
    def root(self) -> str:
        return f"{self.prefix}/{self.run_id}"

    @property
    def rendezvous(self) -> str:
        """Prefix owned by the rendezvous (rounds, participants, wait list, closed flag)."""
        return f"{self.root}/rdzv"

    @property
    def restarts(self) -> str:
        """Prefix of the job-wide restart counters, one key per reason."""
        return f"{self.root}/restarts"

    def restart_counter(self, reason: RestartReason) -> str:
        """Decimal integer: how many group restarts of ``reason`` the job has had."""
        return f"{self.restarts}/{reason.value}"

    def restart_event(self, round_: int) -> str:
        """JSON ``{"reason", "node", "at"}``: the restart that tore down ``round_``.

        Created at most once per round (create-only transaction that also bumps the counter), so N
        agents leaving the same round count one restart.
        """
        return f"{self.restarts}/events/{round_}"

    @property
    def close_reason(self) -> str:
        """JSON ``{"reason": "MaxRestartsExceeded", ...}``: why an agent closed the rendezvous."""
        return f"{self.root}/close-reason"

    @property
    def restart_seed(self) -> str:
        """JSON ``{"byReason": {...}}`` written by the operator after recreating etcd."""
        return f"{self.root}/restart-seed"
