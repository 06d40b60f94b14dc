#!/usr/bin/env bash
# Sign, notarize and staple dist/s2studio.app, then wrap it in dist/s2studio-<version>-macos.dmg.
#
# Driven by environment variables; without them it says so and exits 0 (unsigned dev builds):
#   MACOS_SIGN_IDENTITY   "Developer ID Application: Name (TEAMID)", in the keychain
#   APPLE_ID              Apple ID used for notarization
#   APPLE_TEAM_ID         team id
#   APPLE_APP_PASSWORD    app-specific password for APPLE_ID
#
# Signing is inside-out, every Mach-O on its own with the hardened runtime and a timestamp:
# `codesign --deep` misses or mis-signs nested PySide6 frameworks and notarization then
# rejects them (pyinstaller/pyinstaller#8927). The PortAudio dylib that
# hook-sounddevice bundles is in that loop like every other library.
set -euo pipefail
cd "$(dirname "$0")/../.."

APP=dist/s2studio.app
ENTITLEMENTS=packaging/macos/entitlements.plist
VERSION=$(sed -n 's/^__version__ = "\(.*\)"/\1/p' s2studio/__init__.py)
DMG="dist/s2studio-${VERSION}-macos.dmg"

missing=()
for var in MACOS_SIGN_IDENTITY APPLE_ID APPLE_TEAM_ID APPLE_APP_PASSWORD; do
  [ -n "${!var:-}" ] || missing+=("$var")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "signing skipped: ${missing[*]} not set (the app stays unsigned; Gatekeeper will block it on other Macs)"
  exit 0
fi
[ -d "$APP" ] || { echo "error: $APP not found; run packaging/build.py first" >&2; exit 1; }

sign() {
  codesign --force --timestamp --options runtime --entitlements "$ENTITLEMENTS" \
    --sign "$MACOS_SIGN_IDENTITY" "$1"
}

notarize() {  # $1: a .zip or .dmg; fails unless Apple's verdict is Accepted
  local out id
  out=$(xcrun notarytool submit "$1" --apple-id "$APPLE_ID" --team-id "$APPLE_TEAM_ID" \
          --password "$APPLE_APP_PASSWORD" --wait --output-format json)
  echo "$out"
  # notarytool exits 0 even for Invalid: only an Accepted status may ship.
  if ! echo "$out" | grep -q '"status" *: *"Accepted"'; then
    id=$(echo "$out" | sed -n 's/.*"id" *: *"\([^"]*\)".*/\1/p' | head -1)
    [ -n "$id" ] && xcrun notarytool log "$id" --apple-id "$APPLE_ID" --team-id "$APPLE_TEAM_ID" \
                      --password "$APPLE_APP_PASSWORD" || true
    echo "error: notarization of $1 was not accepted" >&2
    exit 1
  fi
}

echo "signing libraries inside-out"
# Deepest paths first, so a framework's inner binary is signed before the framework itself.
find "$APP/Contents" -type f \( -name '*.so' -o -name '*.dylib' \) \
  | awk -F/ '{ print NF "\t" $0 }' | sort -rn | cut -f2- \
  | while IFS= read -r lib; do sign "$lib"; done
# Other Mach-O files without a library suffix (Qt framework binaries, Python, helpers).
find "$APP/Contents" -type f ! -name '*.so' ! -name '*.dylib' \
  | while IFS= read -r bin; do
      if file -b "$bin" | grep -q 'Mach-O'; then sign "$bin"; fi
    done
find "$APP/Contents" -depth -type d -name '*.framework' \
  | while IFS= read -r fw; do sign "$fw"; done
sign "$APP/Contents/MacOS/s2studio-cli"
sign "$APP/Contents/MacOS/s2studio"
sign "$APP"

echo "verifying"
codesign --verify --deep --strict --verbose=2 "$APP"

echo "notarizing the app"
ZIP=dist/s2studio-notarize.zip
ditto -c -k --keepParent "$APP" "$ZIP"
notarize "$ZIP"
rm -f "$ZIP"
xcrun stapler staple "$APP"
xcrun stapler validate "$APP"

echo "building $DMG"
rm -f "$DMG"
hdiutil create -volname s2studio -srcfolder "$APP" -ov -format UDZO "$DMG"
codesign --force --timestamp --sign "$MACOS_SIGN_IDENTITY" "$DMG"
notarize "$DMG"
xcrun stapler staple "$DMG"
echo "done: $DMG"
