// The module root only: each Kubernetes minor pins its release in go.<minor>.mod (k8sbuild/build.sh -modfile).
module github.com/meshfit/meshfit/kubeplugin

go 1.26.0
