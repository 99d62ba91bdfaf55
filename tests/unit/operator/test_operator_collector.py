"""The garbage collector's settings (``collector.py``): a young generation large enough for
the operator's transient objects to die in, and every collection's pause observed."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
from elasticjob_operator import collector


@pytest.fixture
def restored() -> Iterator[None]:
    thresholds, callbacks = gc.get_threshold(), list(gc.callbacks)
    yield
    gc.set_threshold(*thresholds)
    gc.callbacks[:] = callbacks
    gc.unfreeze()


def test_tune_sets_the_thresholds_and_freezes_what_exists(restored: None) -> None:
    collector.tune()
    assert gc.get_threshold() == (
        collector.YOUNG_THRESHOLD,
        collector.MIDDLE_THRESHOLD,
        collector.OLD_THRESHOLD,
    )
    assert gc.get_freeze_count() > 0


def test_every_collection_is_observed_with_its_generation_and_pause(restored: None) -> None:
    seen: list[tuple[int, float]] = []

    def observe(generation: int, seconds: float) -> None:
        seen.append((generation, seconds))

    collector.tune(observe)
    collector.tune(observe)  # the operator's start-up may run again in one process
    seen.clear()
    gc.collect(1)
    gc.collect(2)
    assert [g for g, _ in seen] == [1, 2]
    assert all(0 <= s < 10 for _, s in seen)
