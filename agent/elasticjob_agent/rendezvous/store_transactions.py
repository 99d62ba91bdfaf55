"""The compare-and-swap writes of the round store (``EtcdStore``) and of torch's state backend
(``EtcdV3RendezvousBackend``), as pure values (``etcd.txn``); ``EtcdClient.cas`` sends them."""

from __future__ import annotations

from elasticjob_agent.etcd.txn import Cas, Put, mod_is, value_is, version_is


def add(key: bytes, marker: bytes, fence: int, new: bytes) -> Cas:
    """``EtcdStore.add``: set counter ``key`` to ``new`` if it was not written since it was
    read at mod revision ``fence`` (0: absent), and leave ``marker`` (this call's own key,
    holding the result) so that a retry of an applied attempt finds its answer."""
    return Cas((mod_is(key, fence),), (Put(key, new), Put(marker, new)))


def compare_set(key: bytes, expected: bytes, desired: bytes) -> Cas:
    """``EtcdStore.compare_set``: ``desired`` if ``key`` holds ``expected`` (is absent when
    ``expected`` is empty); else read the current value back."""
    guard = version_is(key, 0) if not expected else value_is(key, expected)
    return Cas((guard,), (Put(key, desired),), (key,))


def set_state(key: bytes, value: bytes, token: int | None) -> Cas:
    """``EtcdV3RendezvousBackend.set_state``: write ``value`` if ``token`` is the state's mod
    revision (``None``: there is no state yet); else read the current state back."""
    guard = version_is(key, 0) if token is None else mod_is(key, token)
    return Cas((guard,), (Put(key, value),), (key,))
