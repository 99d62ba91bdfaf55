"""Fixtures for integration tests: a real etcd server started by the test itself
(``tests.support.etcd_server``).

``etcd_server`` (function scope) and ``etcd_server_session`` (session scope, cheaper: one process
for the whole run; tests must then use their own run ids/prefixes) both yield an ``EtcdServer``;
``etcd_tls_server`` (module scope) one that speaks only TLS.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.etcd_server import EtcdServer, serve


@pytest.fixture
def etcd_server() -> Iterator[EtcdServer]:
    """A fresh etcd for this test only; stop/start/kill/wipe it freely."""
    yield from serve()


@pytest.fixture(scope="session")
def etcd_server_session() -> Iterator[EtcdServer]:
    """One etcd shared by the whole session: never stop it; use unique run ids."""
    yield from serve()


@pytest.fixture(scope="module")
def etcd_tls_server() -> Iterator[EtcdServer]:
    """An etcd that speaks only TLS and requires client certificates of its own CA
    (``server.tls``: the PEM files); one per test module: use unique run ids."""
    yield from serve(tls=True)
