"""The worker environment matches torchrun's variable for variable."""

from __future__ import annotations

import pytest
from elasticjob_agent.errors import RendezvousStateError
from elasticjob_agent.rendezvous.role_info import (
    RankAssignment,
    RoleInfo,
    assign_ranks,
    parse_master,
)
from elasticjob_agent.supervision.worker_env import AgentKnobs, GroupContext, worker_env
from hypothesis import given, settings
from hypothesis import strategies as st


def _ctx(group_rank: int = 1, nproc: int = 2, nodes: int = 3) -> GroupContext:
    infos = [RoleInfo("default", r, nproc) for r in range(nodes)]
    return GroupContext(
        run_id="job",
        role="default",
        group_rank=group_rank,
        group_world_size=nodes,
        local_world_size=nproc,
        master_addr="10.0.0.1",
        master_port=29500,
        restart_count=4,
        max_restarts=3,
        assignment=assign_ranks(infos)[group_rank],
    )


def test_torchrun_variables() -> None:
    env = worker_env(_ctx(), 1, {"PATH": "/bin"}, AgentKnobs(timer_socket="/tmp/t.sock"))
    expected = {
        "PATH": "/bin",
        "LOCAL_RANK": "1",
        "RANK": "3",
        "GROUP_RANK": "1",
        "ROLE_RANK": "3",
        "ROLE_NAME": "default",
        "LOCAL_WORLD_SIZE": "2",
        "WORLD_SIZE": "6",
        "GROUP_WORLD_SIZE": "3",
        "ROLE_WORLD_SIZE": "6",
        "MASTER_ADDR": "10.0.0.1",
        "MASTER_PORT": "29500",
        "TORCHELASTIC_RESTART_COUNT": "4",
        "TORCHELASTIC_MAX_RESTARTS": "3",
        "TORCHELASTIC_RUN_ID": "job",
        "TORCHELASTIC_USE_AGENT_STORE": "False",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3",
        "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": "600",
        "TORCH_NCCL_ENABLE_MONITORING": "1",
        "ELASTICJOB_COLLECTIVE_TIMEOUT_SECONDS": "1800",
        "OMP_NUM_THREADS": "1",
        "ELASTICJOB_TIMER_SOCKET": "/tmp/t.sock",
    }
    assert env == expected


def test_user_omp_threads_and_single_worker_are_respected() -> None:
    env = worker_env(_ctx(), 0, {"OMP_NUM_THREADS": "8"}, AgentKnobs())
    assert env["OMP_NUM_THREADS"] == "8"
    single = worker_env(_ctx(group_rank=0, nproc=1, nodes=1), 0, {}, AgentKnobs())
    assert "OMP_NUM_THREADS" not in single


def test_error_file_and_bad_local_rank() -> None:
    env = worker_env(_ctx(), 0, {}, AgentKnobs(), error_file="/tmp/e.json")
    assert env["TORCHELASTIC_ERROR_FILE"] == "/tmp/e.json"
    with pytest.raises(ValueError, match="local_rank 2"):
        worker_env(_ctx(), 2, {}, AgentKnobs())


def test_mixed_roles_like_torchrun() -> None:
    infos = [RoleInfo("trainer", 0, 2), RoleInfo("reader", 1, 1), RoleInfo("trainer", 2, 3)]
    assert assign_ranks(infos) == [
        RankAssignment(0, 6, 0, 5),
        RankAssignment(2, 6, 0, 1),
        RankAssignment(3, 6, 2, 5),
    ]


@settings(deadline=None)  # a loaded CI machine must not turn slowness into failures
@given(st.integers(1, 16), st.integers(1, 8))
def test_equal_nodes_give_group_rank_times_nproc(nodes: int, nproc: int) -> None:
    infos = [RoleInfo("default", r, nproc) for r in range(nodes)]
    for rank, a in enumerate(assign_ranks(infos)):
        assert a == RankAssignment(rank * nproc, nodes * nproc, rank * nproc, nodes * nproc)


def test_role_info_round_trip_and_bad_payload() -> None:
    info = RoleInfo("r", 2, 4)
    assert RoleInfo.decode(info.encode()) == info
    with pytest.raises(RendezvousStateError, match="role info at k/1: role"):
        RoleInfo.decode(b"{}", "k/1")


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"nope", "not valid JSON"),
        (b"[1]", "not a JSON object"),
        (b'{"role": "r", "groupRank": 1e400, "localWorldSize": 1}', "groupRank"),
        (b'{"role": "r", "groupRank": NaN, "localWorldSize": 1}', "not valid JSON"),
        (b'{"role": "r", "groupRank": true, "localWorldSize": 1}', "groupRank"),
        (b'{"role": "r", "groupRank": -1, "localWorldSize": 1}', "groupRank"),
        (b'{"role": "r", "groupRank": 0, "localWorldSize": 0}', "localWorldSize"),
        (b'{"role": "r", "groupRank": 0, "localWorldSize": 99999999}', "localWorldSize"),
        (b'{"role": "r", "groupRank": 0, "localWorldSize": "8"}', "localWorldSize"),
        (b'{"role": {}, "groupRank": 0, "localWorldSize": 1}', "role must be"),
        (b'{"role": "", "groupRank": 0, "localWorldSize": 1}', "role must be"),
        (b"[" * 5000, "bytes: corrupt"),
        (b"[" * 1500 + b"]" * 1500, "not valid JSON"),
    ],
)
def test_role_info_from_etcd_is_untrusted(raw: bytes, message: str) -> None:
    with pytest.raises(RendezvousStateError, match=f"role info at /r/7.*{message}"):
        RoleInfo.decode(raw, "/r/7")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"10.0.0.1:29500", ("10.0.0.1", 29500)),
        (b"[::1]:5", ("::1", 5)),
        (b"h.svc:1", ("h.svc", 1)),
    ],
)
def test_master_address(raw: bytes, expected: tuple[str, int]) -> None:
    assert parse_master("m", raw) == expected


@pytest.mark.parametrize(
    "raw", [b"", b"host", b"host:", b"host:0", b"host:70000", b":1", b"a b:1", b"h:\xd9\xa3"]
)
def test_bad_master_address_names_the_key(raw: bytes) -> None:
    with pytest.raises(RendezvousStateError, match="master address at elasticjob/master"):
        parse_master("elasticjob/master", raw)
    with pytest.raises(ValueError, match="group rank"):
        assign_ranks([RoleInfo("r", 1, 1)])
