"""The recipes: one per image, each its content key's inputs and its build."""

from __future__ import annotations

import json
import runpy
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .cache import BuildError, source_tree
from .tools import (
    Context,
    build_context,
    gcc_version,
    go_build,
    go_module_dir,
    go_version,
    podman_build,
    run,
)

#: ``localcluster/images``: the recipes' own files (the pause key hashes their absolute path,
#: so this stays the folder it was when the builder was one file there).
HERE = Path(__file__).resolve().parents[1]
REPO = HERE.parent.parent


def _local_cluster_versions() -> dict[str, str]:
    """The local cluster's versions and image refs (``elasticjob_localcluster/versions.py``, which
    reads ``localcluster/versions.env``), run by path: importing its package would need the
    project's dependencies, which the system Python this runs on lacks."""
    module = REPO / "localcluster" / "elasticjob_localcluster" / "versions.py"
    found = runpy.run_path(str(module))
    return {name: value for name, value in found.items() if isinstance(value, str)}


VERSIONS = _local_cluster_versions()
K8S_VERSION = VERSIONS["K8S_VERSION"]
ETCD_VERSION = VERSIONS["ETCD_VERSION"]
COREDNS_VERSION = VERSIONS["COREDNS_VERSION"]

BASE_REF = "localhost/elasticjob/python:3.11-bookworm"
TORCH_BASE_REF = "localhost/elasticjob/torch-cpu:py3.11"
# What a python:3.11-slim image holds that minbase lacks, plus `python` and `pip` on PATH.
BASE_PACKAGES = (
    "python3",
    "python3-venv",
    "python3-pip",
    "python-is-python3",
    "ca-certificates",
    "passwd",
    "netbase",
    "tzdata",
    "procps",
)
# Docs, man pages and translations are dropped, as in the slim images.
DPKG_EXCLUDES = (
    "/usr/share/man/*",
    "/usr/share/doc/*",
    "/usr/share/info/*",
    "/usr/share/locale/*",
    "/usr/share/lintian/*",
)
SLIM_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG": "C.UTF-8",
}


@dataclass(frozen=True)
class Recipe:
    """One image: ``key`` computes its content key, ``build`` makes ``ref`` in podman."""

    name: str
    ref: str
    parent: str | None
    exported: bool
    key_inputs: Callable[[Context], tuple[list[str], list[Path], Path]]
    build: Callable[[Context], None]


# pause ------------------------------------------------------------------------


def _pause_source() -> Path:
    return go_module_dir("k8s.io/kubernetes", K8S_VERSION) / "build" / "pause" / "linux"


def pause_inputs(ctx: Context) -> tuple[list[str], list[Path], Path]:
    src = _pause_source()
    return (
        [K8S_VERSION, gcc_version()],
        [src / "pause.c", HERE / "pause" / "Containerfile"],
        Path("/"),
    )


def pause_build(ctx: Context) -> None:
    context = build_context(ctx, "pause")
    version = f"v3.10.1-k8s-{K8S_VERSION}"  # TAG of build/pause/Makefile in that tree
    run(
        [
            "gcc",
            "-Os",
            "-Wall",
            "-Werror",
            "-static",
            f"-DVERSION={version}",
            "-o",
            str(context / "pause"),
            str(_pause_source() / "pause.c"),
        ]
    )
    run(["strip", str(context / "pause")])
    podman_build(ctx, PAUSE.ref, context, HERE / "pause" / "Containerfile")


# base -------------------------------------------------------------------------


def base_inputs(ctx: Context) -> tuple[list[str], list[Path], Path]:
    return ["bookworm", "minbase", *BASE_PACKAGES, *DPKG_EXCLUDES, json.dumps(SLIM_ENV)], [], REPO


def base_build(ctx: Context) -> None:
    work = build_context(ctx, "base")
    rootfs = work / "rootfs.tar"
    cmd = ["mmdebstrap", "--variant=minbase", "--quiet", f"--include={','.join(BASE_PACKAGES)}"]
    cmd += [f"--dpkgopt=path-exclude={p}" for p in DPKG_EXCLUDES]
    cmd += [
        "--dpkgopt=path-include=/usr/share/doc/*/copyright",
        # python:3.11-slim lets pip install into the system; Debian's marker would refuse it.
        '--customize-hook=rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED',
        "bookworm",
        str(rootfs),
    ]
    run(["nice", "-n", "10", *cmd])
    changes: list[str] = []
    for key, value in SLIM_ENV.items():
        changes += ["--change", f"ENV {key}={value}"]
    changes += ["--change", 'CMD ["python3"]']
    ctx.podman("import", *changes, str(rootfs), BASE_REF)
    rootfs.unlink()


# torch base (stands in for a PyTorch base image) -------------------------------


def _locked_version(lock: Path, package: str) -> str:
    for line in lock.read_text().splitlines():
        if line.lower().startswith(f"{package}=="):
            return line.split("==", 1)[1].strip()
    raise BuildError(f"{lock} pins no {package}")


def _torch_versions() -> dict[str, str]:
    lock = REPO / "requirements" / "dev.lock"
    return {
        "TORCH_VERSION": _locked_version(lock, "torch"),
        "NUMPY_VERSION": _locked_version(lock, "numpy"),
    }


def torch_base_inputs(ctx: Context) -> tuple[list[str], list[Path], Path]:
    return [json.dumps(_torch_versions())], [HERE / "torch-base" / "Containerfile"], REPO


def torch_base_build(ctx: Context) -> None:
    context = build_context(ctx, "torch-base")
    podman_build(
        ctx,
        TORCH_BASE_REF,
        context,
        HERE / "torch-base" / "Containerfile",
        build_args={"BASE_IMAGE": BASE_REF, **_torch_versions()},
        extra=ctx.build_options(),
    )


# operator ---------------------------------------------------------------------

OPERATOR_SOURCES = (
    "Dockerfile",
    ".dockerignore",
    "pyproject.toml",
    "README.md",
    "requirements/operator.lock",
    "agent",
    "operator",
)


def operator_inputs(ctx: Context) -> tuple[list[str], list[Path], Path]:
    return [], source_tree(REPO, OPERATOR_SOURCES), REPO


def operator_build(ctx: Context) -> None:
    podman_build(
        ctx,
        OPERATOR.ref,
        REPO,
        REPO / "Dockerfile",
        build_args={"PYTHON_IMAGE": BASE_REF},
        extra=ctx.build_options(),
    )


# training ---------------------------------------------------------------------

TRAINING_SOURCES = (
    "examples/training-image/Dockerfile",
    "examples/train.py",
    "examples/train_dcp.py",
    "examples/train-text.txt",
    "pyproject.toml",
    "README.md",
    "agent",
)


def training_inputs(ctx: Context) -> tuple[list[str], list[Path], Path]:
    return [], source_tree(REPO, TRAINING_SOURCES), REPO


def build_wheel(dest: Path) -> Path:
    """A wheel of this checkout (what the release publishes), into an empty ``dest``."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    with tempfile.TemporaryDirectory() as tmp:
        # A copy without build/ or egg-info leftovers, so the wheel holds exactly the sources.
        src = Path(tmp) / "src"
        for rel in ("pyproject.toml", "README.md", "agent", "operator"):
            source = REPO / rel
            if source.is_dir():
                shutil.copytree(
                    source,
                    src / rel,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"),
                )
            else:
                src.mkdir(exist_ok=True)
                shutil.copy2(source, src / rel)
        run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "--quiet",
                "--no-deps",
                "-w",
                str(dest),
                str(src),
            ]
        )
    wheels = sorted(dest.glob("elasticjob-*.whl"))
    if len(wheels) != 1:
        raise BuildError(f"expected one elasticjob wheel in {dest}, found {wheels}")
    return wheels[0]


def training_build(ctx: Context) -> None:
    context = build_context(ctx, "training")
    (context / "training-image").mkdir()
    shutil.copy2(
        REPO / "examples" / "training-image" / "Dockerfile",
        context / "training-image" / "Dockerfile",
    )
    for name in ("train.py", "train_dcp.py", "train-text.txt"):
        shutil.copy2(REPO / "examples" / name, context / name)
    build_wheel(context / "training-image" / "wheels")
    podman_build(
        ctx,
        TRAINING.ref,
        context,
        context / "training-image" / "Dockerfile",
        build_args={"BASE_IMAGE": TORCH_BASE_REF},
        extra=ctx.build_options(),
    )


# etcd -------------------------------------------------------------------------


def etcd_inputs(ctx: Context) -> tuple[list[str], list[Path], Path]:
    return [ETCD_VERSION, go_version()], [HERE / "etcd" / "Containerfile"], REPO


def _etcd_modules() -> list[str]:
    # go.etcd.io/etcd/v3 (the repository's root module) ties the server, etcdctl and etcdutl
    # modules of one release together; the etcd main itself is go.etcd.io/etcd/server/v3.
    v = ETCD_VERSION
    return [
        f"go.etcd.io/etcd/v3@{v}",
        f"go.etcd.io/etcd/server/v3@{v}",
        f"go.etcd.io/etcd/etcdctl/v3@{v}",
        f"go.etcd.io/etcd/etcdutl/v3@{v}",
    ]


def etcd_release_binary(ctx: Context) -> Path:
    """The etcd server of the image's release as a host binary,
    ``$ELASTICJOB_CACHE/bin/etcd-<version>`` (built once): what the rendezvous benchmark runs
    to measure the etcd the operator deploys (``--etcd-binary``)."""
    binary = ctx.paths.root.parent / "bin" / f"etcd-{ETCD_VERSION}"
    if binary.is_file():
        return binary
    staging = ctx.paths.work / "etcd-release"
    go_build(ctx, "etcd-release", _etcd_modules(), {"etcd": "go.etcd.io/etcd/server/v3"}, staging)
    binary.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(staging / "etcd", binary)
    return binary


def etcd_build(ctx: Context) -> None:
    context = build_context(ctx, "etcd")
    go_build(
        ctx,
        "etcd",
        _etcd_modules(),
        {
            "etcd": "go.etcd.io/etcd/server/v3",
            "etcdctl": "go.etcd.io/etcd/etcdctl/v3",
            "etcdutl": "go.etcd.io/etcd/etcdutl/v3",
        },
        context,
    )
    podman_build(ctx, ETCD.ref, context, HERE / "etcd" / "Containerfile")


# CoreDNS ----------------------------------------------------------------------


def coredns_inputs(ctx: Context) -> tuple[list[str], list[Path], Path]:
    return [COREDNS_VERSION, go_version()], [HERE / "coredns" / "Containerfile"], REPO


def coredns_build(ctx: Context) -> None:
    context = build_context(ctx, "coredns")
    go_build(
        ctx,
        "coredns",
        [f"github.com/coredns/coredns@{COREDNS_VERSION}"],
        {"coredns": "github.com/coredns/coredns"},
        context,
        ldflags="-s -w -X github.com/coredns/coredns/coremain.GitCommit=" + COREDNS_VERSION,
    )
    # As upstream: the non-root user may bind port 53 (the image runs as 65532).
    run(["setcap", "cap_net_bind_service=+ep", str(context / "coredns")])
    shutil.copy2("/etc/ssl/certs/ca-certificates.crt", context / "ca-certificates.crt")
    podman_build(ctx, COREDNS.ref, context, HERE / "coredns" / "Containerfile")


# Prometheus ---------------------------------------------------------------------


def prometheus_inputs(ctx: Context) -> tuple[list[str], list[Path], Path]:
    version = VERSIONS["PROMETHEUS_DEBIAN_VERSION"]
    return [version], [HERE / "prometheus" / "Containerfile"], REPO


def prometheus_build(ctx: Context) -> None:
    context = build_context(ctx, "prometheus")
    podman_build(
        ctx,
        PROMETHEUS.ref,
        context,
        HERE / "prometheus" / "Containerfile",
        build_args={
            "BASE_IMAGE": BASE_REF,
            "PROMETHEUS_DEBIAN_VERSION": VERSIONS["PROMETHEUS_DEBIAN_VERSION"],
        },
    )


PAUSE = Recipe("pause", VERSIONS["PAUSE_IMAGE"], None, True, pause_inputs, pause_build)
BASE = Recipe("base", BASE_REF, None, False, base_inputs, base_build)
TORCH_BASE = Recipe(
    "torch-base", TORCH_BASE_REF, "base", False, torch_base_inputs, torch_base_build
)
OPERATOR = Recipe(
    "operator",
    VERSIONS["OPERATOR_IMAGE"],
    "base",
    True,
    operator_inputs,
    operator_build,
)
TRAINING = Recipe(
    "training",
    VERSIONS["TRAINING_IMAGE"],
    "torch-base",
    True,
    training_inputs,
    training_build,
)
ETCD = Recipe("etcd", VERSIONS["ETCD_IMAGE"], None, True, etcd_inputs, etcd_build)
COREDNS = Recipe(
    "coredns",
    VERSIONS["COREDNS_IMAGE"],
    None,
    True,
    coredns_inputs,
    coredns_build,
)
PROMETHEUS = Recipe(
    "prometheus",
    VERSIONS["PROMETHEUS_IMAGE"],
    "base",
    True,
    prometheus_inputs,
    prometheus_build,
)
# In build order: the pause image first (nodes need it before anything else).
RECIPES = {
    r.name: r for r in (PAUSE, BASE, OPERATOR, TORCH_BASE, TRAINING, ETCD, COREDNS, PROMETHEUS)
}
