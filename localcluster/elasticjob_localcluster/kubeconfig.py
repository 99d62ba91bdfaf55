"""Kubeconfig files (pure rendering)."""

from __future__ import annotations

import base64
import json


def render_kubeconfig(server: str, ca_pem: bytes, user: str, token: str, context: str) -> str:
    """A kubeconfig with one cluster, one token user and one current context.

    JSON is valid YAML, so kubectl, helm and the Kubernetes clients all read it.
    """
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": context,
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca_pem).decode(),
                },
            }
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": context, "context": {"cluster": context, "user": user}}],
        "current-context": context,
    }
    return json.dumps(config, indent=2) + "\n"
