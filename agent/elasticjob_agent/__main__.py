"""``python -m elasticjob_agent`` is ``elasticjob-agent``."""

from elasticjob_agent.cli import main

main()
