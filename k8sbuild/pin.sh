#!/usr/bin/env bash
# Write go.<minor>.mod / go.<minor>.sum of a module (k8sbuild/ by default, or kubeplugin/) for one Kubernetes release: k8s.io/kubernetes pinned, and every staging
# module it replaces with a local path (./staging/src/k8s.io/X) replaced by that module's own release, as
# scheduler-plugins does.  Run by hand when a new patch release is adopted; build.sh only reads the result.
#   k8sbuild/pin.sh 1.37.2 [kubeplugin]
set -euo pipefail
version="${1:?usage: pin.sh <kubernetes version, e.g. 1.37.2> [module folder]}"
cd "${2:-$(dirname "$0")}"
module="$(sed -n 's/^module //p' go.mod)"
minor="${version%.*}"
staging="0.${version#1.}"
mod="go.$minor.mod"
upstream="$(go mod download -json "k8s.io/kubernetes@v$version" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')"
{
  echo "// Kubernetes $version: written by pin.sh, read by build.sh -modfile=$mod"
  echo "module $module"
  echo
  echo "go 1.26.0"
  echo
  echo "require k8s.io/kubernetes v$version"
  echo
  echo "replace ("
  sed -n '/^replace (/,/^)/p' "$upstream" | sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\t\1 => \1 v'"$staging"'#p'
  echo ")"
} > "$mod"
rm -f "go.$minor.sum"
# Resolve what this minor's build (and its tests) import, with its build tag: `go mod tidy` would read every
# tag's files at once, and kubeplugin's per-version files import packages that exist in one release only.
GOFLAGS=-mod=mod go list -modfile="$mod" -tags "k8s_${minor/./_}" -deps -test ./... >/dev/null
echo "wrote $mod"
