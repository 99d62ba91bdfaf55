"""The rendezvous error taxonomy, a floor below the etcd client that raises them.

``RendezvousError`` > ``RendezvousClosedError``, ``RendezvousTimeoutError``,
``RendezvousConnectionError``, ``RendezvousStateError``. When torch is importable each class is
also a subclass of torch's same-named class in ``torch.distributed.elastic.rendezvous.api``, so
torch's elastic agent, which catches those, handles ours the same way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    _TorchError = Exception
    _TorchClosed = Exception
    _TorchTimeout = Exception
    _TorchConnection = Exception
    _TorchState = Exception
else:
    try:
        from torch.distributed.elastic.rendezvous.api import (
            RendezvousClosedError as _TorchClosed,
        )
        from torch.distributed.elastic.rendezvous.api import (
            RendezvousConnectionError as _TorchConnection,
        )
        from torch.distributed.elastic.rendezvous.api import (
            RendezvousError as _TorchError,
        )
        from torch.distributed.elastic.rendezvous.api import (
            RendezvousStateError as _TorchState,
        )
        from torch.distributed.elastic.rendezvous.api import (
            RendezvousTimeoutError as _TorchTimeout,
        )
    except ImportError:  # an agent host without torch: plain exceptions
        _TorchError = _TorchClosed = _TorchTimeout = _TorchConnection = _TorchState = Exception


class RendezvousError(_TorchError):
    """Base of every rendezvous error."""


class RendezvousClosedError(RendezvousError, _TorchClosed):
    """The rendezvous is closed: every later attempt fails. Final."""


class RendezvousTimeoutError(RendezvousError, _TorchTimeout):
    """The round did not complete within the join timeout. Not retryable."""


class RendezvousConnectionError(RendezvousError, _TorchConnection):
    """etcd stayed unreachable for longer than the configured timeout."""


class RendezvousStateError(RendezvousError, _TorchState):
    """The rendezvous state in etcd is malformed or inconsistent."""
