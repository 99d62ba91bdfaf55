"""The ``podman`` fixture: see imagetools.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.images import Podman


@pytest.fixture
def podman() -> Iterator[Podman]:
    """podman as the image build configures it; containers a test starts are removed after it."""
    handle = Podman()
    try:
        yield handle
    finally:
        handle.cleanup()
