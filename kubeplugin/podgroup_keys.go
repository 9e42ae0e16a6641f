package main

import fwk "k8s.io/kube-scheduler/framework"

// podGroupKeys reads a pod group's required topology key from the PodGroup API version this build's Kubernetes
// serves (podgroup_v1alpha2.go for 1.36, podgroup_v1beta1.go for 1.37, chosen by the k8s_1_37 build tag).
type podGroupKeys interface {
	// topologyKey is the group's schedulingConstraints.topology[0].key, "" without one.
	topologyKey(podGroup fwk.PodGroupInfo) (string, error)
}
