#!/usr/bin/env bash
# GPU check: run from the repo root on a machine with an NVIDIA GPU and a CUDA build of
# torch in .venv (README "GPU"). About 3-5 minutes. Prints the same comparison as
# `make bench`, on CUDA, plus models/min with 1, 2, 4 and 8 concurrent trainings under
# --resources gpu_mem (each training declares 2 GB and caps its allocator there).
set -euo pipefail
PYTHON=${PYTHON:-.venv/bin/python}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
"$PYTHON" - <<'PY'
import torch
assert torch.cuda.is_available(), "no CUDA device visible to torch: install a CUDA build (README 'GPU')"
print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))
PY
"$PYTHON" bench/bench_speed.py --datasets 16 --rows 5000 --epochs 3 --reps 1 \
    --cores "$(nproc)" --variants naive,snakemake,one-proc --concurrency 1,2,4,8 "$@"
