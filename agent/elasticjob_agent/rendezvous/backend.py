"""``EtcdV3RendezvousBackend``: torch's ``RendezvousBackend`` on etcd v3.

Plugs into torch's own ``DynamicRendezvousHandler`` (``create_handler(store, backend, params)``
with the pair from ``create_backend``). The state is one key, ``<prefix>/<run_id>/rdzv/
torch-state``, holding ``{"v": 1, "state": <base64 of torch's bytes>}``; the fencing token is
the key's mod revision, so ``set_state`` is one compare-and-swap transaction.
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar

from torch.distributed.elastic.rendezvous.dynamic_rendezvous import RendezvousBackend, Token

from elasticjob_agent.errors import RendezvousStateError
from elasticjob_agent.etcd.retry import retry_until
from elasticjob_agent.etcd.session import EtcdSession
from elasticjob_agent.protocol.endpoints import Endpoint
from elasticjob_agent.protocol.keys import DEFAULT_PREFIX, JobKeys
from elasticjob_agent.rendezvous import store_transactions
from elasticjob_agent.rendezvous.config import BACKEND_NAME, RendezvousConfig, request_timeout_for
from elasticjob_agent.rendezvous.store import EtcdStore
from elasticjob_agent.rendezvous.wire import RendezvousKeys, decode, encode

T = TypeVar("T")


class EtcdV3RendezvousBackend(RendezvousBackend):
    """Stores torch's rendezvous state in etcd with revision-based fencing tokens."""

    def __init__(
        self,
        endpoints: tuple[Endpoint, ...],
        run_id: str,
        *,
        key_prefix: str = DEFAULT_PREFIX,
        etcd_timeout: float = 60.0,
        session: EtcdSession | None = None,
    ) -> None:
        self._keys = RendezvousKeys.of(JobKeys(key_prefix, run_id))
        self._key = self._keys.torch_state
        self._owns_session = session is None
        self.session = session or EtcdSession(
            endpoints, request_timeout=request_timeout_for(etcd_timeout), lease_ttl=10
        )
        self._etcd_timeout = etcd_timeout

    def _run(self, op: Callable[[], Awaitable[T]]) -> T:
        """Run ``op`` on the session, retried while etcd is unreachable for up to
        ``etcd_timeout`` s (then ``RendezvousConnectionError``)."""
        return self.session.run(retry_until(op, patience=self._etcd_timeout, what="torch-state"))

    @property
    def name(self) -> str:
        return BACKEND_NAME

    def _decode(self, kv: Any) -> tuple[bytes, Token]:
        payload = decode(self._key, bytes(kv.value)).get("state")
        if not isinstance(payload, str):
            raise RendezvousStateError(f"corrupt rendezvous state at {self._key.decode()!r}")
        try:
            state = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise RendezvousStateError(
                f"corrupt rendezvous state at {self._key.decode()!r}: {exc}"
            ) from exc
        return state, int(kv.mod_revision)

    def get_state(self) -> tuple[bytes, Token] | None:
        """The state and its fencing token, or ``None`` if there is none.

        Raises ``RendezvousConnectionError`` (etcd unreachable past the timeout) or
        ``RendezvousStateError`` (the stored value is not ours).
        """
        kv = self._run(lambda: self.session.client.get(self._key))
        return None if kv is None else self._decode(kv)

    def set_state(
        self, state: bytes, token: Token | None = None
    ) -> tuple[bytes, Token, bool] | None:
        """Set the state if ``token`` is the current fencing token (or there is no state and
        ``token`` is ``None``); otherwise return the current state and token unchanged.

        An unknown token (not one this backend handed out) never matches.
        """
        value = encode(state=base64.b64encode(state).decode())
        if token is not None and (not isinstance(token, int) or isinstance(token, bool)):
            current = self.get_state()
            return None if current is None else (*current, False)
        cas = store_transactions.set_state(self._key, value, token)
        response = self._run(lambda: self.session.client.cas(cas))
        if response.succeeded:
            return state, int(response.header.revision), True
        kvs = response.responses[0].response_range.kvs
        if not kvs:
            return None
        current_state, current_token = self._decode(kvs[0])
        return current_state, current_token, False

    def close(self) -> None:
        if self._owns_session:
            self.session.close()


def create_backend(params: Any) -> tuple[EtcdV3RendezvousBackend, EtcdStore]:
    """Like torch's ``c10d_rendezvous_backend.create_backend``: the backend and a store for
    torch's ``DynamicRendezvousHandler`` (``create_handler(store, backend, params)``)."""
    config = RendezvousConfig.from_parameters(params)
    backend = EtcdV3RendezvousBackend(
        config.endpoints,
        config.run_id,
        key_prefix=config.key_prefix,
        etcd_timeout=config.etcd_timeout,
    )
    prefix = RendezvousKeys.of(config.keys).everything + b"torch-store/"
    store = EtcdStore(backend.session, prefix, timedelta(seconds=math.ceil(config.join_timeout)))
    return backend, store
