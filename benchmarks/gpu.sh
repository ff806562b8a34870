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
# each cuda test runs on the GPU and compares with the same run on the CPU; those needing
# transformers, accelerate, lightning, keras or jax skip themselves where these are missing
python3 -c "import importlib.util as u; print('installed:', *[m for m in ('transformers', 'accelerate', 'lightning', 'keras', 'jax') if u.find_spec(m)])" \
  | tee -a "$out/device.txt"
timeout 420 python3 -m pytest -q -rs -p no:cacheprovider -o addopts="" -m cuda --junitxml="$out/cuda_tests.xml" \
  tests/test_masks_cuda.py tests/test_second_order_cuda.py tests/test_features_cuda.py \
  tests/test_features_cuda_runs.py tests/test_keras_cuda.py \
  2>&1 | tee "$out/cuda_tests.log" || status=1
# which cuda tests ran, and which skipped (and why)
[ -f "$out/cuda_tests.xml" ] && python3 - "$out/cuda_tests.xml" <<'PY' | tee "$out/cuda_tests_summary.txt"
import collections, sys, xml.etree.ElementTree as ET
counts = collections.defaultdict(collections.Counter)
for case in ET.parse(sys.argv[1]).getroot().iter("testcase"):
    name = case.get("classname", "").rsplit(".", 1)[-1]
    state = next((t for t in ("failure", "error", "skipped") if case.find(t) is not None), "passed")
    counts[name][state] += 1
    if state == "skipped":
        print(f"  skipped {name}::{case.get('name')}: {case.find('skipped').get('message', '')}")
for name, c in sorted(counts.items()):
    print(name, dict(c))
PY
python3 benchmarks/bench_torch_masks.py --device cuda 2>&1 | tee "$out/bench_masks.log" || status=1
python3 benchmarks/bench_torch_manager.py --device cuda --batch 64 --rounds 5 2>&1 | tee "$out/bench_manager.log" || status=1
python3 benchmarks/bench_second_order.py --device cuda 2>&1 | tee "$out/bench_second_order.log" || status=1
exit $status
