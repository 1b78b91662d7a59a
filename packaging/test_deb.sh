#!/usr/bin/env bash
# packaging/test_deb.sh — what `make package-test` runs after `make package`: the installed-package check.
# As root: install packaging/out/miaohui_*.deb with apt (which also installs its Depends), run
# `/usr/bin/miaohui --version` and `/usr/bin/miaohui --self-test` offscreen with no network (a fresh network
# namespace: `unshare -n`), require exit 0 and a reply streamed from the bundled model, check that
# nothing was written into /opt/miaohui, remove the package, and check that the user's data directory
# (MIAOHUI_HOME, with the history.sqlite3 the self-test wrote) was left alone. Not part of `make test`: slow.
set -euo pipefail

cd "$(dirname "$0")/.."
OUT=packaging/out

log() { printf 'package-test: %s\n' "$*" >&2; }
fail() { printf 'package-test: FAIL: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || fail "run as root (it installs and removes a package)"
DEB=$(ls -t "$OUT"/miaohui_*.deb 2>/dev/null | head -1 || true)
[ -n "$DEB" ] || fail "no $OUT/miaohui_*.deb: run \`make package\` first"
command -v unshare >/dev/null || fail "unshare (util-linux) is needed to cut the network"
unshare -n true 2>/dev/null || fail "cannot create a network namespace here (unshare -n needs root/CAP_SYS_ADMIN)"

WORK=$(mktemp -d)
USER_HOME=$WORK/home
DATA=$WORK/data  # MIAOHUI_HOME: the user's data dir for this test
mkdir -p "$USER_HOME" "$DATA"
cleanup() {
    if dpkg -s miaohui >/dev/null 2>&1 && [ "${KEEP_INSTALLED:-0}" != 1 ]; then dpkg -r miaohui >/dev/null 2>&1 || true; fi
    rm -rf "$WORK"
}
trap cleanup EXIT

# ---------------------------------------------------------------- install
log "installing $DEB"
if dpkg -s miaohui >/dev/null 2>&1; then dpkg -r miaohui >/dev/null; fi
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "./$DEB" >"$WORK/apt.log" 2>&1 \
    || { tail -20 "$WORK/apt.log" >&2; fail "apt-get install ./$DEB failed"; }
[ -x /usr/bin/miaohui ] || fail "/usr/bin/miaohui missing after install"
[ -x /opt/miaohui/miaohui ] || fail "/opt/miaohui/miaohui missing after install"
[ -f /usr/share/applications/miaohui.desktop ] || fail "desktop entry missing"
ls /usr/share/icons/hicolor/*/apps/miaohui.* >/dev/null 2>&1 || fail "icon missing"
if command -v desktop-file-validate >/dev/null; then desktop-file-validate /usr/share/applications/miaohui.desktop; fi

# The installed app runs as a plain user would: clean environment, no network, no display server.
run_app() {
    env -i PATH=/usr/bin:/bin HOME="$USER_HOME" LANG=C.UTF-8 MIAOHUI_HOME="$DATA" QT_QPA_PLATFORM=offscreen \
        timeout "${SELF_TEST_TIMEOUT:-600}" unshare -n /usr/bin/miaohui "$@"
}
STAMP=$WORK/stamp
touch "$STAMP"
sleep 1  # mtime granularity: anything written under /opt after this is newer than the stamp

# ---------------------------------------------------------------- --version
version=$(run_app --version 2>"$WORK/version.err") || { cat "$WORK/version.err" >&2; fail "--version exited non-zero"; }
log "--version: $version"
[ -n "$version" ] || fail "--version printed nothing"

# ---------------------------------------------------------------- --self-test (the first start)
log "running /usr/bin/miaohui --self-test offscreen without network (first start)"
start=$(date +%s.%N)
set +e
run_app --self-test >"$WORK/self-test.out" 2>&1
rc=$?
set -e
wall=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
sed 's/^/    | /' "$WORK/self-test.out" | tail -40 >&2
[ "$rc" = 0 ] || fail "--self-test exited $rc (output above)"
log "self-test passed in ${wall}s (first start of the installed app, offline)"
# A reply was streamed: the self-test reports its generated tokens; a test that generated nothing is no pass.
grep -Eiq 'token|repl' "$WORK/self-test.out" || fail "--self-test printed no sign of a streamed reply"

[ -f "$DATA/history.sqlite3" ] || fail "the self-test wrote no history.sqlite3 into MIAOHUI_HOME ($DATA)"
written=$(find /opt/miaohui -newer "$STAMP" | head -5)
[ -z "$written" ] || fail "the app wrote into its install folder: $written"

# ---------------------------------------------------------------- remove; user data stays
before=$(cd "$DATA" && find . -type f -exec sha256sum {} + | sort)
log "removing the package"
dpkg -r miaohui >/dev/null
[ ! -e /usr/bin/miaohui ] || fail "/usr/bin/miaohui left after dpkg -r"
[ ! -e /opt/miaohui ] || fail "/opt/miaohui left after dpkg -r: $(find /opt/miaohui | head -3)"
[ ! -e /usr/share/applications/miaohui.desktop ] || fail "desktop entry left after dpkg -r"
after=$(cd "$DATA" && find . -type f -exec sha256sum {} + | sort)
[ "$before" = "$after" ] || fail "removing the package changed the user's data dir"
if command -v sqlite3 >/dev/null; then
    check=$(sqlite3 "$DATA/history.sqlite3" 'PRAGMA integrity_check;')
    [ "$check" = ok ] || fail "history.sqlite3 integrity_check: $check"
fi
log "PASS: installed, answered offline in ${wall}s, removed; user data ($(du -sh "$DATA" | cut -f1)) untouched"
