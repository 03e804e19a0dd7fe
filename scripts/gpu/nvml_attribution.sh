#!/usr/bin/env bash
# GPU check of the report's GPU attribution (docs/performance.md, "Which GPU is a rank's"):
#   nvml_attribution.sh PUBLISH_GPU_TEST
# Runs publish_gpu_test (tests/report) with CUDA_DEVICE_ORDER=PCI_BUS_ID and CUDA_VISIBLE_DEVICES
# listing every GPU in reverse, so that CUDA's device k is nvidia-smi's GPU n-1-k, and checks that
# the bus id each CUDA device published is the one nvidia-smi (NVML) gives that GPU: the form the
# launcher matches. On one GPU the order cannot be shuffled, but the form and the NVML match are
# still checked. Without nvidia-smi only the test runs (it compares with CUDA's own answer).
# Exit status: 0 when everything matched.
set -uo pipefail
bin=${1:?usage: nvml_attribution.sh PUBLISH_GPU_TEST}
if ! command -v nvidia-smi >/dev/null; then
  echo "nvml_attribution: no nvidia-smi: running the test alone (no comparison with NVML)"
  exec timeout 120 "$bin"
fi
mapfile -t smi < <(timeout 30 nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader)
n=${#smi[@]}
[ "$n" -gt 0 ] || { echo "FAIL nvml_attribution: nvidia-smi lists no GPU"; exit 1; }
visible=()
for ((i = n - 1; i >= 0; --i)); do visible+=("$i"); done
list=$(IFS=,; echo "${visible[*]}")
echo "nvml_attribution: $n GPU(s); CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=$list"
out=$(CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=$list timeout 120 "$bin" 2>&1)
rc=$?
echo "$out"
[ $rc -eq 0 ] || { echo "FAIL nvml_attribution: publish_gpu_test exited $rc"; exit 1; }
fail=0
for ((k = 0; k < n; ++k)); do
  got=$(echo "$out" | sed -n "s/^cuda device $k bus id //p" | head -1)
  want=$(echo "${smi[${visible[$k]}]}" | tr -d ' ' | tr a-f A-F)
  if [ "$got" = "$want" ]; then
    echo "PASS CUDA device $k (nvidia-smi GPU ${visible[$k]}): $got"
  else
    echo "FAIL CUDA device $k should be nvidia-smi GPU ${visible[$k]} at '$want', published '${got:-nothing}'"
    fail=1
  fi
done
exit $fail
