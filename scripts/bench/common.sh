# Shared by the benchmark scripts: locations, mpirun flags, and the median of a list.
# Source it from scripts/bench/*.sh.
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$REPO/build}"
PEERS="${PEERS:-$REPO/../shared/peers}"
MPIRUN=(mpirun --oversubscribe)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)

need_bin() {
  [ -x "$BUILD_DIR/$1" ] || { echo "missing $BUILD_DIR/$1: build first (scripts/build.sh) or set BUILD_DIR" >&2; exit 2; }
}

# median v1 v2 ... -> the middle value (upper middle for an even count)
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int(NR/2)+1]}'; }

# field NAME "text": the value of NAME=... in text
field() { sed -n "s/.*[[:space:]]$1=\([^[:space:]]*\).*/\1/p" <<<" $2" | head -n1; }
