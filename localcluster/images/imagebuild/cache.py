"""The image cache: where builds keep their state, content keys, the image index and each
image's recorded key (standard library only, no podman)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

# Bumped when a recipe changes in a way its hashed inputs do not show (e.g. this file's logic).
RECIPE_EPOCH = "1"


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
