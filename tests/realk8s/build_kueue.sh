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

KUEUE_VERSION="${FIREDRILL_KUEUE_VERSION:-v0.17.0}"
CACHE_ROOT="${FIREDRILL_REALK8S_CACHE:-$HOME/.cache/firedrill/realk8s}"
DIR="$CACHE_ROOT/kueue-$KUEUE_VERSION"
STAMP="$DIR/.built"

log() { printf 'kueue build: %s\n' "$*" >&2; }

# One build at a time (see build.sh): a second caller waits, then reuses what the first built.
mkdir -p "$DIR"
exec 9>"$DIR/.lock"
if command -v flock >/dev/null 2>&1; then
    flock -w 3600 9 || { printf 'kueue build: another build held %s/.lock for an hour\n' "$DIR" >&2; exit 1; }
fi

if [[ -f "$STAMP" && -x "$DIR/bin/kueue" ]]; then
    log "reusing kueue $KUEUE_VERSION ($(tr '\n' ' ' <"$STAMP"))"
    echo "$DIR"
    exit 0
fi
if ! command -v go >/dev/null 2>&1; then
    printf 'kueue build: no go on PATH and no cached kueue in %s\n' "$DIR" >&2
    exit 3
fi
[[ "$KUEUE_VERSION" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] \
    || { log "FIREDRILL_KUEUE_VERSION must look like v<major>.<minor>.<patch>, got '$KUEUE_VERSION'"; exit 1; }

t0=$SECONDS
mkdir -p "$DIR/bin" "$DIR/crds" "$DIR/webhook"
cd "$DIR"  # outside any module of the caller's
log "go install sigs.k8s.io/kueue/cmd/kueue@$KUEUE_VERSION (minutes on a cold cache)"
GOBIN="$DIR/bin" GOFLAGS=-mod=mod nice -n 19 go install "sigs.k8s.io/kueue/cmd/kueue@$KUEUE_VERSION"
SRC="$(go mod download -json "sigs.k8s.io/kueue@$KUEUE_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
[[ -d "$SRC/config/components/crd/bases" ]] || { log "no config/components in $SRC"; exit 1; }
cp "$SRC"/config/components/crd/bases/*.yaml "$DIR/crds/"
cp "$SRC/config/components/webhook/manifests.yaml" "$DIR/webhook/manifests.yaml"
chmod -R u+w "$DIR/crds" "$DIR/webhook"
{
    echo "kueue=$KUEUE_VERSION"
    echo "go=$(go env GOVERSION)"
    echo "seconds=$((SECONDS - t0))"
} >"$STAMP"
log "built in $((SECONDS - t0)) s into $DIR"
echo "$DIR"
