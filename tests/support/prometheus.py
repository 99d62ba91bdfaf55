"""A real Prometheus (Debian's ``prometheus``) on loopback, with targets the test can change.

Targets live in file_sd files that Prometheus re-reads on change, so the test can follow pods that
come and go (a killed worker's replacement has a new address). ``honor_labels`` keeps the
metrics' own ``job`` and ``namespace`` labels, as the chart's ServiceMonitor does.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from elasticjob_agent.ports import free_port

SCRAPE_INTERVAL = "1s"


class PrometheusError(RuntimeError):
    """Prometheus did not start, or a query failed."""


@dataclass
class Prometheus:
    workdir: Path
    scrape_jobs: tuple[str, ...] = ("elasticjob-operator", "elasticjob-agents")
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _targets_file(self, job: str) -> Path:
        return self.workdir / f"targets-{job}.json"

    def start(self) -> None:
        binary = shutil.which("prometheus")
        if binary is None:
            raise PrometheusError(
                "prometheus not found: `make setup` installs Debian's prometheus package"
            )
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = {
            "global": {"scrape_interval": SCRAPE_INTERVAL, "scrape_timeout": SCRAPE_INTERVAL},
            "scrape_configs": [
                {
                    "job_name": job,
                    "honor_labels": True,
                    "file_sd_configs": [
                        {"files": [str(self._targets_file(job))], "refresh_interval": "1s"}
                    ],
                }
                for job in self.scrape_jobs
            ],
        }
        for job in self.scrape_jobs:
            self.set_targets(job, [])
        (self.workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        log = (self.workdir / "prometheus.log").open("wb")
        self.process = subprocess.Popen(
            [
                binary,
                f"--config.file={self.workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=1d",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise PrometheusError(f"prometheus exited: {self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise PrometheusError(f"prometheus not ready after 30 s: {self.log_tail()}")

    def log_tail(self) -> str:
        path = self.workdir / "prometheus.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def set_targets(self, job: str, targets: Iterable[str]) -> None:
        """Replace the ``host:port`` targets of ``job`` (written atomically: Prometheus watches)."""
        path = self._targets_file(job)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps([{"targets": sorted(set(targets))}]))
        tmp.replace(path)

    def _get(self, endpoint: str, params: dict[str, str]) -> Any:
        url = f"{self.url}/api/v1/{endpoint}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=30) as resp:
                body = json.load(resp)
        except urllib.error.HTTPError as exc:
            raise PrometheusError(f"{endpoint} {params}: {exc.read().decode()}") from exc
        if body.get("status") != "success":
            raise PrometheusError(f"{endpoint} {params}: {body}")
        return body["data"]

    def query_range(self, expr: str, start: float, end: float, step: float = 2.0) -> list[Any]:
        data = self._get(
            "query_range",
            {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step}"},
        )
        result: list[Any] = data["result"]
        return result

    def active_targets(self) -> list[dict[str, Any]]:
        targets: list[dict[str, Any]] = self._get("targets", {"state": "active"})["activeTargets"]
        return targets


def finite_points(result: Iterable[dict[str, Any]]) -> int:
    """How many samples of a range-query result are numbers (not NaN or infinite)."""
    return sum(
        1
        for series in result
        for _, value in series.get("values", [])
        if math.isfinite(float(value))
    )
