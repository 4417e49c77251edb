"""Benchmarks for the migctl planner: an exact ILP reference, instance generators, quality and scale runs.

Run `python -m bench` from the repository root (`make bench`); `docs/benchmarks.md` has the method and figures.
scipy and numpy are bench-only dependencies (the `bench` extra), never imported by `migctl` itself.
"""
