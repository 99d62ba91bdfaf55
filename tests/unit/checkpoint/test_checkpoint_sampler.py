"""The elastic sampler: whatever sequence of world sizes and steps a job goes through, every
sample of an epoch is consumed exactly once (hypothesis), and its state is strict."""

from __future__ import annotations

import pytest
from elasticjob_agent.checkpoint.sampler import ElasticSampler, SamplerState, epoch_order
from hypothesis import given, settings
from hypothesis import strategies as st


def _world(
    length: int, world: int, state: dict[str, int] | None, **kw: bool
) -> list[ElasticSampler]:
    samplers = [
        ElasticSampler(length, seed=7, rank=r, world_size=world, **kw) for r in range(world)
    ]
    for s in samplers:
        if state is not None:
            s.load_state_dict(state)
    return samplers


@settings(max_examples=300, deadline=None)
@given(
    length=st.integers(0, 60),
    phases=st.lists(
        st.tuples(st.integers(1, 7), st.integers(1, 5), st.integers(0, 6)), min_size=1, max_size=6
    ),
)
def test_every_sample_of_the_epoch_is_consumed_exactly_once(
    length: int, phases: list[tuple[int, int, int]]
) -> None:
    """Each phase: a world of ``world`` ranks restores the last saved state, runs ``steps``
    steps of ``batch`` samples per rank and saves; the last phase runs to the epoch's end."""
    consumed: list[int] = []
    state: dict[str, int] | None = None
    for i, (world, batch, steps) in enumerate(phases):
        samplers = _world(length, world, state)
        for s in samplers:
            s.set_epoch(0)
        streams = [s.remaining() for s in samplers]
        last = i == len(phases) - 1
        step = 0
        while (step < steps or last) and any(streams):
            for r, s in enumerate(samplers):
                consumed.extend(streams[r][:batch])
                streams[r] = streams[r][batch:]
                s.advance(batch)
            step += 1
        assert len({s.consumed for s in samplers}) == 1  # the same state on every rank
        state = samplers[0].state_dict()
    assert sorted(consumed) == list(range(length))
    assert state is not None and state["consumed"] == length


@given(length=st.integers(0, 50), world=st.integers(1, 8), consumed=st.integers(0, 50))
def test_the_ranks_split_the_rest_of_the_epoch(length: int, world: int, consumed: int) -> None:
    consumed = min(consumed, length)
    state = SamplerState(length, 3, 2, consumed).as_dict()
    samplers = _world(length, world, state)
    taken = [i for s in samplers for i in s]
    assert sorted(taken) == sorted(epoch_order(length, 3, 2)[consumed:])
    assert [len(s) for s in samplers] == [len(s.remaining()) for s in samplers]
    dropped = _world(length, world, state, drop_last=True)
    sizes = {len(s) for s in dropped}
    assert len(sizes) == 1 and sizes.pop() == (length - consumed) // world


def test_the_order_depends_on_seed_and_epoch_only() -> None:
    assert epoch_order(20, 1, 0) == epoch_order(20, 1, 0)
    assert epoch_order(20, 1, 0) != epoch_order(20, 1, 1)
    assert epoch_order(20, 1, 0) != epoch_order(20, 2, 0)
    assert epoch_order(5, 1, 0, shuffle=False) == [0, 1, 2, 3, 4]


def test_set_epoch_keeps_the_restored_epochs_position_and_resets_a_new_one() -> None:
    s = ElasticSampler(10, rank=0, world_size=2)
    s.load_state_dict(SamplerState(10, 0, 3, 4).as_dict())
    s.set_epoch(3)
    assert (s.epoch, s.consumed) == (3, 4)
    s.advance(10)
    assert s.consumed == 10  # capped at the epoch's end
    s.set_epoch(4)
    assert (s.epoch, s.consumed) == (4, 0)


def test_rank_and_world_default_to_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "3")
    s = ElasticSampler(9, shuffle=False)
    assert list(s) == [2, 5, 8]


@pytest.mark.parametrize(
    ("state", "message"),
    [
        ({"version": 1, "length": 10, "seed": 0, "epoch": 0, "consumed": 11}, "more than"),
        ({"version": 1, "length": 10, "seed": 0, "epoch": -1, "consumed": 0}, "epoch"),
        ({"version": 1, "length": 10, "seed": 0, "epoch": True, "consumed": 0}, "epoch"),
        ({"version": 2, "length": 10, "seed": 0, "epoch": 0, "consumed": 0}, "version 1"),
        ({"version": 1, "length": 11, "seed": 0, "epoch": 0, "consumed": 0}, "11 samples"),
    ],
)
def test_a_bad_state_is_refused_with_a_message(state: dict[str, object], message: str) -> None:
    s = ElasticSampler(10, rank=0, world_size=1)
    with pytest.raises(ValueError, match=message):
        s.load_state_dict(state)


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="rank 2 is not in a world of 2"):
        ElasticSampler(10, rank=2, world_size=2)
    with pytest.raises(ValueError, match="negative"):
        ElasticSampler(10, rank=0, world_size=1).advance(-1)
