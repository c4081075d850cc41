#!/usr/bin/env bash
# One GPU session, most important numbers first, each step under its own time limit so that
# a hang in one still lets the later ones run (what bench/README.md's "CUDA" section reports).
# Run from the repo root on a machine with an NVIDIA GPU and a CUDA build of torch:
#   bench/gpu_session.sh [LOG_FOLDER]          (default: bench/out/gpu-session-<time>)
# PYTHON: the interpreter (default .venv/bin/python); its snakemake is the one the tests run.
# Steps and their limits (seconds, SCALE=2 doubles them): the CUDA-relevant tests (train.device
# auto is CUDA there) 40 + 150; bench/bench_paths.py (fork and spawn paths) 150; bench/gpu_check.sh 240; an update on the GPU (bench/bench_update.py)
# 60; scripts/size_gpu_mem.py on the demo data 40; 16 trainings with MPS off and on, 40 each;
# bench/bench_batched_lstm.py 150. Writes one log per step group into LOG_FOLDER.
set -u
PYTHON=${PYTHON:-.venv/bin/python}
[[ $PYTHON == */* && $PYTHON != /* ]] && PYTHON=$PWD/$PYTHON
REPO=$PWD
LOGS=${1:-bench/out/gpu-session-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$LOGS" && LOGS=$(cd "$LOGS" && pwd)
SCALE=${SCALE:-1}
export PYTHONUNBUFFERED=1
START=$(date +%s)
step() {  # name, limit (s), log file, command...
    local name=$1 limit=$(($2 * SCALE)) log=$3 began
    shift 3
    echo "######## STEP $name (limit ${limit}s) $(date -u +%T), $(($(date +%s) - START))s in" | tee -a "$log"
    began=$(date +%s)
    timeout -k 10 "$limit" "$@" >>"$log" 2>&1
    echo "######## END $name rc=$? after $(($(date +%s) - began))s" | tee -a "$log"
}
{
    nvidia-smi --query-gpu=name,memory.total,driver_version,compute_mode --format=csv
    "$PYTHON" -c "import torch, snakemake; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available(), 'snakemake', snakemake.__version__)"
} >"$LOGS/env.log" 2>&1

PYTEST=("$PYTHON" -m pytest -p no:cacheprovider -q -x --durations=12)
step tests-unit 40 "$LOGS/tests.log" "${PYTEST[@]}" -n 4 tests/unit/test_precision.py tests/unit/test_gpu_slots.py \
    tests/unit/test_sizing.py tests/unit/test_training.py tests/unit/test_updating.py
step tests-workflow 150 "$LOGS/tests.log" "${PYTEST[@]}" -n 8 --dist loadfile tests/workflow/test_workflow.py \
    tests/workflow/test_retries.py tests/workflow/test_precision_run.py tests/workflow/test_predict.py

# The paths of a job on the card: 64 one-day datasets, 8 trainings at once, forked and spawned
# workers (a context per worker, not per job, on both): models/min and the overhead per model.
step paths 150 "$LOGS/paths.log" "$PYTHON" bench/bench_paths.py --datasets 64 --paths fork,spawn --cores 8 --out "$LOGS"

step gpu_check 240 "$LOGS/gpu_check.log" env PYTHON="$PYTHON" KEEP_SAMPLES="$LOGS/samples.txt" bash bench/gpu_check.sh

WORK=$(mktemp -d /tmp/rnnfleet-gpu-session.XXXXXX)
step update 60 "$LOGS/update_size_mps.log" "$PYTHON" bench/bench_update.py --datasets 8 --days 5 --epochs 3 --out "$WORK/out"
"$PYTHON" scripts/make_demo_data.py "$WORK/demo" >/dev/null
sed "s#^data_dir: .*#data_dir: $WORK/demo#" config.yaml >"$WORK/demo/config.yaml"
step size_gpu_mem 40 "$LOGS/update_size_mps.log" bash -c "cd '$WORK/demo' && '$PYTHON' '$REPO/scripts/size_gpu_mem.py' --configfile config.yaml"
"$PYTHON" - "$WORK/mps" <<'PY'
import sys, yaml
from pathlib import Path
sys.path.insert(0, "scripts")
from rnnfleet.synthetic import write_synthetic_csv
work = Path(sys.argv[1])
for number in range(16):
    write_synthetic_csv(work / "data" / f"M{number:03d}_1m.csv", 5000, number)
config = yaml.safe_load(Path("config.yaml").read_text())
config["data_dir"] = str(work / "data")
config["train"].update(epochs=3, patience=5, gpu_mem=2)
for mps in ("false", "true"):
    (work / mps).mkdir()
    (work / mps / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
PY
for mps in false true; do
    step "mps-$mps" 40 "$LOGS/update_size_mps.log" bash -c "
        began=\$(date +%s.%N)
        '$PYTHON' -m snakemake -s '$REPO/Snakefile' -d '$WORK/mps/$mps' --cores 16 --resources gpu_mem=32 --config mps=$mps >'$WORK/mps/$mps.log' 2>&1
        rc=\$?
        echo \"mps=$mps rc=\$rc: \$(ls '$WORK/mps/$mps/models' 2>/dev/null | wc -l) models in \$(awk -v b=\$began -v e=\$(date +%s.%N) 'BEGIN { printf \"%.1f\", e - b }') s\"
        tail -n 5 '$WORK/mps/$mps/.snakemake/mps/log/'*.log 2>/dev/null  # the MPS daemon's own log: clients it served
        [ \$rc = 0 ] || tail -15 '$WORK/mps/$mps.log'"
done

step batched-lstm 150 "$LOGS/batched_lstm.log" "$PYTHON" bench/bench_batched_lstm.py --ks 1,4,16,64 --seconds 2 \
    --variants graphed,processes,grouped
echo "gpu_session done after $(($(date +%s) - START))s; logs in $LOGS"
