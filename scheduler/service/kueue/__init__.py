"""Kueue: the admission check controller that reserves a Workload's gang before Kueue admits it."""
