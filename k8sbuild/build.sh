#!/usr/bin/env bash
# Build upstream kube-apiserver, kube-scheduler, kube-controller-manager and kubectl for one or more Kubernetes minors
# from the Go module proxy (go.<minor>.mod pins the release) into the per-user cache, and, for a minor that
# kubeplugin/ has a go.<minor>.mod for (1.36+), kube-scheduler with the MeshfitPlacement plugin:
#   ~/.cache/meshfit/k8s/<minor>/bin                                 ($MESHFIT_CACHE, else $XDG_CACHE_HOME/meshfit,
#   ~/.cache/meshfit/k8s/<minor>/plugin-bin/meshfit-kube-scheduler     else ~/.cache/meshfit)
# Usage: k8sbuild/build.sh [--missing] [minor ...]     (no minor: every go.<minor>.mod here)
#   --missing  skip a minor whose binaries are already there and report the pinned version
# Needs: Go 1.26 and the module proxy.  etcd: Debian's etcd-server on PATH (installed here when missing and
# apt-get can), else build_etcd.sh.  Nothing is written into the repository.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${MESHFIT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/meshfit}"
missing_only=0
minors=()
for a in "$@"; do
  case "$a" in
    --missing) missing_only=1 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    [0-9]*.[0-9]*) minors+=("$a") ;;
    *) echo "build.sh: unknown argument '$a' (expected a minor such as 1.37, or --missing)" >&2; exit 2 ;;
  esac
done
if [ ${#minors[@]} -eq 0 ]; then
  for f in "$here"/go.1.*.mod; do m="${f##*/go.}"; minors+=("${m%.mod}"); done
fi
command -v go >/dev/null || { echo "build.sh: Go not found (Go 1.26 builds the control plane)" >&2; exit 2; }

for minor in "${minors[@]}"; do
  mod="$here/go.$minor.mod"
  [ -f "$mod" ] || { echo "build.sh: no $mod (known: $(cd "$here" && ls go.1.*.mod | tr '\n' ' '))" >&2; exit 2; }
  version="$(sed -n 's#^require k8s.io/kubernetes \(v[0-9.]*\)$#\1#p; s#^\s*k8s.io/kubernetes \(v[0-9.]*\)$#\1#p' "$mod" | head -1)"
  bin="$cache/k8s/$minor/bin"
  plugin_mod="$here/../kubeplugin/go.$minor.mod"
  plugin="$cache/k8s/$minor/plugin-bin/meshfit-kube-scheduler"
  if [ "$missing_only" = 1 ] && [ -x "$bin/kube-apiserver" ] && [ -x "$bin/kube-scheduler" ] \
     && [ -x "$bin/kube-controller-manager" ] && [ -x "$bin/kubectl" ] && "$bin/kube-apiserver" --version 2>/dev/null | grep -qx "Kubernetes $version" \
     && { [ ! -f "$plugin_mod" ] || [ -x "$plugin" ]; }; then
    echo "k8s $minor: $version already in $bin"
    continue
  fi
  mkdir -p "$bin"
  start=$(date +%s)
  ldflags="-s -w"
  for kv in "gitVersion=$version" "gitMajor=1" "gitMinor=${minor#1.}" "gitTreeState=clean" \
            "buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"; do
    ldflags="$ldflags -X k8s.io/component-base/version.$kv"
  done
  tags="providerless,k8s_${minor/./_}"
  for cmd in kube-apiserver kube-scheduler kube-controller-manager kubectl; do
    (cd "$here" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -modfile="$mod" -tags "$tags" -trimpath \
        -ldflags "$ldflags" -o "$bin/$cmd.new" "./cmd/$cmd")
    mv -f "$bin/$cmd.new" "$bin/$cmd"
  done
  if [ -f "$plugin_mod" ]; then
    mkdir -p "${plugin%/*}"
    (cd "$here/../kubeplugin" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -modfile="go.$minor.mod" -tags "$tags" \
        -trimpath -ldflags "$ldflags" -o "$plugin.new" .)
    mv -f "$plugin.new" "$plugin"
  fi
  echo "k8s $minor: built $version into $bin in $(( $(date +%s) - start )) s"
done

if ! command -v etcd >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "etcd: installing Debian's etcd-server"
    (apt-get install -y -q etcd-server >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q etcd-server >/dev/null; })
  else
    echo "build.sh: no etcd on PATH: 'apt-get install etcd-server' (Debian) or k8sbuild/build_etcd.sh" >&2
  fi
fi
