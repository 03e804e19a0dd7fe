#!/usr/bin/env bash
# The start-up deadline (docs/failures.md, "When a job does not start") on 2 simulated machines x 1
# rank (scripts/cluster/sim.sh): `xlaunch run` of a 2-rank job whose machine sim1 cannot start its
# part, one case at a time, with startup_timeout_s T (15):
#   daemon_exits      Open MPI's daemon on sim1 exits before it calls back (a wrapper around orted
#                     that exits 0 there): mpirun would wait for it for ever
#   no_orted_in_path  sim1's PATH has no orted (the daemon is started by name)
#   link_cut          sim1's link is cut before the job starts
#   healthy           nothing wrong, a job that runs T + 5 s: the deadline must not end it
# One line per case:
#   bench=startup case=C rc=RC seconds_to_exit=S named=yes|no|n/a processes_left=N
# seconds_to_exit: from `xlaunch run`'s start to its return (the bound: T + 10); named: its message
# names sim1 as the machine that never started; processes_left: processes of the job on this host
# and on either machine LEFT_AFTER_S (30) seconds after it returned. Exits 1 when a case misses
# one of those (rc 0 and named n/a for healthy; rc != 0, within T + 10, named yes for the others;
# nothing left for all).
# Usage: sudo scripts/bench/startup.sh   (BUILD_DIR, STARTUP_TIMEOUT_S, LEFT_AFTER_S, CASES override)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
T="${STARTUP_TIMEOUT_S:-15}"
LEFT_AFTER_S="${LEFT_AFTER_S:-30}"
CASES="${CASES:-daemon_exits no_orted_in_path link_cut healthy}"
RATE="${RATE:-1gbit}"
need_bin launcher/xlaunch
need_bin examples/hello_allreduce
sim_machines startup 2 1
XLAUNCH="$BUILD_DIR/launcher/xlaunch"

mkdir -p "$work/logs"
cat >"$work/job.yaml" <<YAML
distributed_type: MULTI_CPU
num_processes: 2
num_machines: 2
startup_timeout_s: $T
log_dir: $work/logs
mpi:
  hostfile: $work/hosts
YAML
# Open MPI's daemon, as Open MPI starts it, but broken on sim1 as FAULT says.
cat >"$work/orted.sh" <<'SH'
#!/bin/sh
if [ "$(hostname)" = sim1 ]; then
  case "$FAULT" in
    exit) echo "orted.sh: the daemon on sim1 exits before it calls back" >&2; exit 0 ;;
    nopath) PATH=/var/empty ;;
  esac
fi
exec orted "$@"
SH
chmod +x "$work/orted.sh"
printf '#!/bin/sh\nsleep %s\n' "$((T + 5))" >"$work/long_job.sh"
chmod +x "$work/long_job.sh"

# Processes of the job still there: on this host (anything naming the scratch directory or an
# Open MPI daemon) and in either machine's namespaces (but the holder).
left() {
  local n=0 h p
  for h in sim0 sim1; do
    for p in $("$SIM" pids "$h" | awk '{print $1}'); do n=$((n + 1)); done
  done
  n=$((n + $(pgrep -c -f -- "$work/(logs|long_job|orted)|^[^ ]*orted " || true)))
  echo "$n"
}

failed=0
for c in $CASES; do
  fault="" bin="$BUILD_DIR/examples/hello_allreduce"
  case "$c" in
    daemon_exits) fault=exit ;;
    no_orted_in_path) fault=nopath ;;
    link_cut) "$SIM" cut sim1 ;;
    healthy) bin="$work/long_job.sh" ;;
    *) echo "startup.sh: unknown case $c" >&2; exit 2 ;;
  esac
  t0=$(date +%s.%N)
  set +e
  FAULT=$fault OMPI_MCA_orte_launch_agent="$work/orted.sh" timeout $((T + 120)) \
    "$XLAUNCH" run --config_file "$work/job.yaml" "$bin" >"$work/$c.log" 2>&1
  rc=$?
  set -e
  took=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')
  [ "$c" = link_cut ] && "$SIM" heal sim1
  named=n/a
  if [ "$c" != healthy ]; then
    grep -q "machine sim1 (rank 1): its Open MPI daemon never called back" "$work/$c.log" && named=yes || named=no
  fi
  sleep "$LEFT_AFTER_S"
  n=$(left)
  echo "bench=startup case=$c rc=$rc seconds_to_exit=$took named=$named processes_left=$n"
  if [ "$c" = healthy ]; then ok=$([ "$rc" = 0 ] && echo 1 || echo 0)
  else ok=$([ "$rc" != 0 ] && [ "$named" = yes ] && awk -v s="$took" -v b="$((T + 10))" 'BEGIN {exit !(s <= b)}' && echo 1 || echo 0)
  fi
  if [ "$ok" != 1 ] || [ "$n" != 0 ]; then
    failed=1
    echo "startup.sh: case $c missed its bound; xlaunch said:" >&2
    sed 's/^/    /' "$work/$c.log" >&2
  fi
done
exit "$failed"
