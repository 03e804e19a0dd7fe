#!/usr/bin/env bash
# xlaunch on several machines, simulated on this host (scripts/cluster/sim.sh): 2 machines x 2
# ranks through an ordinary hostfile, checked against what each rank must see.
#   usage: multimachine_test.sh SOURCE_DIR BUILD_DIR
# Needs root and network/UTS/mount namespaces: exits 77 (skipped, saying why) without them; under
# CI=true that is a failure (tests/common/test_lib.sh, skip).
# Every namespace, link and process it made is removed on exit, also when a check fails.
set -u
src=$1
build=$2
sim=$src/scripts/cluster/sim.sh
. "$(dirname "$0")/../common/test_lib.sh"
"$sim" check || skip "this machine cannot simulate machines (sim.sh check says why above)"
# One simulation per host at a time: another checkout's test run waits here instead of tearing
# down this one's machines (the names and the bridge are the host's).
exec 9>/run/xlsim.lock
flock -w 600 9 || { echo "FAIL another multi-machine test held /run/xlsim.lock for 10 minutes"; exit 1; }

test_on_exit() { "$sim" down; }
test_workdir

"$sim" up 4 || { echo "FAIL sim.sh up 4"; exit 1; }
# How Open MPI reaches the machines: environment only, nothing xlaunch knows about.
eval "$("$sim" env)"

xlaunch=$build/launcher/xlaunch
mkdir -p "$work/logs"
layout() {  # layout NAME MACHINES RANKS_PER_MACHINE: hostfile + config for sim0..sim<M-1>
  local name=$1 m=$2 per=$3
  : >"$work/$name.hosts"
  for ((i = 0; i < m; i++)); do echo "sim$i slots=$per" >>"$work/$name.hosts"; done
  cat >"$work/$name.yaml" <<EOF
distributed_type: MULTI_CPU
num_processes: $((m * per))
num_machines: $m
log_dir: $work/logs
mpi:
  hostfile: $work/$name.hosts
EOF
}
layout m2x2 2 2
layout m4x1 4 1
layout m1x2 1 2
run() {  # run LAYOUT LOG PROGRAM ARGS...: xlaunch run with that layout's config; output in LOG.log
  local cfg=$work/$1.yaml log=$2
  shift 2
  timeout 150 "$xlaunch" run --config_file "$cfg" "$@" >"$work/$log.log" 2>&1
}

# 1. Where the ranks run, and what each decides there.
probe=$build/tests/cluster/placement_probe
if run m2x2 probe "$probe"; then
  want="0 sim0 0 1 hier
1 sim0 1 0 hier
2 sim1 0 1 hier
3 sim1 1 0 hier"
  got=$(sed -n 's/^probe rank=\([0-9]*\) world=4 host=\([a-z0-9]*\) local_rank=\([0-9]*\) local_main=\([01]\) bucket_comm=\([a-z]*\) .*/\1 \2 \3 \4 \5/p' \
        "$work/probe.log" | sort -n)
  [ "$got" = "$want" ] && pass "2x2: ranks 0,1 on sim0 and 2,3 on sim1, local ranks 0,1 on each, local main = local rank 0, gradients hierarchical (shared memory in each machine, MPI between)" ||
    fail "2x2 placement (want: $(echo $want))" probe
  shm_ids=$(sed -n 's/^probe .*host=\([a-z0-9]*\) .* shm=\([0-9:]*\)$/\1 \2/p' "$work/probe.log" | sort -u)
  [ "$(echo "$shm_ids" | wc -l)" = 2 ] && [ "$(echo "$shm_ids" | awk '{print $2}' | sort -u | wc -l)" = 2 ] &&
    pass "each machine has its own /dev/shm" || fail "each machine has its own /dev/shm: $shm_ids" probe
else
  fail "placement probe on 2x2" probe
fi
if run m1x2 probe1 "$probe" && [ "$(grep -c 'host=sim0 .*bucket_comm=shm ' "$work/probe1.log")" = 2 ]; then
  pass "1x2 on sim0: the two ranks of one machine reduce gradients through shared memory"
else
  fail "1x2 on sim0 uses shared memory" probe1
fi

# 2. xlaunch test, through the same config.
if timeout 120 "$xlaunch" test --config_file "$work/m2x2.yaml" >"$work/selftest.log" 2>&1; then
  pass "xlaunch test on 2x2"
else
  fail "xlaunch test on 2x2" selftest
fi

# 3. DDP equals one process doing the same work, across machines: with the hierarchical allreduce
# (cpu_allreduce auto: shared memory in each machine, MPI between their leaders) and a flat MPI one.
for mode in auto:hier mpi:mpi; do
  opt=${mode%%:*} comm=${mode##*:}
  if run m2x2 "ddp_$opt" "$build/tests/cluster/ddp_equivalence" --cpu_allreduce "$opt" &&
     [ "$(grep -c "ddp_equivalence .*world=4 bucket_comm=$comm .*PASS\$" "$work/ddp_$opt.log")" = 4 ]; then
    pass "2x2, cpu_allreduce $opt ($comm): 8 SGD momentum steps equal one process's on the 4 ranks' batches ($(grep -o 'grad_rel_err.*PASS' "$work/ddp_$opt.log" | head -1))"
  else
    fail "2x2, cpu_allreduce $opt: DDP equals one process (bucket_comm=$comm on every rank)" "ddp_$opt"
  fi
done

# 3a. The communication hooks across machines (hierarchical): bf16 within 16-bit rounding of one
# process, PowerSGD's approximation the same on every rank (the replicas stay bitwise equal).
for hook in bf16 powersgd; do
  if run m2x2 "hook_$hook" "$build/tests/cluster/ddp_equivalence" --comm_hook "$hook" &&
     [ "$(grep -c "ddp_equivalence .*world=4 bucket_comm=hier hook=$hook .*replicas_equal=1 PASS\$" "$work/hook_$hook.log")" = 4 ]; then
    pass "2x2, comm_hook $hook over the hierarchical allreduce: replicas equal on the 4 ranks ($(grep -o 'grad_rel_err=[^ ]*' "$work/hook_$hook.log" | head -1))"
  else
    fail "2x2, comm_hook $hook: want bucket_comm=hier, replicas_equal=1 and PASS on every rank" "hook_$hook"
  fi
done

# 3b. No room in sim1's /dev/shm: every rank agrees to use flat MPI (no machine takes the
# hierarchical path alone, which would hang), rank 0 says why, and DDP still equals one process.
"$sim" exec sim1 sh -c 'dd if=/dev/zero of=/dev/shm/xl-test-fill bs=1M >/dev/null 2>&1; true'
if run m2x2 ddp_full "$build/tests/cluster/ddp_equivalence" &&
   [ "$(grep -c 'ddp_equivalence .*world=4 bucket_comm=mpi .*PASS$' "$work/ddp_full.log")" = 4 ] &&
   [ "$(grep -c 'shared-memory gradient allreduce unavailable, using MPI' "$work/ddp_full.log")" = 1 ]; then
  pass "2x2 with sim1's /dev/shm full: every rank falls back to flat MPI, one warning, DDP equals one process"
else
  fail "2x2 with sim1's /dev/shm full: want bucket_comm=mpi and PASS on every rank and one warning" ddp_full
fi
"$sim" exec sim1 rm -f /dev/shm/xl-test-fill

# 4. A checkpoint saved on 2x2 resumes on 4x1 (4 machines, 1 rank each) exactly.
train=$build/tests/checkpoint/checkpoint_train_resume
if run m2x2 straight "$train" --epochs 2 --out "$work/straight.bin" &&
   run m2x2 save "$train" --epochs 2 --save "$work/ckpt" --stop-after-epochs 1 &&
   run m4x1 resume "$train" --epochs 2 --resume "$work/ckpt" --out "$work/resumed.bin"; then
  [ "$(ls -d "$work"/ckpt* | wc -l)" = 1 ] && [ -f "$work/ckpt/MANIFEST" ] &&
    pass "2x2: one checkpoint directory written" || fail "2x2: one checkpoint directory written ($(ls -d "$work"/ckpt*))"
  cmp -s "$work/straight.bin" "$work/resumed.bin" &&
    pass "saved on 2x2, resumed on 4x1: parameters equal the straight 2x2 run's bitwise" ||
    fail "saved on 2x2, resumed on 4x1: parameters differ from the straight run" resume
else
  fail "checkpoint runs (straight, save on 2x2, resume on 4x1)" resume
fi

# 5. Every rank of machine sim1 killed: the job ends, naming the machine and its ranks.
run m2x2 kill "$train" --epochs 1000000 &
job=$!
comm=$(basename "$train" | cut -c1-15)
on_sim1() { for p in $(ip netns pids sim1); do [ "$(cat /proc/"$p"/comm 2>/dev/null)" = "$comm" ] && echo "$p"; done; }
for _ in $(seq 100); do [ "$(on_sim1 | wc -l)" = 2 ] && break; sleep 0.1; done
sleep 1  # well into training
killed_at=$(date +%s.%N)
on_sim1 | xargs -r kill -9
wait "$job"
rc=$?
took=$(echo "$(date +%s.%N) - $killed_at" | bc)
grep -q "machine sim1 (ranks 2, 3): every rank was killed by signal 9 (SIGKILL)" "$work/kill.log" && [ "$rc" = 137 ] &&
  pass "sim1's ranks killed: exit 137 after ${took% *}s, '$(grep -o 'machine sim1 ([^;]*' "$work/kill.log" | head -1)'" ||
  fail "sim1's ranks killed: want exit 137 naming machine sim1 (ranks 2, 3), got $rc" kill
# 6. Machine sim1 lost whole (its Open MPI daemon too): its ranks leave no status; they are named.
run m2x2 lost "$train" --epochs 1000000 &
job=$!
for _ in $(seq 100); do [ "$(on_sim1 | wc -l)" = 2 ] && break; sleep 0.1; done
sleep 1
for p in $(ip netns pids sim1); do [ "$(cat /proc/"$p"/comm 2>/dev/null)" = sleep ] || kill -9 "$p" 2>/dev/null; done
wait "$job"
rc=$?
grep -Eq "ranks ([01], )*2, 3 ended without an exit status" "$work/lost.log" && [ "$rc" != 0 ] &&
  pass "sim1 lost whole: exit $rc, '$(grep -o 'ranks [0-9, ]*ended without an exit status' "$work/lost.log")'" ||
  fail "sim1 lost whole: want ranks 2, 3 named as without an exit status, got exit $rc" lost

# 7. When a machine goes away (docs/failures.md): 2 machines x 1 rank, timeout_s 10. The job ends
# within timeout_s + 10 s, non-zero, naming the machine, whichever it is, and within a further 60 s
# no process of it is left on either machine or here, while the link is still down. Who notices a
# cut first depends on where in a step it falls: the ranks' watchdog (exit 124, its verdict), or
# mpirun, whose keepalive finds the machine's daemon silent (exit 205); either way the machine is named.
layout m2x1 2 1
echo "timeout_s: 10" >>"$work/m2x1.yaml"
ptrain=$build/tests/cluster/partition_train
job_left() {  # what is left of the job: processes on sim0 and sim1 (not their holders), mpirun and agents here
  for h in sim0 sim1; do "$sim" pids "$h" | sed "s/^/$h:/"; done
  pgrep -a -f "$work/logs|rsh_agent.sh" | sed 's/^/here:/'
}
gone_within() {  # SECONDS: 0 once nothing of the job is left (prints after how long), else 1
  local start=$SECONDS
  while ((SECONDS - start < $1)); do
    [ -z "$(job_left)" ] && { echo $((SECONDS - start)); return 0; }
    sleep 0.5
  done
  return 1
}
wait_file() { for _ in $(seq 900); do [ -f "$1" ] && return 0; sleep 0.1; done; return 1; }
elapsed() { echo "$(date +%s.%N) - $1" | bc | xargs printf '%.1f'; }
# lose NAME HOW HOST MARKER PROGRAM ARGS...: start the job on m2x1, wait for MARKER, then `sim.sh HOW
# HOST`; sets rc, took (seconds from the loss to xlaunch's exit) and gone (seconds after that until
# nothing of the job was left; "never" after 60).
lose() {
  local name=$1 how=$2 host=$3 marker=$4 t0
  shift 4
  rm -f "$marker" "$marker.save"
  run m2x1 "$name" "$@" &
  local job=$!
  wait_file "$marker" || echo "    $name: $marker never appeared"
  t0=$(date +%s.%N)
  "$sim" "$how" "$host"
  wait "$job"
  rc=$?
  took=$(elapsed "$t0")
  gone=$(gone_within 60) || { gone=never; job_left | sed 's/^/    left: /'; }
}
within() { [ "$(echo "$1 <= $2" | bc)" = 1 ]; }

lose cut1 cut sim1 "$work/marker1" "$ptrain" --marker "$work/marker1"
"$sim" heal sim1
# A verdict that every rank entered a collective and none finished it must point at the network.
if [ "$rc" != 0 ] && within "$took" 20 && grep -q "machine sim1 (rank 1) unreachable since [0-9:]*: its link or the machine is down" "$work/cut1.log" &&
   { ! grep -q "every rank entered it and none finished it" "$work/cut1.log" ||
     grep -q "none finished it (on 2 machines: this points at the network between the machines" "$work/cut1.log"; }; then
  pass "sim1's link cut while training: exit $rc ${took}s after the cut (bound 20), '$(grep -o 'machine sim1 ([^)]*) unreachable since [0-9:]*' "$work/cut1.log" | head -1)'"
else
  fail "sim1's link cut: want a non-zero exit within 20 s naming machine sim1 (and the network, with a 'none finished it' verdict), got $rc after ${took}s" cut1
fi
[ "$gone" != never ] && pass "sim1's link cut: nothing of the job left on sim0, sim1 or here ${gone}s after xlaunch's exit (link still down)" ||
  fail "sim1's link cut: processes of the job left 60 s after xlaunch's exit"

# The first machine's link cut while rank 0 (there) is inside its third save: the second
# checkpoint stays complete and loadable.
ckpt=$work/pckpt
lose cut0 cut sim0 "$work/marker0.save" "$ptrain" --marker "$work/marker0" --save "$ckpt" --save_every 10 --pause_in_save 3
"$sim" heal sim0
if [ "$rc" != 0 ] && within "$took" 20 && grep -q "machine sim0 (rank 0) unreachable since" "$work/cut0.log"; then
  pass "sim0's link cut inside a checkpoint save: exit $rc ${took}s after the cut (bound 20), naming machine sim0 (rank 0)"
else
  fail "sim0's link cut inside a save: want a non-zero exit within 20 s naming machine sim0 (rank 0), got $rc after ${took}s" cut0
fi
[ "$gone" != never ] && pass "sim0's link cut: nothing of the job left ${gone}s after xlaunch's exit (link still down)" ||
  fail "sim0's link cut: processes of the job left 60 s after xlaunch's exit"
if "$ptrain" --resume "$ckpt" >"$work/cut0_resume.log" 2>&1 && grep -q "loaded $ckpt at step 20\$" "$work/cut0_resume.log"; then
  pass "the checkpoint saved before the cut is complete: it loads, at step 20"
else
  fail "the checkpoint saved before the cut (step 20) does not load" cut0_resume
fi

# Every process of the first machine killed (its daemon too): named within the same bound.
lose kill0 kill sim0 "$work/marker2" "$ptrain" --marker "$work/marker2"
if [ "$rc" != 0 ] && within "$took" 20 && grep -q "machine sim0 (rank 0) unreachable since" "$work/kill0.log"; then
  pass "every process of sim0 killed: exit $rc ${took}s after (bound 20), naming machine sim0 (rank 0)"
else
  fail "every process of sim0 killed: want a non-zero exit within 20 s naming machine sim0 (rank 0), got $rc after ${took}s" kill0
fi
[ "$gone" != never ] && pass "sim0 killed: nothing of the job left ${gone}s after xlaunch's exit" ||
  fail "sim0 killed: processes of the job left 60 s after xlaunch's exit"

# `xlaunch run` itself SIGKILLed mid-training (a scheduler's `timeout -s KILL`): mpirun dies with it
# (its parent-death signal), the daemons see it gone and the wrappers' lifelines find it refusing,
# so within 10 s nothing of the job is left on either machine or here.
rm -f "$work/marker4"
"$xlaunch" run --config_file "$work/m2x1.yaml" "$ptrain" --marker "$work/marker4" >"$work/sigkill.log" 2>&1 &
job=$!
wait_file "$work/marker4" || echo "    sigkill: $work/marker4 never appeared"
kill -KILL "$job"
wait "$job" 2>/dev/null
if gone=$(gone_within 10); then
  pass "xlaunch run SIGKILLed while training on sim0 and sim1: nothing of the job left ${gone}s later"
else
  job_left | sed 's/^/    left: /'
  fail "xlaunch run SIGKILLed: processes of the job left on sim0, sim1 or here 10 s later" sigkill
  for h in sim0 sim1; do "$sim" kill "$h"; done
fi

# Every process of sim1 frozen (SIGSTOP: a machine that hangs; its kernel still answers TCP, so no
# keepalive fires and its lifeline cannot run): mpirun would wait for its daemon for ever;
# xlaunch run ends mpirun after the grace and names the machine (its rank left no status).
rm -f "$work/marker3"
run m2x1 freeze1 "$ptrain" --marker "$work/marker3" &
job=$!
wait_file "$work/marker3"
t0=$(date +%s.%N)
"$sim" pids sim1 | awk '{print $1}' | xargs -r kill -STOP
wait "$job"
rc=$?
took=$(elapsed "$t0")
here=$(pgrep -a -f "^[^ ]*mpirun .*$work/logs|^[^ ]*bash [^ ]*rsh_agent.sh" || true)
"$sim" kill sim1
if [ "$rc" = 124 ] && within "$took" 20 &&
   grep -q "and mpirun has not ended within 4 s.*; ending mpirun (SIGTERM to it and what it started here)" "$work/freeze1.log" &&
   grep -q "machine sim1 (rank 1) unreachable since" "$work/freeze1.log" && [ -z "$here" ]; then
  pass "sim1 frozen: xlaunch ended mpirun (which waited for sim1's daemon): exit 124 ${took}s after (bound 20), nothing left here"
else
  fail "sim1 frozen: want exit 124 within 20 s, mpirun ended, naming sim1, nothing left here; got $rc after ${took}s; left here: $here" freeze1
fi

# SIGKILL is not instant for every process (a stopped one is woken first): allow 10 s.
for _ in $(seq 20); do
  left=""
  for h in sim0 sim1 sim2 sim3; do
    for p in $(ip netns pids "$h"); do
      [ "$(cat /proc/"$p"/comm 2>/dev/null || echo sleep)" = sleep ] || left+=" $h:$(cat /proc/"$p"/comm 2>/dev/null)"
    done
  done
  [ -z "$left" ] && break
  sleep 0.5
done
[ -z "$left" ] && pass "no process of the job is left on any machine" || fail "processes left:$left"

test_finish
