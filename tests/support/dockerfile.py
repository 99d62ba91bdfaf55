"""Replay a Dockerfile stage's build steps on the host, in a directory standing in for ``/``.

No Docker engine exists here, so the install steps of our Dockerfiles are tested by running the
same ``COPY``/``WORKDIR``/``ENV``/``ARG``/``RUN`` lines against a temporary root: absolute paths in
those lines are rewritten to live under it. Only the instruction forms our Dockerfiles use are
supported; anything else raises ``ValueError`` so a new construct is noticed, not skipped.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

_CONTINUATION = re.compile(r"\\\n")


@dataclass(frozen=True)
class Instruction:
    keyword: str
    argument: str
    line: int


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)


def parse(text: str) -> tuple[dict[str, str], list[Stage]]:
    """Global ``ARG`` defaults and the stages of a Dockerfile (comments and blanks dropped)."""
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    joined = _CONTINUATION.sub(" ", text)
    for number, raw in enumerate(joined.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, argument = line.partition(" ")
        keyword = keyword.upper()
        argument = " ".join(argument.split())
        if keyword == "FROM":
            words = argument.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stages.append(Stage(base=_expand(words[0], global_args), name=name))
        elif not stages:
            if keyword != "ARG":
                raise ValueError(f"line {number}: only ARG may precede FROM, got {keyword}")
            key, _, default = argument.partition("=")
            global_args[key] = default
        else:
            stages[-1].instructions.append(Instruction(keyword, argument, number))
    return global_args, stages


def _expand(value: str, env: Mapping[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: env.get(m[1] or m[2], m[0]), value)


def _ignored(context: Path) -> list[str]:
    path = context / ".dockerignore"
    if not path.is_file():
        return []
    patterns = []
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith(("#", "!")) and line != "*":
            patterns.append(line.removeprefix("**/"))
    return patterns


@dataclass
class Replay:
    """Runs one stage. ``root`` stands in for ``/``; ``path_prefixes`` are rewritten under it."""

    context: Path
    root: Path
    path_prefixes: tuple[str, ...]
    env: dict[str, str]
    build_args: dict[str, str] = field(default_factory=dict)
    log: list[str] = field(default_factory=list)

    def host_path(self, path: str) -> Path:
        if not path.startswith("/"):
            raise ValueError(f"expected an absolute path, got {path!r}")
        return self.root / path.lstrip("/")

    def rewrite(self, command: str) -> str:
        # Longest first, so /opt/elasticjob/bin is not split by a shorter /opt.
        for prefix in sorted(self.path_prefixes, key=len, reverse=True):
            command = re.sub(
                rf"(?<![\w/]){re.escape(prefix)}(?=[/\s\"']|$)",
                str(self.host_path(prefix)),
                command,
            )
        return command

    def run(self, stage: Stage, *, only: set[str] | None = None) -> None:
        workdir = self.root
        workdir.mkdir(parents=True, exist_ok=True)
        ignore = shutil.ignore_patterns(*_ignored(self.context))
        for ins in stage.instructions:
            if only is not None and ins.keyword not in only:
                continue
            arg = _expand(ins.argument, {**self.build_args, **self.env})
            if ins.keyword == "ARG":
                key, _, default = ins.argument.partition("=")
                self.build_args.setdefault(key, default)
            elif ins.keyword == "ENV":
                for word in shlex.split(arg):
                    key, _, value = word.partition("=")
                    self.env[key] = value
            elif ins.keyword == "WORKDIR":
                workdir = self.host_path(arg)
                workdir.mkdir(parents=True, exist_ok=True)
            elif ins.keyword == "COPY":
                *sources, dest = shlex.split(arg)
                if any(s.startswith("--") for s in sources):
                    raise ValueError(f"line {ins.line}: COPY flags are not replayed: {arg}")
                target = self.host_path(dest) if dest.startswith("/") else workdir / dest
                for source in sources:
                    src = self.context / source
                    if src.is_dir():
                        shutil.copytree(src, target, ignore=ignore, dirs_exist_ok=True)
                    else:
                        if any(fnmatch.fnmatch(src.name, p) for p in _ignored(self.context)):
                            continue
                        dst = target / src.name if dest.endswith("/") else target
                        dst.parent.mkdir(parents=True, exist_ok=True)
                        shutil.copy2(src, dst)
            elif ins.keyword == "RUN":
                command = self.rewrite(arg)
                self.log.append(command)
                proc = subprocess.run(
                    ["bash", "-euo", "pipefail", "-c", command],
                    cwd=workdir,
                    env=self.env,
                    capture_output=True,
                    text=True,
                    timeout=900,
                    check=False,
                )
                if proc.returncode != 0:
                    raise RuntimeError(
                        f"RUN on line {ins.line} failed ({proc.returncode}): {command}\n"
                        f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
                    )
            elif ins.keyword in {"LABEL", "EXPOSE", "USER", "ENTRYPOINT", "CMD"}:
                continue
            else:
                raise ValueError(f"line {ins.line}: {ins.keyword} is not replayed")


def base_environment(python: str, scratch: Path) -> dict[str, str]:
    """A minimal environment whose ``python`` is ``python`` (the base image's interpreter)."""
    bin_dir = scratch / "base-bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name in ("python", "python3"):
        link = bin_dir / name
        if not link.exists():
            link.symlink_to(python)
    return {
        "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(scratch / "home"),
        "LANG": "C.UTF-8",
        **{k: v for k, v in os.environ.items() if k in {"PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL"}},
    }
