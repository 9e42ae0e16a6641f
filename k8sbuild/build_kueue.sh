#!/usr/bin/env bash
# Build Kueue's manager from its Go module (sigs.k8s.io/kueue, through the module proxy) into the per-user cache,
# with the module's own config/ (CRDs, webhooks) beside it, as tests/realk8s/kueue_manager.py looks for it:
#   ~/.cache/meshfit/kueue/<version>/{bin/kueue,config/,VERSION}
# Usage: k8sbuild/build_kueue.sh [--missing] [version]      (default v0.19.2: the newest the proxy serves here)
set -euo pipefail
cache="${MESHFIT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/meshfit}"
missing_only=0
version=v0.19.2
for a in "$@"; do
  case "$a" in
    --missing) missing_only=1 ;;
    -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
    v[0-9]*) version="$a" ;;
    *) echo "build_kueue.sh: unknown argument '$a' (expected a version such as v0.19.2, or --missing)" >&2; exit 2 ;;
  esac
done
dest="$cache/kueue/${version#v}"
if [ "$missing_only" = 1 ] && [ -x "$dest/bin/kueue" ] && [ -d "$dest/config/components/crd/bases" ]; then
  echo "kueue: $version already in $dest"
  exit 0
fi
command -v go >/dev/null || { echo "build_kueue.sh: Go not found" >&2; exit 2; }
start=$(date +%s)
mkdir -p "$dest/bin"
GOBIN="$dest/bin" CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kueue/cmd/kueue@$version"
source_dir="$(go mod download -json "sigs.k8s.io/kueue@$version" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')"
rm -rf "$dest/config"
cp -r "$source_dir/config" "$dest/config"
chmod -R u+w "$dest/config"
echo "$version" > "$dest/VERSION"
echo "kueue: built $version into $dest in $(( $(date +%s) - start )) s"
