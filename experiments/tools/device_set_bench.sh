#!/usr/bin/env bash
# The set benchmark on a lent GPU machine, in calls that each fit its 10-minute limit
# (experiments/README.md, "On a GPU"). First bash experiments/tools/device_bundle.sh here, then:
#
#   call 1, carry .dev/tvm.part00:   mkdir -p /tmp/parts /tmp/site && cp .dev/tvm.part00 /tmp/parts/
#   call 2, carry .dev/tvm.part01 and the two wheels in .dev/ (at once, while the machine is warm):
#       cat /tmp/parts/tvm.part00 .dev/tvm.part01 | tar xJf - -C /tmp/site &&
#       bash experiments/tools/device_set_bench.sh start NAME [set_bench.py options...]
#   call 3, if call 2 said RUNNING:  bash experiments/tools/device_set_bench.sh wait NAME
#
# Run from the repository root. "start" installs the wheels and starts experiments.set_bench in its
# own process session (it outlives the call); both modes wait up to $WAIT seconds (default 560) for
# it and copy what it wrote to $OUT: NAME.json / .png, NAME_log.txt, the databases as NAME_work.tgz,
# the GPU's name.
set -uo pipefail
mode=$1 name=$2
shift 2
res=/tmp/res
if [ "$mode" = start ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .dev/*.whl || exit 1
    mkdir -p "$res"
    nvidia-smi --query-gpu=name,driver_version --format=csv > "$res/gpu.txt" 2>&1
    nproc >> "$res/gpu.txt"
    PYTHONPATH=/tmp/site:$PWD TVM_NUM_THREADS=$(nproc) PYTHONUNBUFFERED=1 setsid nohup \
        python3 -m experiments.set_bench "$@" --work /tmp/sbw --out "$res/$name.json" \
        > "$res/${name}_log.txt" 2>&1 < /dev/null &
    echo $! > "$res/pid"
fi
deadline=$((SECONDS + ${WAIT:-560}))
while kill -0 "$(cat "$res/pid")" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 5; done
cp "$res"/*.json "$res"/*.png "$res"/*.txt "$OUT"/ 2>/dev/null
if [ -f "$res/$name.json" ]; then
    tar czf "$OUT/${name}_work.tgz" -C /tmp sbw
    echo DONE
else
    echo RUNNING
fi
tail -15 "$res/${name}_log.txt"
