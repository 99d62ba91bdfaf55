"""Every rank takes step 0 together (one all-reduce), then exits with ``argv[1]`` on the first
``argv[2]`` runs of the group (``TORCHELASTIC_RESTART_COUNT``) and finishes on the next one:
a deterministic bug (``exit_code_runs.py 3 1000``) or a known-flaky exit (``... 4 2``)."""

import os
import sys

import torch
import torch.distributed as dist


def main() -> None:
    code, failing_runs = int(sys.argv[1]), int(sys.argv[2])
    dist.init_process_group("gloo")
    dist.all_reduce(torch.ones(1))
    run = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    # gloo's threads may abort an interpreter that exits with a live group (docs/agent.md).
    dist.destroy_process_group()
    if run < failing_runs:
        print(f"run {run}: rank {os.environ['RANK']} exits {code}", flush=True)
        os._exit(code)
    print(f"run {run}: rank {os.environ['RANK']} finished", flush=True)


if __name__ == "__main__":
    main()
