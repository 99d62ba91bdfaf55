"""The images the nodes run: the image index, and the image store every node's containerd
root is cloned from.

The index (``$ELASTICJOB_CACHE/images/index.json``, written by ``localcluster/images``) is a JSON
list of ``{"ref", "archive", "id"}``. The image store (``$ELASTICJOB_CACHE/nodes/image-store``)
is a containerd root into which a short-lived containerd imports (namespace ``k8s.io``, unpacked
for overlayfs) every entry it does not hold with that ``id`` yet; so a second run imports
nothing. Each node's root is a hard-linked clone of it (:func:`clone_root`): seconds per node,
and no second copy of any image on disk.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import cache_dir
from ..versions import COREDNS_IMAGE, PAUSE_IMAGE
from .render import containerd_config

REQUIRED = (PAUSE_IMAGE, COREDNS_IMAGE)


class ImageError(RuntimeError):
    """The index is missing or malformed, or an import failed."""


@dataclass(frozen=True)
class ImageEntry:
    ref: str
    archive: Path
    id: str


def index_path() -> Path:
    return cache_dir() / "images" / "index.json"


def parse_index(text: str, source: str = "index.json") -> list[ImageEntry]:
    """Entries of an index text (pure); raises :class:`ImageError` naming the bad entry."""
    try:
        raw: Any = json.loads(text)
    except ValueError as err:
        raise ImageError(f"{source}: not JSON ({err})") from err
    if not isinstance(raw, list):
        raise ImageError(f"{source}: expected a JSON list of {{ref, archive, id}}")
    entries = []
    for n, item in enumerate(raw):
        if not (
            isinstance(item, dict)
            and all(isinstance(item.get(k), str) and item.get(k) for k in ("ref", "archive", "id"))
        ):
            raise ImageError(f"{source}: entry {n} needs non-empty strings ref, archive and id")
        entries.append(ImageEntry(item["ref"], Path(item["archive"]), item["id"]))
    return entries


def missing_required(entries: list[ImageEntry]) -> list[str]:
    """The refs of :data:`REQUIRED` the index lacks (pure)."""
    refs = {e.ref for e in entries}
    return [ref for ref in REQUIRED if ref not in refs]


def read_index(wait_s: float = 0) -> list[ImageEntry]:
    """The index; waits up to ``wait_s`` for it to hold the images every node needs."""
    path = index_path()
    deadline = time.monotonic() + wait_s
    while True:
        try:
            entries = parse_index(path.read_text(), str(path))
            lacking = missing_required(entries)
        except FileNotFoundError:
            entries, lacking = [], list(REQUIRED)
        if not lacking:
            return entries
        if time.monotonic() >= deadline:
            raise ImageError(
                f"{path} lacks {', '.join(lacking)}: build the images first "
                "(`make images`, i.e. localcluster/images/build.sh)"
            )
        time.sleep(2)


def _ctr(socket: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ctr", "--address", str(socket), "-n", "k8s.io", *args],
        capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip


def present(socket: Path) -> dict[str, str]:
    """ref -> manifest digest of every image the node holds."""
    done = _ctr(socket, "images", "ls")
    if done.returncode != 0:
        raise ImageError(f"ctr images ls: {done.stderr.strip()}")
    held = {}
    for line in done.stdout.splitlines()[1:]:
        parts = line.split()
        if len(parts) > 2:
            held[parts[0]] = parts[2]
    return held


def stamps_match(root: Path, entries: list[ImageEntry]) -> bool:
    """Whether the containerd root ``root`` recorded importing exactly these ids."""
    try:
        stamps = json.loads((root / "imported.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(stamps, dict) and all(stamps.get(e.ref) == e.id for e in entries)


def clone_root(source: Path, target: Path) -> None:
    """Make ``target`` a copy of the (stopped) containerd root ``source`` that shares the
    immutable files (content blobs, committed snapshot layers) by hard link: a node costs no
    second copy of each image on disk. Everything else (bolt databases, state) is copied."""
    shared = ("io.containerd.content.v1.content", "io.containerd.snapshotter.v1.overlayfs")
    tmp = target.with_name(target.name + ".clone")
    subprocess.run(["rm", "-rf", str(tmp), str(target)], check=True)
    tmp.mkdir(parents=True)
    for child in source.iterdir():
        if child.name in shared:
            continue
        subprocess.run(["cp", "-a", str(child), str(tmp / child.name)], check=True)
    for name in shared:
        if (source / name).exists():
            subprocess.run(["cp", "-al", str(source / name), str(tmp / name)], check=True)
            for db in (tmp / name).glob("*.db"):
                copy = db.with_suffix(".db.copy")
                subprocess.run(["cp", "-a", str(db), str(copy)], check=True)
                copy.replace(db)
    tmp.rename(target)


def import_images(
    socket: Path, entries: list[ImageEntry], stamp_dir: Path, timeout: float = 1800
) -> list[str]:
    """Import each entry not yet in the node; returns the refs imported.

    ``stamp_dir`` (kept with the node's containerd root) records ``ref -> id`` of past imports:
    containerd shows the manifest digest, not the id the index names.
    """
    stamp_dir.mkdir(parents=True, exist_ok=True)
    stamps_file = stamp_dir / "imported.json"
    try:
        stamps: dict[str, str] = json.loads(stamps_file.read_text())
    except (OSError, ValueError):
        stamps = {}
    held = present(socket)
    imported = []
    for entry in entries:
        if stamps.get(entry.ref) == entry.id and entry.ref in held:
            continue
        if not entry.archive.is_file():
            raise ImageError(f"image {entry.ref}: archive {entry.archive} is missing")
        done = _ctr(socket, "images", "import", str(entry.archive), timeout=timeout)
        if done.returncode != 0:
            raise ImageError(f"import of {entry.ref} ({entry.archive}): {done.stderr.strip()}")
        if entry.ref not in present(socket):
            raise ImageError(
                f"import of {entry.archive} did not create {entry.ref}; it holds "
                f"{done.stdout.strip() or 'nothing'}"
            )
        stamps[entry.ref] = entry.id
        # Replaced, never rewritten in place: a cloned root shares files by hard link.
        tmp = stamps_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(stamps, indent=2))
        tmp.replace(stamps_file)
        imported.append(entry.ref)
    return imported


def store_root() -> Path:
    """The image store's containerd root (one per machine, shared by every cluster)."""
    return cache_dir() / "nodes" / "image-store" / "root"


def prepare_store(
    entries: list[ImageEntry], clone_to: Sequence[Path] = (), timeout: float = 1800
) -> Path:
    """Import into the image store what it lacks and clone it to each of ``clone_to``, all under
    one lock: clusters start concurrently, and another cluster's import (of other contents under
    the same refs) while this one clones would tear the clone or swap its images. Returns the
    store's root, stopped."""
    root = store_root()
    root.parent.mkdir(parents=True, exist_ok=True)
    with (root.parent / "lock").open("a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not stamps_match(root, entries):
            _import_into(root, entries, timeout)
        for target in clone_to:
            clone_root(root, target)
        return root


def _import_into(root: Path, entries: list[ImageEntry], timeout: float) -> None:
    """Run a short-lived containerd on the store's ``root`` and import ``entries``."""
    with tempfile.TemporaryDirectory(prefix="ej-image-store-") as tmp:
        work = Path(tmp)
        socket = work / "containerd.sock"
        config = work / "containerd.toml"
        (work / "net.d").mkdir()
        config.write_text(
            containerd_config(
                root=root, state=work / "state", socket=socket,
                runc_root=work / "runc", cni_conf_dir=work / "net.d",
            )
        )  # fmt: skip
        with (root.parent / "containerd.log").open("ab") as out:
            proc = subprocess.Popen(
                ["setpriv", "--pdeathsig", "KILL", "--", "unshare", "--mount",
                 "--propagation", "private", "--", "containerd", "--config", str(config)],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while _ctr(socket, "version", timeout=10).returncode != 0:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise ImageError(
                        f"the image store's containerd did not start; see "
                        f"{root.parent / 'containerd.log'}"
                    )
                time.sleep(0.2)
            import_images(socket, entries, root, timeout)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def remove_root(root: Path) -> None:
    """Delete a node's containerd root (only hard links to the store's files go)."""
    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(root)
