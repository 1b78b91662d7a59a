#!/usr/bin/env bash
# packaging/self_test_bundle.sh — what `make bundle-test` (and CI) runs after `build.sh --bundle-only`: start the
# frozen folder packaging/out/dist/miaohui as a user would, offscreen, on a scratch data folder (MIAOHUI_HOME in a
# temporary directory, a clean environment, no network where `unshare -n` is allowed), require `--version`, then
# `--self-test` to exit 0 with a reply streamed from the bundled model (packaging/check_self_test.py reads its
# report), and check that nothing was written into the bundle and the bundled model was not copied to the data
# folder. `miaohui engine info` runs too: the headless CLI inside the same bundle imports its commands by name, so
# a module that moved shows here. Environment: SELF_TEST_TIMEOUT (seconds, default 600).
set -euo pipefail

cd "$(dirname "$0")/.."
BUNDLE=packaging/out/dist/miaohui
log() { printf 'bundle-test: %s\n' "$*" >&2; }
fail() { printf 'bundle-test: FAIL: %s\n' "$*" >&2; exit 1; }

[ -x "$BUNDLE/miaohui" ] || fail "no frozen app at $BUNDLE/miaohui: run \`make bundle\` first"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/home" "$WORK/data"

# No network for the app where this machine lets us make a namespace without one (root, or user namespaces).
NET=()
if command -v unshare >/dev/null && unshare -n true 2>/dev/null; then NET=(unshare -n); fi
run_app() {
    env -i PATH=/usr/bin:/bin HOME="$WORK/home" LANG=C.UTF-8 MIAOHUI_HOME="$WORK/data" QT_QPA_PLATFORM=offscreen \
        timeout "${SELF_TEST_TIMEOUT:-600}" "${NET[@]}" "$BUNDLE/miaohui" "$@"
}
STAMP=$WORK/stamp
touch "$STAMP"
sleep 1  # mtime granularity: anything written in the bundle after this is newer than the stamp

version=$(run_app --version 2>"$WORK/version.err") || { cat "$WORK/version.err" >&2; fail "--version exited non-zero"; }
log "--version: $version"

run_app engine info --help >"$WORK/engine.out" 2>&1 || { tail -20 "$WORK/engine.out" >&2; fail "miaohui engine info --help failed"; }

log "running the frozen app's --self-test offscreen on a scratch data folder${NET[*]:+, without network}"
start=$SECONDS
set +e
run_app --self-test >"$WORK/self-test.json" 2>"$WORK/self-test.log"
rc=$?
set -e
if [ "$rc" != 0 ]; then
    tail -30 "$WORK/self-test.log" | sed 's/^/    | /' >&2
    sed 's/^/    | /' "$WORK/self-test.json" >&2
    fail "--self-test exited $rc (output above)"
fi
python3 packaging/check_self_test.py "$WORK/self-test.json" || fail "the self-test report shows no reply from the bundled model"

written=$(find "$BUNDLE" -newer "$STAMP" | head -5)
[ -z "$written" ] || fail "the frozen app wrote into its own folder: $written"
[ ! -e "$WORK/data/models/SmolLM2-135M-Instruct" ] || fail "the app copied the bundled model into the data folder"
log "PASS: the frozen app answered from its bundled model in $((SECONDS - start))s ($(du -sh "$BUNDLE" | cut -f1) folder)"
