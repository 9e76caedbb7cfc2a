#!/usr/bin/env bash
# Build (or reuse) Kueue's manager from the Go module proxy, with the CRDs and webhook
# configurations of the same release, for the real-cluster tests' Kueue flavor.
#
# Usage: tests/realk8s/build_kueue.sh      # prints the Kueue folder on its last line
#   exit 0: built or reused; 3: no `go` on PATH and nothing cached; anything else: the build failed
#   FIREDRILL_KUEUE_VERSION  sigs.k8s.io/kueue version (default below)
#   FIREDRILL_REALK8S_CACHE  cache root (default $HOME/.cache/firedrill/realk8s)
#
# sigs.k8s.io/kueue has no replace directives, so `go install .../cmd/kueue@<version>`
# builds it as published. The folder holds bin/kueue, crds/ (config/components/crd/bases)
# and webhook/manifests.yaml (config/components/webhook), copied from the module so a
# cleaned GOMODCACHE does not lose them; the stamp is written last.
set -euo pipefail
source "$(dirname "$0")/gotool.sh"

gotool_begin kueue "${FIREDRILL_KUEUE_VERSION:-v0.17.0}"
[[ -f "$STAMP" && -x "$DIR/bin/kueue" ]] && gotool_reuse
gotool_need_go
gotool_install sigs.k8s.io/kueue/cmd/kueue
SRC="$(gotool_source sigs.k8s.io/kueue)"
[[ -d "$SRC/config/components/crd/bases" ]] || { gotool_log "no config/components in $SRC"; exit 1; }
mkdir -p "$DIR/crds" "$DIR/webhook"
cp "$SRC"/config/components/crd/bases/*.yaml "$DIR/crds/"
cp "$SRC/config/components/webhook/manifests.yaml" "$DIR/webhook/manifests.yaml"
chmod -R u+w "$DIR/crds" "$DIR/webhook"
gotool_stamp
