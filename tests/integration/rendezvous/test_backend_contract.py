"""One contract suite for torch's ``RendezvousBackend``, run against every implementation:
our ``EtcdV3RendezvousBackend`` (real etcd) and torch's ``C10dRendezvousBackend`` (a real
TCPStore) as the reference. The cases follow ``RendezvousBackend``'s documented contract."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from elasticjob_agent.ports import free_port
from elasticjob_agent.protocol.endpoints import parse_endpoints
from elasticjob_agent.rendezvous.backend import EtcdV3RendezvousBackend
from torch.distributed import TCPStore  # type: ignore[attr-defined]
from torch.distributed.elastic.rendezvous import RendezvousStateError
from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import RendezvousBackend

from tests.support.etcd_server import EtcdServer


@dataclass
class Subject:
    backend: RendezvousBackend
    corrupt: Callable[[], None]


def _etcd(server: EtcdServer) -> Iterator[Subject]:
    run_id = f"contract-{uuid.uuid4().hex[:8]}"
    backend = EtcdV3RendezvousBackend(parse_endpoints(server.endpoint), run_id, etcd_timeout=5)
    key = f"/elasticjob/{run_id}/rdzv/torch-state"

    def corrupt() -> None:
        server.etcdctl("put", key, "not json")

    try:
        yield Subject(backend, corrupt)
    finally:
        backend.close()


def _c10d(_: EtcdServer) -> Iterator[Subject]:
    store = TCPStore("127.0.0.1", free_port(), is_master=True, timeout=timedelta(seconds=10))
    run_id = f"contract-{uuid.uuid4().hex[:8]}"
    backend = C10dRendezvousBackend(store, run_id)
    yield Subject(backend, lambda: store.set(f"torch.rendezvous.{run_id}", "non-base64!"))


IMPLEMENTATIONS: dict[str, Callable[[EtcdServer], Iterator[Subject]]] = {
    "etcd-v3": _etcd,
    "c10d-tcpstore": _c10d,
}


@pytest.fixture(params=sorted(IMPLEMENTATIONS))
def subject(request: pytest.FixtureRequest, etcd_server_session: EtcdServer) -> Iterator[Subject]:
    yield from IMPLEMENTATIONS[request.param](etcd_server_session)


def _set(backend: RendezvousBackend, state: bytes, token: Any = None) -> tuple[bytes, Any, bool]:
    result = backend.set_state(state, token)
    assert result is not None
    return result


def test_get_state_returns_backend_state(subject: Subject) -> None:
    subject.backend.set_state(b"x")
    result = subject.backend.get_state()
    assert result is not None
    state, token = result
    assert state == b"x"
    assert token is not None


def test_get_state_returns_none_if_no_state(subject: Subject) -> None:
    assert subject.backend.get_state() is None


def test_get_state_raises_state_error_if_corrupt(subject: Subject) -> None:
    subject.corrupt()
    with pytest.raises(RendezvousStateError):
        subject.backend.get_state()


def test_set_state_creates_state_if_absent(subject: Subject) -> None:
    state, token, has_set = _set(subject.backend, b"x")
    assert (state, has_set) == (b"x", True)
    assert token is not None


def test_set_state_sets_if_token_is_current(subject: Subject) -> None:
    _, token1, has_set1 = _set(subject.backend, b"x")
    state2, token2, has_set2 = _set(subject.backend, b"y", token1)
    assert state2 == b"y"
    assert token1 != token2
    assert has_set1 and has_set2


def test_set_state_returns_current_state_if_token_is_old(subject: Subject) -> None:
    _, token1, _ = _set(subject.backend, b"x")
    state2, token2, _ = _set(subject.backend, b"y", token1)
    state3, token3, has_set = _set(subject.backend, b"z", token1)
    assert (state3, token3, has_set) == (state2, token2, False)


def test_set_state_returns_current_state_if_token_is_none(subject: Subject) -> None:
    state1, token1, _ = _set(subject.backend, b"x")
    state2, token2, has_set = _set(subject.backend, b"y")
    assert (state2, token2, has_set) == (state1, token1, False)


def test_set_state_returns_current_state_if_token_is_invalid(subject: Subject) -> None:
    state1, token1, _ = _set(subject.backend, b"x")
    state2, token2, has_set = _set(subject.backend, b"y", token="invalid")
    assert (state2, token2, has_set) == (state1, token1, False)


def test_binary_state_round_trips(subject: Subject) -> None:
    blob = bytes(range(256)) * 4
    _set(subject.backend, blob)
    result = subject.backend.get_state()
    assert result is not None and result[0] == blob
