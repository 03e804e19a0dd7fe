#!/usr/bin/env bash
# usage: bundle_namespace_test.sh BUILD_DIR SOURCE_DIR      (tests/bundle/CMakeLists.txt says why)
# Packs BUILD_DIR with XLAUNCH_BUNDLE_FROM (no second build), checks the size (at most 60 MiB),
# then, in a private mount namespace, hides the system's copies of what the bundle carries and
# runs the bundle's run.sh --cpu-only. Exit 77: skipped (no root, or no mount namespace here).
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 BUILD_DIR SOURCE_DIR" >&2; exit 2; }
BUILD=$(cd "$1" && pwd)
SRC=$(cd "$2" && pwd)
skip() { echo "SKIPPED: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "hiding the system's libraries needs root (unshare -m and mount)"
command -v unshare >/dev/null || skip "no unshare (util-linux)"
unshare -m true 2>/dev/null || skip "unshare -m is refused here (a container without CAP_SYS_ADMIN?)"

work=$(mktemp -d /tmp/xlaunch-bundle-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
XLAUNCH_BUNDLE_FROM="$BUILD" bash "$SRC/scripts/gpu/bundle.sh" "$work/b"
# The bytes that travel to the GPU machine (its carry limit is on them), not the disk blocks du counts
# by default (every small file rounded up to 4 KiB).
size=$(du -sm --apparent-size "$work/b" | cut -f1)
echo "bundle size: $size MiB (limit 60)"
[ "$size" -le 60 ] || { echo "FAIL: the bundle is $size MiB, over 60"; exit 1; }

# What to hide: whole folders, each system file of the same name as a library in the bundle
# (resolved through symlinks: /lib is /usr/lib on Debian), and the system's Open MPI, PMIx and
# yaml-cpp libraries in any case.
dirs=("$BUILD" "$SRC" /usr/lib/x86_64-linux-gnu/openmpi /usr/lib/x86_64-linux-gnu/pmix2 /usr/share/openmpi
      /etc/openmpi /usr/local/cuda)
files=()
for f in "$work"/b/lib/*.so*; do
  n=$(basename "$f")
  for d in /usr/lib/x86_64-linux-gnu /lib/x86_64-linux-gnu /usr/lib /usr/local/lib; do
    [ -e "$d/$n" ] && files+=("$(readlink -f "$d/$n")")
  done
done
# Open MPI's, PMIx's and yaml-cpp's libraries and what they use, whether the bundle has them or not.
for f in /usr/lib/x86_64-linux-gnu/{libmpi,libopen-rte,libopen-pal,liboshmem,libmca_common_,libpmix,libyaml-cpp,libevent,libhwloc,libmunge,libnl-3}*.so*; do
  [ -e "$f" ] && files+=("$(readlink -f "$f")")
done
for p in /usr/bin/mpirun /usr/bin/mpiexec /usr/bin/orterun /usr/bin/orted; do
  [ -e "$p" ] && files+=("$(readlink -f "$p")")
done
# Except what the tools this test and run.sh use need themselves (python's zlib: libz).
PY="${XLAUNCH_PYTHON:-python3}"
dynload=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"] + "/lib-dynload")' 2>/dev/null || true)
keep=$(for f in /bin/bash "$(command -v mount)" "$(readlink -f "$(command -v "$PY")")" "$dynload"/*.so; do
         [ -e "$f" ] && ldd "$f" 2>/dev/null | awk '/=>/ { print $3 }' | xargs -r readlink -f
       done | sort -u)
printf '%s\n' "${files[@]}" | sort -u | grep -vxF -f <(echo "$keep") >"$work/hide-files" || true
printf '%s\n' "${dirs[@]}" >"$work/hide-dirs"
echo "hiding $(wc -l <"$work/hide-dirs") folders and $(wc -l <"$work/hide-files") files: $(tr '\n' ' ' <"$work/hide-dirs")"

cat >"$work/inside.sh" <<'INSIDE'
set -euo pipefail
work=$1
# Files first: some lie in the folders hidden next.
while read -r f; do mount --bind /dev/null "$f"; done <"$work/hide-files"
while read -r d; do if [ -d "$d" ]; then mount -t tmpfs -o ro,size=1m none "$d"; fi; done <"$work/hide-dirs"
# The hiding works: the system's Open MPI and yaml-cpp cannot be loaded, the build tree is empty.
for lib in libmpi.so.40 libyaml-cpp.so.0.7 libopen-pal.so.40; do
  if [ -e "/usr/lib/x86_64-linux-gnu/$lib" ] && [ -s "$(readlink -f "/usr/lib/x86_64-linux-gnu/$lib")" ]; then
    echo "FAIL: /usr/lib/x86_64-linux-gnu/$lib is still visible"; exit 1
  fi
done
[ ! -e "$(sed -n 1p "$work/hide-dirs")/CMakeCache.txt" ] || { echo "FAIL: the build tree is still visible"; exit 1; }
echo "hidden: system Open MPI, PMIx, yaml-cpp and the bundle's other libraries, /usr/local/cuda, the build and source trees"
unset OPAL_PREFIX LD_LIBRARY_PATH
cd "$work"
bash "$work/b/run.sh" --cpu-only "$work/results"
grep -h '^xlaunch test:' "$work/results/logs/selftest_cpu_2.log" || true
INSIDE
rc=0
unshare -m --propagation private bash "$work/inside.sh" "$work" || rc=$?
if [ $rc -ne 0 ]; then
  for l in "$work"/results/logs/*.log; do [ -f "$l" ] && { echo "--- $l"; tail -40 "$l"; }; done
  echo "FAIL: the bundle's CPU-side checks failed in the namespace (exit $rc)"
  exit 1
fi
echo "PASS: the bundle's CPU-side checks pass with the system's Open MPI, yaml-cpp and the build tree hidden"
