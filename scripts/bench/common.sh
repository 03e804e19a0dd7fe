# Shared by the benchmark scripts: locations, mpirun flags, and the median of a list.
# Source it from scripts/bench/*.sh.
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$REPO/build}"
PEERS="${PEERS:-$REPO/scripts/bench/peers}"
MPIRUN=(mpirun --oversubscribe)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)

need_bin() {
  [ -x "$BUILD_DIR/$1" ] || { echo "missing $BUILD_DIR/$1: build first (scripts/build.sh) or set BUILD_DIR" >&2; exit 2; }
}

# median v1 v2 ... -> the middle value (upper middle for an even count)
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int(NR/2)+1]}'; }

# field NAME "text": the value of NAME=... in text
field() { sed -n "s/.*[[:space:]]$1=\([^[:space:]]*\).*/\1/p" <<<" $2" | head -n1; }

# The peers in scripts/bench/peers are copies of ../shared/peers, beside the repository where it
# was developed; warn (and go on) when that folder exists and a copy has drifted from it. Its
# README carries a provenance section below the original text, left out of the comparison.
check_peers_in_step() {
  local shared="$REPO/../shared/peers" ours="$REPO/scripts/bench/peers" f name
  [ -d "$shared" ] || return 0
  for f in "$shared"/*; do
    name=$(basename "$f")
    if [ "$name" = README.md ]; then
      cmp -s <(sed '/^## Where these files come from$/,$d' "$ours/$name" 2>/dev/null) <(cat "$f"; echo)
    else
      cmp -s "$ours/$name" "$f"
    fi || echo "warning: scripts/bench/peers/$name differs from ../shared/peers/$name; bring the copy" \
                "in step with it (see scripts/bench/peers/README.md)" >&2
  done
}
check_peers_in_step

# steps/s of 2-rank DDP training of the benchmark MLP (H=1024, batch 64, STEPS steps) under mpirun
# with these extra mpirun arguments (e.g. -x XLAUNCH_TIMEOUT_S=0): what faults.sh and overhead.sh
# compare across settings.
ddp_h1024_steps_per_s() {
  local out
  out=$("${MPIRUN[@]}" -np 2 "$@" "$BUILD_DIR/scripts/bench/bench_ddp" --mode ddp --hidden 1024 --batch 64 \
        --steps "$STEPS")
  field steps_per_s "$out"
}
