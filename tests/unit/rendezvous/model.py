"""A model of etcd as the rendezvous executor uses it, for driving ``decide`` in unit tests.

An in-memory fake at our own boundary: the same keys, compares and writes as
``elasticjob_agent.rendezvous.executor.Executor.step`` (one atomic transaction per action), with
revisions and leases. A completion freezes the joined keys of its round, which is what a
historical read at ``completion revision - 1`` returns in etcd.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from elasticjob_agent.rendezvous.state import (
    Action,
    Context,
    Kind,
    Membership,
    Snapshot,
)


@dataclass
class Entry:
    value: object
    create: int
    mod: int
    lease: int | None


@dataclass
class Completion:
    round: int
    revision: int
    members: tuple[str, ...]
    """Node ids of the round's joined keys at ``revision - 1``, in key order."""


@dataclass
class ModelEtcd:
    rev: int = 1
    kv: dict[tuple[str, ...], Entry] = field(default_factory=dict)
    completions: dict[int, list[Completion]] = field(default_factory=dict)
    closed_at: int | None = None
    next_lease: int = 1

    def grant(self) -> int:
        self.next_lease += 1
        return self.next_lease

    def expire(self, lease: int) -> None:
        """The lease is gone: etcd deletes its keys in one revision."""
        doomed = [k for k, e in self.kv.items() if e.lease == lease]
        if doomed:
            self.rev += 1
            for k in doomed:
                del self.kv[k]

    def wipe(self) -> None:
        """A recreated, empty etcd: a fresh start (the closed flag is gone too)."""
        self.kv.clear()
        self.completions.clear()
        self.closed_at = None

    def _mod(self, key: tuple[str, ...]) -> int:
        e = self.kv.get(key)
        return e.mod if e else 0

    def _put(self, key: tuple[str, ...], value: object, lease: int | None = None) -> None:
        old = self.kv.get(key)
        self.kv[key] = Entry(value, old.create if old else self.rev, self.rev, lease)

    def joined(self, p: int) -> list[str]:
        return sorted(k[2] for k in self.kv if k[0] == "joined" and k[1] == str(p))

    def ctl_changed_since(self, revision: int) -> bool:
        return any(k[0] == "ctl" and e.mod > revision for k, e in self.kv.items())

    def snapshot(self, node: str, lease: int, max_nodes: int) -> Snapshot:
        pointer = self.kv.get(("ctl", "round"))
        p = int(pointer.value) if pointer else 0  # type: ignore[call-overload]
        mine = self.kv.get(("joined", str(p), node))
        last_call = self.kv.get(("last-call", str(p)))
        complete = self.kv.get(("ctl", "complete", str(p)))
        my_create = mine.create if mine and mine.lease == lease else 0
        membership = None
        if complete is not None:
            (c,) = [c for c in self.completions[p] if c.revision == complete.create]
            world = min(len(c.members), max_nodes)
            rank = c.members.index(node) if my_create and node in c.members else max_nodes
            membership = Membership(rank, world, c.revision - 1, b"")
        return Snapshot(
            revision=self.rev,
            closed=("ctl", "closed") in self.kv,
            round=p,
            round_mod=pointer.mod if pointer else 0,
            completed=complete is not None,
            joined=len(self.joined(p)),
            my_create=my_create,
            last_call=float(last_call.value) if last_call else None,  # type: ignore[arg-type]
            last_call_mod=last_call.mod if last_call else 0,
            waiting=("waiting", node) in self.kv,
            membership=membership,
        )

    def act(self, node: str, lease: int, snap: Snapshot, action: Action) -> bool:
        """Apply ``action`` as the executor's transaction would; True if it committed."""
        p = str(action.round)
        closed = ("ctl", "closed") in self.kv
        complete_key = ("ctl", "complete", p)
        if action.kind is Kind.JOIN:
            ok = (
                not closed
                and self._mod(("ctl", "round")) == action.fence
                and complete_key not in self.kv
            )
            if ok:
                self.rev += 1
                self._put(("joined", p, node), node, lease)
                self.kv.pop(("waiting", node), None)
            return ok
        if action.kind is Kind.BUMP:
            ok = self._mod(("ctl", "round")) == action.fence and not closed
            if ok:
                self.rev += 1
                self._put(("ctl", "round"), action.round + 1)
                self.kv.pop(("joined", p, node), None)
            return ok
        if action.kind is Kind.LAST_CALL:
            ok = complete_key not in self.kv
            if ok:
                self.rev += 1
                self._put(("last-call", p), action.deadline)
            return ok
        if action.kind is Kind.COMPLETE:
            ok = (
                complete_key not in self.kv
                and not closed
                and self._mod(("ctl", "round")) == snap.round_mod
                and self._mod(("last-call", p)) == action.fence
            )
            if ok:
                members = tuple(self.joined(action.round))
                self.rev += 1
                self._put(complete_key, True)
                self.completions.setdefault(action.round, []).append(
                    Completion(action.round, self.rev, members)
                )
            return ok
        if action.kind is Kind.WAIT_LIST:
            self.rev += 1
            self._put(("waiting", node), node, lease)
            self.kv.pop(("joined", p, node), None)
            return True
        raise ValueError(f"not a transaction: {action.kind}")

    def close(self) -> None:
        if ("ctl", "closed") not in self.kv:
            self.rev += 1
            self._put(("ctl", "closed"), True)
            self.closed_at = self.rev


def context(min_nodes: int, max_nodes: int, now: float, member_of: int | None = None) -> Context:
    return Context(
        min_nodes=min_nodes,
        max_nodes=max_nodes,
        last_call_timeout=1.0,
        join_deadline=now + 30.0,
        recheck_interval=1.0,
        member_of=member_of,
    )
