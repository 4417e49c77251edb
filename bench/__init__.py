"""Benchmarks for the migctl planner: an exact ILP reference, instance generators, quality and scale runs.

Run `python -m bench` from the repository root (`make bench`); `docs/benchmarks.md` has the method and figures.
The exact reference is the planner's own model (`migctl.core.exact`), solved with a time limit instead of a
work budget; highspy and numpy are runtime dependencies of migctl.
"""
