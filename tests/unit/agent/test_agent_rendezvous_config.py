"""The agent's ``RendezvousConfig`` comes from its parsed arguments, with no text in between,
and says what torchrun's path (``from_parameters``) says for the same command line."""

from __future__ import annotations

import pytest
from elasticjob_agent.args import parse_args
from elasticjob_agent.protocol.keys import DEFAULT_PREFIX
from elasticjob_agent.rendezvous.config import RendezvousConfig
from torch.distributed.elastic.rendezvous import RendezvousParameters

CONF = "join_timeout=12,last_call_timeout=1.5,close_timeout=3,heartbeat=2,key_prefix=/jobs"
FLAGS = ["--nnodes", "1:4", "--rdzv-endpoint", "etcd-0.etcd:2379", "--rdzv-id", "job-1"]


def test_every_knob_comes_from_the_typed_arguments() -> None:
    args = parse_args(
        [*FLAGS, "--rdzv-conf", CONF, "--etcd-timeout", "40", "--local-addr", "10.1.1.1", "t.py"],
        {},
    )
    cfg = RendezvousConfig.from_args(
        args, endpoints=args.rdzv_endpoints, run_id=args.rdzv_id, node_id="pod-a"
    )
    assert (cfg.run_id, cfg.min_nodes, cfg.max_nodes, cfg.node_id) == ("job-1", 1, 4, "pod-a")
    assert (cfg.join_timeout, cfg.last_call_timeout, cfg.close_timeout, cfg.heartbeat) == (
        12.0,
        1.5,
        3.0,
        2.0,
    )
    assert (cfg.key_prefix, cfg.etcd_timeout, cfg.local_addr) == ("/jobs", 40.0, "10.1.1.1")
    assert cfg.endpoints == args.rdzv_endpoints


def test_the_same_as_torchruns_path_for_the_same_command_line() -> None:
    conf = f"{CONF},etcd_timeout=40,node_id=pod-a"
    args = parse_args([*FLAGS, "--rdzv-conf", conf, "t.py"], {})
    ours = RendezvousConfig.from_args(
        args, endpoints=args.rdzv_endpoints, run_id=args.rdzv_id, node_id="pod-a"
    )
    params = RendezvousParameters(
        backend="etcd-v3",
        endpoint="etcd-0.etcd:2379",
        run_id="job-1",
        min_nodes=1,
        max_nodes=4,
        local_addr=None,
        **dict(item.split("=") for item in conf.split(",")),
    )
    assert ours == RendezvousConfig.from_parameters(params)


def test_defaults_when_the_conf_is_empty() -> None:
    args = parse_args([*FLAGS, "t.py"], {})
    cfg = RendezvousConfig.from_args(args, endpoints=args.rdzv_endpoints, run_id="r", node_id="n")
    default = RendezvousConfig(
        run_id="r", endpoints=args.rdzv_endpoints, min_nodes=1, max_nodes=4, node_id="n"
    )
    assert cfg == default
    assert cfg.key_prefix == DEFAULT_PREFIX


def test_a_bad_node_id_is_refused() -> None:
    args = parse_args([*FLAGS, "t.py"], {})
    with pytest.raises(ValueError, match="invalid node id"):
        RendezvousConfig.from_args(args, endpoints=args.rdzv_endpoints, run_id="r", node_id="a/b")
