"""The membership check reads only what can change its answer (each read costs etcd a request),
and a read that fails leaves the group as it is."""

from __future__ import annotations

import logging
from typing import Any, cast

import pytest
from elasticjob_agent.errors import RendezvousConnectionError
from elasticjob_agent.health.metrics import AgentMetrics
from elasticjob_agent.health.status import AgentStatus
from elasticjob_agent.logs import EventContext, EventLog
from elasticjob_agent.protocol.health import EtcdStatus
from elasticjob_agent.rendezvous.supervised_handler import SupervisedHandler
from elasticjob_agent.supervision import probes
from elasticjob_agent.supervision.context import Supervision
from elasticjob_agent.supervision.observation import Membership
from elasticjob_agent.supervision.settings import SupervisorSettings
from elasticjob_agent.supervision.worker_env import AgentKnobs


class FakeHandler(SupervisedHandler):
    """Answers from a table; records which reads were made. ``raise`` makes a read fail."""

    def __init__(self, **answers: object) -> None:
        self.answers = answers
        self.reads: list[str] = []

    def _answer(self, name: str) -> Any:
        self.reads.append(name)
        value = self.answers[name]
        if value == "raise":
            raise RendezvousConnectionError("etcd unreachable")
        return value

    def next_rendezvous(self) -> Any:
        raise NotImplementedError

    def num_nodes_waiting(self) -> int:
        return int(self._answer("waiting"))

    def set_closed(self) -> None:
        return None

    def get_run_id(self) -> str:
        return "job"

    def shutdown(self) -> bool:
        return True

    def members_alive(self) -> bool:
        return bool(self._answer("alive"))

    def round_state_lost(self) -> bool:
        return bool(self._answer("lost"))

    def holds_membership(self) -> bool:
        return bool(self._answer("holds"))


def supervision(handler: SupervisedHandler) -> Supervision:
    settings = SupervisorSettings(
        role="default",
        nproc_per_node=1,
        max_restarts=0,
        monitor_interval=0.1,
        shutdown_timeout=1.0,
        etcd_timeout=10.0,
        local_addr=None,
        knobs=AgentKnobs(
            nccl_async_error_handling="3",
            nccl_heartbeat_timeout=600.0,
            nccl_monitoring="1",
            nccl_collective_timeout=1800.0,
            timer_socket="/unused",
            torch_timer_file="/unused",
        ),
    )
    unused = cast(Any, None)
    return Supervision(
        settings,
        handler=handler,
        counter=unused,
        workers=unused,
        timers=unused,
        status=AgentStatus("job", "node", 0, 1.0, etcd=lambda: EtcdStatus(True, None, None, ())),
        metrics=AgentMetrics("job", etcd_reachable=lambda: True),
        events=EventLog(logging.getLogger("test"), EventContext(run_id="job", node="node")),
        environ={},
        etcd_unreachable_since=lambda: None,
    )


CASES = [
    ("all alive", dict(waiting=0, alive=True), Membership(), ["waiting", "alive"]),
    (
        "nodes waiting",
        dict(waiting=2, alive=True),
        Membership(waiting=2),
        ["waiting", "alive"],
    ),
    (
        "round lost: our own key is not read",
        dict(waiting=0, alive=False, lost=True),
        Membership(members_alive=False, round_state_lost=True),
        ["waiting", "alive", "lost"],
    ),
    (
        "member lost, round there: our own key is read",
        dict(waiting=0, alive=False, lost=False, holds=True),
        Membership(members_alive=False),
        ["waiting", "alive", "lost", "holds"],
    ),
    (
        "our lease lapsed",
        dict(waiting=0, alive=False, lost=False, holds=False),
        Membership(members_alive=False, holds_membership=False),
        ["waiting", "alive", "lost", "holds"],
    ),
    (
        "round state unreadable: not lost",
        dict(waiting=0, alive=False, lost="raise", holds=True),
        Membership(members_alive=False),
        ["waiting", "alive", "lost", "holds"],
    ),
    (
        "own key unreadable: held",
        dict(waiting=0, alive=False, lost=False, holds="raise"),
        Membership(members_alive=False),
        ["waiting", "alive", "lost", "holds"],
    ),
    ("waiting unreadable: no check", dict(waiting="raise"), None, ["waiting"]),
    ("members unreadable: no check", dict(waiting=0, alive="raise"), None, ["waiting", "alive"]),
]


@pytest.mark.parametrize(
    ("answers", "expected", "reads"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_membership_reads(
    answers: dict[str, object], expected: Membership | None, reads: list[str]
) -> None:
    handler = FakeHandler(**answers)
    assert probes.membership(supervision(handler)) == expected
    assert handler.reads == reads
