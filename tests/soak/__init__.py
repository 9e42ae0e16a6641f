"""Soak suite (issue 19): a seeded random workload with faults on the real control plane, checked continuously."""
