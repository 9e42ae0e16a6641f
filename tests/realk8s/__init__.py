"""Tests against a real etcd + kube-apiserver + kube-scheduler (envtest-style), marked `realk8s`."""
