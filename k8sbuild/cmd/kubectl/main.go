// Command kubectl is upstream's kubectl (the k8s.io/kubectl staging module that go.<minor>.mod pins), built so
// the tests' `kubectl kustomize` and server-side applies use the release under test.
package main

import (
	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	if err := cli.RunNoErrOutput(cmd.NewDefaultKubectlCommand()); err != nil {
		util.CheckErr(err)
	}
}
