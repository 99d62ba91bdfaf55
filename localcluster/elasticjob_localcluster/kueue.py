"""Kueue in the local cluster: a host process like the controller-manager (docs: shared-clusters).

``localcluster/kueue/build.sh`` builds ``sigs.k8s.io/kueue/cmd/kueue`` into
``$ELASTICJOB_CACHE/kueue/<version>/bin`` and copies its CRDs next to it. :class:`KueueProcess`
applies the CRDs, signs a serving certificate for the webhooks with the cluster's CA, registers
the webhooks by URL (the API server calls ``https://<gateway>:<port>/<path>``), and runs Kueue with
the plain-pod integration for namespaces labelled :data:`MANAGED_NAMESPACE_LABEL`.

The pure parts (:func:`kueue_configuration`, :func:`webhook_configurations`) build the objects;
the class does the I/O. The cluster process owns the Kueue process (``serve --kueue``, or the
control operations ``kueue_start`` / ``kueue_stop`` that ``LocalCluster.start_kueue`` and
``LocalCluster.stop_kueue`` send), so it dies with the cluster.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import functools
import json
import os
import shutil
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from elasticjob_agent.ports import free_port

from .config import cache_dir, run_cached_build, tool_path
from .openssl import openssl
from .versions import KUEUE_VERSION

#: Namespaces with this label (value ``"true"``) are managed by Kueue's plain-pod integration;
#: the pod webhooks are registered for them only, so other namespaces never depend on Kueue.
MANAGED_NAMESPACE_LABEL = "kueue.elasticjob.dev/managed"
KUEUE_NAMESPACE = "kueue-system"
MUTATING_NAME = "elasticjob-local-kueue-mutating"
VALIDATING_NAME = "elasticjob-local-kueue-validating"
#: Kueue reads its metrics serving certificate from this fixed path when its internal
#: certificate management is off; the process gets a private mount namespace with the cluster's
#: own directory bound there (the host path is only an empty mount point).
METRICS_CERT_MOUNT = Path("/etc/kueue")


class KueueError(RuntimeError):
    """Kueue is not built, did not start, or did not become ready."""


def kueue_dir() -> Path:
    version = os.environ.get("ELASTICJOB_KUEUE_VERSION", KUEUE_VERSION)
    return cache_dir() / "kueue" / version


def build_kueue() -> Path:
    """Run ``localcluster/kueue/build.sh`` (a no-op when built); returns the cache directory."""
    run_cached_build("kueue", KueueError)
    return kueue_dir()


# -- pure builders -------------------------------------------------------------------------------


def kueue_configuration(
    *,
    webhook_host: str,
    webhook_port: int,
    cert_dir: Path,
    health_port: int,
    metrics_port: int,
) -> dict[str, Any]:
    """Kueue's ``Configuration``: plain pods only, in labelled namespaces; no leader election
    (one process); certificates provided (internal certificate management off)."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": KUEUE_NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
        "webhook": {"host": webhook_host, "port": webhook_port, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "manageJobsWithoutQueueName": False,
        "managedJobsNamespaceSelector": {"matchLabels": {MANAGED_NAMESPACE_LABEL: "true"}},
        "integrations": {"frameworks": ["pod"]},
        "clientConnection": {"qps": 50, "burst": 100},
    }


def _served(webhook: Mapping[str, Any]) -> bool:
    """Kueue serves (with only the pod framework on) the webhooks of its own API and of pods."""
    for rule in webhook.get("rules") or []:
        if "kueue.x-k8s.io" in (rule.get("apiGroups") or []):
            return True
        if rule.get("apiGroups") == [""] and "pods" in (rule.get("resources") or []):
            return True
    return False


def webhook_configurations(
    manifests: Iterable[Mapping[str, Any]], *, base_url: str, ca_pem: bytes
) -> list[dict[str, Any]]:
    """Kueue's webhook configurations (``config/components/webhook/manifests.yaml``) rewritten
    for a host process: only the webhooks it serves, called by ``url`` under ``base_url`` with the
    cluster CA as ``caBundle``; the pod webhooks only for namespaces labelled
    :data:`MANAGED_NAMESPACE_LABEL`."""
    names = {
        "MutatingWebhookConfiguration": MUTATING_NAME,
        "ValidatingWebhookConfiguration": VALIDATING_NAME,
    }
    ca_bundle = base64.b64encode(ca_pem).decode()
    result = []
    for doc in manifests:
        kind = doc.get("kind")
        if kind not in names:
            continue
        hooks = []
        for hook in doc.get("webhooks") or []:
            if not _served(hook):
                continue
            ours = copy.deepcopy(dict(hook))
            path = ours["clientConfig"]["service"]["path"]
            ours["clientConfig"] = {"url": base_url + path, "caBundle": ca_bundle}
            if any("pods" in (r.get("resources") or []) for r in ours.get("rules") or []):
                ours["namespaceSelector"] = {"matchLabels": {MANAGED_NAMESPACE_LABEL: "true"}}
            ours["timeoutSeconds"] = 10
            hooks.append(ours)
        result.append(
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": kind,
                "metadata": {"name": names[str(kind)]},
                "webhooks": hooks,
            }
        )
    return result


# -- the process ---------------------------------------------------------------------------------


_openssl = functools.partial(openssl, error=KueueError)


def sign_serving_cert(directory: Path, *, ca_cert: Path, ca_key: Path, ip: str) -> None:
    """``tls.crt``/``tls.key`` in ``directory`` for ``ip`` (and 127.0.0.1), signed by the CA."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "san.ext").write_text(
        f"subjectAltName=IP:{ip},IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"
        "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
    )
    _openssl(
        "req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", "tls.key", "-out", "tls.csr",
        "-subj", "/CN=kueue-webhook", cwd=directory,
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", "tls.csr", "-CA", str(ca_cert), "-CAkey", str(ca_key),
        "-CAcreateserial", "-CAserial", "ca.srl", "-days", "365", "-out", "tls.crt",
        "-extfile", "san.ext", cwd=directory,
    )  # fmt: skip
    (directory / "tls.key").chmod(0o600)


@dataclass
class KueueProcess:
    """One cluster's Kueue. ``state_dir`` is the cluster's; Kueue keeps its files in
    ``<state_dir>/kueue`` and logs to ``<state_dir>/logs/kueue.log``."""

    state_dir: Path
    kubeconfig: Path
    host: str
    """The address the API server reaches the webhooks on (the bridge gateway)."""
    ca_cert: Path
    ca_key: Path
    proc: subprocess.Popen[bytes] | None = None
    health_port: int = 0

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _kubectl(self, *args: str, input: str | None = None) -> str:
        done = subprocess.run(
            [str(tool_path("kubectl")), f"--kubeconfig={self.kubeconfig}", *args],
            capture_output=True, text=True, input=input, timeout=120, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise KueueError(f"kubectl {' '.join(args[:3])}: {done.stderr.strip()}")
        return done.stdout

    def start(self, timeout: float = 120) -> dict[str, Any]:
        """Build (if needed), install the CRDs and webhooks, start Kueue, wait until ready."""
        if self.running:
            return self.info()
        built = build_kueue()
        binary = built / "bin" / "kueue"
        work = self.state_dir / "kueue"
        shutil.rmtree(work, ignore_errors=True)
        certs = work / "certs"
        sign_serving_cert(certs, ca_cert=self.ca_cert, ca_key=self.ca_key, ip=self.host)
        metrics_certs = work / "etc" / "metrics" / "certs"
        metrics_certs.mkdir(parents=True)
        for name in ("tls.crt", "tls.key"):
            shutil.copy(certs / name, metrics_certs / name)

        self._kubectl("apply", "--server-side", "--force-conflicts", "-f", str(built / "crds"))
        self._kubectl(
            "wait", "--for=condition=Established", "--timeout=60s", "-f", str(built / "crds")
        )
        self._kubectl(
            "apply", "-f", "-",
            input=json.dumps({"apiVersion": "v1", "kind": "Namespace",
                              "metadata": {"name": KUEUE_NAMESPACE}}),
        )  # fmt: skip

        webhook_port = free_port(self.host)
        self.health_port = free_port("127.0.0.1")
        config = kueue_configuration(
            webhook_host=self.host,
            webhook_port=webhook_port,
            cert_dir=certs,
            health_port=self.health_port,
            metrics_port=free_port("127.0.0.1"),
        )
        (work / "config.yaml").write_text(yaml.safe_dump(config))
        module_manifests = _module_webhook_manifests(built)
        hooks = webhook_configurations(
            module_manifests,
            base_url=f"https://{self.host}:{webhook_port}",
            ca_pem=self.ca_cert.read_bytes(),
        )
        self._kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                             "items": hooks}))  # fmt: skip

        METRICS_CERT_MOUNT.mkdir(parents=True, exist_ok=True)
        logs = self.state_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        # A private mount namespace: Kueue reads its metrics certificate from /etc/kueue.
        script = f'mount --bind "{work / "etc"}" "{METRICS_CERT_MOUNT}" && exec "$0" "$@"'
        argv = [
            "setpriv", "--pdeathsig", "KILL", "--",
            "unshare", "--mount", "--propagation", "private", "--",
            "sh", "-c", script, str(binary),
            f"--config={work / 'config.yaml'}",
            f"--kubeconfig={self.kubeconfig}",
            "--feature-gates=VisibilityOnDemand=false",
            "--zap-log-level=info",
        ]  # fmt: skip
        with (logs / "kueue.log").open("ab") as out:
            self.proc = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        self._wait_ready(timeout)
        info = self.info()
        (work / "kueue.json").write_text(json.dumps(info, indent=2))
        return info

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise KueueError(f"kueue exited with {self.proc.returncode}: {self._log_tail()}")
            try:
                url = f"http://127.0.0.1:{self.health_port}/readyz"
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        break
            except (urllib.error.URLError, OSError) as err:
                last = str(err)
            time.sleep(0.3)
        else:
            self.stop()
            raise KueueError(f"kueue not ready after {timeout:.0f} s ({last}): {self._log_tail()}")
        # Ready means listening; the webhook must also answer the API server over TLS.
        context = ssl.create_default_context(cafile=str(self.ca_cert))
        webhook = yaml.safe_load((self.state_dir / "kueue" / "config.yaml").read_text())["webhook"]
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(
                    f"https://{webhook['host']}:{webhook['port']}/healthz",
                    context=context,
                    timeout=2,
                ):
                    return
            except urllib.error.HTTPError:
                return  # TLS handshake done: the server answers (404 for an unknown path)
            except (urllib.error.URLError, OSError) as err:
                last = str(err)
            time.sleep(0.3)
        self.stop()
        raise KueueError(f"kueue webhook not reachable over TLS: {last}")

    def _log_tail(self) -> str:
        path = self.state_dir / "logs" / "kueue.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def info(self) -> dict[str, Any]:
        return {
            "version": kueue_dir().name,
            "pid": self.proc.pid if self.proc is not None else 0,
            "managed_namespace_label": MANAGED_NAMESPACE_LABEL,
            "log": str(self.state_dir / "logs" / "kueue.log"),
        }

    def control_ops(self) -> dict[str, Callable[[dict[str, Any]], Awaitable[Any]]]:
        """Handlers of the cluster process's control socket: ``kueue_start`` (idempotent, returns
        :meth:`info`), ``kueue_stop`` and ``kueue_running``. PR_SET_PDEATHSIG fires when the
        starting *thread* ends, so start and stop run in the loop's long-lived executor."""

        async def start(_req: dict[str, Any]) -> Any:
            return await asyncio.to_thread(self.start)

        async def stop(_req: dict[str, Any]) -> Any:
            await asyncio.to_thread(self.stop)
            return None

        async def running(_req: dict[str, Any]) -> Any:
            return self.running

        return {"kueue_start": start, "kueue_stop": stop, "kueue_running": running}

    def stop(self, timeout: float = 10) -> None:
        """SIGTERM, SIGKILL after ``timeout``. The webhook configurations stay registered, as
        they would when Kueue's Deployment is down: pod creation in managed namespaces fails."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _module_webhook_manifests(built: Path) -> list[dict[str, Any]]:
    """The webhook manifests of the Kueue version built (build.sh copies them from the module)."""
    path = built / "webhook" / "manifests.yaml"
    return [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]
