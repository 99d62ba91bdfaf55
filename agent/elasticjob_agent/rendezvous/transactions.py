"""The etcd transaction each rendezvous action sends, as plain data. Pure: no I/O, no client.

``decide`` says what to do; ``transaction`` says exactly what etcd is asked: the compares, the
writes if they hold, and which round's snapshot both branches read back. The executor turns a
``Txn`` into an etcd request; the tests' model of etcd (tests/support/rendezvous_model.py)
interprets the same ``Txn``, so the randomized schedules check the transactions production
sends, not a copy of them.

Every compare is an equality (etcd's ``==``): on a key's version (0 = absent), its mod revision
(0 = absent) or its value. The compares and writes are ``etcd.txn``'s values, shared with the
store's and the restart counter's transactions.
"""

from __future__ import annotations

from dataclasses import dataclass

from elasticjob_agent.etcd.txn import Compare, Delete, Put, Target, Write, mod_is, version_is
from elasticjob_agent.rendezvous import rank_table
from elasticjob_agent.rendezvous.state import Action, Kind, Snapshot
from elasticjob_agent.rendezvous.wire import RendezvousKeys, encode


@dataclass(frozen=True)
class Txn:
    """If every compare holds, apply ``success`` (atomically, at one new revision); either way,
    read back the snapshot of round ``then_read``."""

    compare: tuple[Compare, ...]
    success: tuple[Write, ...]
    then_read: int


_version = version_is
_mod = mod_is


def _join_writes(
    keys: RendezvousKeys, p: int, node: str, advertise: tuple[str, int] | None
) -> tuple[Write, ...]:
    if advertise is None:
        raise ValueError("a join needs the address the node advertises")
    addr, port = advertise
    return (
        Put(keys.joined(p, node), encode(node=node, addr=addr, port=port), on_lease=True),
        Delete(keys.waiting(node)),
        Put(keys.joins(p), encode()),
    )


def transaction(
    action: Action,
    snap: Snapshot,
    keys: RendezvousKeys,
    node: str,
    advertise: tuple[str, int] | None = None,
) -> Txn:
    """The transaction that performs ``action``, decided on ``snap``, for ``node``.

    ``advertise`` is the (address, port) the node offers as the round's master if it becomes
    rank 0 (written with its join; only a join needs it). ``ValueError`` for actions that are
    not transactions (``WAIT``, ``ROSTER``, ``FINISH``, ``CLOSED``, ``TIMEOUT``).
    """
    p, k = action.round, keys
    if action.kind is Kind.JOIN:
        return Txn(
            (_version(k.closed, 0), _mod(k.round, action.fence), _version(k.complete(p), 0)),
            _join_writes(k, p, node, advertise),
            p,
        )
    if action.kind is Kind.BUMP:
        return Txn(
            (_mod(k.round, action.fence), _version(k.closed, 0)),
            (Put(k.round, encode(round=p + 1)), Delete(k.joined(p, node))),
            p + 1,
        )
    if action.kind is Kind.LAST_CALL:
        if action.deadline is None:
            raise ValueError("a last-call action needs a deadline")
        return Txn(
            (_version(k.complete(p), 0),),
            (Put(k.last_call(p), encode(deadline=action.deadline, by=node)),),
            p,
        )
    if action.kind is Kind.COMPLETE:
        if snap.roster is None or snap.round != p:
            raise ValueError("a completion is built from the roster of its round's snapshot")
        record, buckets = rank_table.table(snap.roster, p)
        tables = tuple(
            Put(k.ranks(p, b), rank_table.encode_bucket(entries)) for b, entries in buckets.items()
        )
        return Txn(
            (
                _version(k.complete(p), 0),
                _version(k.closed, 0),
                _mod(k.round, snap.round_mod),
                _mod(k.last_call(p), action.fence),
                # No join since the roster was read: the members are exactly the round's
                # first joined keys as of the completion (less any that died meanwhile).
                _mod(k.joins(p), snap.roster.joins_mod),
            ),
            (*tables, Put(k.complete(p), rank_table.encode_record(record))),
            p,
        )
    if action.kind is Kind.WAIT_LIST:
        return Txn(
            (),
            (Put(k.waiting(node), encode(node=node), on_lease=True), Delete(k.joined(p, node))),
            p,
        )
    raise ValueError(f"{action.kind.value} is not a transaction")


def blind_join(
    keys: RendezvousKeys, node: str, guess: int, advertise: tuple[str, int] | None
) -> Txn:
    """What a fresh ``next_rendezvous()`` sends first, without reading: join round ``guess`` if
    it is the current round (compared by value: the pointer's mod revision is not known yet),
    open and not closed. Not for a member of ``guess``, which must bump the round instead."""
    pointer_is_guess = (
        _version(keys.round, 0)
        if guess == 0
        else Compare(keys.round, Target.VALUE, encode(round=guess))
    )
    return Txn(
        (_version(keys.closed, 0), pointer_is_guess, _version(keys.complete(guess), 0)),
        _join_writes(keys, guess, node, advertise),
        guess,
    )


def close(keys: RendezvousKeys, node: str) -> Txn:
    """``set_closed()``: create the closed flag once (final)."""
    return Txn((_version(keys.closed, 0),), (Put(keys.closed, encode(by=node)),), 0)


def leave(keys: RendezvousKeys, node: str, p: int) -> Txn:
    """On a join timeout: drop this node's joined key of round ``p`` and its wait-list key."""
    return Txn((), (Delete(keys.joined(p, node)), Delete(keys.waiting(node))), p)
