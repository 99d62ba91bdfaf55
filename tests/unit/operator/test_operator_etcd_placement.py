"""Where the managed etcd runs: ``spec.etcd``'s placement, else the template's less GPU keys."""

from __future__ import annotations

from typing import Any

import pytest
from elasticjob_operator.core.manifests import build_etcd_pod, etcd_placement
from elasticjob_operator.core.spec import EtcdSpec, SpecError, parse_job, parse_spec

from tests.support.operator_model import JOB, raw_spec

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
POOL_TOLERATION = {"key": "pool", "operator": "Equal", "value": "train", "effect": "NoSchedule"}
GPU_TERM = {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["A100"]}
ZONE_TERM = {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}


def _affinity(*expressions: dict[str, Any]) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": list(expressions)}]
            }
        }
    }


def _spec(template_extra: dict[str, Any], etcd: dict[str, Any] | None = None) -> Any:
    raw = raw_spec()
    raw["template"]["spec"].update(template_extra)
    if etcd is not None:
        raw["etcd"] = etcd
    return parse_spec(raw)


CASES: list[tuple[str, dict[str, Any], dict[str, Any] | None, dict[str, Any]]] = [
    ("nothing set: no constraint", {}, None, {}),
    (
        "GPU selector and toleration are not inherited, the rest is",
        {
            "nodeSelector": {"nvidia.com/gpu.present": "true", "pool": "train"},
            "tolerations": [GPU_TOLERATION, POOL_TOLERATION],
        },
        None,
        {"nodeSelector": {"pool": "train"}, "tolerations": [POOL_TOLERATION]},
    ),
    (
        "only GPU placement: none inherited",
        {"nodeSelector": {"nvidia.com/gpu.present": "true"}, "tolerations": [GPU_TOLERATION]},
        None,
        {},
    ),
    (
        "node affinity less its GPU expressions",
        {"affinity": _affinity(GPU_TERM, ZONE_TERM)},
        None,
        {"affinity": _affinity(ZONE_TERM)},
    ),
    ("a node affinity only on GPUs is dropped", {"affinity": _affinity(GPU_TERM)}, None, {}),
    (
        "pod (anti-)affinity of the workers is not the etcd's",
        {"affinity": {"podAntiAffinity": {"x": 1}}},
        None,
        {},
    ),
    (
        "spec.etcd wins, field by field",
        {"nodeSelector": {"pool": "train"}, "tolerations": [POOL_TOLERATION]},
        {"nodeSelector": {"pool": "system"}},
        {"nodeSelector": {"pool": "system"}, "tolerations": [POOL_TOLERATION]},
    ),
    (
        "an empty spec.etcd field inherits nothing",
        {"tolerations": [POOL_TOLERATION]},
        {"tolerations": []},
        {},
    ),
    (
        "spec.etcd affinity as written",
        {"affinity": _affinity(ZONE_TERM)},
        {"affinity": {"podAffinity": {"y": 2}}},
        {"affinity": {"podAffinity": {"y": 2}}},
    ),
    (
        "priority class: the template's, else spec.etcd's",
        {"priorityClassName": "training"},
        None,
        {"priorityClassName": "training"},
    ),
    (
        "priority class of spec.etcd wins",
        {"priorityClassName": "training"},
        {"priorityClassName": "infra-critical"},
        {"priorityClassName": "infra-critical"},
    ),
    (
        "imagePullSecrets always come along",
        {"imagePullSecrets": [{"name": "regcred"}]},
        {"nodeSelector": {}},
        {"imagePullSecrets": [{"name": "regcred"}]},
    ),
]


@pytest.mark.parametrize(
    ("template", "etcd", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_etcd_placement(
    template: dict[str, Any], etcd: dict[str, Any] | None, expected: dict[str, Any]
) -> None:
    spec = _spec(template, etcd)
    assert etcd_placement(spec) == expected
    pod_spec = build_etcd_pod(JOB, spec, 0)["spec"]
    for key in ("nodeSelector", "tolerations", "affinity", "priorityClassName"):
        assert pod_spec.get(key) == expected.get(key), key
    assert pod_spec.get("imagePullSecrets") == expected.get("imagePullSecrets")


def test_placement_is_a_copy() -> None:
    spec = _spec({"tolerations": [POOL_TOLERATION]})
    etcd_placement(spec)["tolerations"][0]["key"] = "changed"
    assert etcd_placement(spec)["tolerations"][0]["key"] == "pool"


BAD = [
    ({"nodeSelector": {"pool": 1}}, "spec.etcd.nodeSelector must map"),
    ({"nodeSelector": "pool=x"}, "spec.etcd.nodeSelector must map"),
    ({"tolerations": {"key": "x"}}, "spec.etcd.tolerations must be a list"),
    ({"tolerations": ["x"]}, "spec.etcd.tolerations[0] must be an object"),
    ({"affinity": []}, "spec.etcd.affinity must be an object"),
    ({"priorityClassName": "Not A Name"}, "spec.etcd.priorityClassName must name"),
    (
        {"mode": "External", "endpoints": ["e:2379"], "tolerations": []},
        "spec.etcd.tolerations is for Managed mode",
    ),
]


@pytest.mark.parametrize(("etcd", "message"), BAD, ids=[m for _, m in BAD])
def test_bad_placement_names_the_field(etcd: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_spec(raw_spec(etcd=etcd))
    assert message in str(info.value)


IMAGES = [
    ("spec.etcd.image wins", {"image": "mine/etcd:1"}, "mirror/etcd:2", "mine/etcd:1"),
    ("the operator's setting", {}, "mirror/etcd:2", "mirror/etcd:2"),
    ("no setting: the built-in default", {}, None, EtcdSpec.image),
]


@pytest.mark.parametrize(
    ("etcd", "setting", "expected"), [c[1:] for c in IMAGES], ids=[c[0] for c in IMAGES]
)
def test_etcd_image(etcd: dict[str, Any], setting: str | None, expected: str) -> None:
    spec = parse_job({"spec": raw_spec(etcd=etcd)}, etcd_image=setting)
    assert spec.etcd.image == expected
    (container,) = build_etcd_pod(JOB, spec, 0)["spec"]["containers"]
    assert container["image"] == expected
