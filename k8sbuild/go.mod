// The module root only: each Kubernetes minor pins its release in go.<minor>.mod (build.sh -modfile).
module github.com/meshfit/meshfit/k8sbuild

go 1.26.0
