"""``elasticjob-operator``: run the operator (a thin wrapper around ``kopf.run``).

Flags: ``--namespace NS`` (repeatable) or ``--all-namespaces``, ``--liveness URL``,
``--verbose``. Other settings come from the environment (``settings.OperatorSettings``).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

import kopf

from . import handlers  # noqa: F401 - importing registers the handlers with kopf
from .settings import OperatorSettings, SettingsError


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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        settings = OperatorSettings.from_env()
    except SettingsError as exc:
        print(f"elasticjob-operator: {exc}", file=sys.stderr)
        return 2
    level = "debug" if args.verbose else settings.log_level
    logging.basicConfig(
        level=getattr(logging, level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    namespaces = tuple(args.namespace) or (() if args.all_namespaces else settings.watch_namespaces)
    liveness = args.liveness or (
        f"http://0.0.0.0:{settings.health_port}/healthz" if settings.health_port else None
    )

    kopf.run(
        clusterwide=not namespaces,
        namespaces=namespaces,
        liveness_endpoint=liveness,
        standalone=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
