#!/usr/bin/env bash
# GPU check: run from the repo root on a machine with an NVIDIA GPU and a CUDA build of
# torch in .venv (README "GPU"). About 3 minutes on an H200 (bench/README.md). Three parts:
# 1. The concurrency curve: models/min of the naive sequential loop and of the workflow, then
#    of the workflow with 1, 2, 4, 8 and 16 concurrent trainings under --resources gpu_mem
#    (each training declares 2 GB and caps its allocator there), all on this GPU.
# 2. What the card saw meanwhile (nvidia-smi sampled every ~0.3 s, bench/gpu_samples.py):
#    utilisation, the memory of each training process (CUDA context plus allocator) against
#    the 2 GB it declared, and whether N trainings stayed within N x 2 GB together.
# 3. The cap: a training too big for its gpu_mem (sized first with scripts/size_gpu_mem.py)
#    must fail with its own out-of-memory error and succeed on the retry with twice as much.
# Options: PYTHON (default .venv/bin/python), DATASETS (16), ROWS (5000), EPOCHS (3),
# CONCURRENCY (1,2,4,8,16), KEEP_SAMPLES=<file> to keep the raw samples. Extra arguments go
# to bench/bench_speed.py.
set -euo pipefail
PYTHON=${PYTHON:-.venv/bin/python}
[[ $PYTHON == */* && $PYTHON != /* ]] && PYTHON=$PWD/$PYTHON  # the cap's sizing runs in its own folder
REPO=$PWD
WORK=$(mktemp -d /tmp/rnnfleet-gpu-check.XXXXXX)
SAMPLES=${KEEP_SAMPLES:-$WORK/samples.txt}
PHASES=$WORK/phases.txt
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
"$PYTHON" - <<'PY'
import torch
assert torch.cuda.is_available(), "no CUDA device visible to torch: install a CUDA build (README 'GPU')"
print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))
PY

sample_gpu() {  # appends G and P lines (bench/gpu_samples.py) until killed
    while true; do
        local now
        now=$(date +%s.%N)
        nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader,nounits -i 0 |
            awk -v t="$now" -F', *' '{ print "G", t, $1, $2 }'
        nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits |
            awk -v t="$now" -F', *' 'NF == 2 { print "P", t, $1, $2 }'
        sleep 0.2
    done >>"$SAMPLES" 2>/dev/null
}
sample_gpu &
SAMPLER=$!
report_samples() {  # also when stopped early (timeout, Ctrl-C): the phases so far
    trap - EXIT INT TERM
    kill "$SAMPLER" 2>/dev/null || true
    echo; echo "== 2. what the card saw (nvidia-smi samples; MiB per process = CUDA context + allocator)"
    [ -s "$PHASES" ] && "$PYTHON" bench/gpu_samples.py "$SAMPLES" "$PHASES"
}
trap report_samples EXIT
trap 'report_samples; exit 130' INT TERM

echo; echo "== 1. models/min: naive loop, the workflow, and 1..16 concurrent trainings"
"$PYTHON" bench/bench_speed.py --workloads large --datasets "${DATASETS:-16}" --rows "${ROWS:-5000}" \
    --epochs "${EPOCHS:-3}" --reps 1 --cores "$(nproc)" --variants naive,snakemake \
    --concurrency "${CONCURRENCY:-1,2,4,8,16}" --phases "$PHASES" --out "$WORK/out" "$@" ||
    echo "bench_speed.py FAILED"

echo; echo "== 3. the cap: a training that needs more than its gpu_mem"
"$PYTHON" - "$WORK/cap" <<'PY'
import sys, yaml
from pathlib import Path
sys.path.insert(0, "scripts")
from rnnfleet.synthetic import write_synthetic_csv
work = Path(sys.argv[1])
write_synthetic_csv(work / "data" / "BIG_1m.csv", 20_000, 7)
config = yaml.safe_load(Path("config.yaml").read_text())
config["data_dir"] = str(work / "data")
config["model"].update(hidden_size=768)
config["train"].update(batch_size=2048, epochs=1)
(work / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
PY
(cd "$WORK/cap" && "$PYTHON" "$REPO/scripts/size_gpu_mem.py" --configfile config.yaml) | tee "$WORK/cap/sizing.txt" ||
    echo "size_gpu_mem.py FAILED"
# gpu_mem for the first attempt: the whole GB below the allocator's measured peak
FIRST=$(awk '/allocator peak/ { gb = int($(NF-1)); print (gb < 1 ? 1 : gb) }' "$WORK/cap/sizing.txt")
echo "train.gpu_mem=$FIRST for the first attempt (allocator peak above it), --resources gpu_mem=$((4 * FIRST))"
started=$(date +%s.%N)
"$PYTHON" -m snakemake -s "$REPO/Snakefile" -d "$WORK/cap" --cores 4 --resources gpu_mem=$((4 * FIRST)) \
    --config "train={\"gpu_mem\": $FIRST}" >"$WORK/cap/run.log" 2>&1 && echo "cap run: snakemake succeeded" ||
    echo "cap run: snakemake FAILED (see below)"
echo "$started $(date +%s.%N) cap-attempts 1 $((2 * FIRST))" >>"$PHASES"
grep -h -i -E "out of memory|attempt|retry|training on|gpu_mem" "$WORK"/cap/logs/train/*.log | cut -c1-300 || true
"$PYTHON" -c "import json,sys; m=json.load(open(sys.argv[1])); print('cap run model trained on', m['device'], 'val_loss', round(m['val_loss'], 5))" \
    "$WORK"/cap/metrics/BIG_1m.json || tail -20 "$WORK/cap/run.log"

