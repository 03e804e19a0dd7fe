#!/usr/bin/env bash
# Renders a report.html (xlaunch run --trace DIR) to a PNG with headless Chromium, for docs and
# issue reports: scripts/report_png.sh DIR/report.html OUT.png [WIDTHxHEIGHT]
# Also a page that a server draws with scripts (scripts/tensorboard_png.sh): give its http:// URL;
# Chromium then lets the page run for WAIT_MS (default 15000) of virtual time before the shot.
# Installs Debian's chromium when it is missing (root); not part of the build or the tests.
set -euo pipefail
case "$1" in
  http://*|https://*) url=$1; wait_flags=(--virtual-time-budget="${WAIT_MS:-15000}" --run-all-compositor-stages-before-draw) ;;
  *) url="file://$(realpath "$1")"; wait_flags=() ;;
esac
out=$(realpath -m "$2")
size=${3:-1250x950}
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [ -z "$browser" ]; then
  [ "$(id -u)" = 0 ] || { echo "report_png: no Chromium; install it (apt-get install chromium)" >&2; exit 2; }
  apt-get update -q && apt-get install -y -q --no-install-recommends chromium
  browser=$(command -v chromium)
fi
"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size="${size/x/,}" \
  "${wait_flags[@]}" --screenshot="$out" "$url" 2>/dev/null
[ -s "$out" ] && echo "report_png: $out" || { echo "report_png: Chromium wrote nothing" >&2; exit 1; }
