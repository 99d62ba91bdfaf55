"""The command line: torchrun's flags, PET_* equivalents, and clear errors for bad input."""

from __future__ import annotations

import re

import pytest
from elasticjob_agent.args import (
    UsageError,
    parse_args,
    parse_c10d_endpoint,
    parse_rdzv_conf,
    resolve_nproc,
)
from elasticjob_agent.protocol.endpoints import Endpoint

BASE = ["--rdzv-endpoint", "127.0.0.1:2379", "--rdzv-id", "job1"]


def test_torchrun_command_line_is_accepted() -> None:
    args = parse_args(
        [
            "--nnodes",
            "1:3",
            "--nproc_per_node",
            "2",
            "--rdzv_backend",
            "etcd-v3",
            "--rdzv_endpoint",
            "a:1,b:2",
            "--rdzv_id",
            "j",
            "--max_restarts",
            "3",
            "--monitor_interval",
            "0.5",
            "--role",
            "trainer",
            "--start_method",
            "fork",
            "-r",
            "0:1,1:2",
            "-t",
            "3",
            "--log_dir",
            "/tmp/x",
            "--local_addr",
            "10.0.0.1",
            "train.py",
            "--lr",
            "0.1",
            "--steps",
            "5",
        ],
        {},
    )
    assert (args.min_nodes, args.max_nodes) == (1, 3)
    assert args.nproc_per_node == "2"
    assert args.rdzv_endpoints == (Endpoint("a", 1), Endpoint("b", 2))
    assert args.max_restarts == 3
    assert args.monitor_interval == 0.5
    assert args.role == "trainer"
    assert args.redirects == "0:1,1:2" and args.tee == "3"
    assert args.training_script == "train.py"
    assert args.training_script_args == ("--lr", "0.1", "--steps", "5")


def test_pet_variables_are_defaults_and_flags_win() -> None:
    env = {
        "PET_NNODES": "2:4",
        "PET_NPROC_PER_NODE": "4",
        "PET_RDZV_ENDPOINT": "etcd:2379",
        "PET_RDZV_ID": "from-env",
        "PET_MAX_RESTARTS": "7",
        "PET_STANDALONE": "0",
        "PET_ETCD_TIMEOUT": "12",
    }
    args = parse_args(["--max-restarts", "1", "train.py"], env)
    assert (args.min_nodes, args.max_nodes) == (2, 4)
    assert args.nproc_per_node == "4"
    assert args.rdzv_id == "from-env"
    assert args.max_restarts == 1
    assert args.standalone is False
    assert args.etcd_timeout == 12.0


def test_standalone_forces_one_node_and_needs_no_endpoint() -> None:
    args = parse_args(["--standalone", "--nnodes", "2", "train.py"], {})
    assert args.standalone and (args.min_nodes, args.max_nodes) == (1, 1)
    assert parse_args(["train.py"], {"PET_STANDALONE": "1"}).standalone


def test_defaults_follow_contracts() -> None:
    args = parse_args([*BASE, "train.py"], {})
    assert args.health_port == 29401
    assert args.etcd_timeout == 300.0
    assert args.nccl_async_error_handling == "3"
    assert args.key_prefix == "/elasticjob"
    assert args.worst_case_time_to_fail == 1 * (1800 + 600)
    inherited = parse_args([*BASE, "train.py"], {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"})
    assert inherited.nccl_async_error_handling == "1"


def test_worst_case_time_to_fail() -> None:
    args = parse_args(
        [
            *BASE,
            "--max-restarts",
            "2",
            "--nccl-collective-timeout",
            "60",
            "--nccl-heartbeat-timeout",
            "30",
            "train.py",
        ],
        {},
    )
    assert args.worst_case_time_to_fail == 3 * 90


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--rdzv-backend", "static", *BASE, "t.py"], "--rdzv-backend 'static'"),
        (["--rdzv-backend", "c10d", "t.py"], "is required with --rdzv-backend c10d"),
        (["--rdzv-backend", "c10d", "--rdzv-endpoint", "http://h:1", "t.py"], "without a scheme"),
        (["--rdzv-backend", "c10d", "--rdzv-endpoint", "h:99999", "t.py"], "port '99999'"),
        (["--rdzv-backend", "c10d", *BASE, "--rdzv-conf", "cacert=/c", "t.py"], "key 'cacert'"),
        (
            ["--rdzv-backend", "c10d", *BASE, "--rdzv-conf", "join_timeout=1.5", "t.py"],
            "join_timeout '1.5' must be a positive whole number",
        ),
        (["--rdzv-backend", "c10d", *BASE, "--rdzv-conf", "is_host=maybe", "t.py"], "is_host"),
        (["--nnodes", "3:1", *BASE, "t.py"], "--nnodes '3:1'"),
        (["--nnodes", "a", *BASE, "t.py"], "--nnodes 'a'"),
        (["--rdzv-id", "job1", "t.py"], "--rdzv-endpoint host:port is required"),
        (["--rdzv-endpoint", "a:b:c", "t.py"], "--rdzv-endpoint: invalid etcd endpoint"),
        ([*BASE, "--rdzv-id", "bad id", "t.py"], "--rdzv-id"),
        ([*BASE, "--nproc-per-node", "0", "t.py"], "--nproc-per-node '0'"),
        ([*BASE, "--max-restarts", "-1", "t.py"], "--max-restarts must be >= 0"),
        ([*BASE, "--monitor-interval", "0", "t.py"], "--monitor-interval must be > 0"),
        ([*BASE, "--rdzv-conf", "join_timeout=abc", "t.py"], "join_timeout 'abc' is not a number"),
        ([*BASE, "--rdzv-conf", "bogus=1", "t.py"], "unknown key 'bogus'"),
        ([*BASE, "--rdzv-conf", "heartbeat", "t.py"], "must be key=value"),
        ([*BASE, "--rdzv-conf", "key_prefix=nope", "t.py"], "key_prefix 'nope'"),
        ([*BASE, "-r", "7", "t.py"], "--redirects '7'"),
        ([*BASE, "-m", "--no-python", "t.py"], "--module and --no-python"),
        ([*BASE, "--nccl-monitoring", "2", "t.py"], "--nccl-monitoring '2'"),
        ([*BASE, "--health-port", "70000", "t.py"], "not a port number"),
    ],
)
def test_bad_input_names_what_to_fix(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_args(argv, {})


def test_unknown_flag_exits_2() -> None:
    with pytest.raises(SystemExit) as exc:
        parse_args(["--no-such-flag", "t.py"], {})
    assert exc.value.code == 2


def test_rdzv_conf_parses_known_keys() -> None:
    conf = parse_rdzv_conf("join_timeout=60, last_call_timeout=1,key_prefix=/x/y,heartbeat=2")
    assert conf == {
        "join_timeout": "60",
        "last_call_timeout": "1",
        "key_prefix": "/x/y",
        "heartbeat": "2",
    }


def test_resolve_nproc() -> None:
    assert resolve_nproc("3", 8, 0) == 3
    assert resolve_nproc("cpu", 8, 2) == 8
    assert resolve_nproc("auto", 8, 2) == 2
    assert resolve_nproc("auto", 8, 0) == 8
    with pytest.raises(UsageError, match="no GPU"):
        resolve_nproc("gpu", 8, 0)


@pytest.mark.parametrize("value", ["inf", "nan", "Infinity", "NaN", "1e999", "+inf"])
@pytest.mark.parametrize(
    "flag",
    [
        "--monitor-interval",
        "--shutdown-timeout",
        "--etcd-timeout",
        "--nccl-collective-timeout",
        "--nccl-heartbeat-timeout",
    ],
)
def test_non_finite_seconds_are_refused(flag: str, value: str) -> None:
    with pytest.raises(UsageError, match=f"{flag} '{re.escape(value)}' must be a finite number"):
        parse_args([*BASE, flag, value, "t.py"], {})


@pytest.mark.parametrize("key", ["join_timeout", "last_call_timeout", "heartbeat"])
def test_non_finite_rdzv_conf_seconds_are_refused(key: str) -> None:
    with pytest.raises(UsageError, match=f"--rdzv-conf {key} 'inf' must be a finite number"):
        parse_args([*BASE, "--rdzv-conf", f"{key}=inf", "t.py"], {})


def test_c10d_backend_takes_torchs_endpoint_and_conf() -> None:
    args = parse_args(
        [
            "--rdzv-backend", "c10d", "--rdzv-endpoint", "node-0", "--rdzv-id", "job1",
            "--rdzv-conf", "join_timeout=60,is_host=false,keep_alive_interval=2", "t.py",
        ],
        {},
    )  # fmt: skip
    assert args.rdzv_backend == "c10d"
    assert args.c10d_endpoint == "node-0:29400"
    assert args.rdzv_endpoints == ()
    assert dict(args.rdzv_conf) == {
        "join_timeout": "60",
        "is_host": "false",
        "keep_alive_interval": "2",
    }
    assert parse_c10d_endpoint("[::1]:1234") == "[::1]:1234"
    assert parse_c10d_endpoint(" 10.0.0.1:5 ") == "10.0.0.1:5"
    assert parse_args(["--rdzv-backend", "etcd", *BASE, "t.py"], {}).rdzv_backend == "etcd-v3"
    # torchrun's --standalone overrides the backend; ours is then an embedded etcd.
    solo = parse_args(["--standalone", "--rdzv-backend", "c10d", "t.py"], {})
    assert solo.rdzv_backend == "etcd-v3"
