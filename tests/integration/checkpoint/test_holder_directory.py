"""The holder directory on a real etcd that is wiped (the operator recreates a lost managed etcd
empty): the next publish puts this node's record back at once, on a new lease, instead of
failing until the keep-alive notices the lease is gone."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from elasticjob_agent.checkpoint.directory import HolderDirectory
from elasticjob_agent.checkpoint.manifest import HolderRecord, ShardId
from elasticjob_agent.etcd.session import EtcdSession
from elasticjob_agent.protocol.endpoints import parse_endpoints
from elasticjob_agent.protocol.keys import JobKeys

from tests.support.etcd_server import EtcdServer

# A keep-alive far slower than the test: only the publish itself can bring the record back.
LEASE_TTL = 60


@pytest.fixture
def session(etcd_server: EtcdServer) -> Iterator[EtcdSession]:
    opened = EtcdSession(
        parse_endpoints(etcd_server.endpoint, None), request_timeout=5.0, lease_ttl=LEASE_TTL
    )
    yield opened
    opened.close()


def test_a_record_is_published_again_at_once_after_etcd_was_wiped(
    etcd_server: EtcdServer, session: EtcdSession
) -> None:
    directory = HolderDirectory(session, JobKeys("/elasticjob", "wiped"), "node-a")
    try:
        record = HolderRecord("node-a", "10.0.0.1:29500", (ShardId(70, 0, 4), ShardId(70, 1, 4)))
        directory.publish(record)
        assert directory.records() == {"node-a": record}

        etcd_server.wipe()
        assert directory.records() == {}
        newer = HolderRecord("node-a", "10.0.0.1:29500", (ShardId(80, 0, 4),))
        directory.publish(newer)

        assert directory.records() == {"node-a": newer}
    finally:
        directory.close()
