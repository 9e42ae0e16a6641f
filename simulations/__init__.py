"""Discrete-event simulator, trace loaders, capacity planner and reports."""
