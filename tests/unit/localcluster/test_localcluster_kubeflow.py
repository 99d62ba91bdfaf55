"""The pure parts of the Kubeflow peer's set-up (``elasticjob_localcluster.kubeflow``) and the
certificates it makes for the controller's webhook."""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path

import pytest
import yaml
from elasticjob_localcluster.kubeflow import (
    CA_NAME,
    WEBHOOK_CONFIGURATION,
    WEBHOOK_SECRET,
    WEBHOOK_SERVICE_DNS,
    TrainingOperatorError,
    make_certificates,
    operator_argv,
    webhook_configuration,
    webhook_secret,
)

# The shape of the module's manifests/base/webhook/manifests.yaml (two of its six webhooks).
MANIFESTS = """
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: validating-webhook-configuration
webhooks:
- admissionReviewVersions: [v1]
  clientConfig:
    service: {name: webhook-service, namespace: system, path: /validate-kubeflow-org-v1-mxjob}
  failurePolicy: Fail
  name: validator.mxjob.training-operator.kubeflow.org
  rules:
  - {apiGroups: [kubeflow.org], apiVersions: [v1], operations: [CREATE, UPDATE],
     resources: [mxjobs]}
  sideEffects: None
- admissionReviewVersions: [v1]
  clientConfig:
    service: {name: webhook-service, namespace: system, path: /validate-kubeflow-org-v1-pytorchjob}
  failurePolicy: Fail
  name: validator.pytorchjob.training-operator.kubeflow.org
  rules:
  - {apiGroups: [kubeflow.org], apiVersions: [v1], operations: [CREATE, UPDATE],
     resources: [pytorchjobs]}
  sideEffects: None
"""


def test_only_the_served_webhooks_are_kept_and_called_by_url_under_the_rotators_name() -> None:
    docs = list(yaml.safe_load_all(MANIFESTS))
    config = webhook_configuration(docs, base_url="https://10.200.0.1:9443", ca_pem=b"CA")
    assert config["metadata"]["name"] == WEBHOOK_CONFIGURATION
    (hook,) = config["webhooks"]
    assert hook["name"] == "validator.pytorchjob.training-operator.kubeflow.org"
    assert hook["clientConfig"] == {
        "url": "https://10.200.0.1:9443/validate-kubeflow-org-v1-pytorchjob",
        "caBundle": base64.b64encode(b"CA").decode(),
    }
    assert hook["failurePolicy"] == "Fail"  # validated as in a user's cluster
    # The input is not changed.
    assert "service" in docs[0]["webhooks"][1]["clientConfig"]


def test_a_manifest_without_the_schemes_webhook_is_an_error() -> None:
    docs = list(yaml.safe_load_all(MANIFESTS))
    with pytest.raises(TrainingOperatorError, match="no webhook for \\['tfjobs'\\]"):
        webhook_configuration(docs, base_url="https://h:1", ca_pem=b"", schemes=["tfjob"])


def test_the_secret_has_the_rotators_key_names() -> None:
    secret = webhook_secret(ca_crt=b"a", ca_key=b"b", tls_crt=b"c", tls_key=b"d")
    assert secret["metadata"] == {"name": WEBHOOK_SECRET, "namespace": "kubeflow"}
    assert {k: base64.b64decode(v) for k, v in secret["data"].items()} == {
        "ca.crt": b"a", "ca.key": b"b", "tls.crt": b"c", "tls.key": b"d",
    }  # fmt: skip


def test_the_command_line_runs_pytorchjob_only_with_probes_on_loopback() -> None:
    argv = operator_argv(
        Path("/bin/to"), kubeconfig=Path("/k"), webhook_port=1, health_port=2, metrics_port=3
    )
    assert argv == [
        "/bin/to", "--enable-scheme=pytorchjob", "--kubeconfig=/k", "--webhook-server-port=1",
        "--health-probe-bind-address=127.0.0.1:2", "--metrics-bind-address=127.0.0.1:3",
        "--zap-log-level=info",
    ]  # fmt: skip


def _openssl(*args: str) -> str:
    return subprocess.run(["openssl", *args], capture_output=True, text=True, check=True).stdout


def test_the_certificates_are_what_the_rotator_and_the_api_server_accept(tmp_path: Path) -> None:
    make_certificates(tmp_path, ip="10.201.0.1")
    # The rotator checks the CA against its own name (a DNS SAN) and the serving certificate
    # against the Service name; the API server calls the gateway address.
    assert f"DNS:{CA_NAME}" in _openssl("x509", "-in", str(tmp_path / "ca.crt"), "-noout", "-ext",
                                        "subjectAltName")  # fmt: skip
    sans = _openssl("x509", "-in", str(tmp_path / "tls.crt"), "-noout", "-ext", "subjectAltName")
    assert f"DNS:{WEBHOOK_SERVICE_DNS}" in sans and "IP Address:10.201.0.1" in sans
    verified = _openssl(
        "verify", "-CAfile", str(tmp_path / "ca.crt"), "-purpose", "sslserver",
        str(tmp_path / "tls.crt"),
    )  # fmt: skip
    assert verified.strip().endswith("OK")
    # Valid well beyond the rotator's 90-day look-ahead, so it never replaces them.
    assert _openssl("x509", "-in", str(tmp_path / "tls.crt"), "-noout", "-checkend",
                    str(91 * 24 * 3600)).strip() == "Certificate will not expire"  # fmt: skip
    for key in ("ca.key", "tls.key"):
        # PKCS#1, the only form the rotator parses.
        assert (tmp_path / key).read_text().startswith("-----BEGIN RSA PRIVATE KEY-----")
        assert (tmp_path / key).stat().st_mode & 0o077 == 0
