"""Fixtures for agent tests: start real agents, always kill whatever they started."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from tests.support.agent_harness import Agent


@pytest.fixture
def spawn_agent(tmp_path: Path) -> Iterator[Callable[..., Agent]]:
    started: list[Agent] = []

    def spawn(
        name: str,
        argv: Sequence[str],
        env: dict[str, str] | None = None,
        *,
        as_torchrun: bool = False,
    ) -> Agent:
        agent = Agent(tmp_path, name, argv, env, as_torchrun=as_torchrun)
        started.append(agent)
        return agent

    yield spawn
    for agent in started:
        agent.cleanup()
