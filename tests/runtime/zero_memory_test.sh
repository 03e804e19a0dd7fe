#!/usr/bin/env bash
# Memory per rank at ZeRO stages 0, 1 and 2, measured: the benchmark MLP (784-4096-4096-10, 20M
# parameters) with AdamW on 4 ranks, each stage its own mpirun job (a peak is per process
# lifetime), through zero_memory_probe. Prints every rank's figures, then checks on every rank:
#  - optimizer state bytes at stages 1 and 2 <= 1.05 / 4 of stage 0's (both transports);
#  - with cpu_allreduce mpi: the peak resident memory (VmHWM) the training added to the process (less
#    its resident set at main(), before any of xlaunch ran) at stage 2 at least 35% below stage 0's
#    in the median over the 4 ranks, and at least 30% below on every rank. One rank's peak moves by a
#    few percent from run to run with where glibc's arenas put its buffers (measured 0.59-0.65 over
#    the ranks of one run), so a single rank is no stable witness for the 35%.
# Why less the bare process: this LibTorch is a CUDA build, and its libraries alone hold ~350 MB per
# process before main() on a machine without a GPU (181 MB of it private), the same at every stage:
# 40% of stage 0's whole peak here, which no sharding can touch. Both figures are printed.
# Why the peak is checked over MPI only: VmHWM counts every page mapped into the process. Over MPI
# a rank's buffers are its own (anonymous memory), so its VmHWM is its memory. Over shared memory
# (auto) the buckets, the flat parameters and the staging ring live in /dev/shm, and each rank
# reads and writes parts of the other ranks' copies, which then count in its VmHWM as well although
# they exist once: a per-rank figure that overstates what the rank owns (max_shmem_kb shows how
# much), so there the peaks are printed, not compared.
# Usage: zero_memory_test.sh MPIRUN ZERO_MEMORY_PROBE mpi|auto [mpirun flags...]
set -uo pipefail
mpirun="$1" probe="$2" transport="$3"
shift 3
flags=("$@")
want_comm=$([ "$transport" = mpi ] && echo mpi || echo shm)
. "$(dirname "$0")/../common/test_lib.sh"
test_workdir
status=0
added2=()
for stage in 0 1 2; do
  if ! timeout 120 "$mpirun" "${flags[@]}" -np 4 "$probe" --stage "$stage" --cpu_allreduce "$transport" \
       --hidden 4096 --steps 3 >"$work/$stage.log" 2>&1; then
    echo "FAIL stage $stage: the probe's job failed"; tail -30 "$work/$stage.log"; exit 1
  fi
  grep '^zero_memory ' "$work/$stage.log" | sort -t= -k2 -n >"$work/$stage.txt"
  if [ "$(grep -c " world=4 stage=$stage bucket_comm=$want_comm " "$work/$stage.txt")" != 4 ]; then
    echo "FAIL stage $stage: want 4 ranks reporting bucket_comm=$want_comm"; cat "$work/$stage.log"; exit 1
  fi
done
field() { sed -n "s/.* $1=\([0-9:]*\).*/\1/p" "$work/$2.txt" | sed -n "$(($3 + 1))p"; }  # NAME STAGE RANK
echo "zero memory, cpu_allreduce $transport, 4 ranks, 784-4096-4096-10, AdamW (kB unless said):"
for stage in 0 1 2; do sed 's/^/  /' "$work/$stage.txt"; done
for rank in 0 1 2 3; do
  s0=$(field state_bytes 0 "$rank") h0=$(field vm_hwm_kb 0 "$rank")
  for stage in 1 2; do
    s=$(field state_bytes "$stage" "$rank") h=$(field vm_hwm_kb "$stage" "$rank")
    ratio=$(echo "scale=3; $s / $s0" | bc) peak=$(echo "scale=3; $h / $h0" | bc)
    # The same peaks less this rank's resident set at main(), before any of xlaunch ran: what the
    # training added to the bare process (LibTorch alone holds ~350 MB here, the same at every stage).
    b0=$(field main_kb 0 "$rank" | cut -d: -f1) b=$(field main_kb "$stage" "$rank" | cut -d: -f1)
    added=$(echo "scale=3; ($h - $b) / ($h0 - $b0)" | bc)
    echo "rank $rank stage $stage: optimizer state $s bytes = $ratio of stage 0's (bound 0.2625); peak $h kB = $peak of stage 0's $h0 kB; above the bare process (RSS at main: $b, $b0 kB): $added"
    if [ "$(echo "$s * 4 <= 1.05 * $s0" | bc)" != 1 ]; then
      echo "FAIL rank $rank stage $stage: optimizer state $s bytes > 1.05 / 4 of stage 0's $s0"; status=1
    fi
    if [ "$transport" = mpi ] && [ "$stage" = 2 ]; then
      added2+=("$added")
      if [ "$(echo "$added <= 0.70" | bc)" != 1 ]; then
        echo "FAIL rank $rank stage 2: the peak resident memory training added is $added of stage 0's (want <= 0.70)"; status=1
      fi
    fi
  done
done
if [ "$transport" = mpi ]; then
  median=$(printf '%s\n' "${added2[@]}" | sort -g | awk '{a[NR]=$1} END {print (a[2] + a[3]) / 2}')
  echo "stage 2: the peak resident memory training added, the median over the ranks: $median of stage 0's (want <= 0.65)"
  [ "$(echo "$median <= 0.65" | bc)" = 1 ] || { echo "FAIL stage 2: median $median > 0.65"; status=1; }
fi
[ "$status" = 0 ] && echo "PASS zero memory, cpu_allreduce $transport"
exit $status
