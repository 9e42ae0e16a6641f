package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
)

// Name is the plugin's name in the registry and in profiles.
const Name = "MeshfitPlacement"

// assignmentTTL bounds how long an unbound member's placement is remembered between its group cycle and its Bind.
const assignmentTTL = 10 * time.Minute

// Args are the plugin's arguments (pluginConfig of the profile).
type Args struct {
	// Endpoint is meshfit's gRPC address, host:port.
	Endpoint string `json:"endpoint"`
	// CAFile, CertFile and KeyFile turn on mTLS: the CA meshfit's certificate is checked against, and the client
	// certificate kube-scheduler presents. Without CAFile the connection is plaintext (loopback only).
	CAFile   string `json:"caFile,omitempty"`
	CertFile string `json:"certFile,omitempty"`
	KeyFile  string `json:"keyFile,omitempty"`
	// ServerName overrides the name checked in meshfit's certificate (default: the endpoint's host).
	ServerName string `json:"serverName,omitempty"`
	// TimeoutSeconds bounds one PlacePodGroup call (default 5).
	TimeoutSeconds float64 `json:"timeoutSeconds,omitempty"`
}

// assignment is what meshfit decided for one member: its node and the annotations its Binding carries.
type assignment struct {
	node        string
	annotations map[string]string
	at          time.Time
}

// MeshfitPlacement asks meshfit for a pod group's whole placement (one gRPC call per group cycle), offers
// kube-scheduler that one placement, pins each member to its node at PreFilter, and binds it with its ranks.
type MeshfitPlacement struct {
	handle    fwk.Handle
	placer    Placer
	podGroups podGroupKeys
	timeout   time.Duration
	now       func() time.Time

	mu       sync.Mutex
	assigned map[types.UID]assignment
}

var (
	_ fwk.PlacementGeneratePlugin = &MeshfitPlacement{}
	_ fwk.PreFilterPlugin         = &MeshfitPlacement{}
	_ fwk.BindPlugin              = &MeshfitPlacement{}
)

// New builds the plugin from its Args (a frameworkruntime.PluginFactory).
func New(_ context.Context, obj runtime.Object, handle fwk.Handle) (fwk.Plugin, error) {
	args := Args{}
	if obj != nil {
		if err := frameworkruntime.DecodeInto(obj, &args); err != nil {
			return nil, fmt.Errorf("%s args: %w", Name, err)
		}
	}
	if args.Endpoint == "" {
		return nil, fmt.Errorf("%s args: endpoint (meshfit's gRPC host:port) is required", Name)
	}
	placer, err := DialPlacer(args)
	if err != nil {
		return nil, err
	}
	return newPlugin(handle, placer, newPodGroupKeys(handle), timeoutOf(args)), nil
}

func timeoutOf(args Args) time.Duration {
	if args.TimeoutSeconds <= 0 {
		return 5 * time.Second
	}
	return time.Duration(args.TimeoutSeconds * float64(time.Second))
}

func newPlugin(handle fwk.Handle, placer Placer, podGroups podGroupKeys,
	timeout time.Duration) *MeshfitPlacement {
	return &MeshfitPlacement{handle: handle, placer: placer, podGroups: podGroups, timeout: timeout,
		now: time.Now, assigned: map[types.UID]assignment{}}
}

// Name returns the plugin's name.
func (pl *MeshfitPlacement) Name() string { return Name }

// GeneratePlacements asks meshfit for the group's placement and returns it as the one candidate placement.
func (pl *MeshfitPlacement) GeneratePlacements(ctx context.Context, _ fwk.PodGroupCycleState,
	podGroup fwk.PodGroupInfo, parent *fwk.Placement) (*fwk.GeneratePlacementsResult, *fwk.Status) {
	key, err := pl.podGroups.topologyKey(podGroup)
	if err != nil {
		return nil, fwk.AsStatus(err)
	}
	request, err := groupRequest(podGroup, parent, key)
	if err != nil {
		return nil, fwk.AsStatus(err)
	}
	callCtx, cancel := context.WithTimeout(ctx, pl.timeout)
	defer cancel()
	answer, err := pl.placer.PlacePodGroup(callCtx, request)
	if err != nil {
		return nil, fwk.AsStatus(fmt.Errorf("meshfit PlacePodGroup: %w", err))
	}
	if answer.Status != "placed" {
		return nil, fwk.NewStatus(fwk.Unschedulable, "meshfit: "+answer.Reason)
	}
	placement, reason := placementOf(answer, podGroup.GetUnscheduledPods(), parent, key)
	if reason != "" {
		return nil, fwk.NewStatus(fwk.Unschedulable, "meshfit: "+reason)
	}
	pl.remember(answer)
	klog.FromContext(ctx).V(3).Info("meshfit placed pod group", "podGroup", klog.KRef(podGroup.GetNamespace(),
		podGroup.GetName()), "placement", placement.Name, "gang", answer.Gang, "rendezvous", answer.Rendezvous)
	return &fwk.GeneratePlacementsResult{Placements: []*fwk.Placement{placement}}, nil
}

// groupRequest is the PlacePodGroup request for the group's unscheduled members and the parent's nodes.
func groupRequest(podGroup fwk.PodGroupInfo, parent *fwk.Placement, key string) (GroupRequest, error) {
	request := GroupRequest{Namespace: podGroup.GetNamespace(), PodGroup: podGroup.GetName(), TopologyKey: key}
	for _, pod := range podGroup.GetUnscheduledPods() {
		raw, err := json.Marshal(pod)
		if err != nil {
			return request, fmt.Errorf("encoding pod %s: %w", klog.KObj(pod), err)
		}
		request.Pods = append(request.Pods, raw)
	}
	for _, node := range parent.Nodes {
		request.Nodes = append(request.Nodes, node.Node().Name)
	}
	return request, nil
}

// placementOf turns meshfit's answer into one Placement (its nodes only), or says why it cannot be used.
func placementOf(answer *GroupPlacement, pods []*v1.Pod, parent *fwk.Placement, key string) (*fwk.Placement, string) {
	byName := make(map[string]fwk.NodeInfo, len(parent.Nodes))
	for _, node := range parent.Nodes {
		byName[node.Node().Name] = node
	}
	placed := make(map[types.UID]bool, len(answer.Members))
	for _, member := range answer.Members {
		placed[types.UID(member.UID)] = true
	}
	for _, pod := range pods {
		if !placed[pod.UID] {
			return nil, fmt.Sprintf("gang %s: no node for pod %s", answer.Gang, pod.Name)
		}
	}
	nodes, seen, domain := []fwk.NodeInfo{}, sets.New[string](), ""
	for _, member := range answer.Members {
		node, ok := byName[member.Node]
		if !ok {
			return nil, fmt.Sprintf("gang %s: pod %s placed on node %s, which is not a candidate", answer.Gang,
				member.Name, member.Node)
		}
		if key != "" {
			value, has := node.Node().Labels[key]
			if !has || (domain != "" && value != domain) {
				return nil, fmt.Sprintf("gang %s: its members span more than one %s domain", answer.Gang, key)
			}
			domain = value
		}
		if !seen.Has(member.Node) {
			seen.Insert(member.Node)
			nodes = append(nodes, node)
		}
	}
	name := "meshfit:" + answer.Gang
	if domain != "" {
		name = fmt.Sprintf("meshfit:%s=%s", key, domain)
	}
	return &fwk.Placement{Name: name, Nodes: nodes}, ""
}

func (pl *MeshfitPlacement) remember(answer *GroupPlacement) {
	now := pl.now()
	pl.mu.Lock()
	defer pl.mu.Unlock()
	for uid, held := range pl.assigned {
		if now.Sub(held.at) > assignmentTTL {
			delete(pl.assigned, uid)
		}
	}
	for _, member := range answer.Members {
		pl.assigned[types.UID(member.UID)] = assignment{node: member.Node, annotations: member.Annotations, at: now}
	}
}

func (pl *MeshfitPlacement) lookup(uid types.UID) (assignment, bool) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	held, ok := pl.assigned[uid]
	return held, ok
}

// PreFilter pins a placed member to meshfit's node for it; other pods are left alone (Skip).
func (pl *MeshfitPlacement) PreFilter(_ context.Context, _ fwk.CycleState, pod *v1.Pod,
	_ []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	held, ok := pl.lookup(pod.UID)
	if !ok {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	return &fwk.PreFilterResult{NodeNames: sets.New(held.node)}, nil
}

// PreFilterExtensions returns nil: the plugin has no Filter to update incrementally.
func (pl *MeshfitPlacement) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

// Bind posts the member's Binding with meshfit's annotations (ranks, rendezvous); other pods: Skip.
func (pl *MeshfitPlacement) Bind(ctx context.Context, _ fwk.CycleState, pod *v1.Pod, nodeName string) *fwk.Status {
	held, ok := pl.lookup(pod.UID)
	if !ok || held.node != nodeName {
		return fwk.NewStatus(fwk.Skip)
	}
	binding := &v1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID,
			Annotations: held.annotations},
		Target: v1.ObjectReference{Kind: "Node", Name: nodeName},
	}
	if err := pl.handle.ClientSet().CoreV1().Pods(pod.Namespace).Bind(ctx, binding, metav1.CreateOptions{}); err != nil {
		return fwk.AsStatus(err)
	}
	pl.mu.Lock()
	delete(pl.assigned, pod.UID)
	pl.mu.Unlock()
	return nil
}
