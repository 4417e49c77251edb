"""The exact solver inside the planner: the planner's objective as an integer program (`model`), solved by HiGHS
within a work budget (`solve`), decoded to GPUs (`decode`), for whole instances and neighbourhoods (`search`)."""

from migctl.core.exact.search import refine, whole

__all__ = ["refine", "whole"]
