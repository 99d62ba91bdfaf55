"""``elasticjob-operator``: run the operator (a thin wrapper around ``kopf.run``).

Flags: ``--namespace NS`` (repeatable) or ``--all-namespaces``, ``--liveness URL``,
``--verbose``, ``--log-format text|json``. Other settings come from the environment
(``settings.OperatorSettings``).

With leader election (the default) the process first acquires the Lease, standing by (and
answering its liveness probe) while another operator holds it; it runs kopf only while it holds
the Lease, and exits at once (code ``LOST_LEADERSHIP``) when it loses it, so that two operators
never act together. The Lease is renewed from a thread of its own (``election.LeaseKeeper``).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Collection, Sequence

import kopf
from aiohttp import web

from . import (
    handlers,  # noqa: F401 - importing registers the handlers with kopf
    logs,
)
from .election import Elector, LeaseKeeper
from .kube import Kube
from .settings import OperatorSettings, SettingsError

LOST_LEADERSHIP = 3
"""Exit code when the Lease was lost: the Deployment restarts the pod as a standby."""

log = logging.getLogger("elasticjob_operator")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="elasticjob-operator",
        description="Kubernetes operator for ElasticJob (elastic PyTorch training).",
    )
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument(
        "--namespace",
        "-n",
        action="append",
        default=[],
        help="watch only this namespace (repeatable)",
    )
    scope.add_argument("--all-namespaces", "-A", action="store_true", help="watch every namespace")
    parser.add_argument(
        "--liveness",
        default=None,
        help="kopf liveness endpoint, e.g. http://0.0.0.0:8081/healthz "
        "(default: port ELASTICJOB_HEALTH_PORT)",
    )
    parser.add_argument("--verbose", "-v", action="store_true", help="debug logging")
    parser.add_argument(
        "--log-format",
        choices=logs.LOG_FORMATS,
        default=None,
        help="text lines, or one JSON object a line (default: ELASTICJOB_LOG_FORMAT, else text)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        settings = OperatorSettings.from_env()
    except SettingsError as exc:
        print(f"elasticjob-operator: {exc}", file=sys.stderr)
        return 2
    level = "debug" if args.verbose else settings.log_level
    logs.configure(level, args.log_format or settings.log_format)
    namespaces = tuple(args.namespace) or (() if args.all_namespaces else settings.watch_namespaces)
    liveness = args.liveness or (
        f"http://0.0.0.0:{settings.health_port}/healthz" if settings.health_port else None
    )

    return asyncio.run(_serve(settings, namespaces, liveness))


async def _serve(
    settings: OperatorSettings, namespaces: Collection[str], liveness: str | None
) -> int:
    operator = kopf.operator(
        clusterwide=not namespaces,
        namespaces=namespaces,
        liveness_endpoint=liveness,
        standalone=True,  # kopf's own peering is off: the Lease below decides who acts
    )
    if not settings.leader_election:
        await operator
        return 0

    def elector_on(kube: Kube) -> Elector:
        return Elector(
            kube,
            namespace=settings.lease_namespace,
            name=settings.lease_name,
            identity=settings.identity,
            timings=settings.lease,
        )

    kube = await Kube.connect()
    elector = elector_on(kube)
    standby = await _standby_liveness(settings.health_port) if settings.health_port else None
    try:
        await elector.acquire()
    except BaseException:
        operator.close()
        raise
    finally:
        if standby is not None:
            await standby.cleanup()
    await kube.close()

    def lost(reason: str) -> None:
        # Stop acting at once (from the keeper's thread): a graceful kopf shutdown would let
        # daemons write for seconds while another operator may already act.
        log.error("leadership lost (%s): exiting", reason)
        logging.shutdown()
        os._exit(LOST_LEADERSHIP)

    keeper = LeaseKeeper(Kube.connect, elector_on, lost)
    keeper.start()
    try:
        await operator
    finally:
        await asyncio.to_thread(keeper.stop, settings.lease.renew_deadline)
    return 0


async def _standby_liveness(port: int) -> web.AppRunner:
    """Answer ``/healthz`` while standing by (kopf's endpoint takes the port once leading)."""

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="standing by for the lease\n")

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    # Every address: the kubelet probes the pod IP.
    await web.TCPSite(runner, "0.0.0.0", port).start()
    return runner


if __name__ == "__main__":
    sys.exit(main())
