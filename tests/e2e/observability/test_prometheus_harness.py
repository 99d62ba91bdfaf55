"""The Prometheus harness itself: a real Prometheus scraping a real /metrics endpoint.

Fast and cluster-free, so a broken harness shows here rather than after a long e2e run.
"""

from __future__ import annotations

import time
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge, start_http_server

from tests.support.prometheus import Prometheus, finite_points


def test_scrapes_a_target_and_answers_range_queries(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    phase = Gauge("elasticjob_job_phase", "phase", ["namespace", "job", "phase"], registry=registry)
    phase.labels("default", "demo", "Running").set(1)
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    port = server.server_port
    prom = Prometheus(workdir=tmp_path / "prom")
    try:
        prom.start()
        start = time.time()
        prom.set_targets("elasticjob-operator", [f"127.0.0.1:{port}"])
        deadline = time.monotonic() + 30
        result: list[object] = []
        while time.monotonic() < deadline:
            result = prom.query_range(
                'elasticjob_job_phase{job="demo"} == 1', start - 5, time.time(), step=1
            )
            if finite_points(result):  # type: ignore[arg-type]
                break
            time.sleep(0.5)
        assert finite_points(result) > 0, prom.log_tail()  # type: ignore[arg-type]
        # honor_labels: the metric's own job label wins over the scrape job's name.
        assert result[0]["metric"]["job"] == "demo"  # type: ignore[index]
    finally:
        prom.stop()
        server.shutdown()
        thread.join(timeout=5)
