"""Config parsing, endpoints and the wire format: bad input gets a message naming it."""

from __future__ import annotations

from typing import Any

import pytest
from elasticjob_agent.protocol.endpoints import Endpoint, parse_endpoints
from elasticjob_agent.rendezvous import RendezvousStateError
from elasticjob_agent.rendezvous.config import RendezvousConfig
from elasticjob_agent.rendezvous.wire import decode, decode_int, encode
from torch.distributed.elastic.rendezvous import RendezvousParameters


def params(**conf: Any) -> RendezvousParameters:
    return RendezvousParameters(
        backend="etcd-v3",
        endpoint="etcd-0.etcd:2379,10.0.0.2",
        run_id="job-1",
        min_nodes=1,
        max_nodes=4,
        local_addr="10.1.1.1",
        **conf,
    )


def test_from_parameters_reads_every_key() -> None:
    cfg = RendezvousConfig.from_parameters(
        params(
            join_timeout="12",
            last_call_timeout="1.5",
            close_timeout=3,
            heartbeat="2",
            key_prefix="/jobs",
            etcd_timeout="40",
            node_id="pod-a",
            timeout=900,
        )
    )
    assert cfg.endpoints == (Endpoint("etcd-0.etcd", 2379), Endpoint("10.0.0.2", 2379))
    assert (cfg.join_timeout, cfg.last_call_timeout, cfg.close_timeout) == (12.0, 1.5, 3.0)
    assert (cfg.heartbeat, cfg.etcd_timeout) == (2.0, 40.0)
    assert (cfg.key_prefix, cfg.node_id, cfg.local_addr) == ("/jobs", "pod-a", "10.1.1.1")
    assert (cfg.min_nodes, cfg.max_nodes, cfg.run_id) == (1, 4, "job-1")


def test_defaults_follow_the_contract() -> None:
    cfg = RendezvousConfig.from_parameters(params())
    assert (cfg.join_timeout, cfg.last_call_timeout, cfg.close_timeout) == (600.0, 30.0, 30.0)
    assert (cfg.heartbeat, cfg.etcd_timeout, cfg.key_prefix) == (5.0, 300.0, "/elasticjob")


@pytest.mark.parametrize(
    ("conf", "message"),
    [
        ({"join_timeout": "soon"}, "join_timeout"),
        ({"heartbeat": "0"}, "heartbeat"),
        ({"last_call_timeout": "-1"}, "last_call_timeout"),
        ({"colour": "blue"}, "colour"),
        ({"key_prefix": "no-slash"}, "key prefix"),
    ],
)
def test_bad_conf_names_the_key(conf: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RendezvousConfig.from_parameters(params(**conf))


def test_bad_sizes_and_ids() -> None:
    p = params()
    p.min_nodes, p.max_nodes = 3, 2
    with pytest.raises(ValueError, match="max_nodes"):
        RendezvousConfig.from_parameters(p)
    p = params()
    p.run_id = "bad/id"
    with pytest.raises(ValueError, match="rendezvous id"):
        RendezvousConfig.from_parameters(p)
    p = params()
    p.endpoint = ""
    with pytest.raises(ValueError, match="endpoint"):
        RendezvousConfig.from_parameters(p)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:2379", (Endpoint("127.0.0.1", 2379),)),
        ("http://etcd:1234/", (Endpoint("etcd", 1234),)),
        ("a, b:2", (Endpoint("a", 2379), Endpoint("b", 2))),
        ("[::1]:23", (Endpoint("::1", 23),)),
    ],
)
def test_parse_endpoints(text: str, expected: tuple[Endpoint, ...]) -> None:
    assert parse_endpoints(text) == expected


@pytest.mark.parametrize("text", ["", "a,,b", "host:http", "host:70000", "::1:2", "[::1"])
def test_parse_endpoints_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="endpoint"):
        parse_endpoints(text)


def test_wire_round_trip_and_corruption() -> None:
    key = b"/x/rdzv/ctl/round"
    assert decode_int(key, encode(round=3), "round") == 3
    assert decode(key, encode(a=1))["a"] == 1
    for bad in (b"{", b"[]", b'{"v": 2}', b"\xff"):
        with pytest.raises(RendezvousStateError, match="ctl/round"):
            decode(key, bad)
    with pytest.raises(RendezvousStateError, match="round"):
        decode_int(key, encode(round="3"), "round")


@pytest.mark.parametrize("value", ["inf", "nan", "-inf"])
def test_non_finite_seconds_are_refused_on_the_torchrun_path(value: str) -> None:
    with pytest.raises(ValueError, match="join_timeout must be a finite number > 0"):
        RendezvousConfig.from_parameters(params(join_timeout=value))
