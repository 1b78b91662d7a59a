#!/usr/bin/env bash
# packaging/build.sh — what `make package` runs: freeze Miaohui with PyInstaller (one-folder build, spec
# packaging/miaohui.spec), then, on Linux, pack the folder as
#   packaging/out/miaohui-<version>-linux-<arch>.tar.gz   and   packaging/out/miaohui_<version>_<arch>.deb
# (the .deb installs under /opt/miaohui with a /usr/bin/miaohui launcher, a .desktop entry and icons).
# On Windows and macOS it only freezes; their installers are built as packaging/README.md says.
# `build.sh --bundle-only` stops after the frozen folder and its --version check (`make bundle`, what CI builds;
# packaging/self_test_bundle.sh then runs its --self-test).
#
# Environment: PY (the Python with PyInstaller, default .venv/bin/python), MIAOHUI_BUNDLE_MODEL (see the
# spec), DEB_COMPRESSION (dpkg-deb -Z: gzip|xz|zstd, default gzip), SKIP_LINTIAN=1 to skip lintian.
# PyInstaller's work folder build/pyinstaller and its cache are kept between runs: a rebuild reuses them.
set -euo pipefail

cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=packaging/out
DIST=$OUT/dist
BUNDLE=$DIST/miaohui

log() { printf 'package: %s\n' "$*" >&2; }
die() { printf 'package: error: %s\n' "$*" >&2; exit 1; }

BUNDLE_ONLY=0
case "${1:-}" in
    --bundle-only) BUNDLE_ONLY=1 ;;
    "") ;;
    *) die "unknown option ${1} (the only one is --bundle-only)" ;;
esac

VERSION=$("$PY" -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')
if [ -z "${MIAOHUI_BUNDLE_MODEL:-}" ]; then
    "$PY" -c 'from engine import paths; from engine.models import fetch; raise SystemExit(0 if fetch.is_fetched(paths.default_model_dir()) else 1)' \
        || die "the default model is not in place: run \`$PY -m engine fetch\` (make install does) first"
fi

# ---------------------------------------------------------------- freeze
start=$SECONDS
log "freezing Miaohui $VERSION with PyInstaller (slow the first time; later runs reuse build/pyinstaller)"
"$PY" -m PyInstaller packaging/miaohui.spec --noconfirm --distpath "$DIST" --workpath build/pyinstaller \
    --log-level WARN
freeze_s=$((SECONDS - start))
[ -x "$BUNDLE/miaohui" ] || [ -f "$BUNDLE/miaohui.exe" ] || die "PyInstaller produced no $BUNDLE/miaohui"
log "frozen in ${freeze_s}s: $BUNDLE ($(du -sh "$BUNDLE" | cut -f1))"

case "$(uname -s)" in
    Linux) ;;
    *) log "not Linux: the folder is ready; build the installer as packaging/README.md says"; exit 0 ;;
esac

# A frozen app that cannot even print its version must not be packed.
QT_QPA_PLATFORM=offscreen "$BUNDLE/miaohui" --version >/dev/null || die "the frozen app failed to run --version"
if [ "$BUNDLE_ONLY" = 1 ]; then
    log "done (--bundle-only): $BUNDLE"
    exit 0
fi

DEB_ARCH=$(dpkg --print-architecture 2>/dev/null || uname -m)
TARBALL=$OUT/miaohui-$VERSION-linux-$(uname -m).tar.gz
DEB=$OUT/miaohui_${VERSION}_${DEB_ARCH}.deb

# System libraries the bundle links against but does not carry (Qt's X11/Wayland/GL stack, fontconfig,
# glib, dbus): recorded so the .deb's Depends can be checked against them (packaging/README.md).
find "$BUNDLE" -type f \( -name '*.so' -o -name '*.so.*' -o -path "$BUNDLE/miaohui" \) -print0 \
    | xargs -0 ldd 2>/dev/null | awk '/=>/ && $3 !~ /miaohui\/_internal/ {print $1}' | sort -u > "$OUT/system-libs.txt"
log "system libraries used by the bundle: $(wc -l < "$OUT/system-libs.txt") (list in $OUT/system-libs.txt)"

# ---------------------------------------------------------------- .tar.gz
start=$SECONDS
tar -C "$DIST" --owner=0 --group=0 --numeric-owner -cf - miaohui | gzip -6 > "$TARBALL.part"
mv "$TARBALL.part" "$TARBALL"
log "tarball in $((SECONDS - start))s: $TARBALL ($(du -h "$TARBALL" | cut -f1))"

# ---------------------------------------------------------------- .deb
start=$SECONDS
STAGE=$OUT/deb-root
rm -rf "$STAGE"
mkdir -p "$STAGE/DEBIAN" "$STAGE/opt" "$STAGE/usr/bin" "$STAGE/usr/share/applications" \
    "$STAGE/usr/share/doc/miaohui" "$STAGE/usr/share/icons/hicolor/scalable/apps" \
    "$STAGE/usr/share/icons/hicolor/256x256/apps" "$STAGE/usr/share/man/man1" "$STAGE/usr/share/lintian/overrides"
cp -a "$BUNDLE" "$STAGE/opt/miaohui"
install -m 0755 packaging/deb/miaohui.sh "$STAGE/usr/bin/miaohui"
install -m 0644 packaging/deb/miaohui.desktop "$STAGE/usr/share/applications/miaohui.desktop"
install -m 0644 packaging/deb/copyright "$STAGE/usr/share/doc/miaohui/copyright"
install -m 0644 packaging/deb/lintian-overrides "$STAGE/usr/share/lintian/overrides/miaohui"
gzip -9n < packaging/deb/miaohui.1 > "$STAGE/usr/share/man/man1/miaohui.1.gz"
if [ -f assets/miaohui.svg ]; then install -m 0644 assets/miaohui.svg "$STAGE/usr/share/icons/hicolor/scalable/apps/miaohui.svg"; fi
if [ -f assets/miaohui.png ]; then
    install -m 0644 assets/miaohui.png "$STAGE/usr/share/icons/hicolor/256x256/apps/miaohui.png"
elif [ -f assets/miaohui.svg ]; then  # menus that skip SVG icons still get a bitmap
    "$PY" packaging/render_icon.py assets/miaohui.svg "$STAGE/usr/share/icons/hicolor/256x256/apps/miaohui.png" 256
fi
{
    printf 'miaohui (%s) unstable; urgency=medium\n\n  * Packaged build of Miaohui %s.\n\n' "$VERSION" "$VERSION"
    printf ' -- Miaohui developers <maintainers@miaohui.invalid>  %s\n' "$(date -R -d "@$(git log -1 --format=%ct 2>/dev/null || date +%s)")"
} | gzip -9n > "$STAGE/usr/share/doc/miaohui/changelog.gz"
chmod 0644 "$STAGE/usr/share/doc/miaohui/changelog.gz"
# Readable by everyone, writable by root only: the install folder is never a place for user data.
# Execute bits only where something is executed: directories, the ELF programs (not shared libraries,
# not library sources whose shebang lines never run, not licence files wheels shipped as +x).
chmod -R u+rwX,go+rX,go-w "$STAGE"
find "$STAGE/opt/miaohui" -type f \( -name '*.so' -o -name '*.so.*' \) -perm /111 -exec chmod 0644 {} +
find "$STAGE/opt/miaohui" -type f -perm /111 -print0 | while IFS= read -r -d '' file; do
    [ "$(head -c4 "$file" | od -An -c | tr -d ' ')" = '177ELF' ] || chmod 0644 "$file"
done
# The bundle's .py copies (transformers reads its sources) would get stale __pycache__ folders if any
# build step compiled them; none belong in the package.
find "$STAGE/opt/miaohui" -name __pycache__ -type d -prune -exec rm -rf {} +

INSTALLED_SIZE=$(du -sk --exclude=DEBIAN "$STAGE" | cut -f1)
DEPENDS=$(grep -v '^#' packaging/deb/depends.txt | grep -v '^[[:space:]]*$' | paste -sd, | sed 's/,/, /g')
sed -e "s/@VERSION@/$VERSION/" -e "s/@ARCH@/$DEB_ARCH/" -e "s/@INSTALLED_SIZE@/$INSTALLED_SIZE/" \
    -e "s/@DEPENDS@/$DEPENDS/" packaging/deb/control.in > "$STAGE/DEBIAN/control"
# gzip -6 by default: xz (and gzip -9, dpkg-deb's default) take minutes longer on 1.2 GB for a few %
# (the weights and torch's libraries barely compress); Debian's lintian and older dpkg reject zstd members.
dpkg-deb --root-owner-group -Z"${DEB_COMPRESSION:-gzip}" -z6 --build "$STAGE" "$DEB.part" >/dev/null
mv "$DEB.part" "$DEB"
rm -rf "$STAGE"
log "deb in $((SECONDS - start))s: $DEB ($(du -h "$DEB" | cut -f1))"

if [ "${SKIP_LINTIAN:-0}" != 1 ] && command -v lintian >/dev/null; then
    # Informational: the expected, deliberate tags (embedded libraries, /opt layout) are in README.md.
    lintian --allow-root --tag-display-limit 0 "$DEB" > "$OUT/lintian.txt" 2>&1 || true
    log "lintian: $(grep -c '^E:' "$OUT/lintian.txt" || true) errors, $(grep -c '^W:' "$OUT/lintian.txt" || true) warnings (see $OUT/lintian.txt)"
fi
log "done: $BUNDLE, $TARBALL, $DEB"
