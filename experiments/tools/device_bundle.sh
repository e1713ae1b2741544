#!/usr/bin/env bash
# Pack what a lent GPU machine lacks for eto's benchmarks into .dev/ (git-ignored through
# .git/info/exclude): TVM 0.27 for that machine's Python 3.12, without its CUTLASS headers and
# sources, as an xz tarball (about 60 MB) split in two parts (a call carries at most 64 MiB with the
# repository's own 11.5 MB), and the FFI and xgboost-cpu wheels (about 9 MB, with the second part).
# The machine has PyTorch, numpy, scipy, networkx, psutil, cloudpickle, matplotlib and nvcc. Usage,
# then the two calls (one after the other, while the machine is warm; see experiments/README.md, "On a GPU: running on a lent machine"):
#
#   bash experiments/tools/device_bundle.sh
#   run(carry=[".dev/tvm.part00"]):  mkdir -p /tmp/parts /tmp/site && cp .dev/tvm.part00 /tmp/parts/
#   run(carry=[".dev/tvm.part01", ".dev/<ffi wheel>", ".dev/<xgboost wheel>"]):
#       cat /tmp/parts/tvm.part00 .dev/tvm.part01 | tar xJf - -C /tmp/site &&
#       python3 -m pip install -q --no-index --no-deps --target /tmp/site .dev/*.whl &&
#       PYTHONPATH=/tmp/site:$PWD TVM_NUM_THREADS=16 python3 -m experiments.set_bench --target nvidia/nvidia-h100 ...
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx '/.dev/' .git/info/exclude 2>/dev/null || echo '/.dev/' >> .git/info/exclude
mkdir -p .dev
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${platforms[@]}" -d "$tmp" apache-tvm==0.27.0.post1 apache-tvm-ffi==0.1.14.post1 xgboost-cpu==3.2.0
mv "$tmp"/apache_tvm_ffi-*.whl "$tmp"/xgboost_cpu-*.whl .dev/
(cd "$tmp" && unzip -q apache_tvm-*.whl && rm apache_tvm-*.whl &&
 tar cf - --exclude=tvm/3rdparty --exclude=tvm/src tvm apache_tvm-*.dist-info |
     xz -T1 --x86 --lzma2=preset=9e,dict=256MiB > "$OLDPWD/.dev/tvm.tar.xz")
(cd .dev && rm -f tvm.part* && split -b 31000000 -d tvm.tar.xz tvm.part)
ls -la .dev
