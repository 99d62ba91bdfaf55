"""The fail-fast benchmark's training script: a deterministic bug at step 0.

Every rank joins the gloo group and takes step 0 (one all-reduce), then raises the same error
every time it runs, as a shape mismatch in a model does. Under torch's ``@record`` the error
file carries the exception, which the agent's root cause quotes.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record


@record
def main() -> None:
    dist.init_process_group("gloo")
    dist.all_reduce(torch.ones(1))
    raise RuntimeError("mat1 and mat2 shapes cannot be multiplied (64x512 and 256x10)")


if __name__ == "__main__":
    main()
