"""Run real ``elasticjob-agent`` processes for the integration tests and watch their health."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from elasticjob_agent.ports import free_port

from tests.support.paths import REPO

TRAIN = REPO / "examples" / "train.py"
SCRIPTS = REPO / "tests" / "integration" / "agent" / "scripts"
AGENT = [sys.executable, "-m", "elasticjob_agent"]
_LOG_TIME = re.compile(r"^(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}),(\d{3}) ")
"""The agent's log line stamp (``logging``'s ``asctime``: local time, milliseconds)."""


def pid_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


class Agent:
    """One agent process (its own session, so teardown can kill everything it started)."""

    def __init__(
        self,
        workdir: Path,
        name: str,
        argv: Sequence[str],
        env: dict[str, str] | None = None,
        *,
        as_torchrun: bool = False,
    ) -> None:
        """``as_torchrun``: only ``argv`` (no health port or node id of ours), as a user of
        torchrun would type it; ``health_port`` is then read from the log (``serving_port``)."""
        self.name = name
        self.health_port = 0 if as_torchrun else free_port()
        self.log_path = workdir / f"{name}.log"
        full_env = dict(os.environ)
        full_env["PYTHONPATH"] = os.pathsep.join(
            [str(REPO / "agent"), full_env.get("PYTHONPATH", "")]
        )
        full_env.update(env or {})
        ours = ["--health-addr", "127.0.0.1", "--health-port", str(self.health_port)]
        ours += ["--node-id", name]
        self.command = [*AGENT, *([] if as_torchrun else ours), *argv]
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in cleanup()
        self.proc = subprocess.Popen(
            self.command,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=full_env,
            cwd=workdir,
            start_new_session=True,
        )
        self.seen_pids: set[int] = set()

    def status(self) -> dict[str, Any] | None:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.health_port}/status", timeout=2
            ) as resp:
                data: dict[str, Any] = json.loads(resp.read())
        except (OSError, ValueError):
            return None
        self.seen_pids.update(w["pid"] for w in data.get("workers", []) if w.get("pid"))
        return data

    def get(self, path: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.health_port}{path}", timeout=2
            ) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def wait_status(
        self, predicate: Callable[[dict[str, Any]], bool], timeout: float, what: str
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        last: dict[str, Any] | None = None
        while time.monotonic() < deadline:
            last = self.status() or last
            if last is not None and predicate(last):
                return last
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        raise AssertionError(
            f"{self.name}: timed out waiting for {what}; last status {last}; "
            f"exit {self.proc.poll()}; log tail:\n{self.log()[-3000:]}"
        )

    def wait_running(self, timeout: float = 120.0, world_size: int | None = None) -> dict[str, Any]:
        return self.wait_status(
            lambda s: (
                s["state"] == "Running"
                and len(s["workers"]) > 0
                and (world_size is None or s["worldSize"] == world_size)
            ),
            timeout,
            f"Running (world size {world_size})",
        )

    def report_after(self, moment: float, timeout: float = 120.0) -> dict[str, Any]:
        """The agent's first report that proves it ran past ``moment`` (a Unix time): its etcd
        session heard from etcd after it (keep-alives do, every heartbeat). A check that
        something did NOT happen by ``moment`` reads this report, never one taken after a fixed
        sleep, which a starved agent may not have lived through."""
        return self.wait_status(
            lambda s: (s["etcd"]["lastContact"] or 0.0) >= moment,
            timeout,
            f"a contact with etcd after {time.strftime('%H:%M:%S', time.localtime(moment))}",
        )

    def event_times(self, event: str) -> list[float]:
        """Unix times of the agent's ``event=<event>`` log lines, oldest first."""
        times = []
        for line in self.log().splitlines():
            found = _LOG_TIME.match(line)
            if found is not None and f" event={event} " in f"{line} ":
                stamp = time.mktime(time.strptime(found.group(1), "%Y-%m-%d %H:%M:%S"))
                times.append(stamp + int(found.group(2)) / 1000)
        return times

    def wait_exit(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{self.name} still running after {timeout}s; log tail:\n{self.log()[-3000:]}"
            ) from None

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def serving_port(self, timeout: float) -> int:
        """The health port the agent logged it serves on (its own choice, or a fallback)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = re.search(r"health server on [^ ]+:(\d+)", self.log())
            if found:
                return int(found.group(1))
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        raise AssertionError(f"{self.name}: no health server line; log tail:\n{self.log()[-3000:]}")

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def cleanup(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        for pid in self.seen_pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)
        self._log.close()


def rdzv_flags(endpoint: str, run_id: str, nnodes: str, **conf: float | str) -> list[str]:
    settings = {"last_call_timeout": 1, "heartbeat": 2, "join_timeout": 120, **conf}
    return [
        "--nnodes", nnodes,
        "--rdzv-endpoint", endpoint,
        "--rdzv-id", run_id,
        "--rdzv-conf", ",".join(f"{k}={v}" for k, v in settings.items()),
        "--monitor-interval", "0.2",
        "--shutdown-timeout", "5",
    ]  # fmt: skip


@contextlib.contextmanager
def _counter(endpoint: str, run_id: str) -> Iterator[Any]:
    from elasticjob_agent.etcd.session import EtcdSession  # noqa: PLC0415
    from elasticjob_agent.protocol.endpoints import parse_endpoints  # noqa: PLC0415
    from elasticjob_agent.protocol.keys import JobKeys  # noqa: PLC0415
    from elasticjob_agent.supervision.restart_counter import JobRestartCounter  # noqa: PLC0415

    session = EtcdSession(parse_endpoints(endpoint), request_timeout=2.0, lease_ttl=5)
    try:
        yield JobRestartCounter(session, JobKeys("/elasticjob", run_id), "test", patience=5)
    finally:
        session.close()


def job_counts(endpoint: str, run_id: str) -> dict[str, int]:
    """The job-wide restart counts in etcd, by reason (absent reasons omitted)."""
    with _counter(endpoint, run_id) as counter:
        return dict(counter.read().by_reason)


def expire_lease_of(endpoint: str, run_id: str, node: str) -> None:
    """Do to ``node`` what etcd does when it sees no keep-alive within the TTL (a starved etcd
    or agent): revoke the lease that holds its joined key in the current round."""
    import asyncio  # noqa: PLC0415

    from elasticjob_agent.etcd.client import EtcdClient  # noqa: PLC0415
    from elasticjob_agent.protocol.endpoints import parse_endpoints  # noqa: PLC0415
    from elasticjob_agent.protocol.keys import JobKeys  # noqa: PLC0415
    from elasticjob_agent.rendezvous.wire import RendezvousKeys  # noqa: PLC0415

    keys = RendezvousKeys.of(JobKeys("/elasticjob", run_id))

    async def expire() -> None:
        client = EtcdClient(parse_endpoints(endpoint), request_timeout=5.0)
        try:
            pointer = await client.get(keys.round)  # absent until the first bump: round 0
            p = 0 if pointer is None else int(json.loads(bytes(pointer.value))["round"])
            joined = await client.get(keys.joined(p, node))
            assert joined is not None and joined.lease, f"{node} holds no key in round {p}"
            await client.revoke(int(joined.lease))
        finally:
            await client.close()

    asyncio.run(expire())


def close_reason(endpoint: str, run_id: str) -> str | None:
    with _counter(endpoint, run_id) as counter:
        reason: str | None = counter.close_reason()
        return reason


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
