#!/usr/bin/env bash
# Open MPI's `plm_rsh_agent` for the simulated machines of sim.sh: called like ssh,
#   rsh_agent.sh [ssh options] HOST COMMAND...
# it runs COMMAND with `sh -c` inside HOST's namespaces instead of logging in over the network.
# A machine whose link is cut (sim.sh cut HOST) cannot be logged in to, as over ssh: the agent says
# so and exits 255, ssh's code for a connection that failed.
set -euo pipefail
while [[ ${1:-} == -* ]]; do  # ssh options Open MPI may pass (-x, -o X=Y)
  case "$1" in -o|-l|-p|-i) shift 2 ;; *) shift ;; esac
done
host="${1:?rsh_agent.sh: no host}"; shift
sim="$(dirname "${BASH_SOURCE[0]}")/sim.sh"
if [[ $("$sim" link "$host" 2>/dev/null) == down ]]; then
  echo "ssh: connect to host $host port 22: No route to host (sim.sh: its link is cut)" >&2
  exit 255
fi
exec "$sim" exec "$host" sh -c "$*"
