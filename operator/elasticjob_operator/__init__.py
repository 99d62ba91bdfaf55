"""ElasticJob operator: provisions etcd and workers, counts restarts job-wide, detects stalls.

The pure core (``spec``, ``names``, ``manifests``, ``agent_command``, ``observed``,
``conditions``, ``restarts``, ``stall``, ``status``, ``planning``) imports no kopf and no client
library. The handlers register with kopf only when kopf is the program running us
(``kopf run -m elasticjob_operator``); ``elasticjob-operator`` imports them itself.
"""

import sys

__version__ = "0.1.0"

if "kopf" in sys.modules:  # `kopf run -m elasticjob_operator`, or a test that drives kopf
    from . import handlers  # noqa: F401
