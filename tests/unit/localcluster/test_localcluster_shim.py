"""The emulator's container shim explains a working directory that a pod's volume hides."""

from __future__ import annotations

from elasticjob_localcluster.shim import _hidden_by


def test_a_checkout_under_a_mounted_tmp_is_named() -> None:
    mounts: list[dict[str, object]] = [{"source": "/var/lib/x/tmp", "target": "/tmp"}]
    why = _hidden_by("/tmp/clone", mounts)
    assert "mounted at /tmp hides it" in why and "outside /tmp" in why


def test_a_working_directory_outside_every_mount_gets_no_explanation() -> None:
    mounts: list[dict[str, object]] = [
        {"source": "/a", "target": "/tmp"},
        {"source": "/b", "target": "/data/"},
    ]
    assert _hidden_by("/work/repo", mounts) == ""
    assert _hidden_by("/tmpdir/repo", mounts) == ""  # a prefix of the name is not a parent
    assert _hidden_by("/data", mounts) != ""
