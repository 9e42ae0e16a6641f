"""The scheduler-extender service: kube-scheduler and Volcano extender verbs, gRPC, metrics."""
