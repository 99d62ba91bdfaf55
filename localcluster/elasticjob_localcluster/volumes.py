"""A pod's volumes as host directories, and its containers' bind mounts."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .kubeapi import ApiError, KubeApi
from .podenv import PodConfigError, PodContext, field_value

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


async def read_config_map(api: KubeApi, namespace: str, name: str) -> dict[str, str] | None:
    """A ConfigMap's ``data``, or None when it does not exist."""
    try:
        body = await api.get(f"/api/v1/namespaces/{namespace}/configmaps/{name}")
    except ApiError as err:
        if err.status == 404:
            return None
        raise
    return {str(k): str(v) for k, v in (body.get("data") or {}).items()}


async def read_secret(api: KubeApi, namespace: str, name: str) -> dict[str, str] | None:
    """A Secret's ``data`` (decoded) plus ``stringData``, or None when it does not exist."""
    try:
        body = await api.get(f"/api/v1/namespaces/{namespace}/secrets/{name}")
    except ApiError as err:
        if err.status == 404:
            return None
        raise
    data = {
        str(k): base64.b64decode(v).decode(errors="replace")
        for k, v in (body.get("data") or {}).items()
    }
    data.update({str(k): str(v) for k, v in (body.get("stringData") or {}).items()})
    return data


async def request_token(
    api: KubeApi, pod: Mapping[str, Any], audience: str | None, expiration: int
) -> str:
    """A token of the pod's ServiceAccount bound to the pod (TokenRequest API)."""
    meta = pod["metadata"]
    account = pod["spec"].get("serviceAccountName") or "default"
    spec: dict[str, Any] = {
        "expirationSeconds": expiration,
        "boundObjectRef": {
            "kind": "Pod",
            "apiVersion": "v1",
            "name": meta["name"],
            "uid": meta["uid"],
        },
    }
    if audience:
        spec["audiences"] = [audience]
    body = await api.request(
        "POST",
        f"/api/v1/namespaces/{meta['namespace']}/serviceaccounts/{account}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec},
    )
    return str(body["status"]["token"])


def _write_items(
    target: Path, data: Mapping[str, str], items: list[Mapping[str, Any]] | None
) -> None:
    target.mkdir(parents=True, exist_ok=True)
    chosen = (
        [(str(i["key"]), str(i.get("path", i["key"]))) for i in items]
        if items
        else [(k, k) for k in data]
    )
    for key, rel in chosen:
        if key not in data:
            raise PodConfigError(f"key {key!r} not found for volume file {rel!r}")
        path = target / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(data[key])


async def prepare_volumes(
    api: KubeApi, pod: Mapping[str, Any], pod_dir: Path, ctx: PodContext, ca_pem: str
) -> dict[str, Path]:
    """Materialise every volume of ``pod``; returns ``volume name -> host path``.

    emptyDir: a directory under ``pod_dir`` (removed with the pod). hostPath: the path itself
    (created for types ``""``/``DirectoryOrCreate``/``FileOrCreate``). configMap, secret and
    projected (serviceAccountToken, configMap, secret, downwardAPI): files written once at pod
    start (later changes are not propagated). Anything else raises :class:`PodConfigError`.
    """
    namespace = str(pod["metadata"]["namespace"])
    paths: dict[str, Path] = {}
    for volume in pod["spec"].get("volumes") or []:
        name = str(volume["name"])
        target = pod_dir / "volumes" / name
        if "emptyDir" in volume:
            target.mkdir(parents=True, exist_ok=True)
        elif "hostPath" in volume:
            target = Path(volume["hostPath"]["path"])
            kind = volume["hostPath"].get("type", "")
            if not target.exists():
                if kind in ("", "DirectoryOrCreate"):
                    target.mkdir(parents=True, exist_ok=True)
                elif kind == "FileOrCreate":
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.touch()
                else:
                    raise PodConfigError(f"hostPath {target} of volume {name!r} does not exist")
        elif "configMap" in volume:
            ref = volume["configMap"]
            data = await read_config_map(api, namespace, str(ref["name"]))
            if data is None and not ref.get("optional", False):
                raise PodConfigError(f'configmap "{ref["name"]}" not found')
            _write_items(target, data or {}, ref.get("items"))
        elif "secret" in volume:
            ref = volume["secret"]
            data = await read_secret(api, namespace, str(ref["secretName"]))
            if data is None and not ref.get("optional", False):
                raise PodConfigError(f'secret "{ref["secretName"]}" not found')
            _write_items(target, data or {}, ref.get("items"))
        elif "projected" in volume:
            target.mkdir(parents=True, exist_ok=True)
            for source in volume["projected"].get("sources") or []:
                await _project(api, pod=pod, source=source, target=target, ctx=ctx, ca_pem=ca_pem)
        else:
            kinds = sorted(k for k in volume if k != "name")
            raise PodConfigError(
                f"volume {name!r}: type {kinds} is not supported by the local cluster"
            )
        paths[name] = target
    return paths


async def _project(
    api: KubeApi,
    *,
    pod: Mapping[str, Any],
    source: Mapping[str, Any],
    target: Path,
    ctx: PodContext,
    ca_pem: str,
) -> None:
    namespace = str(pod["metadata"]["namespace"])
    if "serviceAccountToken" in source:
        sat = source["serviceAccountToken"]
        token = await request_token(
            api, pod, sat.get("audience"), int(sat.get("expirationSeconds", 3607))
        )
        (target / str(sat["path"])).write_text(token)
    elif "configMap" in source:
        ref = source["configMap"]
        data = await read_config_map(api, namespace, str(ref["name"]))
        if data is None and ref["name"] == "kube-root-ca.crt":
            # The controller-manager publishes it a moment after the namespace appears.
            data = {"ca.crt": ca_pem}
        if data is None and not ref.get("optional", False):
            raise PodConfigError(f'configmap "{ref["name"]}" not found')
        _write_items(target, data or {}, ref.get("items"))
    elif "secret" in source:
        ref = source["secret"]
        data = await read_secret(api, namespace, str(ref["name"]))
        if data is None and not ref.get("optional", False):
            raise PodConfigError(f'secret "{ref["name"]}" not found')
        _write_items(target, data or {}, ref.get("items"))
    elif "downwardAPI" in source:
        for item in source["downwardAPI"].get("items") or []:
            if "fieldRef" not in item:
                raise PodConfigError("downwardAPI volumes support fieldRef items only")
            value = field_value(pod, str(item["fieldRef"]["fieldPath"]), ctx)
            (target / str(item["path"])).write_text(value)
    else:
        raise PodConfigError(f"projected source {sorted(source)} is not supported")


def container_mounts(
    container: Mapping[str, Any], volumes: Mapping[str, Path]
) -> list[dict[str, Any]]:
    """The bind mounts of one container, parents before children."""
    mounts: list[dict[str, Any]] = []
    for mount in container.get("volumeMounts") or []:
        name = str(mount["name"])
        if name not in volumes:
            raise PodConfigError(f"volumeMount {name!r} names no volume of the pod")
        source = volumes[name]
        if mount.get("subPath"):
            source = source / str(mount["subPath"])
            if not source.exists():
                source.mkdir(parents=True, exist_ok=True)
        mounts.append(
            {
                "source": str(source),
                "target": str(mount["mountPath"]),
                "read_only": bool(mount.get("readOnly", False)),
            }
        )
    mounts.sort(key=lambda m: len(Path(str(m["target"])).parts))
    return mounts
