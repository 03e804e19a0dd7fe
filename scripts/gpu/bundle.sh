#!/usr/bin/env bash
# Packs everything the GPU checks need into one folder that runs on a lent GPU machine as it is
# (no package registry, no Open MPI, yaml-cpp or CLI11 there; LibTorch and the CUDA libraries
# come from that machine's own torch wheel):
#   scripts/gpu/bundle.sh OUT_DIR
# then, there:   OUT_DIR/run.sh [RESULTS_DIR]        (docs/gpu.md)
#
# Builds here first (Release, XLAUNCH_WITH_CUDA=ON, XLAUNCH_WITH_NCCL=ON, kernels for sm_80 and
# sm_90, against this machine's torch: the same 2.11.0 wheel) into BUILD_DIR (default
# ./build-bundle), only the targets the checks run. XLAUNCH_BUNDLE_FROM=DIR packs an existing
# build tree instead of building (the CTest check tests/bundle does this with the main build).
#
# OUT_DIR (at most 60 MiB: the GPU machine takes 64 with the working tree) holds, stripped:
#   run.sh                  finds torch, sets the library path, runs the checks (scripts/gpu/run.sh)
#   bin/                    xlaunch, xlaunch_selftest, the examples, test and benchmark programs,
#                           and Open MPI's mpirun (orterun) and orted
#   lib/                    libxlaunch and every library those need that is neither glibc,
#                           libstdc++/libgcc_s nor provided by the torch wheel (Open MPI, PMIx,
#                           libevent, hwloc, yaml-cpp, zlib, ...); lib/openmpi3 and lib/pmix are
#                           Open MPI's and PMIx's components, relocated by run.sh (OPAL_PREFIX...)
#   share/, etc/            Open MPI's and PMIx's help texts and parameter files
#   data/fashion-mnist/     the dataset of examples/train_fashion_mnist
#   data/fortunes/          the corpus of examples/train_gpt (Debian package fortunes)
#   torch-libs.txt          the libraries that must come from the machine's torch wheel
#   MANIFEST.txt            what was packed, from which commit and build
# OUT_DIR must be missing, empty, or an earlier bundle (which is replaced).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
say() { echo "[bundle] $*"; }
die() { echo "[bundle] error: $*" >&2; exit 1; }

[ $# -eq 1 ] || die "usage: scripts/gpu/bundle.sh OUT_DIR"
OUT=$1
PY="${XLAUNCH_PYTHON:-python3}"
MPI_LIB=/usr/lib/x86_64-linux-gnu/openmpi/lib
PMIX_ROOT=/usr/lib/x86_64-linux-gnu/pmix2
DATA_DIR="${XLAUNCH_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}"

# What the checks run, by build-tree path, and what the CPU-side checks need at the least.
PROGRAMS=(launcher/xlaunch launcher/xlaunch_selftest launcher/xlaunch_merge_weights examples/train_fashion_mnist examples/hello_allreduce
          examples/train_gpt
          tests/runtime/nccl_test tests/runtime/mpi_communicator_test tests/data/loader_test tests/rl/env_pool_test
          tests/runtime/device_paths_test tests/runtime/watchdog_abort_test tests/faults/fault_program
          tests/amp/amp_unscale_test tests/report/publish_gpu_test tests/report/sync_count_job tests/augment/augment_cuda_test tests/amp/grad_scaler_test tests/amp/autocast_test
          tests/checkpoint/checkpoint_train_resume tests/checkpoint/checkpoint_train_job
          scripts/bench/bench_amp_unscale scripts/bench/bench_amp scripts/bench/bench_loader scripts/bench/bench_ddp)
TARGETS=()
for p in "${PROGRAMS[@]}"; do TARGETS+=("$(basename "$p")"); done

torch_prefix=$("$PY" -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null) ||
  die "$PY has no torch: run scripts/install-deps.sh (or set XLAUNCH_PYTHON)"
TORCH_LIB=$(cd "$torch_prefix/../../lib" && pwd)       # site-packages/torch/lib
SITE=$(cd "$TORCH_LIB/../.." && pwd)                      # site-packages (nvidia/*/lib beside torch)

# 1. The build.
if [ -n "${XLAUNCH_BUNDLE_FROM:-}" ]; then
  BUILD=$(cd "$XLAUNCH_BUNDLE_FROM" && pwd) || die "XLAUNCH_BUNDLE_FROM=$XLAUNCH_BUNDLE_FROM is not a directory"
  [ -f "$BUILD/CMakeCache.txt" ] || die "$BUILD is not a CMake build tree"
  say "packing the existing build $BUILD (no build)"
else
  BUILD="${BUILD_DIR:-$REPO/build-bundle}"
  command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || die "no nvcc: the bundle is a CUDA build"
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$REPO}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
  export CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}"
  export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-8.0;9.0}"
  start=$(date +%s)
  say "configuring $BUILD (Release, CUDA and NCCL on, kernels for sm_80 and sm_90)"
  cmake -S "$REPO" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$torch_prefix" \
    -DXLAUNCH_WITH_CUDA=ON -DXLAUNCH_WITH_NCCL=ON -DXLAUNCH_KERNELS_CUDA_ARCHITECTURES="80;90" \
    -DXLAUNCH_BUILD_TESTS=ON -DXLAUNCH_BUILD_EXAMPLES=ON >"$BUILD.configure.log" 2>&1 ||
    { tail -30 "$BUILD.configure.log"; die "configure failed (log: $BUILD.configure.log)"; }
  say "building ${#TARGETS[@]} targets with ${JOBS:-2} jobs"
  cmake --build "$BUILD" -j "${JOBS:-2}" --target "${TARGETS[@]}"
  say "built in $(( $(date +%s) - start )) s"
fi
cache() { sed -n "s/^$1:[A-Z]*=//p" "$BUILD/CMakeCache.txt" | head -1; }
archs=$(cache XLAUNCH_KERNELS_CUDA_ARCHITECTURES)
nccl=$(cache NCCL_LIBRARY)
case ";$archs;" in *";90;"*|*";90-real;"*|*";90a;"*) ;; *) say "warning: $BUILD's kernels are built for '$archs', without sm_90 (Hopper)";; esac
[[ -n "$nccl" && "$nccl" != *NOTFOUND* ]] || say "warning: $BUILD has no NCCL: the NCCL checks will fail on the GPU machine"

# 2. The folder.
if [ -e "$OUT" ]; then
  [ -d "$OUT" ] || die "$OUT exists and is not a directory"
  if [ -f "$OUT/MANIFEST.txt" ] && grep -q '^xlaunch GPU bundle' "$OUT/MANIFEST.txt"; then
    rm -rf "$OUT"
  elif [ -n "$(ls -A "$OUT")" ]; then
    die "$OUT is neither empty nor an earlier bundle: refusing to write into it"
  fi
fi
mkdir -p "$OUT"/{bin,lib/openmpi3,lib/pmix,share/openmpi,share/pmix,etc,data}
OUT=$(cd "$OUT" && pwd)

is_system_lib() {  # glibc, and the C++ runtime torch itself needs from the machine
  case "$1" in
    linux-vdso.so.*|ld-linux-x86-64.so.*|libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|libutil.so.*|\
    libresolv.so.*|libanl.so.*|libstdc++.so.*|libgcc_s.so.*|libcuda.so.*) return 0;;
  esac
  return 1
}
declare -A copied=() from_torch=()
# add_deps FILE: copies into lib/ every library FILE needs (recursively, through ldd) that is not
# a system one or the torch wheel's; records the wheel's in from_torch.
add_deps() {
  local line name path
  while read -r line; do
    [[ "$line" == *"=>"* ]] || continue
    name=${line%% =>*}; name=${name//[[:space:]]/}
    path=${line#*=> }; path=${path%% (*}
    is_system_lib "$name" && continue
    [ "$path" = "not found" ] && die "$1 needs $name, which is not found here"
    case "$(readlink -f "$path")" in
      "$SITE"/*|/usr/local/cuda*|/usr/local/cuda-*) from_torch[$name]=1; continue;;
    esac
    [ -n "${copied[$name]:-}" ] && continue
    copied[$name]=1
    cp -L "$path" "$OUT/lib/$name"
  done < <(ldd "$1")
  return 0
}
pack() {  # pack SRC DEST: copy, strip, and collect the libraries it needs
  cp -L "$1" "$2"
  chmod u+w "$2"
  strip --strip-unneeded "$2" 2>/dev/null || true
  add_deps "$1"
}

for p in "${PROGRAMS[@]}"; do
  [ -x "$BUILD/$p" ] || die "$BUILD/$p is missing: build it (cmake --build $BUILD --target $(basename "$p"))"
  pack "$BUILD/$p" "$OUT/bin/$(basename "$p")"
done
pack "$BUILD/runtime/libxlaunch.so" "$OUT/lib/libxlaunch.so"

# Open MPI 4.1 from Debian: mpirun (orterun), orted, the libraries, the components a single
# machine uses (not those for InfiniBand, UCX, libfabric, PSM, OpenSHMEM, ROMIO, or Slurm/Flux/LSF/
# Grid Engine), and
# PMIx with its components.
pack "$(readlink -f /usr/bin/orterun)" "$OUT/bin/mpirun"
pack /usr/bin/orted "$OUT/bin/orted"
skip_re='^mca_(btl_(openib|ofi|uct)|mtl_|pml_(ucx|cm)|osc_ucx|atomic_|spml_|sshmem_|scoll_|memheap_|io_romio|.*(slurm|flux|jsm|gridengine|lsf|tm)\.so)'
kept=0
for c in "$MPI_LIB"/openmpi3/*.so; do
  n=$(basename "$c")
  [[ "$n" =~ $skip_re ]] && continue
  pack "$c" "$OUT/lib/openmpi3/$n"
  kept=$((kept + 1))
done
for c in "$PMIX_ROOT"/lib/pmix/*.so; do pack "$c" "$OUT/lib/pmix/$(basename "$c")"; done
# The libraries the components reach through the ones copied above are in lib/ already; strip them.
for f in "$OUT"/lib/*.so*; do chmod u+w "$f"; strip --strip-unneeded "$f" 2>/dev/null || true; done
cp -r /usr/share/openmpi/. "$OUT/share/openmpi/"
cp -r "$PMIX_ROOT"/share/pmix/. "$OUT/share/pmix/"
cp /etc/openmpi/openmpi-mca-params.conf /etc/openmpi/openmpi-default-hostfile "$OUT/etc/"
# Debian's pmix-mca-params.conf names /usr/lib/.../pmix2/lib/pmix: run.sh sets the path instead.
echo "# PMIx parameters of the bundle: run.sh sets PMIX_MCA_mca_base_component_path" >"$OUT/share/pmix-mca-params.conf"
cp "$OUT/share/pmix-mca-params.conf" "$OUT/etc/pmix-mca-params.conf"

# The dataset, the run script.
[ -f "$DATA_DIR/train-images-idx3-ubyte.gz" ] || die "no Fashion-MNIST in $DATA_DIR (Debian package dataset-fashion-mnist)"
mkdir -p "$OUT/data/fashion-mnist"
cp "$DATA_DIR"/*-ubyte.gz "$OUT/data/fashion-mnist/"
CORPUS="${XLAUNCH_FORTUNES_DIR:-/usr/share/games/fortunes}"
[ -d "$CORPUS" ] || die "no corpus in $CORPUS (Debian package fortunes)"
mkdir -p "$OUT/data/fortunes"
find "$CORPUS" -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' -exec cp {} "$OUT/data/fortunes/" \;
cp "$REPO/scripts/gpu/run.sh" "$OUT/run.sh"
cp "$REPO/scripts/gpu/nvml_attribution.sh" "$REPO/scripts/gpu/sync_check.sh" "$OUT/"
chmod +x "$OUT/run.sh"

# The wheel's libraries the bundle relies on: each must be in this torch's torch/lib or nvidia/*/lib.
missing=()
for name in "${!from_torch[@]}"; do
  found=$(ls "$TORCH_LIB/$name" "$SITE"/nvidia/*/lib/"$name" 2>/dev/null | head -1 || true)
  [ -n "$found" ] || missing+=("$name")
done
[ ${#missing[@]} -eq 0 ] || die "not in the torch wheel at $SITE: ${missing[*]} (the GPU machine would lack them)"
printf '%s\n' "${!from_torch[@]}" | sort >"$OUT/torch-libs.txt"

commit=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(git -C "$REPO" status --porcelain 2>/dev/null | grep -q . && echo " (with uncommitted changes)" || true)
{
  echo "xlaunch GPU bundle"
  echo "commit: $commit$dirty"
  echo "build: $BUILD ($(cache CMAKE_BUILD_TYPE); kernels for CUDA architectures '$archs'; NCCL ${nccl:-none})"
  echo "torch: $("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null) ($TORCH_LIB)"
  echo "made: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n)"
  echo "open mpi: $(dpkg-query -W -f='${Version}' libopenmpi3 2>/dev/null || echo '?'), $kept components"
  echo "files:"
  (cd "$OUT" && find . -type f | sort | sed 's|^\./|  |')
} >"$OUT/MANIFEST.txt"
say "$OUT: $(du -sm --apparent-size "$OUT" | cut -f1) MiB, ${#copied[@]} libraries bundled, ${#from_torch[@]} taken from the machine's torch"
