#!/usr/bin/env bash
# Build (or reuse) KWOK's controller from the Go module proxy: the fake GPU nodes of the
# real-cluster tests at size (tests/realk8s/kwok.py).
#
# Usage: tests/realk8s/build_kwok.sh       # prints the KWOK folder on its last line
#   exit 0: built or reused; 3: no `go` on PATH and nothing cached; anything else: the build failed
#   FIREDRILL_KWOK_VERSION   sigs.k8s.io/kwok version (default below)
#   FIREDRILL_REALK8S_CACHE  cache root (default $HOME/.cache/firedrill/realk8s)
#
# sigs.k8s.io/kwok has no replace directives, so `go install .../cmd/kwok@<version>` builds it
# as published. The folder holds bin/kwok and stages.yaml: the release's own "fast" Stages (a node
# initialized Ready at once, its Lease renewed; a pod Running at once, completed, deleted), which the
# kwok binary needs as --config (kwokctl passes them; kwok alone has none). The stamp is written last.
set -euo pipefail
source "$(dirname "$0")/gotool.sh"

gotool_begin kwok "${FIREDRILL_KWOK_VERSION:-v0.8.0}"
[[ -f "$STAMP" && -x "$DIR/bin/kwok" && -f "$DIR/stages.yaml" ]] && gotool_reuse
gotool_need_go
gotool_install sigs.k8s.io/kwok/cmd/kwok
STAGES="$(gotool_source sigs.k8s.io/kwok)/kustomize/stage"
for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
         pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
    [[ -f "$STAGES/$f" ]] || { gotool_log "no $f in $STAGES"; exit 1; }
    printf -- '---\n# %s (sigs.k8s.io/kwok@%s)\n' "$f" "$GOTOOL_VERSION"
    cat "$STAGES/$f"
done >"$DIR/stages.yaml"
gotool_stamp
