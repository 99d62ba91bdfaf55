"""The back-off of refused agents (``refusals.py``)."""

from __future__ import annotations

from elasticjob_operator.core.refusals import Refusals

TARGETS = {"a": "10.0.0.1", "b": "10.0.0.2"}


def test_a_refused_pod_is_held_for_a_doubling_back_off_up_to_the_most() -> None:
    refusals = Refusals(first=4.0, most=10.0)
    refusals.record(TARGETS, {"b": "not JSON"}, TARGETS, now=0.0)
    assert refusals.held(TARGETS, 3.9) == {"b": "not JSON"}
    assert refusals.held(TARGETS, 4.0) == {}
    refusals.record({"b": "10.0.0.2"}, {"b": "still not JSON"}, TARGETS, now=4.0)
    assert refusals.held(TARGETS, 11.9) == {"b": "still not JSON"}  # 8 s
    refusals.record({"b": "10.0.0.2"}, {"b": "x"}, TARGETS, now=12.0)
    assert refusals.held(TARGETS, 21.9) == {"b": "x"} and refusals.held(TARGETS, 22.0) == {}


def test_a_valid_report_a_new_address_or_the_pods_end_forgets_the_refusal() -> None:
    refusals = Refusals(first=4.0, most=60.0)
    refusals.record(TARGETS, {"a": "x", "b": "y"}, TARGETS, now=0.0)
    refusals.record({"a": "10.0.0.1"}, {}, TARGETS, now=4.0)  # a answered well
    assert refusals.held(TARGETS, 5.0) == {}  # b's 4 s are over too
    refusals.record({"b": "10.0.0.2"}, {"b": "y"}, TARGETS, now=5.0)
    moved = {"a": "10.0.0.1", "b": "10.0.0.9"}
    assert refusals.held(moved, 6.0) == {}  # a new address is polled at once
    refusals.record(TARGETS, {"b": "y"}, {"a": "10.0.0.1"}, now=7.0)  # b is gone
    assert refusals.held(TARGETS, 8.0) == {}
