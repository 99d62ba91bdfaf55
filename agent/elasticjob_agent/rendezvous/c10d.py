"""torchrun's default rendezvous, ``--rdzv-backend c10d``, for our supervisor.

torch's own pieces, as its registry builds them: ``C10dRendezvousBackend`` on a ``TCPStore``
(hosted by the agent whose host matches the endpoint, or the one with ``is_host=1``) and
``DynamicRendezvousHandler``. What this gives up against ``etcd-v3`` is in docs/agent.md
(``--rdzv-backend c10d``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from elasticjob_agent.rendezvous.supervised_handler import SupervisedHandler

SHARE_STORE_ENV = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"


def make_c10d_handler(
    endpoint: str,
    run_id: str,
    *,
    min_nodes: int,
    max_nodes: int,
    local_addr: str | None,
    conf: Mapping[str, str],
) -> tuple[C10dHandler, Any]:
    """torch's ``DynamicRendezvousHandler`` on the c10d backend (as a ``C10dHandler``), and the
    backend's store.

    Raises our ``RendezvousConnectionError`` when the store can be neither hosted nor reached,
    ``ValueError`` for a value torch refuses.
    """
    from torch.distributed.elastic.rendezvous import RendezvousParameters  # noqa: PLC0415
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import (  # noqa: PLC0415
        create_backend,
    )
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import (  # noqa: PLC0415
        create_handler,
    )

    # Workers get their own TCPStore on a fresh port every round (TORCHELASTIC_USE_AGENT_STORE
    # is False, as with etcd-v3): torch's shared agent store would hold that port, and reuse
    # one master port across rounds (pytorch/pytorch#135712). Read in next_rendezvous().
    os.environ[SHARE_STORE_ENV] = "1"
    params = RendezvousParameters(
        backend="c10d",
        endpoint=endpoint,
        run_id=run_id,
        min_nodes=min_nodes,
        max_nodes=max_nodes,
        local_addr=local_addr,
        **conf,
    )
    try:
        backend, store = create_backend(params)
        handler = create_handler(store, backend, params)
    except Exception as exc:
        mapped = _ours(exc)
        if mapped is exc:
            raise
        raise mapped from exc
    return C10dHandler(handler), store


def _ours(exc: Exception) -> Exception:
    """torch's rendezvous error as ours (the supervisor's taxonomy); others unchanged."""
    from torch.distributed.elastic.rendezvous import api  # noqa: PLC0415

    from elasticjob_agent import errors  # noqa: PLC0415

    if isinstance(exc, errors.RendezvousError) or not isinstance(exc, api.RendezvousError):
        return exc
    for theirs, mine in (
        (api.RendezvousClosedError, errors.RendezvousClosedError),
        (api.RendezvousTimeoutError, errors.RendezvousTimeoutError),
        (api.RendezvousConnectionError, errors.RendezvousConnectionError),
        (api.RendezvousStateError, errors.RendezvousStateError),
    ):
        if isinstance(exc, theirs):
            return mine(str(exc))
    return errors.RendezvousError(str(exc))


class C10dHandler(SupervisedHandler):
    """torch's handler with torch's rendezvous errors raised as ours, so the supervisor reads
    a closed, timed-out or unreachable c10d rendezvous as it reads an etcd-v3 one. The optional
    features keep ``SupervisedHandler``'s defaults."""

    def __init__(self, handler: Any) -> None:
        self._handler = handler

    def _call(self, name: str) -> Any:
        try:
            return getattr(self._handler, name)()
        except Exception as exc:
            mapped = _ours(exc)
            if mapped is exc:
                raise
            raise mapped from exc

    def next_rendezvous(self) -> Any:
        return self._call("next_rendezvous")

    def num_nodes_waiting(self) -> int:
        return int(self._call("num_nodes_waiting"))

    def set_closed(self) -> None:
        self._call("set_closed")

    def get_run_id(self) -> str:
        return str(self._handler.get_run_id())

    def shutdown(self) -> bool:
        return bool(self._call("shutdown"))
