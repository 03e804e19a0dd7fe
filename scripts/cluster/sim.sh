#!/usr/bin/env bash
# Simulated machines on this host, for trying and testing xlaunch's multi-machine path.
#
#   scripts/cluster/sim.sh up K [--rate 1gbit]   make K machines sim0..sim<K-1> (root)
#   scripts/cluster/sim.sh down                  remove every machine, its processes and the bridge
#   scripts/cluster/sim.sh exec HOST CMD...      run CMD on machine HOST (what Open MPI's agent does)
#   scripts/cluster/sim.sh env                   print the MCA settings that reach the machines
#   scripts/cluster/sim.sh cut HOST              take HOST's link down: its packets are lost, silently,
#                                                both ways (a pulled cable, a dead switch port)
#   scripts/cluster/sim.sh heal HOST             bring HOST's link back up; returns once HOST reaches
#                                                this host again (at most 10 s, else an error)
#   scripts/cluster/sim.sh link HOST             print up, or down while cut (rsh_agent.sh then refuses, as ssh would)
#   scripts/cluster/sim.sh kill HOST             SIGKILL every process on HOST (a machine that died),
#                                                keeping the machine itself (its namespaces) up
#   scripts/cluster/sim.sh pids HOST             the processes on HOST (not its holder), one per line:
#                                                PID COMM
#   scripts/cluster/sim.sh check                 exit 0 when this host can simulate machines, else 77
#
# Each machine is a network namespace (named like its host) with its own hostname (UTS namespace)
# and its own /dev/shm (a mount namespace with a fresh tmpfs), held by one long-lived process; its
# address is 10.213.0.(10+k) on the bridge xlsim-br0 (10.213.0.1 here), which exists only on this
# host. With --rate, each machine's link is limited in both directions with tbf (netem is not
# available on these kernels). Open MPI reaches the machines through `plm_rsh_agent` = rsh_agent.sh,
# which enters the machine's namespaces instead of using ssh. Nothing in xlaunch knows: a job uses
# them through an ordinary hostfile and the settings `env` prints (OMPI_MCA_* variables).
#
# `down` is idempotent and also removes what a failed `up` or an interrupted test left behind.
# Names: XLSIM_PREFIX (default sim) for hosts and namespaces; state in XLSIM_STATE (/run/xlsim).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PREFIX="${XLSIM_PREFIX:-sim}"
STATE="${XLSIM_STATE:-/run/xlsim}"
BRIDGE=xlsim-br0
NET=10.213.0
SHM_SIZE="${XLSIM_SHM_SIZE:-1g}"

die() { echo "sim.sh: $*" >&2; exit 1; }

holder_pid() {  # host -> pid of the process that holds its namespaces
  local pid
  pid=$(cat "$STATE/$1.pid" 2>/dev/null) || die "no machine $1 (run: sim.sh up K)"
  [[ -d /proc/$pid ]] || die "machine $1's holder (pid $pid) is gone; run sim.sh down, then up"
  echo "$pid"
}

check() {
  [[ $(id -u) == 0 ]] || { echo "sim.sh: needs root (network namespaces, a bridge, tmpfs mounts)" >&2; return 77; }
  for t in ip nsenter unshare; do
    command -v "$t" >/dev/null || { echo "sim.sh: $t not found (install iproute2 / util-linux)" >&2; return 77; }
  done
  local probe="xlsim-probe-$$"
  ip netns add "$probe" 2>/dev/null || { echo "sim.sh: cannot create a network namespace here" >&2; return 77; }
  local ok=0
  ip netns exec "$probe" unshare --uts --mount true 2>/dev/null || ok=77
  ip netns del "$probe" 2>/dev/null || true
  [[ $ok == 0 ]] || echo "sim.sh: cannot create UTS/mount namespaces here" >&2
  return $ok
}

limit() {  # netns ("" for this one) dev rate: tbf on dev's egress
  local ns=(); [[ -n $1 ]] && ns=(ip netns exec "$1")
  # burst >= 1 MB: at 1 Gbit/s a smaller bucket cannot keep up with the timer resolution.
  "${ns[@]}" tc qdisc replace dev "$2" root tbf rate "$3" burst 1mb latency 50ms
}

up() {
  local k="${1:-}" rate=""
  [[ $k =~ ^[1-9][0-9]*$ ]] || die "usage: sim.sh up K [--rate R]"
  shift
  while (($#)); do
    case "$1" in
      --rate) rate="${2:?--rate needs a value, e.g. 1gbit}"; shift 2 ;;
      *) die "unknown option $1" ;;
    esac
  done
  (( k <= 200 )) || die "at most 200 machines"
  check || exit $?
  down
  mkdir -p "$STATE"
  ip link add "$BRIDGE" type bridge
  ip addr add "$NET.1/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  for ((i = 0; i < k; i++)); do
    local h="$PREFIX$i" ve="xlsim-v$i"
    ip netns add "$h"
    ip link add "$ve" type veth peer name eth0 netns "$h"
    ip link set "$ve" master "$BRIDGE" up
    ip netns exec "$h" ip addr add "$NET.$((10 + i))/24" dev eth0
    ip netns exec "$h" ip link set eth0 up
    ip netns exec "$h" ip link set lo up
    if [[ -n $rate ]]; then
      limit "" "$ve" "$rate"
      limit "$h" eth0 "$rate"
    fi
    # The holder: own hostname and own /dev/shm, inside the network namespace, until `down`.
    # setsid + closed descriptors: it outlives this script and holds no caller's pipe open, nor the
    # simulation lock (fd 9 of the tests and benches): a test killed before `down` does not keep it.
    setsid ip netns exec "$h" unshare --uts --mount --propagation private sh -c \
      "hostname '$h' && mount -t tmpfs -o size=$SHM_SIZE,mode=1777 tmpfs /dev/shm && exec sleep infinity" \
      </dev/null >/dev/null 2>&1 9>&- &
    echo $! >"$STATE/$h.pid"
    echo "$h" >>"$STATE/hosts"
  done
  # Wait until every holder has its hostname (the mount comes first).
  for ((i = 0; i < k; i++)); do
    local h="$PREFIX$i" n=0
    until [[ $(nsenter -t "$(holder_pid "$h")" -u hostname 2>/dev/null) == "$h" ]]; do
      (( ++n < 100 )) || die "machine $h did not come up"
      sleep 0.05
    done
  done
  echo "sim.sh: $k machines up: $(tr '\n' ' ' <"$STATE/hosts")(bridge $BRIDGE $NET.0/24${rate:+, links limited to $rate})"
}

down() {
  local hosts=()
  [[ -f $STATE/hosts ]] && mapfile -t hosts <"$STATE/hosts"
  # Also namespaces a crashed `up` left without state.
  while read -r ns _; do
    [[ $ns =~ ^$PREFIX[0-9]+$ ]] && hosts+=("$ns")
  done < <(ip netns list 2>/dev/null)
  local h
  for h in $(printf '%s\n' "${hosts[@]}" | sort -u); do
    # Every process of the machine (holder, orted, ranks) first: a namespace in use stays alive.
    ip netns pids "$h" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "$h" 2>/dev/null || true
    rm -f "$STATE/$h.pid"
  done
  ip link show | sed -n 's/^[0-9]*: \(xlsim-v[0-9]*\)@.*/\1/p' | xargs -r -n1 ip link del 2>/dev/null || true
  ip link del "$BRIDGE" 2>/dev/null || true
  rm -f "$STATE/hosts"
  rmdir "$STATE" 2>/dev/null || true
}

run_on() {  # host cmd... : in the machine's network, UTS and mount namespaces
  local h="$1"; shift
  exec nsenter -t "$(holder_pid "$h")" -n -u -m -- "$@"
}

veth_of() {  # host -> the bridge side of its link
  holder_pid "$1" >/dev/null
  local i="${1#"$PREFIX"}"
  [[ $i =~ ^[0-9]+$ ]] || die "$1 is not one of the machines $PREFIX<k>"
  echo "xlsim-v$i"
}

# Link down on the bridge side: the machine keeps its address and routes, so its TCP connections
# see nothing but silence (retransmissions, keepalive probes unanswered), as with a dead switch
# port, not an error they could act on at once.
cut() { ip link set "$(veth_of "$1")" down; }
# Link up, and back only once the machine reaches this host again: the neighbour (ARP) entries
# that failed while it was down, on both sides, are dropped (otherwise a connect in the next second
# fails with 'No route to host', and an Open MPI daemon started then ends before it calls back, so
# mpirun waits for it for ever); then a TCP connect from the machine to this host's bridge address
# must be answered (accepted or refused) within 10 s.
heal() {
  local h="$1" ve pid out n
  ve=$(veth_of "$h")
  pid=$(holder_pid "$h")
  ip link set "$ve" up
  ip neigh flush dev "$BRIDGE" to "$NET.$((10 + ${h#"$PREFIX"}))" 2>/dev/null || true
  nsenter -t "$pid" -n ip neigh flush dev eth0 2>/dev/null || true
  for ((n = 0; n < 50; n++)); do
    out=$(nsenter -t "$pid" -n timeout 1 bash -c "exec 3<>/dev/tcp/$NET.1/9" 2>&1) && return 0
    [[ $out == *refused* ]] && return 0
    sleep 0.2
  done
  die "heal $h: its link is up, but a TCP connect from it to $NET.1 (this host) got no answer for 10 s: $out"
}
link_state() {  # host -> "up" or "down" (cut)
  if ip -o link show "$(veth_of "$1")" | grep -q "[<,]UP[,>]"; then echo up; else echo down; fi
}

machine_pids() {  # host -> every process in its network namespace but the holder
  local holder p
  holder=$(holder_pid "$1")
  for p in $(ip netns pids "$1"); do
    [[ $p == "$holder" ]] || echo "$p"
  done
}

kill_machine() { machine_pids "$1" | xargs -r kill -9 2>/dev/null || true; }

print_pids() {
  local p
  for p in $(machine_pids "$1"); do
    local c
    c=$(cat "/proc/$p/comm" 2>/dev/null) && echo "$p $c"
  done
  return 0
}

print_env() {
  cat <<EOF
export OMPI_MCA_plm_rsh_agent=$HERE/rsh_agent.sh
export OMPI_MCA_plm_rsh_no_tree_spawn=1
export OMPI_MCA_oob_tcp_if_include=$NET.0/24
export OMPI_MCA_btl_tcp_if_include=$NET.0/24
export OMPI_MCA_routed=direct
EOF
}

case "${1:-}" in
  up) shift; up "$@" ;;
  down) down ;;
  exec) shift; (($# >= 2)) || die "usage: sim.sh exec HOST CMD..."; run_on "$@" ;;
  env) print_env ;;
  check) check ;;
  cut|heal|kill|pids|link)
    (($# == 2)) || die "usage: sim.sh $1 HOST"
    case "$1" in cut) cut "$2" ;; link) link_state "$2" ;; heal) heal "$2" ;; kill) kill_machine "$2" ;; pids) print_pids "$2" ;; esac ;;
  *) die "usage: sim.sh up K [--rate R] | down | exec HOST CMD... | env | check | cut|heal|kill|pids|link HOST" ;;
esac
