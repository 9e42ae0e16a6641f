"""The cluster-state cache the service decides on (like kube-scheduler's internal/cache)."""
