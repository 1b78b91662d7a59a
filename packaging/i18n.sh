#!/usr/bin/env bash
# packaging/i18n.sh — the interface's translations (app/ui/i18n.py loads them): what `make i18n` runs.
#
#   bash packaging/i18n.sh            update the .ts sources from the code, then build the .qm files
#   bash packaging/i18n.sh update     only pyside6-lupdate: app/**/*.py -> assets/i18n/miaohui_<lang>.ts
#   bash packaging/i18n.sh build      only pyside6-lrelease: assets/i18n/*.ts -> assets/i18n/*.qm (make install)
#
# The .ts files are the sources kept in the repository (edit them with pyside6-linguist or any editor); a text
# new in the code arrives in them as type="unfinished" and shows in English until it is translated. The .qm
# files are build outputs (.gitignore): `make install` builds them, packaging/miaohui.spec ships them.
# Locations are left out of the .ts (-locations none) so that editing the code does not rewrite them; a text
# gone from the code stays as type="vanished" (its translation comes back with it; lrelease skips it).
# Environment: PYSIDE_BIN, the folder holding pyside6-lupdate and pyside6-lrelease (default: .venv/bin, else
# the PATH).
set -euo pipefail

cd "$(dirname "$0")/.."
LANGUAGES=(zh_CN)
DIR=assets/i18n
BIN=${PYSIDE_BIN:-.venv/bin}

tool() {
    if [ -x "$BIN/$1" ]; then echo "$BIN/$1"; elif command -v "$1" >/dev/null; then command -v "$1"; else
        printf 'i18n: %s not found (in %s or on the PATH): run `make install` first\n' "$1" "$BIN" >&2; exit 1
    fi
}

update() {
    local lupdate sources
    lupdate=$(tool pyside6-lupdate)
    mapfile -t sources < <(find app -name '*.py' -not -path '*/__pycache__/*' | LC_ALL=C sort)
    for lang in "${LANGUAGES[@]}"; do
        "$lupdate" -silent -locations none -target-language "$lang" "${sources[@]}" \
            -ts "$DIR/miaohui_$lang.ts"
        local unfinished
        unfinished=$(grep -c 'type="unfinished"' "$DIR/miaohui_$lang.ts" || true)
        printf 'i18n: %s: %s unfinished\n' "$DIR/miaohui_$lang.ts" "$unfinished"
    done
}

build() {
    local lrelease
    lrelease=$(tool pyside6-lrelease)
    for lang in "${LANGUAGES[@]}"; do
        "$lrelease" -silent "$DIR/miaohui_$lang.ts" -qm "$DIR/miaohui_$lang.qm"
    done
}

case "${1:-all}" in
    update) update ;;
    build) build ;;
    all) update; build ;;
    *) printf 'usage: %s [update|build]\n' "$0" >&2; exit 2 ;;
esac
