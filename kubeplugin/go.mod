module github.com/meshfit/meshfit/kubeplugin

go 1.26.0

godebug default=go1.26

require (
	google.golang.org/grpc v1.79.3
	google.golang.org/protobuf v1.36.12-0.20260120151049-f2248ac996af
	k8s.io/api v0.36.2
	k8s.io/apimachinery v0.36.2
	k8s.io/client-go v0.36.2
	k8s.io/component-base v0.36.2
	k8s.io/klog/v2 v2.140.0
	k8s.io/kube-scheduler v0.36.2
	k8s.io/kubernetes v1.36.3
)
