"""Wire contracts shared by the agent and the operator (the operator may import these only)."""
