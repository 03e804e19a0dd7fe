#!/usr/bin/env bash
# Open MPI's `plm_rsh_agent` for the simulated machines of sim.sh: called like ssh,
#   rsh_agent.sh [ssh options] HOST COMMAND...
# it runs COMMAND with `sh -c` inside HOST's namespaces instead of logging in over the network.
set -euo pipefail
while [[ ${1:-} == -* ]]; do  # ssh options Open MPI may pass (-x, -o X=Y)
  case "$1" in -o|-l|-p|-i) shift 2 ;; *) shift ;; esac
done
host="${1:?rsh_agent.sh: no host}"; shift
exec "$(dirname "${BASH_SOURCE[0]}")/sim.sh" exec "$host" sh -c "$*"
