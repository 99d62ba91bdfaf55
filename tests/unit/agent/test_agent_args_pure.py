"""``args.py`` says it is pure: importing it loads neither grpc nor torch (nor any client).

Checked in a fresh interpreter, since this test process has long imported both. The import
rules themselves live in .importlinter; this checks what a user pays at start-up.
"""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("grpc", "torch", "aetcd", "prometheus_client", "google.protobuf")


def test_importing_args_loads_no_heavy_library() -> None:
    code = (
        "import sys\n"
        "import elasticjob_agent.args\n"
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "", f"importing elasticjob_agent.args loads {done.stdout}"
