"""The role exchange on a real etcd: every node gets torchrun's ranks with O(1) requests."""

from __future__ import annotations

import uuid

import pytest
from elasticjob_agent.errors import RendezvousStateError
from elasticjob_agent.rendezvous.role_info import RankAssignment, RoleInfo, assign_ranks
from elasticjob_agent.rendezvous.roles import TABLE_KEY, exchange_roles
from elasticjob_agent.rendezvous.store import EtcdStore

from tests.support.etcd_server import EtcdServer
from tests.support.rendezvous_handlers import in_threads

N = 12


@pytest.mark.timeout(120)
def test_every_node_gets_its_ranks_with_a_constant_number_of_requests(
    etcd_server_session: EtcdServer,
) -> None:
    prefix = f"/roles-{uuid.uuid4().hex[:8]}/store/"
    infos = [RoleInfo("trainer" if r % 4 else "reader", r, 1 + r % 3) for r in range(N)]
    stores = [EtcdStore.connect(etcd_server_session.endpoint, prefix) for _ in range(N)]
    results: dict[int, RankAssignment] = {}
    try:
        for s in stores:
            s.num_keys()  # connect before counting
        before = [s._session.client.requests for s in stores]

        def run(r: int) -> None:
            results[r] = exchange_roles(stores[r], infos[r], N)

        in_threads(run, range(N), timeout=60)
        requests = [s._session.client.requests - b for s, b in zip(stores, before, strict=True)]
    finally:
        for s in stores:
            s.close()
    assert [results[r] for r in range(N)] == assign_ranks(infos)
    # Rank 0 gathers (a range read, a watch; one more of each per re-check) and publishes;
    # every other node writes its role and reads the table in one transaction, then at most
    # one watch.
    assert requests[0] <= 4, requests
    assert max(requests[1:]) <= 2, requests


@pytest.mark.timeout(60)
def test_a_corrupt_table_is_a_state_error_naming_the_key(etcd_server_session: EtcdServer) -> None:
    prefix = f"/roles-{uuid.uuid4().hex[:8]}/store/"
    store = EtcdStore.connect(etcd_server_session.endpoint, prefix)
    try:
        store.set(TABLE_KEY, b'{"v": 1, "runs": [["trainer", 1, 99]]}')
        with pytest.raises(RendezvousStateError, match="covers 99 nodes") as err:
            exchange_roles(store, RoleInfo("trainer", 1, 1), 2)
        assert TABLE_KEY in str(err.value)
    finally:
        store.close()
