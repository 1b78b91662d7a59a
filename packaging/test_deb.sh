#!/usr/bin/env bash
# packaging/test_deb.sh — what `make package-test` runs after `make package`: the installed-package check.
# As root: seed a user data dir (MIAOHUI_HOME) with a history.sqlite3 written by the app's own store, install
# packaging/out/miaohui_*.deb with apt (which also installs its Depends), run `/usr/bin/miaohui --version` and
# `/usr/bin/miaohui --self-test` offscreen with no network (a fresh network namespace: `unshare -n`) and a
# clean environment, require exit 0 and a reply streamed from the bundled model (the self-test's JSON report),
# check that nothing was written into /opt/miaohui and that the user's history was not touched, remove the
# package (dpkg -r), and check that the user data dir was left alone. Not part of `make test`: slow.
# Environment: PY (a Python with the repository's app package, default .venv/bin/python), SELF_TEST_TIMEOUT.
set -euo pipefail

cd "$(dirname "$0")/.."
OUT=packaging/out
PY=${PY:-.venv/bin/python}

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

# ---------------------------------------------------------------- a returning user's data
# History written by the app's own store (the schema the app expects), before the package exists.
MIAOHUI_HOME="$DATA" "$PY" - <<'PYEOF' || fail "could not seed the user's history with $PY"
from engine.paths import history_path
from app.history.store import HistoryStore

store = HistoryStore(history_path())
cid = store.create_conversation("kept across install and removal")
store.add_message(cid, "user", "hello before the package was installed")
store.add_message(cid, "assistant", "this history must survive dpkg -r", finish_reason="eos")
store.close()
PYEOF
[ -f "$DATA/history.sqlite3" ] || fail "seeding wrote no $DATA/history.sqlite3"
history_sum() { sha256sum "$DATA/history.sqlite3" | cut -d' ' -f1; }
seeded=$(history_sum)

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
log "running /usr/bin/miaohui --self-test offscreen without network (first start of the installed app)"
start=$(date +%s.%N)
set +e
run_app --self-test >"$WORK/self-test.json" 2>"$WORK/self-test.log"
rc=$?
set -e
wall=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
if [ "$rc" != 0 ]; then
    tail -30 "$WORK/self-test.log" | sed 's/^/    | /' >&2
    sed 's/^/    | /' "$WORK/self-test.json" >&2
    fail "--self-test exited $rc (output above)"
fi
# The report says the reply was streamed from the bundled model and the panel showed its figures.
"$PY" packaging/check_self_test.py "$WORK/self-test.json" \
    || fail "the self-test report shows no reply streamed from the bundled model"
log "self-test passed in ${wall}s (first start of the installed app, offline)"

written=$(find /opt/miaohui -newer "$STAMP" | head -5)
[ -z "$written" ] || fail "the app wrote into its install folder: $written"
[ "$(history_sum)" = "$seeded" ] || fail "the self-test changed the user's history (it must use a scratch copy)"
[ ! -e "$DATA/models/SmolLM2-135M-Instruct" ] || fail "the app copied the bundled model into the user's data dir"

# ---------------------------------------------------------------- remove; user data stays
before=$(cd "$DATA" && find . -type f -exec sha256sum {} + | sort)
log "removing the package"
dpkg -r miaohui >/dev/null
[ ! -e /usr/bin/miaohui ] || fail "/usr/bin/miaohui left after dpkg -r"
[ ! -e /opt/miaohui ] || fail "/opt/miaohui left after dpkg -r: $(find /opt/miaohui | head -3)"
[ ! -e /usr/share/applications/miaohui.desktop ] || fail "desktop entry left after dpkg -r"
after=$(cd "$DATA" && find . -type f -exec sha256sum {} + | sort)
[ "$before" = "$after" ] || fail "removing the package changed the user's data dir"
"$PY" -c 'import sqlite3, sys; con = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
rows = con.execute("SELECT count(*) FROM messages").fetchone()[0]
assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok" and rows == 2, rows' "$DATA/history.sqlite3" \
    || fail "the user's history.sqlite3 is damaged or lost messages after removal"
log "PASS: installed, answered offline in ${wall}s, removed; user data ($(du -sh "$DATA" | cut -f1)) untouched"
