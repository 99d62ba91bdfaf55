"""The agent's etcd v3 access: endpoint parsing and a small asyncio client with failover.

Public API (also used by the restart counter): ``parse_endpoints``, ``Endpoint``, ``EtcdClient``,
``EtcdRequestError``, ``LeaseNotFoundError``, ``Reachability``, ``prefix_end`` and the
transaction helpers in ``elasticjob_agent.etcd.client``. Unreachable etcd surfaces as
``elasticjob_agent.rendezvous.RendezvousConnectionError``.
"""

from elasticjob_agent.etcd.client import (
    EtcdClient,
    EtcdRequestError,
    LeaseNotFoundError,
    Reachability,
    prefix_end,
)
from elasticjob_agent.etcd.endpoints import Endpoint, parse_endpoints

__all__ = [
    "Endpoint",
    "EtcdClient",
    "EtcdRequestError",
    "LeaseNotFoundError",
    "Reachability",
    "parse_endpoints",
    "prefix_end",
]
