#!/usr/bin/env bash
# The GPU checks, in one run on a CUDA machine: the GPU benchmarks (M-FAC's inverse, Keras's
# per-step overhead on JAX and torch, PyTorch's masks and step overhead) and the `cuda` tests.
# Logs go to $OUT (or ./gpu-out). Needs python3 with torch (CUDA) and, for Keras, jax; the
# project's own dependencies and Keras may come as wheels in .whl/ (installed offline into
# /tmp/site). The project itself is used from this checkout (no build step): its backends
# through links, its entry points from a small dist-info.
#
# The wheels (CPython 3.12, x86-64) for a machine that lacks them, into .whl/ (git-ignored):
#     python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#       --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
#       --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
#       keras==3.15.1 namex==0.1.0 optree==0.20.0 compressed-tensors==0.19.0 pydantic==2.14.4 \
#       pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 loguru==0.7.3 \
#       typing_extensions==4.16.0 jsonschema==4.26.0 jsonschema-specifications==2025.9.1 \
#       referencing==0.37.0 rpds-py==2026.9.1 python-frontmatter==1.3.0
#
#     bash benchmarks/gpu.sh               # everything, at most about 10 minutes
#     GPU_QUICK=1 bash benchmarks/gpu.sh   # fewer rounds
#     GPU_PARTS="tests keras" bash benchmarks/gpu.sh   # some of: bench keras tests torch
#     GPU_PARTS=tests GPU_TESTS=tests/test_features_cuda.py bash benchmarks/gpu.sh
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=${OUT:-gpu-out}
mkdir -p "$out"
site=/tmp/site
mkdir -p "$site"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" .whl/*.whl \
    || { echo "wheel install failed" | tee "$out/device.txt"; exit 1; }
fi
mkdir -p /tmp/shim "$site/recipe_spec-0.1.0.dist-info"
ln -sfn "$root/backends/torch" /tmp/shim/recipe_spec_torch
ln -sfn "$root/backends/keras" /tmp/shim/recipe_spec_keras
url=$(sed -n 's/^Documentation = "\(.*\)"/\1/p' pyproject.toml)
printf 'Metadata-Version: 2.1\nName: recipe-spec\nVersion: 0.1.0\nProject-URL: Documentation, %s\n' "$url" \
  > "$site/recipe_spec-0.1.0.dist-info/METADATA"
printf '[recipe_spec.backends]\ntorch = recipe_spec_torch:backend\nkeras = recipe_spec_keras:backend\n' \
  > "$site/recipe_spec-0.1.0.dist-info/entry_points.txt"
export PYTHONPATH=$site:$root:/tmp/shim PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TF_CPP_MIN_LOG_LEVEL=2
parts=" ${GPU_PARTS:-bench keras tests torch} "
steps=${GPU_STEPS:-60} rounds=${GPU_ROUNDS:-5}
[ -n "${GPU_QUICK:-}" ] && steps=20 rounds=2
bench=$out/benchmarks.log
{
  nvidia-smi -L
  python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name(0))"
  python3 -c "import importlib.util as u; print('installed:', *[m for m in ('transformers', 'accelerate', 'lightning', 'keras', 'jax', 'compressed_tensors', 'safetensors') if u.find_spec(m)])"
  python3 -c "import jax; print('jax', jax.__version__, jax.devices())"
  python3 -c "import recipe_spec, recipe_spec_torch; from recipe_spec.registry import available_backends; print('recipe_spec backends:', available_backends())"
} 2>&1 | tee "$out/device.txt"
status=0
step() {  # step NAME SECONDS COMMAND...: run with a time limit, log to the benchmarks file
  local name=$1 limit=$2
  shift 2
  echo "=== $name ($(date +%T))" | tee -a "$bench"
  timeout "$limit" "$@" 2>&1 | grep -v -E "^(I0000|W0000|WARNING: All log messages)" | tee -a "$bench"
  local rc=${PIPESTATUS[0]}
  [ "$rc" -eq 0 ] || { echo "=== $name: exit $rc" | tee -a "$bench"; status=1; }
}
[[ $parts == *" bench "* ]] && step "M-FAC inverse, m=64 d=1M B=2000" 60 python3 benchmarks/bench_second_order.py --device cuda --repeats 20
[[ $parts == *" keras "* ]] && for backend in jax torch; do
  step "Keras overhead, $backend" 180 python3 benchmarks/bench_keras_overhead.py --keras-backend "$backend" \
    --steps "$steps" --rounds "$rounds"
done
[[ $parts == *" keras "* ]] && step "Keras one-shot solves, NumPy (CPU) against Keras tensors (GPU)" 240 \
  python3 benchmarks/keras_solves.py --backends jax,torch --repeat 3
# each cuda test runs on the GPU and compares with the same run on the CPU (or with stored
# llm-compressor runs); those needing a framework not installed here skip themselves
[[ $parts == *" tests "* ]] && { echo "=== cuda tests ($(date +%T))" | tee -a "$bench"
timeout 300 python3 -m pytest -q -rs -p no:cacheprovider -o addopts="" -m cuda -n 8 --timeout 240 \
  --junitxml="$out/cuda_tests.xml" \
  ${GPU_TESTS:-tests/test_masks_cuda.py tests/test_second_order_cuda.py tests/test_features_cuda.py \
  tests/test_features_cuda_runs.py tests/test_keras_cuda.py tests/test_oneshot_cuda.py \
  tests/test_keras_oneshot_cuda.py} \
  > "$out/cuda_tests.log" 2>&1 || status=1
tail -n 40 "$out/cuda_tests.log"; }
# which cuda tests ran, and which skipped (and why)
[ -f "$out/cuda_tests.xml" ] && python3 - "$out/cuda_tests.xml" <<'PY' | tee -a "$bench"
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
[[ $parts == *" torch "* ]] && step "PyTorch masks" 45 python3 benchmarks/bench_torch_masks.py --device cuda
[[ $parts == *" torch "* ]] && step "PyTorch step overhead" 60 python3 benchmarks/bench_torch_manager.py --device cuda --batch 64 --steps 30 --rounds 5 --threads 4
exit $status
