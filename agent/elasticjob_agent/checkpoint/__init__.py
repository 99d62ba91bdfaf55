"""Checkpoints held by the agents in memory, replicated to a peer, optionally persisted.

The pieces, from the bottom: ``manifest`` (pure: shard ids, manifests, the newest complete
step), ``config`` (pure: the ``ELASTICJOB_CHECKPOINT_*`` settings), ``resize`` (pure: how a
step saved by W ranks maps onto W' ranks), ``store`` (a bounded directory of shards),
``persist``, ``peer`` (the agents' mutual-TLS channel), ``directory`` (who holds what, in
etcd), ``node`` (one node's checkpoints), ``service`` (the agent's socket for its workers),
``serving`` (the agent's wiring). For training scripts: ``api`` (``Checkpointer``: save and
load a state dict; ``restore`` maps a saved step onto the current ranks), ``sampler`` (pure: a
data position that survives a resize) and ``dcp`` (a DCP storage writer and reader).
See docs/checkpoints.md.
"""
