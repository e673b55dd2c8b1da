#!/usr/bin/env bash
# The GPU checks of the open issues, in one device call (device time is short: one run of this).
#
#   T_TESTS=100 T_KERNELS=280 T_PROFILE=45 timeout 560 bash bench/device_check.sh   # on the device
#   SMALL=1 bash bench/device_check.sh                                     # CPU dry run, here
#
# 1. the GPU tests (tests/test_gpu.py, test_rows_gpu.py, test_backend.py: CuPy finds a device);
# 2. issue 26's CUDA rows: the executor's plain step on CuPy against torch eager on CUDA, every
#    zoo model at the bench's sizes (bench/kernels_bench.py --device cuda: time, ratio, CuPy pool
#    peak against torch.cuda.max_memory_allocated, gradient gap);
# 3. issue 26's profile of where a CuPy step's time goes (bench/kernels_profile.py --device cuda).
# The device has no Ray and no network, and the project is not installed there: everything runs
# from the checkout with PYTHONPATH. Results go under $OUT (a temporary folder if unset).
# SMALL=1: quick sizes on the CPU (--device cpu), to check the script itself where no GPU is.
set -u
export PYTHONUNBUFFERED=1 RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0
OUT="${OUT:-$(mktemp -d)}"
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
SMALL="${SMALL:-}"

{ date; git log --oneline -1 2>/dev/null; nvidia-smi -L 2>/dev/null || echo "no nvidia-smi"
  python3 -c "import sys, numpy; print(sys.version.split()[0], 'numpy', numpy.__version__)"
  python3 -c "import cupy; print('cupy', cupy.__version__)" 2>&1 | tail -1
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())" 2>&1 | tail -1
} | tee "$OUT/env.txt"

echo "== 1 GPU tests"
timeout "${T_TESTS:-150}" python3 -m pytest -q -p no:cacheprovider -o addopts="-ra" \
  tests/test_gpu.py tests/test_rows_gpu.py tests/test_backend.py 2>&1 | tail -25 | tee "$OUT/tests.txt"

echo "== 2 kernels: executor vs torch eager (issue 26)"
if [ -n "$SMALL" ]; then
  KB=(--quick --device cpu --threads 1 --steps 2 --models mlp,transformer)
else
  KB=(--device cuda --steps 5 --timeout 90)
fi
timeout "${T_KERNELS:-360}" python3 bench/kernels_bench.py "${KB[@]}" --out "$OUT/kernels.md" 2>&1 \
  | tail -40 | tee "$OUT/kernels.txt"
echo "== 3 where a CuPy step's time goes (issue 26): kernels_profile, per op, device time"
if [ -n "$SMALL" ]; then
  PROFILES=("mlp --steps 2")
else
  PROFILES=("vgg16 --batch 8 --image 224 --steps 3" "resnet --batch 32 --width 64 --depth 2 --image 32 --steps 3"
            "transformer --batch 4 --width 512 --depth 4 --heads 8 --seq 512 --steps 3")
fi
DEV=cuda; [ -n "$SMALL" ] && DEV=cpu
for prof in "${PROFILES[@]}"; do
  # shellcheck disable=SC2086
  timeout "${T_PROFILE:-60}" python3 bench/kernels_profile.py $prof --device $DEV --top 15 2>&1 \
    | grep -v "^USDT\|profiler_st" | tee -a "$OUT/profile.txt"
done
echo "== done: $OUT"
ls "$OUT"
