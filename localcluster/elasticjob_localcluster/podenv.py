"""A container's environment and command line, as the kubelet computes them (pure)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_LABEL_REF = re.compile(r"^metadata\.(labels|annotations)\['([^']+)'\]$")
_VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


class PodConfigError(ValueError):
    """The pod asks for something that cannot be provided (reported as
    ``CreateContainerConfigError``, like the kubelet does)."""


@dataclass(frozen=True)
class PodContext:
    """What the environment may refer to besides the pod object itself."""

    pod_ip: str
    host_ip: str
    node_name: str
    api_host: str
    api_port: int
    #: PATH inside the container (the repository's .venv/bin first).
    path: str
    home: str
    #: ``(namespace, name) -> data`` of the ConfigMaps and Secrets (decoded) the pod may use.
    config_maps: Mapping[tuple[str, str], Mapping[str, str]]
    secrets: Mapping[tuple[str, str], Mapping[str, str]]


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion: defined references are replaced, ``$$`` is a literal
    ``$``, undefined references are left as they are."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env[name] if name in env else match.group(0)

    return _VAR_REF.sub(replace, text)


def field_value(pod: Mapping[str, Any], path: str, ctx: PodContext) -> str:
    """The value of a downward-API ``fieldRef.fieldPath``."""
    meta = pod.get("metadata", {})
    spec = pod.get("spec", {})
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ctx.node_name),
        "spec.serviceAccountName": spec.get("serviceAccountName", "default"),
        "status.podIP": ctx.pod_ip,
        "status.podIPs": ctx.pod_ip,
        "status.hostIP": ctx.host_ip,
        "status.hostIPs": ctx.host_ip,
    }
    if path in simple:
        return str(simple[path])
    match = _LABEL_REF.match(path)
    if match:
        return str((meta.get(match.group(1)) or {}).get(match.group(2), ""))
    raise PodConfigError(f"fieldRef.fieldPath {path!r} is not supported by the local cluster")


def _lookup(
    store: Mapping[tuple[str, str], Mapping[str, str]],
    kind: str,
    namespace: str,
    ref: Mapping[str, Any],
) -> Mapping[str, str] | None:
    data = store.get((namespace, str(ref.get("name", ""))))
    if data is None and not ref.get("optional", False):
        raise PodConfigError(f'{kind} "{ref.get("name")}" not found')
    return data


def container_env(
    pod: Mapping[str, Any], container: Mapping[str, Any], ctx: PodContext
) -> dict[str, str]:
    """The environment of ``container``: PATH/HOME/HOSTNAME, the ``kubernetes`` Service
    variables, ``envFrom``, then ``env`` in order (later wins, ``$(VAR)`` expanded)."""
    namespace = str(pod["metadata"]["namespace"])
    spec = pod.get("spec", {})
    hostname = spec.get("hostname") or pod["metadata"]["name"]
    env: dict[str, str] = {
        "PATH": ctx.path,
        "HOME": ctx.home,
        "HOSTNAME": str(hostname),
        "KUBERNETES_SERVICE_HOST": ctx.api_host,
        "KUBERNETES_SERVICE_PORT": str(ctx.api_port),
        "KUBERNETES_SERVICE_PORT_HTTPS": str(ctx.api_port),
        "KUBERNETES_PORT": f"tcp://{ctx.api_host}:{ctx.api_port}",
        "KUBERNETES_PORT_443_TCP": f"tcp://{ctx.api_host}:{ctx.api_port}",
        "KUBERNETES_PORT_443_TCP_ADDR": ctx.api_host,
        "KUBERNETES_PORT_443_TCP_PORT": str(ctx.api_port),
        "KUBERNETES_PORT_443_TCP_PROTO": "tcp",
    }
    for source in container.get("envFrom") or []:
        prefix = str(source.get("prefix", ""))
        if "configMapRef" in source:
            data = _lookup(ctx.config_maps, "configmap", namespace, source["configMapRef"])
        elif "secretRef" in source:
            data = _lookup(ctx.secrets, "secret", namespace, source["secretRef"])
        else:
            raise PodConfigError(f"envFrom entry {dict(source)} names no configMapRef/secretRef")
        for key, value in (data or {}).items():
            env[prefix + key] = value
    for var in container.get("env") or []:
        name = str(var["name"])
        if "valueFrom" not in var:
            env[name] = expand(str(var.get("value", "")), env)
            continue
        source = var["valueFrom"]
        if "fieldRef" in source:
            env[name] = field_value(pod, str(source["fieldRef"]["fieldPath"]), ctx)
        elif "configMapKeyRef" in source or "secretKeyRef" in source:
            kind = "configmap" if "configMapKeyRef" in source else "secret"
            ref = source.get("configMapKeyRef") or source["secretKeyRef"]
            store = ctx.config_maps if kind == "configmap" else ctx.secrets
            data = _lookup(store, kind, namespace, ref)
            if data is None:
                continue
            key = str(ref["key"])
            if key not in data:
                if ref.get("optional", False):
                    continue
                raise PodConfigError(f"couldn't find key {key} in {kind} {namespace}/{ref['name']}")
            env[name] = data[key]
        else:
            raise PodConfigError(
                f"env {name}: only value, fieldRef, configMapKeyRef and secretKeyRef are supported"
            )
    return env


def container_argv(container: Mapping[str, Any], env: Mapping[str, str]) -> list[str]:
    """``command`` + ``args`` with ``$(VAR)`` expanded. There is no image to supply an
    entrypoint, so ``command`` is required."""
    command = [str(part) for part in container.get("command") or []]
    if not command:
        raise PodConfigError(
            f"container {container.get('name')!r} has no command: the local cluster runs no "
            "images, so every container must name a command that exists on the host"
        )
    args = [str(part) for part in container.get("args") or []]
    return [expand(part, env) for part in command + args]
