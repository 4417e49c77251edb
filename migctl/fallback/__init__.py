"""The non-MIG fallback: VRAM as an extended resource, placed per GPU by migctl's own scheduler."""
