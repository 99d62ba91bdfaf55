"""Every handler the supervisor can get is a ``SupervisedHandler``; a missing feature keeps the
default that means "not supported"."""

from __future__ import annotations

from elasticjob_agent.rendezvous.c10d import C10dHandler
from elasticjob_agent.rendezvous.handler import EtcdRendezvousHandler
from elasticjob_agent.rendezvous.supervised_handler import SupervisedHandler


class _TorchHandler:
    """The calls C10dHandler forwards to torch's handler."""

    def next_rendezvous(self) -> str:
        return "info"

    def num_nodes_waiting(self) -> int:
        return 2

    def set_closed(self) -> None:
        return None

    def get_run_id(self) -> str:
        return "job"

    def shutdown(self) -> bool:
        return True


def test_the_etcd_handler_is_a_supervised_handler() -> None:
    assert issubclass(EtcdRendezvousHandler, SupervisedHandler)


def test_the_c10d_handler_forwards_torchs_calls_and_keeps_the_defaults() -> None:
    handler = C10dHandler(_TorchHandler())
    assert isinstance(handler, SupervisedHandler)
    assert (handler.next_rendezvous(), handler.num_nodes_waiting(), handler.get_run_id()) == (
        "info",
        2,
        "job",
    )
    assert handler.round is None
    assert handler.standby_since() is None
    assert handler.members_alive() is True
    assert handler.holds_membership() is True
    assert handler.round_state_lost() is False
    handler.leave()  # nothing to leave early, and no error
