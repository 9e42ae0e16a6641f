package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	_ "embed"
	"fmt"
	"net"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// placementDescriptor is meshfit/v1/placement.proto compiled to a FileDescriptorSet (see README.md: protoc-gen-go is
// not available offline, so messages are built from the descriptor with dynamicpb; the wire format is the same).
//
//go:embed placement.desc
var placementDescriptor []byte

const placePodGroupMethod = "/meshfit.v1.Placement/PlacePodGroup"

// GroupRequest is one PlacePodGroup call: the group's unscheduled members (as Pod JSON) and the candidate nodes.
type GroupRequest struct {
	Namespace, PodGroup, TopologyKey string
	Pods                             [][]byte
	Nodes                            []string
}

// Member is one member's placement.
type Member struct {
	Name, UID, Node string
	Index           int32
	Ranks           []int32
	Annotations     map[string]string
}

// GroupPlacement is meshfit's answer.
type GroupPlacement struct {
	Status, Reason, Gang, Rendezvous string
	Members                          []Member
	StepCommSeconds                  float64
}

// Placer places a whole pod group (meshfit's gRPC service, or a fake in tests).
type Placer interface {
	PlacePodGroup(ctx context.Context, request GroupRequest) (*GroupPlacement, error)
}

// messages holds the descriptors of the two messages PlacePodGroup exchanges.
type messages struct {
	request, response, member protoreflect.MessageDescriptor
}

func loadMessages() (messages, error) {
	set := &descriptorpb.FileDescriptorSet{}
	if err := proto.Unmarshal(placementDescriptor, set); err != nil {
		return messages{}, fmt.Errorf("placement descriptor: %w", err)
	}
	for _, file := range set.File {
		if file.GetPackage() != "meshfit.v1" {
			continue
		}
		fd, err := protodesc.NewFile(file, nil)
		if err != nil {
			return messages{}, fmt.Errorf("placement descriptor: %w", err)
		}
		m := messages{request: fd.Messages().ByName("PodGroupRequest"),
			response: fd.Messages().ByName("PodGroupPlacement"), member: fd.Messages().ByName("MemberPlacement")}
		if m.request == nil || m.response == nil || m.member == nil {
			return messages{}, fmt.Errorf("placement descriptor has no PodGroupRequest/PodGroupPlacement")
		}
		return m, nil
	}
	return messages{}, fmt.Errorf("placement descriptor has no meshfit.v1 file")
}

// encodeRequest builds the PodGroupRequest message.
func (m messages) encodeRequest(request GroupRequest) *dynamicpb.Message {
	msg := dynamicpb.NewMessage(m.request)
	fields := m.request.Fields()
	msg.Set(fields.ByName("namespace"), protoreflect.ValueOfString(request.Namespace))
	msg.Set(fields.ByName("pod_group"), protoreflect.ValueOfString(request.PodGroup))
	msg.Set(fields.ByName("topology_key"), protoreflect.ValueOfString(request.TopologyKey))
	pods := msg.Mutable(fields.ByName("pods")).List()
	for _, pod := range request.Pods {
		pods.Append(protoreflect.ValueOfBytes(pod))
	}
	nodes := msg.Mutable(fields.ByName("nodes")).List()
	for _, node := range request.Nodes {
		nodes.Append(protoreflect.ValueOfString(node))
	}
	return msg
}

// decodeResponse reads a PodGroupPlacement message.
func (m messages) decodeResponse(msg *dynamicpb.Message) *GroupPlacement {
	fields := m.response.Fields()
	answer := &GroupPlacement{
		Status: msg.Get(fields.ByName("status")).String(), Reason: msg.Get(fields.ByName("reason")).String(),
		Gang: msg.Get(fields.ByName("gang")).String(), Rendezvous: msg.Get(fields.ByName("rendezvous")).String(),
		StepCommSeconds: msg.Get(fields.ByName("step_comm_seconds")).Float(),
	}
	members := msg.Get(fields.ByName("members")).List()
	mf := m.member.Fields()
	for i := 0; i < members.Len(); i++ {
		item := members.Get(i).Message()
		member := Member{Name: item.Get(mf.ByName("name")).String(), UID: item.Get(mf.ByName("uid")).String(),
			Node: item.Get(mf.ByName("node")).String(), Index: int32(item.Get(mf.ByName("index")).Int()),
			Annotations: map[string]string{}}
		ranks := item.Get(mf.ByName("ranks")).List()
		for r := 0; r < ranks.Len(); r++ {
			member.Ranks = append(member.Ranks, int32(ranks.Get(r).Int()))
		}
		item.Get(mf.ByName("annotations")).Map().Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
			member.Annotations[k.String()] = v.String()
			return true
		})
		answer.Members = append(answer.Members, member)
	}
	return answer
}

// grpcPlacer calls meshfit's meshfit.v1.Placement service.
type grpcPlacer struct {
	conn *grpc.ClientConn
	msgs messages
}

// DialPlacer connects (lazily) to meshfit's gRPC endpoint, with mTLS when Args name a CA.
func DialPlacer(args Args) (Placer, error) {
	msgs, err := loadMessages()
	if err != nil {
		return nil, err
	}
	creds, err := transportCredentials(args)
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(args.Endpoint, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, fmt.Errorf("%s: meshfit endpoint %q: %w", Name, args.Endpoint, err)
	}
	return &grpcPlacer{conn: conn, msgs: msgs}, nil
}

func transportCredentials(args Args) (credentials.TransportCredentials, error) {
	if args.CAFile == "" {
		return insecure.NewCredentials(), nil
	}
	pem, err := os.ReadFile(args.CAFile)
	if err != nil {
		return nil, fmt.Errorf("%s caFile: %w", Name, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s caFile %s: no PEM certificate in it", Name, args.CAFile)
	}
	config := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12, ServerName: args.ServerName}
	if config.ServerName == "" {
		if host, _, err := net.SplitHostPort(args.Endpoint); err == nil {
			config.ServerName = host
		}
	}
	if args.CertFile != "" || args.KeyFile != "" {
		pair, err := tls.LoadX509KeyPair(args.CertFile, args.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("%s certFile/keyFile: %w", Name, err)
		}
		config.Certificates = []tls.Certificate{pair}
	}
	return credentials.NewTLS(config), nil
}

// PlacePodGroup makes one unary call.
func (p *grpcPlacer) PlacePodGroup(ctx context.Context, request GroupRequest) (*GroupPlacement, error) {
	response := dynamicpb.NewMessage(p.msgs.response)
	if err := p.conn.Invoke(ctx, placePodGroupMethod, p.msgs.encodeRequest(request), response); err != nil {
		return nil, err
	}
	return p.msgs.decodeResponse(response), nil
}
