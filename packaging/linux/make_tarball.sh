#!/usr/bin/env bash
# Linux tarball: dist/s2studio/ (from packaging/build.py) -> dist/s2studio-<version>-linux-x86_64.tar.gz
#
# Layout of the tarball:
#   s2studio-<version>/s2studio, s2studio-cli, _internal/...   the PyInstaller bundle
#   s2studio-<version>/share/s2studio.desktop, share/s2studio.png
#   s2studio-<version>/install-desktop-entry.sh                 menu entry + ~/.local/bin links
#   s2studio-<version>/DEPENDENCIES.txt
#
# System libraries the bundle expects from the distribution (not bundled on purpose: they are
# tied to the local sound and display stacks):
#   libportaudio2        sound playback and recording (bundled too when found at build time;
#                        without it the app runs with sound cards off)
#   libxcb-cursor0       Qt's xcb platform plugin (X11 and XWayland)
#   libxkbcommon-x11-0   Qt's xcb platform plugin
set -euo pipefail
cd "$(dirname "$0")/../.."

VERSION=$(sed -n 's/^__version__ = "\(.*\)"/\1/p' s2studio/__init__.py)
NAME="s2studio-${VERSION}"
ARCH=$(uname -m)
[ -x dist/s2studio/s2studio ] || { echo "error: dist/s2studio not built; run packaging/build.py" >&2; exit 1; }

STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
cp -a dist/s2studio "$STAGE/$NAME"
mkdir -p "$STAGE/$NAME/share"
cp packaging/linux/s2studio.desktop resources/s2studio.png "$STAGE/$NAME/share/"
cat > "$STAGE/$NAME/DEPENDENCIES.txt" <<'TXT'
s2studio needs these system packages (Debian/Ubuntu names):
  sudo apt install libportaudio2 libxcb-cursor0 libxkbcommon-x11-0
Fedora: portaudio xcb-util-cursor libxkbcommon-x11
Arch:   portaudio xcb-util-cursor libxkbcommon-x11
Check the installation with:  ./s2studio-cli --self-test
TXT
cat > "$STAGE/$NAME/install-desktop-entry.sh" <<'SH'
#!/bin/sh
# Put s2studio in the application menu and on PATH for this user (no root needed).
set -e
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$HOME/.local/bin" "$HOME/.local/share/applications" "$HOME/.local/share/icons/hicolor/512x512/apps"
ln -sf "$HERE/s2studio" "$HOME/.local/bin/s2studio"
ln -sf "$HERE/s2studio-cli" "$HOME/.local/bin/s2studio-cli"
sed "s|^Exec=s2studio|Exec=$HERE/s2studio|" "$HERE/share/s2studio.desktop" > "$HOME/.local/share/applications/s2studio.desktop"
cp "$HERE/share/s2studio.png" "$HOME/.local/share/icons/hicolor/512x512/apps/s2studio.png"
echo "installed: s2studio is in the application menu and in ~/.local/bin"
SH
chmod +x "$STAGE/$NAME/install-desktop-entry.sh"

OUT="dist/${NAME}-linux-${ARCH}.tar.gz"
tar -C "$STAGE" -czf "$OUT" "$NAME"
echo "tarball: $OUT ($(du -h "$OUT" | cut -f1))"
