"""The local search after the planner's greedy passes (docs/planning.md, "Method").

It works on a plain model of a placement (`bins.py`: GPUs as bins of single-instance pods, nodes as boxes of
CPU, memory and pod slots) with exact, memoised single-GPU fits (`fits.py`). `LocalSearch` (`local.py`: insert,
swap, evacuate, drop) mixes in its other moves from one module each: `tidy.py` (tidy, exchanges, trade),
`repack.py`, `augment.py` (chains of moves, two-for-one) and `reshuffle.py`; `state.py` is what they share.
Every cap on its work is in `budgets.py`.
"""

from migctl.core.search.local import LocalSearch

__all__ = ["LocalSearch"]
