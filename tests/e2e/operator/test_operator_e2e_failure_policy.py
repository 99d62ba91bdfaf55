"""Bad failure policies and hang-timeout settings on the real API server: what the CRD's schema
and CEL rules refuse, naming the field, and what only the operator can tell (a pattern RE2 does
not compile), reported as ``InvalidSpec`` naming the field."""

from __future__ import annotations

import json
from typing import Any

import pytest
from elasticjob_localcluster import LocalCluster

from tests.support.jobs import condition, phase, wait_job
from tests.support.operator_e2e import OperatorProcess, job_manifest

pytestmark = pytest.mark.e2e


def _rules(*rules: dict[str, Any]) -> dict[str, Any]:
    return {"failurePolicy": {"rules": list(rules)}}


EXIT_3 = {"operator": "In", "values": [3]}

REFUSED: list[tuple[str, dict[str, Any], str]] = [
    ("unknown-action", _rules({"action": "Retry", "onExitCodes": EXIT_3}), "action"),
    ("no-action", _rules({"onExitCodes": EXIT_3}), "action: Required value"),
    ("empty-rule", _rules({"action": "FailJob"}), "a failurePolicy rule needs a condition"),
    (
        "unknown-reason",
        _rules({"action": "Ignore", "onReasons": ["membership"]}),
        "onReasons[0]: Unsupported value",
    ),
    ("no-reasons", _rules({"action": "Ignore", "onReasons": []}), "onReasons"),
    (
        "unknown-operator",
        _rules({"action": "Ignore", "onExitCodes": {"operator": "Is", "values": [3]}}),
        "onExitCodes.operator: Unsupported value",
    ),
    (
        "in-zero",
        _rules({"action": "Ignore", "onExitCodes": {"operator": "In", "values": [0]}}),
        "0 is success",
    ),
    (
        "exit-code-range",
        _rules({"action": "Ignore", "onExitCodes": {"operator": "In", "values": [300]}}),
        "onExitCodes.values[0]",
    ),
    (
        "repeated-exit-code",
        _rules({"action": "Ignore", "onExitCodes": {"operator": "In", "values": [3, 3]}}),
        "Duplicate value",
    ),
    (
        "long-pattern",
        _rules({"action": "FailJob", "onRootCause": {"pattern": "x" * 257}}),
        "onRootCause.pattern",
    ),
    ("empty-pattern", _rules({"action": "FailJob", "onRootCause": {"pattern": ""}}), "pattern"),
    (
        "too-many-rules",
        _rules(*[{"action": "Ignore", "onExitCodes": EXIT_3}] * 21),
        "spec.failurePolicy.rules",
    ),
    (
        "both-timeouts",
        {"progress": {"mode": "Auto"}, "progressTimeoutSeconds": 60},
        "exclude each other",
    ),
    ("progress-mode", {"progress": {"mode": "Sometimes"}}, "spec.progress.mode"),
    (
        "floor-above-ceiling",
        {"progress": {"mode": "Auto", "floorSeconds": 600, "ceilingSeconds": 60}},
        "spec.progress.floorSeconds must be <= spec.progress.ceilingSeconds",
    ),
    ("tiny-factor", {"progress": {"mode": "Auto", "factor": 0.5}}, "spec.progress.factor"),
]


@pytest.mark.parametrize(("name", "change", "says"), REFUSED, ids=[c[0] for c in REFUSED])
def test_the_crd_refuses_a_bad_policy_naming_the_field(
    cluster: LocalCluster, operator: OperatorProcess, name: str, change: dict[str, Any], says: str
) -> None:
    manifest = job_manifest(name)
    manifest["spec"].update(change)
    done = cluster.kubectl(
        "apply", "--dry-run=server", "-n", "default", "-f", "-",
        input=json.dumps(manifest), check=False,
    )  # fmt: skip
    assert done.returncode != 0, f"{name} was accepted"
    assert says in done.stderr, done.stderr


def test_a_good_policy_and_auto_timeout_are_accepted_with_defaults(
    cluster: LocalCluster, operator: OperatorProcess
) -> None:
    manifest = job_manifest("good-policy")
    manifest["spec"].update(
        _rules(
            {"action": "FailJob", "onRootCause": {"pattern": r"ImportError|ModuleNotFound"}},
            {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [4, 77]}},
            {"action": "Count", "onReasons": ["hang", "OOMKilled"]},
        )
    )
    manifest["spec"]["progress"] = {"mode": "Auto"}
    out = cluster.kubectl(
        "apply", "--dry-run=server", "-n", "default", "-o", "json", "-f", "-",
        input=json.dumps(manifest),
    ).stdout  # fmt: skip
    progress = json.loads(out)["spec"]["progress"]
    assert progress == {
        "mode": "Auto",
        "factor": 5,
        "percentile": 95,
        "windowSteps": 100,
        "floorSeconds": 10,
        "ceilingSeconds": 1800,
        "exemptSteps": 5,
    }, progress


def test_a_pattern_re2_cannot_compile_is_invalid_spec_naming_the_field(
    cluster: LocalCluster, ns: str, operator: OperatorProcess
) -> None:
    """CEL cannot compile an arbitrary pattern; the operator can, before any pod starts."""
    manifest = job_manifest("badregex")
    manifest["spec"].update(
        _rules(
            {"action": "Ignore", "onExitCodes": EXIT_3},
            {"action": "FailJob", "onRootCause": {"pattern": r"(?<=lookbehind)x"}},
        )
    )
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(manifest))
    job = wait_job(cluster, ns, "badregex", "InvalidSpec", lambda j: phase(j) == "Failed")
    field = "spec.failurePolicy.rules[1].onRootCause.pattern"
    assert job["status"]["reason"] == "InvalidSpec" and field in job["status"]["message"]
    cond = condition(job, "InvalidSpec")
    assert cond["status"] == "True" and field in cond["message"], cond
    workers = cluster.kubectl(
        "get", "pods", "-n", ns, "-l", "elasticjob.dev/role=worker", "-o", "name"
    ).stdout
    assert workers.strip() == "", workers
