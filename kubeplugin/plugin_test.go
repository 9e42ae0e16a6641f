package main

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

const leaf = "network.topology.nvidia.com/leaf"

func nodeInfo(name, domain string) fwk.NodeInfo {
	info := framework.NewNodeInfo()
	info.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{leaf: domain}}})
	return info
}

func pod(name string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)}}
}

func parent() *fwk.Placement {
	return &fwk.Placement{Nodes: []fwk.NodeInfo{nodeInfo("a", "leaf-0"), nodeInfo("b", "leaf-0"),
		nodeInfo("c", "leaf-1")}}
}

func answer(nodes ...string) *GroupPlacement {
	placed := &GroupPlacement{Status: "placed", Gang: "ns/g"}
	for i, node := range nodes {
		name := string(rune('p' + i))
		placed.Members = append(placed.Members, Member{Name: name, UID: "uid-" + name, Node: node})
	}
	return placed
}

func TestPlacementIsMeshfitsNodesNamedAfterTheDomain(t *testing.T) {
	placement, reason := placementOf(answer("a", "b", "a"), []*v1.Pod{pod("p"), pod("q"), pod("r")}, parent(), leaf)
	if reason != "" {
		t.Fatalf("unexpected refusal: %s", reason)
	}
	if placement.Name != "meshfit:"+leaf+"=leaf-0" {
		t.Errorf("name %q", placement.Name)
	}
	var names []string
	for _, node := range placement.Nodes {
		names = append(names, node.Node().Name)
	}
	if strings.Join(names, ",") != "a,b" {
		t.Errorf("nodes %v, want a,b (each once, in member order)", names)
	}
}

func TestPlacementSpanningTwoDomainsOfTheRequiredKeyIsRefused(t *testing.T) {
	_, reason := placementOf(answer("a", "c"), []*v1.Pod{pod("p"), pod("q")}, parent(), leaf)
	if !strings.Contains(reason, "more than one") {
		t.Errorf("reason %q", reason)
	}
	if _, reason := placementOf(answer("a", "c"), []*v1.Pod{pod("p"), pod("q")}, parent(), ""); reason != "" {
		t.Errorf("no required key: %q", reason)
	}
}

func TestPlacementMissingAMemberOrUsingAnUnofferedNodeIsRefused(t *testing.T) {
	if _, reason := placementOf(answer("a"), []*v1.Pod{pod("p"), pod("q")}, parent(), leaf); !strings.Contains(reason, "no node for pod q") {
		t.Errorf("missing member: %q", reason)
	}
	if _, reason := placementOf(answer("zz"), []*v1.Pod{pod("p")}, parent(), leaf); !strings.Contains(reason, "not a candidate") {
		t.Errorf("unoffered node: %q", reason)
	}
}

func TestWireMessagesRoundTripThroughTheEmbeddedDescriptor(t *testing.T) {
	msgs, err := loadMessages()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := proto.Marshal(msgs.encodeRequest(GroupRequest{Namespace: "ns", PodGroup: "g", TopologyKey: leaf,
		Pods: [][]byte{[]byte(`{"metadata":{}}`)}, Nodes: []string{"a", "b"}}))
	if err != nil {
		t.Fatal(err)
	}
	back := dynamicpb.NewMessage(msgs.request)
	if err := proto.Unmarshal(raw, back); err != nil {
		t.Fatal(err)
	}
	f := msgs.request.Fields()
	if back.Get(f.ByName("pod_group")).String() != "g" || back.Get(f.ByName("nodes")).List().Len() != 2 {
		t.Errorf("request did not round-trip: %v", back)
	}

	response := dynamicpb.NewMessage(msgs.response)
	rf, mf := msgs.response.Fields(), msgs.member.Fields()
	response.Set(rf.ByName("status"), protoreflect.ValueOfString("placed"))
	response.Set(rf.ByName("rendezvous"), protoreflect.ValueOfString("a"))
	member := response.Mutable(rf.ByName("members")).List().NewElement()
	member.Message().Set(mf.ByName("name"), protoreflect.ValueOfString("g-0"))
	member.Message().Set(mf.ByName("node"), protoreflect.ValueOfString("a"))
	member.Message().Mutable(mf.ByName("ranks")).List().Append(protoreflect.ValueOfInt32(7))
	member.Message().Mutable(mf.ByName("annotations")).Map().Set(
		protoreflect.ValueOfString("meshfit.io/master-addr").MapKey(), protoreflect.ValueOfString("a"))
	response.Mutable(rf.ByName("members")).List().Append(member)
	wire, err := proto.Marshal(response)
	if err != nil {
		t.Fatal(err)
	}
	decoded := dynamicpb.NewMessage(msgs.response)
	if err := proto.Unmarshal(wire, decoded); err != nil {
		t.Fatal(err)
	}
	got := msgs.decodeResponse(decoded)
	if got.Status != "placed" || got.Rendezvous != "a" || len(got.Members) != 1 {
		t.Fatalf("decoded %+v", got)
	}
	m := got.Members[0]
	if m.Name != "g-0" || m.Node != "a" || len(m.Ranks) != 1 || m.Ranks[0] != 7 ||
		m.Annotations["meshfit.io/master-addr"] != "a" {
		t.Errorf("member %+v", m)
	}
}
