"""Every `make` target and every file the README and the docs name exists: a reader who copies a
command from them finds it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "bench" / "RESULTS.md"]

# `make target` at the start of inline code, or a line of a fenced block that runs make.
_MAKE_INLINE = re.compile(r"`make ((?:[A-Z_]+=\S+ )*)([a-z][\w-]*)")
_MAKE_LINE = re.compile(r"^\s*(?:\$ )?make ((?:[A-Z_]+=\S+ )*)([a-z][\w-]*)", re.MULTILINE)
_FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
# A repository path inside inline code: a top-level folder of ours, then more path.
_PATH = re.compile(
    r"`((?:scripts|bench|localcluster|examples|charts|crds|dashboards|docs|tests|operator|agent)"
    r"/[\w./-]*)"
)


def _targets() -> set[str]:
    makefile = (REPO / "Makefile").read_text()
    found = set(re.findall(r"^([a-z][\w-]*)\s*:(?!=)", makefile, re.MULTILINE))
    for phony in re.findall(r"^\.PHONY:(.*)$", makefile, re.MULTILINE):
        found.update(phony.split())
    return found


def _named(pattern: re.Pattern[str], group: int) -> list[tuple[str, str]]:
    return [
        (doc.relative_to(REPO).as_posix(), match.group(group))
        for doc in DOCS
        for match in pattern.finditer(doc.read_text())
    ]


def _make_targets() -> list[tuple[str, str]]:
    named = set(_named(_MAKE_INLINE, 2))
    for doc in DOCS:
        for block in _FENCE.findall(doc.read_text()):
            named.update(
                (doc.relative_to(REPO).as_posix(), m[1]) for m in _MAKE_LINE.findall(block)
            )
    return sorted(named)


@pytest.mark.parametrize(("doc", "target"), _make_targets())
def test_every_make_target_named_in_the_docs_exists(doc: str, target: str) -> None:
    assert target in _targets(), f"{doc} names `make {target}`, which the Makefile lacks"


def _files() -> list[tuple[str, str]]:
    """Named paths, less prefixes (``test_real_node_``) that stand for several files."""
    named = {(doc, path.rstrip(".")) for doc, path in _named(_PATH, 1)}
    return sorted((doc, path) for doc, path in named if not path.endswith(("_", "-")))


@pytest.mark.parametrize(("doc", "path"), _files())
def test_every_file_named_in_the_docs_exists(doc: str, path: str) -> None:
    assert (REPO / path).exists(), f"{doc} names {path}, which does not exist"


_DEVELOPMENT_TALK = re.compile(
    r"\bbranch `|\(branch\b|before branch\b|\bthis session\b|\bwork in progress\b|\bWIP\b",
    re.IGNORECASE,
)


def test_docs_and_tests_describe_the_product_not_its_development() -> None:
    sources = [*DOCS, *sorted((REPO / "tests").rglob("*.py")), *sorted(REPO.glob("examples/*"))]
    said = [
        f"{path.relative_to(REPO)}:{number}: {line.strip()}"
        for path in sources
        if path.is_file() and path != Path(__file__)
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if _DEVELOPMENT_TALK.search(line)
    ]
    assert not said, "words about branches or sessions:\n" + "\n".join(said)
