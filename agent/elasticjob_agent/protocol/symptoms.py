"""Symptoms: the errors a lost peer leaves on the ranks that survive it. Pure, bounded.

When one node of a group dies (its pod deleted, its node lost, its rank killed), the other ranks
fail too, a moment later, in their next collective or store call: gloo's "Connection reset by
peer", NCCL's watchdog timeout, a store's broken socket. Those failures are consequences, never
the cause: the agent's local pick and the operator's job-wide ranking put them last. Shared by
both, so they agree on what a symptom is.

Matching is plain substring tests on at most ``MAX_SYMPTOM_TEXT`` characters, lower-cased: linear
in the (bounded) text whatever a worker printed.
"""

from __future__ import annotations

from enum import StrEnum


class Symptom(StrEnum):
    """What kind of consequence a survivor's error is (``lastFailure.kind`` in the job's status)."""

    STORE_ERROR = "StoreError"
    """The rendezvous store (TCPStore, the etcd-backed store) lost its connection or timed out."""
    COLLECTIVE_TIMEOUT = "CollectiveTimeout"
    """A collective waited for a peer that never came (NCCL's watchdog, gloo's timeout)."""
    CONNECTION_LOST = "ConnectionLost"
    """The transport to a peer broke: reset or closed by the peer, a broken pipe."""
    PEER_ABORTED = "PeerAborted"
    """The process group or communicator was aborted under the rank (a peer's failure)."""


MAX_SYMPTOM_TEXT = 4096
"""Characters of an error's text that are looked at (a record's message is at most 1024)."""

# Each entry: the symptom, and alternatives of which one must match; an alternative is a tuple
# of substrings that must all occur. First entry that matches wins (the most specific first).
_TABLE: tuple[tuple[Symptom, tuple[tuple[str, ...], ...]], ...] = (
    (
        Symptom.STORE_ERROR,
        (
            ("tcpstore",),
            ("store.cpp",),
            ("diststoreerror",),
            ("etcdstore",),
            ("store", "wait timeout"),
        ),
    ),
    (
        Symptom.COLLECTIVE_TIMEOUT,
        (
            ("watchdog caught collective operation timeout",),
            ("collective operation timeout",),
            ("timed out waiting",),
            ("disttimeouterror",),
        ),
    ),
    (
        Symptom.CONNECTION_LOST,
        (
            ("connection reset by peer",),
            ("connection closed by peer",),
            ("broken pipe",),
            ("distnetworkerror",),
            ("gloo", "read error"),
            ("gloo", "connection refused"),
        ),
    ),
    (
        Symptom.PEER_ABORTED,
        (
            ("nccl communicator",),
            ("processgroup", "abort"),
            ("distbackenderror",),
            ("ncclremoteerror",),
            ("gloo",),
        ),
    ),
)


def classify(text: str) -> Symptom | None:
    """The symptom ``text`` (an exception's ``Type: message``, or a last line of output) shows,
    or ``None`` when it reads like a failure of its own."""
    lowered = text[:MAX_SYMPTOM_TEXT].lower()
    for symptom, alternatives in _TABLE:
        for needles in alternatives:
            if all(needle in lowered for needle in needles):
                return symptom
    return None
