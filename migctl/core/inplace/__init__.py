"""In-place reconfiguration: what a GPU can reach without draining (reach) and the agent's per-GPU steps (steps)."""
