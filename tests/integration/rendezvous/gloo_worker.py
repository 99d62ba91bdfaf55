"""A worker process for test_store: gloo bootstraps through an ``EtcdStore``, then all-reduces.

Usage: python gloo_worker.py ENDPOINT PREFIX RANK WORLD_SIZE; prints ``sum=<value>``.
"""

from __future__ import annotations

import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from elasticjob_agent.rendezvous.store import EtcdStore


def main() -> int:
    endpoint, prefix, rank, world = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    store = EtcdStore.connect(endpoint, prefix, timeout=timedelta(seconds=30))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
    tensor = torch.tensor([float(rank + 1)])
    dist.all_reduce(tensor)
    dist.barrier()
    print(f"sum={tensor.item():g}", flush=True)
    dist.destroy_process_group()
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
