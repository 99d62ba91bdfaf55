"""Kubeflow's training operator on the local cluster, as a peer for benchmarks only.

``localcluster/kubeflow/build.sh`` builds ``github.com/kubeflow/training-operator`` (main package
``./cmd/training-operator.v1``) into ``$ELASTICJOB_CACHE/kubeflow/<version>/bin`` and copies its
CRDs and webhook manifests next to it. :class:`TrainingOperator` runs it as a host process, like
Kueue (:mod:`.kueue`), with the PyTorchJob scheme only. The product never depends on it.

Its webhook stays on, with certificates we provide. The controller's certificate rotator
(``cert-controller``) insists on three things before it starts any controller: the Secret
``kubeflow/training-operator-webhook-cert`` holding a CA and a serving certificate it accepts,
the certificate files in ``/tmp/k8s-webhook-server/serving-certs`` (a pod gets them mounted from
the Secret), and the ValidatingWebhookConfiguration ``validator.training-operator.kubeflow.org``
to inject the CA into. So: a throwaway CA signs a serving certificate for both the Service name
the rotator checks (``training-operator.kubeflow.svc``) and the bridge gateway the API server
calls; the Secret holds them (the rotator finds them valid and keeps them); the process gets a
private mount namespace with the files bound on that fixed path; and the webhook configuration
calls ``https://<gateway>:<port>/validate-kubeflow-org-v1-pytorchjob`` by URL. PyTorchJobs are
therefore validated as in a user's cluster.

The pure parts (:func:`webhook_configuration`, :func:`webhook_secret`, :func:`operator_argv`)
build the objects; the class does the I/O and is owned by the process that starts it (a test
fixture, a benchmark): it dies with that process.
"""

from __future__ import annotations

import base64
import copy
import functools
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml
from elasticjob_agent.ports import free_port

from . import versions
from .config import cache_dir, run_cached_build, tool_path
from .handle import LocalCluster
from .openssl import openssl

#: The release ``localcluster/kubeflow/build.sh`` builds (the benchmarks name it here).
KUBEFLOW_VERSION = versions.KUBEFLOW_VERSION
#: The controller's namespace when ``MY_POD_NAMESPACE`` is unset (its certificate Secret is here).
KUBEFLOW_NAMESPACE = "kubeflow"
#: Names the controller's certificate rotator looks for (``pkg/cert/cert.go``).
WEBHOOK_CONFIGURATION = "validator.training-operator.kubeflow.org"
WEBHOOK_SECRET = "training-operator-webhook-cert"
WEBHOOK_SERVICE_DNS = "training-operator.kubeflow.svc"
CA_NAME = "training-operator-ca"
#: controller-runtime's default certificate directory; the controller has no flag to move it.
CERT_MOUNT = Path("/tmp/k8s-webhook-server/serving-certs")
#: The schemes (job kinds) the benchmarks need; the controller runs only these.
SCHEMES = ("pytorchjob",)


class TrainingOperatorError(RuntimeError):
    """The training operator is not built, did not start, or did not become ready."""


def kubeflow_dir() -> Path:
    version = os.environ.get("ELASTICJOB_KUBEFLOW_VERSION", KUBEFLOW_VERSION)
    return cache_dir() / "kubeflow" / version


def build_training_operator() -> Path:
    """Run ``localcluster/kubeflow/build.sh`` (a no-op when built); returns the cache directory."""
    run_cached_build("kubeflow", TrainingOperatorError)
    return kubeflow_dir()


# -- pure builders -------------------------------------------------------------------------------


def webhook_configuration(
    manifests: Iterable[Mapping[str, Any]],
    *,
    base_url: str,
    ca_pem: bytes,
    schemes: Iterable[str] = SCHEMES,
) -> dict[str, Any]:
    """The module's ValidatingWebhookConfiguration (``manifests/base/webhook/manifests.yaml``)
    under the name the rotator injects its CA into, keeping only the webhooks of ``schemes``
    (the others have no server behind them), each called by ``url`` under ``base_url``."""
    wanted = {f"{s.lower()}s" for s in schemes}
    hooks = []
    for doc in manifests:
        if doc.get("kind") != "ValidatingWebhookConfiguration":
            continue
        for hook in doc.get("webhooks") or []:
            resources = {r for rule in hook.get("rules") or [] for r in rule.get("resources") or []}
            if not resources & wanted:
                continue
            ours = copy.deepcopy(dict(hook))
            path = ours["clientConfig"]["service"]["path"]
            ours["clientConfig"] = {
                "url": base_url + path,
                "caBundle": base64.b64encode(ca_pem).decode(),
            }
            ours["timeoutSeconds"] = 10
            hooks.append(ours)
    if not hooks:
        raise TrainingOperatorError(f"no webhook for {sorted(wanted)} in the module's manifests")
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": WEBHOOK_CONFIGURATION},
        "webhooks": hooks,
    }


def webhook_secret(
    *, ca_crt: bytes, ca_key: bytes, tls_crt: bytes, tls_key: bytes
) -> dict[str, Any]:
    """The Secret the rotator reads (its key names: ``ca.crt``, ``ca.key``, ``tls.crt``,
    ``tls.key``)."""
    data = {"ca.crt": ca_crt, "ca.key": ca_key, "tls.crt": tls_crt, "tls.key": tls_key}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": WEBHOOK_SECRET, "namespace": KUBEFLOW_NAMESPACE},
        "type": "Opaque",
        "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
    }


def operator_argv(
    binary: Path, *, kubeconfig: Path, webhook_port: int, health_port: int, metrics_port: int
) -> list[str]:
    """The controller's command line: the schemes of :data:`SCHEMES`, no leader election (one
    process), probes and metrics on loopback, the webhook on every address (the API server calls
    it on the gateway)."""
    return [
        str(binary),
        *(f"--enable-scheme={s}" for s in SCHEMES),
        f"--kubeconfig={kubeconfig}",
        f"--webhook-server-port={webhook_port}",
        f"--health-probe-bind-address=127.0.0.1:{health_port}",
        f"--metrics-bind-address=127.0.0.1:{metrics_port}",
        "--zap-log-level=info",
    ]


# -- certificates --------------------------------------------------------------------------------


_openssl = functools.partial(openssl, error=TrainingOperatorError)


def make_certificates(directory: Path, *, ip: str) -> None:
    """``ca.crt``/``ca.key`` (a CA the rotator accepts: its name is a DNS SAN, since Go checks
    names against SANs only) and ``tls.crt``/``tls.key`` for the Service name and ``ip``, valid
    ten years (the rotator renews what expires within 90 days)."""
    directory.mkdir(parents=True, exist_ok=True)
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650",
        "-keyout", "ca.key", "-out", "ca.crt",
        "-subj", f"/O=training-operator/CN={CA_NAME}",
        "-addext", f"subjectAltName=DNS:{CA_NAME}",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,digitalSignature,keyEncipherment",
        cwd=directory,
    )  # fmt: skip
    (directory / "san.ext").write_text(
        f"subjectAltName=DNS:{WEBHOOK_SERVICE_DNS},IP:{ip},IP:127.0.0.1\n"
        "extendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n"
        "keyUsage=digitalSignature,keyEncipherment\n"
    )
    _openssl(
        "req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", "tls.key", "-out", "tls.csr",
        "-subj", f"/O=training-operator/CN={WEBHOOK_SERVICE_DNS}", cwd=directory,
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-CAserial", "ca.srl", "-days", "3650", "-out", "tls.crt",
        "-extfile", "san.ext", cwd=directory,
    )  # fmt: skip
    for key in ("ca.key", "tls.key"):
        # The rotator parses keys as PKCS#1 only (x509.ParsePKCS1PrivateKey); OpenSSL 3 writes
        # PKCS#8 by default.
        _openssl("rsa", "-in", key, "-out", key, "-traditional", cwd=directory)
        (directory / key).chmod(0o600)


# -- the process ---------------------------------------------------------------------------------


@dataclass
class TrainingOperator:
    """One cluster's training operator: files in ``<state_dir>/kubeflow``, log in
    ``<state_dir>/logs/training-operator.log``. A context manager: ``with
    TrainingOperator.for_cluster(cluster) as op: ...`` starts it and stops it."""

    state_dir: Path
    kubeconfig: Path
    host: str
    """The address the API server reaches the webhook on (the bridge gateway)."""
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    proc: subprocess.Popen[bytes] | None = None
    health_port: int = 0

    @classmethod
    def for_cluster(cls, cluster: LocalCluster) -> TrainingOperator:
        return cls(
            state_dir=cluster.config.state_dir,
            kubeconfig=cluster.kubeconfig,
            host=str(cluster.info["gateway"]),
            env=cluster.env,
        )

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def log_path(self) -> Path:
        return self.state_dir / "logs" / "training-operator.log"

    def _kubectl(self, *args: str, input: str | None = None, check: bool = True) -> str:
        done = subprocess.run(
            [str(tool_path("kubectl")), f"--kubeconfig={self.kubeconfig}", *args],
            capture_output=True, text=True, input=input, timeout=120, check=False,
        )  # fmt: skip
        if check and done.returncode != 0:
            raise TrainingOperatorError(f"kubectl {' '.join(args[:3])}: {done.stderr.strip()}")
        return done.stdout

    def _apply(self, obj: Mapping[str, Any]) -> None:
        self._kubectl("apply", "-f", "-", input=json.dumps(obj))

    def start(self, timeout: float = 120) -> TrainingOperator:
        """Build (if needed), install the CRDs, the certificate Secret and the webhook, start the
        controller and wait until it is ready (certificates accepted, webhook serving)."""
        if self.running:
            return self
        built = build_training_operator()
        work = self.state_dir / "kubeflow"
        shutil.rmtree(work, ignore_errors=True)
        certs = work / "certs"
        make_certificates(certs, ip=self.host)

        crds = built / "crds"
        self._kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crds))
        self._kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", str(crds))
        self._apply({"apiVersion": "v1", "kind": "Namespace",
                     "metadata": {"name": KUBEFLOW_NAMESPACE}})  # fmt: skip
        self._apply(
            webhook_secret(
                ca_crt=(certs / "ca.crt").read_bytes(),
                ca_key=(certs / "ca.key").read_bytes(),
                tls_crt=(certs / "tls.crt").read_bytes(),
                tls_key=(certs / "tls.key").read_bytes(),
            )
        )
        webhook_port = free_port(self.host)
        manifests = [
            d
            for d in yaml.safe_load_all((built / "webhook" / "manifests.yaml").read_text())
            if isinstance(d, dict)
        ]
        self._apply(
            webhook_configuration(
                manifests,
                base_url=f"https://{self.host}:{webhook_port}",
                ca_pem=(certs / "ca.crt").read_bytes(),
            )
        )

        self.health_port = free_port("127.0.0.1")
        argv = operator_argv(
            built / "bin" / "training-operator",
            kubeconfig=self.kubeconfig,
            webhook_port=webhook_port,
            health_port=self.health_port,
            metrics_port=free_port("127.0.0.1"),
        )
        CERT_MOUNT.mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        # A private mount namespace: the controller reads its serving certificate from the fixed
        # CERT_MOUNT, which must not be shared by clusters running side by side.
        script = f'mount --bind "{certs}" "{CERT_MOUNT}" && exec "$0" "$@"'
        wrapped = [
            "setpriv", "--pdeathsig", "KILL", "--",
            "unshare", "--mount", "--propagation", "private", "--",
            "sh", "-c", script, *argv,
        ]  # fmt: skip
        with self.log_path.open("ab") as out:
            self.proc = subprocess.Popen(
                wrapped,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**self.env, "KUBECONFIG": str(self.kubeconfig)},
            )
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise TrainingOperatorError(
                    f"training-operator exited with {self.proc.returncode}: {self.log_tail()}"
                )
            try:
                url = f"http://127.0.0.1:{self.health_port}/readyz"
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError) as err:
                last = str(err)
            time.sleep(0.5)
        raise TrainingOperatorError(
            f"training-operator not ready after {timeout:.0f} s ({last}): {self.log_tail()}"
        )

    def log_tail(self, chars: int = 3000) -> str:
        path = self.log_path
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""

    def stop(self, timeout: float = 10) -> None:
        """SIGTERM, SIGKILL after ``timeout``; then the webhook configuration is removed, so
        the cluster accepts PyTorchJobs (unvalidated, unreconciled) as when the CRD alone is
        installed. The CRDs and the namespace stay."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._kubectl(
            "delete", "validatingwebhookconfiguration", WEBHOOK_CONFIGURATION,
            "--ignore-not-found", check=False,
        )  # fmt: skip

    def __enter__(self) -> TrainingOperator:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
