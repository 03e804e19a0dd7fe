#!/usr/bin/env bash
# When a machine goes away (docs/failures.md): 2 simulated machines x 1 rank (scripts/cluster/sim.sh),
# timeout_s 10, a small data-parallel training loop (tests/cluster/partition_train); once it is 20
# steps in, machine sim1's link goes down for good. One line per round:
#   bench=partition machines=2 timeout_s=10 seconds_to_exit=S processes_left_after_60s=N
# seconds_to_exit: from the cut to `xlaunch run`'s return (target: <= 20, timeout_s + 10);
# processes_left_after_60s: processes of the job on sim0, sim1 or here (mpirun, its agents) 60 s
# after that return, the link still down (target: 0). A line `# round R: cleared_after_s=C` says
# when the last one went. Then scripts/bench/elastic.sh, when it exists.
# Usage: sudo scripts/bench/partition.sh [ROUNDS]   (BUILD_DIR overrides)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ROUNDS="${1:-1}"
RATE="${RATE:-1gbit}"
need_bin launcher/xlaunch
need_bin tests/cluster/partition_train

(  # the simulation and its lock end with this subshell, before elastic.sh takes them
  sim_machines partition 2 1
  cat >"$work/job.yaml" <<YAML
distributed_type: MULTI_CPU
num_processes: 2
num_machines: 2
timeout_s: 10
log_dir: $work/logs
mpi:
  hostfile: $work/hosts
YAML
  left() {  # processes of the job still running, anywhere
    { for h in sim0 sim1; do "$SIM" pids "$h" | awk '{print $1}'; done; pgrep -f "$work/logs|rsh_agent.sh" || true; } |
      sort -u | wc -l
  }
  for ((r = 0; r < ROUNDS; r++)); do
    rm -f "$work/marker"
    "$BUILD_DIR/launcher/xlaunch" run --config_file "$work/job.yaml" "$BUILD_DIR/tests/cluster/partition_train" \
      --marker "$work/marker" >"$work/log" 2>&1 &
    job=$!
    for _ in $(seq 900); do [ -f "$work/marker" ] && break; sleep 0.1; done
    [ -f "$work/marker" ] || { cat "$work/log" >&2; exit 1; }
    t0=$(date +%s.%N)
    "$SIM" cut sim1
    wait "$job" || true
    exit_s=$(echo "$(date +%s.%N) - $t0" | bc)
    cleared=""
    for ((s = 0; s < 60; s++)); do
      [ -z "$cleared" ] && [ "$(left)" = 0 ] && cleared=$s
      sleep 1
    done
    printf 'bench=partition machines=2 timeout_s=10 seconds_to_exit=%.1f processes_left_after_60s=%d\n' "$exit_s" "$(left)"
    echo "# round $r: cleared_after_s=${cleared:-never}; $(grep -o 'machine sim1 ([^)]*) unreachable since [0-9:]*' "$work/log" | head -1)"
    "$SIM" heal sim1
  done
)
elastic="$(dirname "${BASH_SOURCE[0]}")/elastic.sh"
[ -f "$elastic" ] && bash "$elastic"
exit 0
