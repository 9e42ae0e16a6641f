"""Lifecycle: admission, repairs, notices, preemption, elastic resizing, replacement, spares, cluster actions."""
