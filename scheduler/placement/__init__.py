"""Placement: jobs and their parallelism, rank layout, the cost model, policies and the engine."""
