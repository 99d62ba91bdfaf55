"""Where the local cluster's pods land: real nodes by default, virtual ones by toleration."""

from __future__ import annotations

from elasticjob_localcluster.placement import (
    REAL_NODE_LABEL,
    VIRTUAL_NODE_LABEL,
    VIRTUAL_NODE_PLACEMENT,
    VIRTUAL_NODE_TAINT,
    on_virtual_nodes,
    place,
)
from elasticjob_localcluster.testing import python_pod, real_pod


def test_the_virtual_placement_tolerates_exactly_the_virtual_taint() -> None:
    (toleration,) = VIRTUAL_NODE_PLACEMENT["tolerations"]
    assert toleration["key"] == VIRTUAL_NODE_TAINT["key"] == VIRTUAL_NODE_LABEL
    assert toleration["effect"] == VIRTUAL_NODE_TAINT["effect"] == "NoSchedule"
    assert VIRTUAL_NODE_PLACEMENT["nodeSelector"] == {VIRTUAL_NODE_LABEL: "true"}


def test_place_keeps_the_specs_own_selector_and_tolerations_and_adds_once() -> None:
    spec = {
        "nodeSelector": {"team": "a"},
        "tolerations": [{"key": "gpu", "operator": "Exists"}],
    }
    on_virtual_nodes(spec)
    on_virtual_nodes(spec)
    assert spec["nodeSelector"] == {"team": "a", VIRTUAL_NODE_LABEL: "true"}
    assert spec["tolerations"] == [
        {"key": "gpu", "operator": "Exists"},
        *VIRTUAL_NODE_PLACEMENT["tolerations"],
    ]


def test_place_adds_no_empty_tolerations() -> None:
    spec: dict[str, object] = {}
    place(spec, {"nodeSelector": {REAL_NODE_LABEL: "true"}})
    assert spec == {"nodeSelector": {REAL_NODE_LABEL: "true"}}


def test_python_pod_goes_to_virtual_nodes_and_real_pod_to_real_ones() -> None:
    virtual = python_pod("v", "pass")["spec"]
    assert virtual["nodeSelector"] == {VIRTUAL_NODE_LABEL: "true"}
    assert virtual["tolerations"] == VIRTUAL_NODE_PLACEMENT["tolerations"]

    real = real_pod("r", "pass", node="real-2")["spec"]
    assert real["nodeSelector"] == {REAL_NODE_LABEL: "true", "kubernetes.io/hostname": "real-2"}
    assert "tolerations" not in real
    assert real["containers"][0]["imagePullPolicy"] == "Never"
