"""Operator settings: a dataclass read once at start (environment variables, then flags)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from .reconciler import LoopSettings
from .stall import StallSettings


class SettingsError(ValueError):
    """An environment variable or flag has a value the operator cannot use."""


@dataclass(frozen=True)
class OperatorSettings:
    metrics_port: int = 8080
    """Port of ``/metrics`` (``ELASTICJOB_METRICS_PORT``; 0 disables)."""
    health_port: int = 8081
    """Port of kopf's liveness endpoint ``/healthz`` (``ELASTICJOB_HEALTH_PORT``)."""
    watch_namespaces: tuple[str, ...] = ()
    """Namespaces to watch (``ELASTICJOB_WATCH_NAMESPACES``, comma-separated); empty: all."""
    log_level: str = "info"
    """``debug``, ``info``, ``warning`` or ``error`` (``ELASTICJOB_LOG_LEVEL``)."""
    loop: LoopSettings = field(default_factory=LoopSettings)
    """Reconcile interval (``ELASTICJOB_INTERVAL_SECONDS``) and stall thresholds
    (``ELASTICJOB_ETCD_UNAVAILABLE_AFTER_SECONDS``, ``ELASTICJOB_WAITING_AFTER_SECONDS``)."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> OperatorSettings:
        env = os.environ if env is None else env
        level = env.get("ELASTICJOB_LOG_LEVEL", "info").lower()
        if level not in ("debug", "info", "warning", "error"):
            raise SettingsError(
                f"ELASTICJOB_LOG_LEVEL must be debug, info, warning or error, got {level!r}"
            )
        stall = StallSettings(
            etcd_unavailable_after=_number(env, "ELASTICJOB_ETCD_UNAVAILABLE_AFTER_SECONDS", 4.0),
            waiting_after=_number(env, "ELASTICJOB_WAITING_AFTER_SECONDS", 15.0),
        )
        return cls(
            metrics_port=int(_number(env, "ELASTICJOB_METRICS_PORT", 8080)),
            health_port=int(_number(env, "ELASTICJOB_HEALTH_PORT", 8081)),
            watch_namespaces=tuple(
                n.strip()
                for n in env.get("ELASTICJOB_WATCH_NAMESPACES", "").split(",")
                if n.strip()
            ),
            log_level=level,
            loop=LoopSettings(
                interval=_number(env, "ELASTICJOB_INTERVAL_SECONDS", 2.0), stall=stall
            ),
        )


def _number(env: Mapping[str, str], key: str, default: float) -> float:
    raw = env.get(key, "")
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{key} must be a number, got {raw!r}") from None
    if value < 0:
        raise SettingsError(f"{key} must not be negative, got {raw!r}")
    return value
