"""The tools the recipes run: a command runner, podman (its own configuration and storage) and
Go's and gcc's command lines; :class:`Context` is what every recipe may use."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .cache import BuildError, Paths

CONTAINERS_CONF = """\
# podman here: the shell cannot raise its limits, crun refuses cgroup v1 hybrid, no systemd.
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
"""


def podman_env(paths: Paths) -> dict[str, str]:
    """The environment for podman: our own containers.conf (:data:`CONTAINERS_CONF`) and
    storage under ``paths.podman``."""
    conf_dir = paths.podman
    conf_dir.mkdir(parents=True, exist_ok=True)
    containers = conf_dir / "containers.conf"
    storage = conf_dir / "storage.conf"
    _write_if_changed(containers, CONTAINERS_CONF)
    _write_if_changed(
        storage,
        "[storage]\n"
        'driver = "overlay"\n'
        f'graphroot = "{conf_dir / "storage"}"\n'
        f'runroot = "{conf_dir / "run"}"\n',
    )
    env = dict(os.environ)
    env["CONTAINERS_CONF"] = str(containers)
    env["CONTAINERS_STORAGE_CONF"] = str(storage)
    return env


def _write_if_changed(path: Path, text: str) -> None:
    if not path.is_file() or path.read_text() != text:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(path)


def run(cmd: Sequence[str], *, env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
    """Run a command; its stdout on success, a BuildError with its output tail on failure."""
    proc = subprocess.run(list(cmd), env=env, cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-40:])
        raise BuildError(f"{' '.join(cmd[:4])} ... failed ({proc.returncode}):\n{tail}")
    return proc.stdout


@dataclass
class Context:
    """What every recipe may use: paths, podman's environment, the build-time CA option."""

    paths: Paths
    env: dict[str, str]
    ca_bundle: Path | None
    keys: dict[str, str] = field(default_factory=dict)
    timings: list[tuple[str, str, float]] = field(default_factory=list)

    def podman(self, *args: str) -> str:
        return run(["podman", *args], env=self.env)

    def image_exists(self, ref: str) -> bool:
        proc = subprocess.run(
            ["podman", "image", "exists", ref], env=self.env, capture_output=True, check=False
        )
        return proc.returncode == 0

    def image_id(self, ref: str) -> str:
        return "sha256:" + self.podman("image", "inspect", "--format", "{{.Id}}", ref).strip()

    def build_options(self) -> list[str]:
        """Build-time only, nothing of it lands in an image: pip (Debian's, and the one in a
        venv, both read the system bundle) trusts this machine's CA bundle, as builds behind a
        TLS-intercepting proxy must. Mounted over the base's own bundle, so the mount point
        exists and the committed layer keeps the base's file."""
        if self.ca_bundle is None:
            return []
        return [f"--volume={self.ca_bundle}:/etc/ssl/certs/ca-certificates.crt:ro"]


def gcc_version() -> str:
    return run(["gcc", "-dumpfullversion"]).strip()


def go_module_dir(module: str, version: str) -> Path:
    out = run(["go", "mod", "download", "-json", f"{module}@{version}"], env=go_env())
    return Path(json.loads(out)["Dir"])


def go_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update({"GOTOOLCHAIN": "local", "CGO_ENABLED": "0", "GOFLAGS": "-buildvcs=false"})
    return env


def go_build(
    ctx: Context,
    name: str,
    requires: Sequence[str],
    mains: dict[str, str],
    out: Path,
    *,
    ldflags: str = "-s -w",
) -> None:
    """Build Go mains of published modules (from the module proxy): ``out/<binary>`` for each
    ``{binary: package}`` of ``mains``, statically (no cgo)."""
    work = ctx.paths.work / f"go-{name}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    env = go_env()
    run(["go", "mod", "init", f"elasticjob.dev/images/{name}"], env=env, cwd=work)
    run(["go", "get", *requires], env=env, cwd=work)
    out.mkdir(parents=True, exist_ok=True)
    for binary, package in mains.items():
        run(
            [
                "nice",
                "-n",
                "10",
                "go",
                "build",
                "-trimpath",
                "-ldflags",
                ldflags,
                "-o",
                str(out / binary),
                package,
            ],
            env=env,
            cwd=work,
        )


def build_context(ctx: Context, name: str) -> Path:
    context = ctx.paths.work / f"context-{name}"
    shutil.rmtree(context, ignore_errors=True)
    context.mkdir(parents=True)
    return context


def podman_build(
    ctx: Context,
    ref: str,
    context: Path,
    containerfile: Path,
    *,
    build_args: dict[str, str] | None = None,
    extra: Sequence[str] = (),
) -> None:
    args = ["build", "--pull=never", "--tag", ref, "--file", str(containerfile)]
    for key, value in (build_args or {}).items():
        args.append(f"--build-arg={key}={value}")
    args.extend(extra)
    args.append(str(context))
    ctx.podman(*args)


def go_version() -> str:
    return run(["go", "env", "GOVERSION"], env=go_env()).strip()
