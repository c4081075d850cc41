#!/usr/bin/env bash
# Multi-GPU check, for a Linux machine with NVIDIA GPUs and the CUDA build of torch in .venv
# (README "GPU"). Run from the repo root: bench/gpu_check_multi.sh   (about 5-10 minutes)
# Never run in CI or on the development machines (no GPU there): its results are not in
# the test suite.
#
# 1. size_gpu_mem on cuda:0 for these datasets.
# 2. Spread: 4 trainings per visible GPU at once, each declaring 2 GB. Checks from the
#    metrics that every GPU trained models, and from nvidia-smi samples that each training
#    process used exactly one GPU (no stray CUDA context on cuda:0) and that no GPU ever
#    held more trainings than its whole GB / 2.
# 3. MPS: 8 concurrent trainings on cuda:0, without and with `mps: true`; models/min each.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
PYTHON=${PYTHON:-$REPO/.venv/bin/python}
WORK=$(mktemp -d /tmp/rnnfleet-gpu-multi.XXXXXX)
GPUS=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
CORES=$(nproc)
echo "work folder $WORK; $GPUS GPU(s), $CORES cores"
nvidia-smi --query-gpu=index,name,memory.total,uuid --format=csv
"$PYTHON" -c "import torch; assert torch.cuda.is_available(), 'torch sees no CUDA device'; print('torch', torch.__version__, 'cuda', torch.version.cuda)"

"$PYTHON" - "$WORK" "$((4 * GPUS > 8 ? 4 * GPUS : 8))" <<'PY'
import sys, yaml
from pathlib import Path
sys.path.insert(0, "scripts")
from rnnfleet.synthetic import write_synthetic_csv
work, datasets = Path(sys.argv[1]), int(sys.argv[2])
for number in range(datasets):
    write_synthetic_csv(work / "data" / f"G{number:03d}_1m.csv", 20_000, number)
config = yaml.safe_load(Path("config.yaml").read_text())
config["data_dir"] = str(work / "data")
config["train"].update(epochs=3, gpu_mem=2)
(work / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
PY

echo; echo "== 1. sizing on cuda:0"
(cd "$WORK" && "$PYTHON" "$REPO/scripts/size_gpu_mem.py" --configfile config.yaml)

run_workflow() {  # folder, then extra snakemake arguments; prints the wall seconds
    local folder=$1; shift
    mkdir -p "$folder" && cp "$WORK/config.yaml" "$folder/"
    local started=$(date +%s.%N)
    "$PYTHON" -m snakemake -s "$REPO/Snakefile" -d "$folder" --cores "$CORES" "$@" >"$folder/run.log" 2>&1 ||
        { echo "snakemake failed: see $folder/run.log" >&2; return 1; }
    awk -v now="$(date +%s.%N)" -v started="$started" 'BEGIN { printf "%.1f", now - started }'
}

echo; echo "== 2. spread over $GPUS GPU(s): 4 trainings per GPU, 2 GB declared each"
SAMPLES="$WORK/compute_apps.csv"
(while true; do nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv,noheader,nounits >>"$SAMPLES"; echo "--" >>"$SAMPLES"; sleep 0.5; done) &
SAMPLER=$!
seconds=$(run_workflow "$WORK/spread" --resources gpu_mem=$((8 * GPUS)))
kill "$SAMPLER"
echo "spread run: ${seconds} s"
"$PYTHON" - "$WORK/spread" "$SAMPLES" "$GPUS" <<'PY'
import collections, json, subprocess, sys
from pathlib import Path
folder, samples, gpus = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
devices = collections.Counter(json.loads(p.read_text())["device"] for p in (folder / "metrics").glob("*.json"))
print("models per device:", dict(sorted(devices.items())))
capacity = {}
for line in subprocess.run(["nvidia-smi", "--query-gpu=uuid,memory.total", "--format=csv,noheader,nounits"],
                           capture_output=True, text=True, check=True).stdout.splitlines():
    uuid, mib = (part.strip() for part in line.split(","))
    capacity[uuid] = int(mib) // 1024
gpus_of_pid, worst = collections.defaultdict(set), collections.Counter()
for block in samples.read_text().split("--\n"):
    per_gpu = collections.Counter()
    for line in filter(None, block.splitlines()):
        pid, uuid, _ = (part.strip() for part in line.split(","))
        gpus_of_pid[pid].add(uuid)
        per_gpu[uuid] += 1
    for uuid, count in per_gpu.items():
        worst[uuid] = max(worst[uuid], count)
checks = {
    "every GPU trained models": len(devices) == gpus,
    "each training process on one GPU only": all(len(uuids) == 1 for uuids in gpus_of_pid.values()),
    "no GPU over its declared capacity": all(worst[u] <= capacity[u] // 2 for u in worst),
}
print("most processes seen at once per GPU:", dict(worst))
for name, ok in checks.items():
    print(("PASS " if ok else "FAIL ") + name)
PY

echo; echo "== 3. MPS: 8 concurrent trainings on cuda:0"
for mps in false true; do
    seconds=$(CUDA_VISIBLE_DEVICES=0 run_workflow "$WORK/mps-$mps" --resources gpu_mem=16 --config mps=$mps)
    models=$(ls "$WORK/mps-$mps/models" | wc -l)
    echo "mps=$mps: $models models in ${seconds} s = $(awk -v m="$models" -v s="$seconds" 'BEGIN { printf "%.0f", 60 * m / s }') models/min"
done
