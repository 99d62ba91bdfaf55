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
every call here does nothing. Imports only the standard library (no torch).

Compute time per step, for the operator's straggler detection (``spec.health.stragglers``)::

    from elasticjob_agent.progress import step_timer

    with step_timer():  # the step's local compute: it must not wait for other ranks
        loss = loss_fn(model(x), y)
    loss.backward()  # with DDP the backward waits for the slowest rank's gradients
    optim.step()

``report_compute(seconds)`` sends a duration measured another way. The health report carries
the node's compute time per step (``computeSeconds``: the median over the local ranks of each
rank's median over its last steps), how many timings it is made of (``computeSamples``) and how
many were ignored as nonsense (``computeRejected``).
"""

from __future__ import annotations

from elasticjob_agent.timers.worker import report_compute, report_done, report_step, step_timer

__all__ = ["report_compute", "report_done", "report_step", "step_timer"]
