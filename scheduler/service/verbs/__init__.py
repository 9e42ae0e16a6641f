"""Verbs: the kube-scheduler and Volcano extender verbs, the gRPC Placement service, and the GangScheduler."""
