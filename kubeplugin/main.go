// Command meshfit-kube-scheduler is kube-scheduler 1.36 with the MeshfitPlacement plugin registered.
//
// Enable it in a profile (see README.md): placementGenerate, preFilter and bind, with TopologyPlacementGenerator
// disabled in placementGenerate (only the first generator of a profile runs).
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	command := app.NewSchedulerCommand(app.WithPlugin(Name, New))
	os.Exit(cli.Run(command))
}
