"""Build the local cluster's container images without a registry, each cached by its content.

Every image is a recipe: its inputs (recipe files, the sources it copies, versions, build
arguments and the key of the image it starts from) hash to a key. An image whose recorded key
equals the new key (and whose archive is on disk) is not built again, so a second run builds
nothing. Images that nodes run are saved as docker-archive tarballs and listed in
``$ELASTICJOB_CACHE/images/index.json`` (the image contract in docs/packaging.md):
``[{"ref": ..., "archive": ..., "id": "sha256:<image config digest>"}]``, replaced atomically.

Standard library only: ``localcluster/images/build.sh`` runs it with the system Python after
installing podman, runc, mmdebstrap and the rest from Debian.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import re
import runpy
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
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
# Bumped when a recipe changes in a way its hashed inputs do not show (e.g. this file's logic).
RECIPE_EPOCH = "1"

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

CONTAINERS_CONF = """\
# podman here: the shell cannot raise its limits, crun refuses cgroup v1 hybrid, no systemd.
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
"""


def log(message: str) -> None:
    print(f"images: {message}", file=sys.stderr, flush=True)


class BuildError(RuntimeError):
    """A step of an image build failed; the message names the step and its output."""


@dataclass(frozen=True)
class Paths:
    """Where the builds keep their state, all under ``$ELASTICJOB_CACHE/images``."""

    root: Path

    @property
    def index(self) -> Path:
        return self.root / "index.json"

    @property
    def archives(self) -> Path:
        return self.root / "archives"

    @property
    def state(self) -> Path:
        return self.root / "state"

    @property
    def work(self) -> Path:
        return self.root / "work"

    @property
    def podman(self) -> Path:
        return self.root / "podman"

    def archive(self, name: str) -> Path:
        return self.archives / f"{name}.tar"


def default_paths() -> Paths:
    cache = Path(os.environ.get("ELASTICJOB_CACHE", Path.home() / ".cache" / "elasticjob"))
    return Paths(cache / "images")


def podman_env(paths: Paths) -> dict[str, str]:
    """The environment for podman: our own containers.conf and storage (see the module doc)."""
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


# ---------------------------------------------------------------- content keys


def hash_files(digest: hashlib._Hash, files: Iterable[Path], root: Path) -> None:
    """Feed each file's path (relative to root) and bytes into the digest, in sorted order."""
    for path in sorted(files):
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")


def source_tree(root: Path, parts: Sequence[str]) -> list[Path]:
    """The files under root/parts that a build copies (no caches, no build output)."""
    skip = re.compile(r"(__pycache__|\.pyc$|\.egg-info|/build/|\.mypy_cache)")
    files: list[Path] = []
    for part in parts:
        base = root / part
        if base.is_file():
            files.append(base)
            continue
        for path in base.rglob("*"):
            if path.is_file() and not skip.search(str(path.relative_to(root))):
                files.append(path)
    return files


def recipe_key(*, name: str, inputs: Sequence[str], files: Iterable[Path], root: Path) -> str:
    digest = hashlib.sha256()
    digest.update(f"{RECIPE_EPOCH}\0{name}\0".encode())
    for item in inputs:
        digest.update(item.encode() + b"\0")
    hash_files(digest, files, root)
    return digest.hexdigest()


# ---------------------------------------------------------------- the index


def read_index(paths: Paths) -> list[dict[str, str]]:
    if not paths.index.is_file():
        return []
    entries = json.loads(paths.index.read_text())
    if not isinstance(entries, list):
        raise BuildError(f"{paths.index} must hold a JSON list; delete it to start over")
    return entries


def put_index_entry(paths: Paths, ref: str, archive: Path, image_id: str) -> None:
    """Replace the entry of ``ref`` (or add it) and rename the new index into place."""
    entries = [e for e in read_index(paths) if e.get("ref") != ref]
    entries.append({"ref": ref, "archive": str(archive), "id": image_id})
    entries.sort(key=lambda e: e["ref"])
    tmp = paths.index.with_name("index.json.tmp")
    tmp.write_text(json.dumps(entries, indent=2) + "\n")
    tmp.replace(paths.index)


@dataclass(frozen=True)
class State:
    key: str
    image_id: str


def read_state(paths: Paths, name: str) -> State | None:
    path = paths.state / f"{name}.json"
    if not path.is_file():
        return None
    raw = json.loads(path.read_text())
    return State(key=str(raw["key"]), image_id=str(raw["id"]))


def write_state(paths: Paths, name: str, state: State) -> None:
    paths.state.mkdir(parents=True, exist_ok=True)
    path = paths.state / f"{name}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"key": state.key, "id": state.image_id}) + "\n")
    tmp.replace(path)


# ---------------------------------------------------------------- recipes


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


@dataclass(frozen=True)
class Recipe:
    """One image: ``key`` computes its content key, ``build`` makes ``ref`` in podman."""

    name: str
    ref: str
    parent: str | None
    exported: bool
    key_inputs: Callable[[Context], tuple[list[str], list[Path], Path]]
    build: Callable[[Context], None]


def _gcc_version() -> str:
    return run(["gcc", "-dumpfullversion"]).strip()


def _go_module_dir(module: str, version: str) -> Path:
    out = run(["go", "mod", "download", "-json", f"{module}@{version}"], env=_go_env())
    return Path(json.loads(out)["Dir"])


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update({"GOTOOLCHAIN": "local", "CGO_ENABLED": "0", "GOFLAGS": "-buildvcs=false"})
    return env


def _go_build(
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
    env = _go_env()
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


def _build_context(ctx: Context, name: str) -> Path:
    context = ctx.paths.work / f"context-{name}"
    shutil.rmtree(context, ignore_errors=True)
    context.mkdir(parents=True)
    return context


def _podman_build(
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


# pause ------------------------------------------------------------------------


def _pause_source() -> Path:
    return _go_module_dir("k8s.io/kubernetes", K8S_VERSION) / "build" / "pause" / "linux"


def pause_inputs(ctx: Context) -> tuple[list[str], list[Path], Path]:
    src = _pause_source()
    return (
        [K8S_VERSION, _gcc_version()],
        [src / "pause.c", HERE / "pause" / "Containerfile"],
        Path("/"),
    )


def pause_build(ctx: Context) -> None:
    context = _build_context(ctx, "pause")
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
    _podman_build(ctx, PAUSE.ref, context, HERE / "pause" / "Containerfile")


# base -------------------------------------------------------------------------


def base_inputs(ctx: Context) -> tuple[list[str], list[Path], Path]:
    return ["bookworm", "minbase", *BASE_PACKAGES, *DPKG_EXCLUDES, json.dumps(SLIM_ENV)], [], REPO


def base_build(ctx: Context) -> None:
    work = _build_context(ctx, "base")
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
    context = _build_context(ctx, "torch-base")
    _podman_build(
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
    _podman_build(
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
    context = _build_context(ctx, "training")
    (context / "training-image").mkdir()
    shutil.copy2(
        REPO / "examples" / "training-image" / "Dockerfile",
        context / "training-image" / "Dockerfile",
    )
    shutil.copy2(REPO / "examples" / "train.py", context / "train.py")
    build_wheel(context / "training-image" / "wheels")
    _podman_build(
        ctx,
        TRAINING.ref,
        context,
        context / "training-image" / "Dockerfile",
        build_args={"BASE_IMAGE": TORCH_BASE_REF},
        extra=ctx.build_options(),
    )


# etcd -------------------------------------------------------------------------


def etcd_inputs(ctx: Context) -> tuple[list[str], list[Path], Path]:
    return [ETCD_VERSION, _go_version()], [HERE / "etcd" / "Containerfile"], REPO


def _go_version() -> str:
    return run(["go", "env", "GOVERSION"], env=_go_env()).strip()


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
    _go_build(ctx, "etcd-release", _etcd_modules(), {"etcd": "go.etcd.io/etcd/server/v3"}, staging)
    binary.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(staging / "etcd", binary)
    return binary


def etcd_build(ctx: Context) -> None:
    context = _build_context(ctx, "etcd")
    _go_build(
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
    _podman_build(ctx, ETCD.ref, context, HERE / "etcd" / "Containerfile")


# CoreDNS ----------------------------------------------------------------------


def coredns_inputs(ctx: Context) -> tuple[list[str], list[Path], Path]:
    return [COREDNS_VERSION, _go_version()], [HERE / "coredns" / "Containerfile"], REPO


def coredns_build(ctx: Context) -> None:
    context = _build_context(ctx, "coredns")
    _go_build(
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
    _podman_build(ctx, COREDNS.ref, context, HERE / "coredns" / "Containerfile")


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
# In build order: the pause image first (nodes need it before anything else).
RECIPES = {r.name: r for r in (PAUSE, BASE, OPERATOR, TORCH_BASE, TRAINING, ETCD, COREDNS)}


# ---------------------------------------------------------------- driver


def key_of(ctx: Context, recipe: Recipe) -> str:
    if recipe.name not in ctx.keys:
        inputs, files, root = recipe.key_inputs(ctx)
        parent = [key_of(ctx, RECIPES[recipe.parent])] if recipe.parent else []
        ctx.keys[recipe.name] = recipe_key(
            name=recipe.ref, inputs=[*inputs, *parent], files=files, root=root
        )
    return ctx.keys[recipe.name]


def ensure(ctx: Context, recipe: Recipe, *, local: bool) -> None:
    """Make ``recipe`` current: built (or reused), exported, indexed; in podman if ``local``."""
    key = key_of(ctx, recipe)
    state = read_state(ctx.paths, recipe.name)
    archive = ctx.paths.archive(recipe.name)
    current = state is not None and state.key == key
    if current and recipe.exported and not archive.is_file():
        current = False
    if current and not recipe.exported and not ctx.image_exists(recipe.ref):
        current = False  # intermediate images live only in podman's storage
    if current and state is not None:
        if local and not ctx.image_exists(recipe.ref):
            log(f"{recipe.ref}: loading the cached archive into podman")
            ctx.podman("load", "--input", str(archive))
        if recipe.exported:
            put_index_entry(ctx.paths, recipe.ref, archive, state.image_id)
        ctx.timings.append((recipe.ref, "cached", 0.0))
        log(f"{recipe.ref}: up to date (key {key[:12]}), nothing built")
        return
    if recipe.parent:
        ensure(ctx, RECIPES[recipe.parent], local=True)
    log(f"{recipe.ref}: building (key {key[:12]})")
    started = time.monotonic()
    recipe.build(ctx)
    image_id = ctx.image_id(recipe.ref)
    if recipe.exported:
        ctx.paths.archives.mkdir(parents=True, exist_ok=True)
        tmp = archive.with_suffix(".tar.tmp")
        tmp.unlink(missing_ok=True)
        ctx.podman("save", "--format", "docker-archive", "--output", str(tmp), recipe.ref)
        tmp.replace(archive)
        put_index_entry(ctx.paths, recipe.ref, archive, image_id)
    write_state(ctx.paths, recipe.name, State(key=key, image_id=image_id))
    if state is not None and state.image_id != image_id:
        # The replaced image (a torch layer is gigabytes); kept if something still uses it.
        subprocess.run(
            ["podman", "rmi", state.image_id.removeprefix("sha256:")],
            env=ctx.env,
            capture_output=True,
            check=False,
        )
    took = time.monotonic() - started
    ctx.timings.append((recipe.ref, "built", took))
    log(f"{recipe.ref}: built in {took:.0f} s ({image_id[:19]})")


def default_ca_bundle() -> Path | None:
    """The system bundle when this machine trusts extra CAs (a TLS-intercepting proxy)."""
    extra = Path("/usr/local/share/ca-certificates")
    bundle = Path("/etc/ssl/certs/ca-certificates.crt")
    if bundle.is_file() and extra.is_dir() and any(extra.rglob("*.crt")):
        return bundle
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "images",
        nargs="*",
        metavar="IMAGE",
        help=f"images to build (default: all): {', '.join(RECIPES)}",
    )
    parser.add_argument(
        "--ca-bundle",
        default="auto",
        help="CA bundle that pip trusts during builds (mounted, never copied into an image); "
        "'auto': this machine's bundle when it has extra CAs; 'none': pip's own",
    )
    parser.add_argument(
        "--etcd-release",
        action="store_true",
        help=f"build no image: print the path of etcd {ETCD_VERSION} as a host binary, built "
        "once into $ELASTICJOB_CACHE/bin (the benchmarks' --etcd-binary)",
    )
    args = parser.parse_args(argv)
    unknown = [name for name in args.images if name not in RECIPES]
    if unknown:
        parser.error(f"unknown image(s) {', '.join(unknown)}; choose from {', '.join(RECIPES)}")
    if args.ca_bundle == "auto":
        ca_bundle = default_ca_bundle()
    elif args.ca_bundle == "none":
        ca_bundle = None
    else:
        ca_bundle = Path(args.ca_bundle)
        if not ca_bundle.is_file():
            parser.error(f"--ca-bundle {ca_bundle}: no such file")
    paths = default_paths()
    for folder in (paths.root, paths.work, paths.state, paths.archives):
        folder.mkdir(parents=True, exist_ok=True)
    ctx = Context(paths=paths, env=podman_env(paths), ca_bundle=ca_bundle)
    if args.etcd_release:
        print(etcd_release_binary(ctx))
        return 0
    names = args.images or list(RECIPES)
    started = time.monotonic()
    # One build at a time per cache: a second caller waits, then finds its images current.
    with (paths.root / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            for name in names:
                ensure(ctx, RECIPES[name], local=True)
        except BuildError as err:
            log(f"error: {err}")
            return 1
    for ref, what, took in ctx.timings:
        log(f"  {ref:50} {what:7} {took:6.0f} s")
    log(f"done in {time.monotonic() - started:.0f} s; index {paths.index}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
