//go:build !k8s_1_37

package main

import (
	schedulinglisters "k8s.io/client-go/listers/scheduling/v1alpha2"
	fwk "k8s.io/kube-scheduler/framework"
)

// v1alpha2Keys reads 1.36's scheduling.k8s.io/v1alpha2 PodGroups from kube-scheduler's informer.
type v1alpha2Keys struct {
	lister schedulinglisters.PodGroupLister
}

func newPodGroupKeys(handle fwk.Handle) podGroupKeys {
	return v1alpha2Keys{lister: handle.SharedInformerFactory().Scheduling().V1alpha2().PodGroups().Lister()}
}

func (k v1alpha2Keys) topologyKey(podGroup fwk.PodGroupInfo) (string, error) {
	group, err := k.lister.PodGroups(podGroup.GetNamespace()).Get(podGroup.GetName())
	if err != nil {
		return "", err
	}
	if c := group.Spec.SchedulingConstraints; c != nil && len(c.Topology) > 0 {
		return c.Topology[0].Key, nil
	}
	return "", nil
}
