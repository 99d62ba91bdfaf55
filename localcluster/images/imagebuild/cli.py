"""The driver and the command line: make each named image current (built, or reused by its
content key), exported and indexed, one build at a time per cache."""

from __future__ import annotations

import argparse
import fcntl
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from .cache import (
    BuildError,
    State,
    default_paths,
    log,
    put_index_entry,
    read_state,
    recipe_key,
    write_state,
)
from .recipes import ETCD_VERSION, RECIPES, Recipe, etcd_release_binary
from .tools import Context, podman_env

#: What ``--help`` says first.
DESCRIPTION = (
    "Build the local cluster's container images without a registry, each cached by its content."
)


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
    parser = argparse.ArgumentParser(prog="localcluster/images/build.sh", description=DESCRIPTION)
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
