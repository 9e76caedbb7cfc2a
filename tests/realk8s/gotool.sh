# Sourced by build_kueue.sh and build_kwok.sh: build (or reuse) one Go command of a published module with
# `go install`, into a cache folder of its own, one build at a time.
#
#   gotool_begin NAME VERSION   sets DIR (cache folder) and STAMP, takes DIR/.lock (a second caller waits,
#                               then reuses what the first built); exits 3 when Go is absent and the caller's
#                               gotool_cached said nothing is cached
#   gotool_install PACKAGE      go install PACKAGE@VERSION into DIR/bin (nice 19, -mod=mod, no cgo)
#   gotool_source               prints the module's folder in GOMODCACHE (to copy manifests from)
#   gotool_stamp                writes DIR/.built (versions and seconds) last, and prints DIR
# FIREDRILL_REALK8S_CACHE is the cache root (default $HOME/.cache/firedrill/realk8s).

gotool_log() { printf '%s build: %s\n' "$GOTOOL_NAME" "$*" >&2; }

gotool_begin() {
    GOTOOL_NAME="$1" GOTOOL_VERSION="$2" GOTOOL_T0=$SECONDS
    DIR="${FIREDRILL_REALK8S_CACHE:-$HOME/.cache/firedrill/realk8s}/$GOTOOL_NAME-$GOTOOL_VERSION"
    STAMP="$DIR/.built"
    [[ "$GOTOOL_VERSION" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] \
        || { gotool_log "the version must look like v<major>.<minor>.<patch>, got '$GOTOOL_VERSION'"; exit 1; }
    mkdir -p "$DIR"
    exec 9>"$DIR/.lock"
    if command -v flock >/dev/null 2>&1; then
        flock -w 3600 9 || { gotool_log "another build held $DIR/.lock for an hour"; exit 1; }
    fi
}

gotool_reuse() {
    gotool_log "reusing $GOTOOL_NAME $GOTOOL_VERSION ($(tr '\n' ' ' <"$STAMP"))"
    echo "$DIR"
    exit 0
}

gotool_need_go() {
    if ! command -v go >/dev/null 2>&1; then
        gotool_log "no go on PATH and no cached $GOTOOL_NAME in $DIR"
        exit 3
    fi
}

gotool_install() {
    mkdir -p "$DIR/bin"
    cd "$DIR"  # outside any module of the caller's
    gotool_log "go install $1@$GOTOOL_VERSION (minutes on a cold cache)"
    GOBIN="$DIR/bin" GOFLAGS=-mod=mod CGO_ENABLED=0 nice -n 19 go install -trimpath "$1@$GOTOOL_VERSION"
}

gotool_source() {
    go mod download -json "$1@$GOTOOL_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p'
}

gotool_stamp() {
    {
        echo "$GOTOOL_NAME=$GOTOOL_VERSION"
        echo "go=$(go env GOVERSION)"
        echo "seconds=$((SECONDS - GOTOOL_T0))"
    } >"$STAMP"
    gotool_log "built in $((SECONDS - GOTOOL_T0)) s into $DIR"
    echo "$DIR"
}
