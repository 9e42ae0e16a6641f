#!/usr/bin/env bash
# Build helm from its Go module (helm.sh/helm/v4) into the per-user cache:
#   ${MESHFIT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/meshfit}/tools/helm-<version>/bin/helm
# Usage: k8sbuild/build_helm.sh [version]      (default v4.3.2; skipped when that helm is already there)
# Needs: Go 1.26 and the module proxy.  Nothing is written into the repository.
# The chart tests find helm through $MESHFIT_HELM, then this cache path, then PATH.
set -euo pipefail
version="${1:-v4.3.2}"
case "$version" in
  -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
  v[0-9]*.[0-9]*.[0-9]*) ;;
  *) echo "build_helm.sh: bad version '$version' (expected a tag such as v4.3.2)" >&2; exit 2 ;;
esac
cache="${MESHFIT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/meshfit}"
bin="$cache/tools/helm-$version/bin"
if [ -x "$bin/helm" ] && "$bin/helm" version --short 2>/dev/null | grep -q "^${version}"; then
  echo "helm $version already in $bin"
  exit 0
fi
command -v go >/dev/null || { echo "build_helm.sh: Go not found (Go 1.26 builds helm)" >&2; exit 2; }
mkdir -p "$bin"
start=$(date +%s)
major="${version%%.*}"
# -ldflags sets the version helm reports (a module build otherwise says its main module's version only).
ldflags="-s -w -X helm.sh/helm/$major/internal/version.version=$version"
CGO_ENABLED=0 GOBIN="$bin" GOFLAGS=-buildvcs=false go install -trimpath -ldflags "$ldflags" \
  "helm.sh/helm/$major/cmd/helm@$version"
"$bin/helm" version --short
echo "helm $version: built into $bin in $(( $(date +%s) - start )) s"
