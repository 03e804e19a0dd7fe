#!/usr/bin/env bash
# Renders a report.html (xlaunch run --trace DIR) to a PNG with headless Chromium, for docs and
# issue reports: scripts/report_png.sh DIR/report.html OUT.png [WIDTHxHEIGHT]
# Installs Debian's chromium when it is missing (root); not part of the build or the tests.
set -euo pipefail
html=$(realpath "$1")
out=$(realpath -m "$2")
size=${3:-1250x950}
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [ -z "$browser" ]; then
  [ "$(id -u)" = 0 ] || { echo "report_png: no Chromium; install it (apt-get install chromium)" >&2; exit 2; }
  apt-get update -q && apt-get install -y -q --no-install-recommends chromium
  browser=$(command -v chromium)
fi
"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size="${size/x/,}" \
  --screenshot="$out" "file://$html" 2>/dev/null
[ -s "$out" ] && echo "report_png: $out" || { echo "report_png: Chromium wrote nothing" >&2; exit 1; }
