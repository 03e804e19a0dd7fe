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

# figure NAME WHAT OUTPUT: the number NAME=... in OUTPUT; when there is none, says that WHAT
# printed no NAME, shows OUTPUT and exits 1. Call it as an assignment (x=$(figure ...),
# a+=("$(figure ...)")), so that set -e stops the script too; inside another command
# substitution that needs `shopt -s inherit_errexit` in the script.
figure() {
  local v
  v=$(field "$1" "$3")
  [[ $v =~ ^[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?$ ]] && { echo "$v"; return; }
  echo "$(basename "$0"): $2 printed no $1; its output:" >&2
  printf '%s\n' "$3" >&2
  exit 1
}

# median v1 v2 ... -> the middle value (upper middle for an even count)
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int(NR/2)+1]}'; }

# field NAME "text": the value of the first NAME=... in text (at the start of a line or after a space)
field() { sed -n "s/^\(.*[[:space:]]\)\{0,1\}$1=\([^[:space:]]*\).*/\2/p" <<<"$2" | head -n1; }

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

# sim_machines NAME K SLOTS: K simulated machines (scripts/cluster/sim.sh; root) with links limited to
# $RATE, under the host's simulation lock (fd 9: one simulation per host at a time); sets $SIM and
# $work (a scratch directory holding `hosts`, SLOTS ranks per machine) and undoes it all on exit.
sim_machines() {
  SIM="$REPO/scripts/cluster/sim.sh"
  "$SIM" check || { echo "$1: cannot simulate machines here (see above)" >&2; exit 2; }
  work=$(mktemp -d "/tmp/xlaunch_bench_$1.XXXXXX")
  exec 9>/run/xlsim.lock
  flock -w 600 9
  trap '"$SIM" down >/dev/null; rm -rf "$work"' EXIT
  trap 'exit 130' INT TERM HUP
  "$SIM" up "$2" --rate "$RATE" >&2
  eval "$("$SIM" env)"
  local m
  for ((m = 0; m < $2; m++)); do echo "sim$m slots=$3"; done >"$work/hosts"
}

# ratio A B -> A / B with 2 decimals
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }

# hook_config HOOK START: writes $work/HOOK.yaml, a job of one rank on each machine of $work/hosts
# (sim_machines NAME 2 1) under ddp.comm_hook HOOK, PowerSGD of rank $POWERSGD_RANK from synced
# step START.
hook_config() {
  cat >"$work/$1.yaml" <<YAML
distributed_type: MULTI_CPU
num_processes: 2
num_machines: 2
mpi:
  hostfile: $work/hosts
ddp:
  comm_hook: $1
  powersgd_rank: $POWERSGD_RANK
  powersgd_start_step: $2
YAML
}
