#!/usr/bin/env bash
# The GPU checks, in one run on a CUDA machine: the `cuda` tests, then the GPU benchmarks (masks,
# step overhead, second-order inverse). Logs go to $OUT (or ./gpu-out). Needs torch with CUDA;
# the core's own dependencies may come as wheels in .whl/ (installed offline into /tmp/site).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-out}
mkdir -p "$out"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
fi
python3 -m pip install -q --no-index --no-deps --no-build-isolation --target /tmp/site . || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
nvidia-smi -L | tee "$out/device.txt"
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name(0))" | tee -a "$out/device.txt"
status=0
python3 -m pytest -q -p no:cacheprovider -o addopts="" -m cuda tests/test_masks_cuda.py tests/test_second_order_cuda.py \
  2>&1 | tee "$out/cuda_tests.log" || status=1
python3 benchmarks/bench_torch_masks.py --device cuda 2>&1 | tee "$out/bench_masks.log" || status=1
python3 benchmarks/bench_torch_manager.py --device cuda --batch 64 --rounds 5 2>&1 | tee "$out/bench_manager.log" || status=1
python3 benchmarks/bench_second_order.py --device cuda 2>&1 | tee "$out/bench_second_order.log" || status=1
exit $status
