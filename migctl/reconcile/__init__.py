"""The reconcile layer: one pure step that the live controller and the simulator both call.

Below the components, above the adapters and the configuration; no API, no threads, no clock of its own.
`step` (`step.py`) sequences a reconcile's decisions and returns an `Outcome`; the decisions are
`decide.py` (freezing, the burst rule, the batching windows, starts and holds), `guards.py` (the guard rails),
`paths.py` (the actuation paths as records: their rails, refusals and fences), `facts.py` (what a reconcile knows
of each node), `nodestate.py` (the phase annotations of a node in flight, read strictly) and `reasons.py` (why,
as codes with text).
"""
