"""The plain records the planner reads and writes (cluster, plan, per-GPU config), with their strict parsers."""
