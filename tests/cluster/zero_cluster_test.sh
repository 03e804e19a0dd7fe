#!/usr/bin/env bash
# ZeRO stages 1 and 2 across machines, simulated on this host (scripts/cluster/sim.sh): 2 machines x
# 2 ranks, the gradient buckets on the hierarchical communicator (cpu_allreduce auto: shared memory
# in each machine, MPI between their leaders). tests/runtime/zero_mpi_test trains each case at
# stage 0, 1 and 2 and checks stages 1 and 2 against stage 0 (1e-6 relative after 50 steps) with the
# replicas bitwise equal after every step; here it runs through `xlaunch run` on an ordinary
# hostfile, and every rank must say that it used the hierarchical communicator. Hybrid sharding
# (ddp.shard_group machine) at stages 1, 2 and 3 likewise, against stage 0 and the whole job's sharding,
# every rank saying its shards were cut over its machine. (A few minutes.)
#   usage: zero_cluster_test.sh SOURCE_DIR BUILD_DIR
# Needs root and network/UTS/mount namespaces: exits 77 (skipped, saying why) without them; under
# CI=true that is a failure (tests/common/test_lib.sh, skip).
# Every namespace, link and process it made is removed on exit, also when a check fails.
set -u
src=$1
build=$2
sim=$src/scripts/cluster/sim.sh
. "$(dirname "$0")/../common/test_lib.sh"
"$sim" check || skip "this machine cannot simulate machines (sim.sh check says why above)"
# One simulation per host at a time (the names and the bridge are the host's).
exec 9>/run/xlsim.lock
flock -w 600 9 || { echo "FAIL another multi-machine test held /run/xlsim.lock for 10 minutes"; exit 1; }

test_on_exit() { "$sim" down; }
test_workdir

# 9>&-: the machines' long-lived holders must not inherit the lock.
"$sim" up 2 9>&- || { echo "FAIL sim.sh up 2"; exit 1; }
eval "$("$sim" env)"
xlaunch=$build/launcher/xlaunch
test_bin=$build/tests/runtime/zero_mpi_test
printf 'sim0 slots=2\nsim1 slots=2\n' >"$work/hosts"
cat >"$work/m2x2.yaml" <<EOF
distributed_type: MULTI_CPU
num_processes: 4
num_machines: 2
log_dir: $work/logs
mpi:
  hostfile: $work/hosts
EOF

# run LOG BIN FILTER COMM: BIN's tests FILTER on 2x2; every rank of every training must report COMM
# (BIN's "<name> rank=R world=4 bucket_comm=COMM" lines). Sets took.
run() {
  local t0=$SECONDS
  local log=$1 bin=$2 filter=$3 comm=$4
  local tag=${bin#*/tests/runtime/}
  tag=${tag%_test}
  timeout 280 "$xlaunch" run --config_file "$work/m2x2.yaml" "$bin" --gtest_color=no --gtest_filter="$filter" \
    >"$work/$log.log" 2>&1 || return 1
  grep -q '\[  PASSED  \]' "$work/$log.log" && ! grep -q '\[  FAILED  \]' "$work/$log.log" \
    && ! grep -q '\[  SKIPPED \]' "$work/$log.log" || return 1
  local lines other
  lines=$(grep -c "^$tag rank=[0-3] world=4 bucket_comm=$comm " "$work/$log.log")
  other=$(grep "^$tag " "$work/$log.log" | grep -vc "bucket_comm=$comm ")
  took=$((SECONDS - t0))
  [ "$lines" -gt 0 ] && [ "$((lines % 4))" = 0 ] && [ "$other" = 0 ]
}

# hybrid LOG TAG: every hybrid training's every rank cut its shards over its machine's 2 ranks, the
# 2 machines replicas (TAG's "rank=R stage=S shard_world=2 shard_rank=L replicas=2 replica=M" lines,
# L and M the rank's place: ranks 0 and 1 on sim0, 2 and 3 on sim1).
hybrid() {
  local want='rank=0 stage=[123] shard_world=2 shard_rank=0 replicas=2 replica=0|rank=1 stage=[123] shard_world=2 shard_rank=1 replicas=2 replica=0|rank=2 stage=[123] shard_world=2 shard_rank=0 replicas=2 replica=1|rank=3 stage=[123] shard_world=2 shard_rank=1 replicas=2 replica=1'
  local lines other
  lines=$(grep -cE "^$2 ($want)\$" "$work/$1.log")
  other=$(grep "^$2 rank=" "$work/$1.log" | grep -vcE "^$2 ($want)\$")
  [ "$lines" -gt 0 ] && [ "$((lines % 4))" = 0 ] && [ "$other" = 0 ]
}

# AdamW with two parameter groups; SGD with momentum and AdamW with accumulation and fp16 skips.
if run hier "$test_bin" "*/ZeroMpi.AdamWWithTwoGroups*/auto:*/ZeroMpi.AccumulationAndFp16Skips*/auto" hier; then
  pass "2x2 hierarchical: stages 1 and 2 match stage 0 (AdamW; SGD momentum and AdamW with accumulation and fp16 skips), replicas bitwise equal after every step ($(grep -o '\[  PASSED  \].*' "$work/hier.log"), $took s)"
else
  fail "2x2 hierarchical: want PASSED and bucket_comm=hier on every rank" hier
fi

# Hybrid sharding (ddp.shard_group machine): stages 1 and 2 (_HYBRID_SHARD_ZERO2) and stage 3
# (HYBRID_SHARD) against stage 0 and the whole job's sharding, and their checkpoints resumed.
if run hybrid12 "$test_bin" "ZeroHybrid.*" hier && hybrid hybrid12 zero_hybrid; then
  pass "2x2 hybrid sharding, stages 1 and 2: shards within each machine, the machines replicas; match stage 0 and the whole job's sharding (AdamW; fp16 skips with accumulation; uneven inputs with join; the bf16 hook at stage 2, its largest error against no hook $(grep '^zero_hybrid bf16 hook' "$work/hybrid12.log" | awk '{print $6}' | sort -g | tail -1), the whole job's $(grep '^zero_hybrid bf16 hook' "$work/hybrid12.log" | awk '{print $9}' | tr -d ')' | sort -g | tail -1)) ($took s)"
else
  fail "2x2 hybrid sharding, stages 1 and 2: want PASSED, bucket_comm=hier, and shard_world=2 replicas=2 on every rank" hybrid12
fi
if run hybrid3 "$build/tests/runtime/fsdp_mpi_test" "FsdpHybrid.*" hier && hybrid hybrid3 fsdp_hybrid; then
  pass "2x2 hybrid sharding, stage 3 (HYBRID_SHARD): matches stage 0, FULL_SHARD and one process ($(grep -m1 -o 'largest relative error against stage 0: .*' "$work/hybrid3.log"), $(grep -m1 -o 'against one process: .*' "$work/hybrid3.log"); fsdp.param_dtype bf16 against FULL_SHARD's: $(grep -m1 -o 'against FULL_SHARD: .*' "$work/hybrid3.log" | cut -d' ' -f3); uneven inputs with join); its checkpoints resume on its own layout, on FULL_SHARD's and at stage 0, and it resumes FULL_SHARD's ($took s)"
else
  fail "2x2 hybrid sharding, stage 3: want PASSED, bucket_comm=hier, and shard_world=2 replicas=2 on every rank" hybrid3
fi

# The resharding matrix of a hybrid checkpoint: saved on 2x2 at stages 3 and 2, resumed on 3, 2 and 1
# ranks, each bit for bit like a run started from the saved state gathered whole.
t0=$SECONDS
if timeout 280 "$xlaunch" run --config_file "$work/m2x2.yaml" "$build/tests/runtime/mpi_tests" \
     --test_files=zero_checkpoint_mpi_test.cpp --gtest_color=no --gtest_filter='ZeroCheckpointMpi.Hybrid*' >"$work/hybrid_ckpt.log" 2>&1 \
   && grep -q '\[  PASSED  \] 1 test' "$work/hybrid_ckpt.log" && ! grep -q '\[  SKIPPED \]' "$work/hybrid_ckpt.log"; then
  pass "2x2 hybrid checkpoints (stages 3 and 2) resume on 3, 2 and 1 ranks like runs from the state gathered whole ($((SECONDS - t0)) s)"
else
  fail "2x2 hybrid checkpoints: want ZeroCheckpointMpi.Hybrid* PASSED, not skipped" hybrid_ckpt
fi

test_finish
