"""The image builder's cache and index (localcluster/images/imagebuild), without podman: a
recipe whose build only records that it ran, and a Context whose podman answers are in memory.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from elasticjob_localcluster import versions
from images import imagebuild
from images.imagebuild import Context, Paths, Recipe, ensure, put_index_entry, recipe_key


class FakePodman(Context):
    """Context with podman's two queries answered from memory (our own I/O boundary)."""

    def image_exists(self, ref: str) -> bool:
        return True

    def image_id(self, ref: str) -> str:
        return "sha256:" + "ab" * 32

    def podman(self, *args: str) -> str:
        if args[:1] == ("save",):
            Path(args[args.index("--output") + 1]).write_bytes(b"archive")
            return ""
        raise AssertionError(f"unexpected podman {args}")


def _recipe(tmp_path: Path, built: list[str]) -> Recipe:
    source = tmp_path / "Containerfile"
    if not source.exists():
        source.write_text("FROM scratch\n")
    return Recipe(
        name="thing",
        ref="registry.example/thing:1",
        parent=None,
        exported=True,
        key_inputs=lambda ctx: (["v1"], [source], tmp_path),
        build=lambda ctx: built.append("thing"),
    )


def _context(tmp_path: Path) -> Context:
    paths = Paths(tmp_path / "images")
    for folder in (paths.root, paths.state, paths.archives):
        folder.mkdir(parents=True, exist_ok=True)
    return FakePodman(paths=paths, env={}, ca_bundle=None)


def test_a_second_run_builds_nothing_and_a_changed_input_builds_again(tmp_path: Path) -> None:
    built: list[str] = []
    recipe = _recipe(tmp_path, built)
    ensure(_context(tmp_path), recipe, local=False)
    ensure(_context(tmp_path), recipe, local=False)
    assert built == ["thing"]
    (tmp_path / "Containerfile").write_text("FROM scratch\nUSER 1\n")
    ensure(_context(tmp_path), recipe, local=False)
    assert built == ["thing", "thing"]


def test_a_missing_archive_is_rebuilt(tmp_path: Path) -> None:
    built: list[str] = []
    recipe = _recipe(tmp_path, built)
    ctx = _context(tmp_path)
    ensure(ctx, recipe, local=False)
    ctx.paths.archive("thing").unlink()
    ensure(_context(tmp_path), recipe, local=False)
    assert built == ["thing", "thing"]


def test_the_index_holds_one_entry_per_ref_with_the_contract_fields(tmp_path: Path) -> None:
    built: list[str] = []
    ctx = _context(tmp_path)
    ensure(ctx, _recipe(tmp_path, built), local=False)
    put_index_entry(ctx.paths, "other:1", Path("/x/other.tar"), "sha256:" + "cd" * 32)
    put_index_entry(ctx.paths, "other:1", Path("/x/other.tar"), "sha256:" + "ef" * 32)
    entries = json.loads(ctx.paths.index.read_text())
    assert [e["ref"] for e in entries] == ["other:1", "registry.example/thing:1"]
    assert all(set(e) == {"ref", "archive", "id"} for e in entries)
    assert entries[0]["id"] == "sha256:" + "ef" * 32
    assert entries[1]["archive"] == str(ctx.paths.archive("thing"))
    assert Path(entries[1]["archive"]).is_absolute()
    assert not ctx.paths.index.with_name("index.json.tmp").exists()


def test_keys_depend_on_inputs_file_bytes_and_names(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("1")
    base = recipe_key(name="r", inputs=["x"], files=[tmp_path / "a"], root=tmp_path)
    assert base == recipe_key(name="r", inputs=["x"], files=[tmp_path / "a"], root=tmp_path)
    assert base != recipe_key(name="r", inputs=["y"], files=[tmp_path / "a"], root=tmp_path)
    assert base != recipe_key(name="s", inputs=["x"], files=[tmp_path / "a"], root=tmp_path)
    (tmp_path / "a").write_text("2")
    assert base != recipe_key(name="r", inputs=["x"], files=[tmp_path / "a"], root=tmp_path)


def test_a_parents_key_is_part_of_its_childs(tmp_path: Path) -> None:
    ctx = _context(tmp_path)
    parent = imagebuild.RECIPES["base"]
    child = imagebuild.RECIPES["operator"]
    first = imagebuild.key_of(ctx, child)
    ctx.keys = {parent.name: "0" * 64}
    assert imagebuild.key_of(ctx, child) != first


def test_bad_arguments_name_what_to_fix(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        imagebuild.main(["nosuchimage"])
    assert "unknown image(s) nosuchimage; choose from pause, base" in capsys.readouterr().err


def test_the_recipes_build_the_refs_the_local_cluster_runs() -> None:
    refs = {name: recipe.ref for name, recipe in imagebuild.RECIPES.items()}
    assert refs["etcd"] == versions.ETCD_IMAGE
    assert refs["coredns"] == versions.COREDNS_IMAGE
    assert refs["pause"] == versions.PAUSE_IMAGE
    assert refs["operator"] == versions.OPERATOR_IMAGE
    assert refs["training"] == versions.TRAINING_IMAGE
    assert refs["prometheus"] == versions.PROMETHEUS_IMAGE
    assert versions.PROMETHEUS_DEBIAN_VERSION.startswith(versions.PROMETHEUS_IMAGE.split(":")[1])
