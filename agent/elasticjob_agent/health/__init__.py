"""Health: what the agent knows about itself (``status``), its metrics, and the HTTP server."""
