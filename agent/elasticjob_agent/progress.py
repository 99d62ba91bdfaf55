"""Report training progress to the agent: ``report_step(step)`` once per step (opt-in).

::

    from elasticjob_agent.progress import report_done, report_step

    for step in range(start, steps):
        train_one_step()
        report_step(step + 1)
    report_done()  # the final checkpoint and the teardown may take as long as they take

Each call sends one datagram (no reply, no wait) over the agent's worker socket
(``ELASTICJOB_TIMER_SOCKET``, shared with the expiration timers). The agent shows the step and
when it last advanced in its health report (``lastStep``, ``lastStepAt``), and with
``--progress-timeout`` (``spec.progressTimeoutSeconds``) restarts a group in which no local worker
reported a step for that long after the first one (restart reason ``hang``), until a worker
calls ``report_done()``. Outside the agent (plain ``python train.py``, or under ``torchrun``)
both do nothing. Imports only the standard library (no torch).
"""

from __future__ import annotations

from elasticjob_agent.timers.worker import report_done, report_step

__all__ = ["report_done", "report_step"]
