//go:build k8s_1_37

package main

import (
	fwk "k8s.io/kube-scheduler/framework"
)

// v1beta1Keys reads 1.37's scheduling.k8s.io/v1beta1 PodGroup (or v1alpha3 CompositePodGroup) that the group
// cycle hands the plugin with the group itself.
type v1beta1Keys struct{}

func newPodGroupKeys(fwk.Handle) podGroupKeys { return v1beta1Keys{} }

func (v1beta1Keys) topologyKey(podGroup fwk.PodGroupInfo) (string, error) {
	if group := podGroup.GetPodGroup(); group != nil {
		if c := group.Spec.SchedulingConstraints; c != nil && len(c.Topology) > 0 {
			return c.Topology[0].Key, nil
		}
		return "", nil
	}
	if composite := podGroup.GetCompositePodGroup(); composite != nil {
		if c := composite.Spec.SchedulingConstraints; c != nil && len(c.Topology) > 0 {
			return c.Topology[0].Key, nil
		}
	}
	return "", nil
}
