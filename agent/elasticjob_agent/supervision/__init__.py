"""Supervision: the supervisor loop, local workers, their environment, and restart policy."""
