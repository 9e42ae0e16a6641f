#!/usr/bin/env bash
# What CI builds and checks before README's two commands (see k8sbuild/README.md): upstream Kubernetes from the Go
# module proxy into the per-user cache, the newest minor always, then older minors newest first while the build
# budget lasts (a cold build is 10-20 min a minor on 2 cores; a warm cache skips each in a second); Kueue and helm
# from their modules; kubeplugin's `go vet` and `go test` for each minor it is built for.  tests/realk8s then runs
# on every version found, and under CI=true a version that is missing fails instead of skipping.
#   k8sbuild/ci_tools.sh          (MESHFIT_CI_BUILD_BUDGET_MIN: minutes of building after which older minors wait)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
started=$(date +%s)
budget_min="${MESHFIT_CI_BUILD_BUDGET_MIN:-40}"
minors=($(ls "$here"/go.1.*.mod | sed 's#.*/go\.\(1\.[0-9]*\)\.mod#\1#' | sort -t. -k2,2nr))
"$here/build.sh" --missing "${minors[0]}"
for minor in "${minors[@]:1}"; do
  if (( $(date +%s) - started < budget_min * 60 )); then
    "$here/build.sh" --missing "$minor"
  else
    echo "ci_tools.sh: build budget ($budget_min min) spent: Kubernetes $minor not built in this run"
  fi
done
"$here/build_kueue.sh" --missing
"$here/build_helm.sh"   # skipped when that helm is already built

for mod in "$here"/../kubeplugin/go.1.*.mod; do
  minor="$(basename "$mod" .mod)"; minor="${minor#go.}"
  tags="providerless,k8s_${minor/./_}"
  (cd "$here/../kubeplugin" && GOFLAGS=-mod=mod go vet -modfile="go.$minor.mod" -tags "$tags" . \
     && GOFLAGS=-mod=mod go test -count=1 -modfile="go.$minor.mod" -tags "$tags" .)
done
echo "ci_tools.sh: done in $(( $(date +%s) - started )) s"
