"""The agent's etcd v3 access: endpoints, the asyncio client, the session, the retry helper.

- ``endpoints``: ``parse_endpoints`` (the one parser of ``--rdzv-endpoint``), ``Endpoint``;
  pure, so the command line can use it without loading grpc.
- ``client``: ``EtcdClient`` and the transaction building blocks (the only gRPC module).
- ``session``: ``EtcdSession``, the one loop thread, client and lease of an agent process.
- ``retry``: ``retry_until``, the one retry helper.

This package imports none of them eagerly: importing ``endpoints`` must not load grpc.
"""
