"""K small LSTMs at once on one GPU: one batched model against K separate processes.

    python bench/bench_batched_lstm.py --ks 1,4,16,64 --seconds 3         # on a CUDA machine
    python bench/bench_batched_lstm.py --device cpu --ks 1,2 --seconds 1  # smoke test, CPU

The model is rnnfleet's default (rnnfleet.train.models.SequenceRegressor: LSTM, 5 inputs, 64 units,
2 layers, dropout 0.1, a linear head on the last step), trained with Adam on MSE over
batches of 128 windows of 60 bars, bf16 autocast where the device computes it natively
(rnnfleet.precision), as rnnfleet trains it. Each model has its own 2,048 random windows,
resident on the device; a step draws a random batch of them.

Variants, each at every K:
  processes  K processes, each training one model with torch's own nn.LSTM (cuDNN on CUDA):
             how rnnfleet runs K concurrent trainings today (no MPS)
  grouped    one process, one model holding the K models' weights stacked (K, 4H, in):
             each time step of each layer is one batched matmul (torch.bmm) for all K, the
             input projection of all 60 steps one more; the same maths as nn.LSTM per model
  graphed    grouped, with the whole training step (forward, backward, Adam) captured once
             in a CUDA graph and replayed (CUDA only): no per-kernel launch cost
Every variant warms up, waits until all its processes are ready, then counts the steps
finished in --seconds. Prints, per K: model-steps/s (K x steps/s of each), the same per
model, and the GPU memory the variant held (whole device's used memory while it ran, less
before: CUDA contexts included; nvidia-smi) with torch's allocator peak. One JSON line each.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

from rnnfleet.precision import resolve_amp  # noqa: E402
from rnnfleet.train.models import SequenceRegressor  # noqa: E402

INPUTS, HIDDEN, LAYERS, DROPOUT = 5, 64, 2, 0.1
SEQ_LEN, BATCH, WINDOWS = 60, 128, 2048


class GroupedLSTMRegressor(nn.Module):
    """K independent SequenceRegressor(lstm) models in one module: weights stacked along a
    first dimension of K, inputs (K, batch, seq_len, inputs) -> predictions (K, batch)."""

    def __init__(self, models: int, inputs: int = INPUTS, hidden: int = HIDDEN, layers: int = LAYERS, dropout=DROPOUT):
        super().__init__()
        self.hidden, self.dropout = hidden, dropout
        scale = hidden**-0.5  # nn.LSTM's initialisation: U(-1/sqrt(H), 1/sqrt(H))
        self.w_ih, self.w_hh, self.bias = nn.ParameterList(), nn.ParameterList(), nn.ParameterList()
        for layer in range(layers):
            width = inputs if layer == 0 else hidden
            self.w_ih.append(nn.Parameter(torch.empty(models, width, 4 * hidden).uniform_(-scale, scale)))
            self.w_hh.append(nn.Parameter(torch.empty(models, hidden, 4 * hidden).uniform_(-scale, scale)))
            self.bias.append(nn.Parameter(torch.empty(models, 1, 4 * hidden).uniform_(-scale, scale)))
        self.head_w = nn.Parameter(torch.empty(models, hidden, 1).uniform_(-scale, scale))
        self.head_b = nn.Parameter(torch.empty(models, 1, 1).uniform_(-scale, scale))

    @torch.no_grad()
    def load_from(self, models: list[SequenceRegressor]) -> None:
        """Copy the weights of K SequenceRegressors (for the equivalence check)."""
        for layer in range(len(self.w_ih)):
            self.w_ih[layer].copy_(torch.stack([getattr(m.rnn, f"weight_ih_l{layer}").T for m in models]))
            self.w_hh[layer].copy_(torch.stack([getattr(m.rnn, f"weight_hh_l{layer}").T for m in models]))
            biases = [getattr(m.rnn, f"bias_ih_l{layer}") + getattr(m.rnn, f"bias_hh_l{layer}") for m in models]
            self.bias[layer].copy_(torch.stack(biases).unsqueeze(1))
        self.head_w.copy_(torch.stack([m.head.weight.T for m in models]))
        self.head_b.copy_(torch.stack([m.head.bias for m in models]).unsqueeze(1))

    def forward(self, windows: torch.Tensor) -> torch.Tensor:
        models, batch, steps, _ = windows.shape
        sequence = windows
        for layer in range(len(self.w_ih)):
            if layer > 0 and self.training and self.dropout:
                sequence = nn.functional.dropout(sequence, self.dropout)
            # the input projection of every step at once: (K, batch*steps, in) @ (K, in, 4H)
            projected = torch.baddbmm(self.bias[layer], sequence.reshape(models, batch * steps, -1), self.w_ih[layer])
            projected = projected.view(models, batch, steps, 4 * self.hidden)
            h = windows.new_zeros(models, batch, self.hidden, dtype=projected.dtype)
            c = windows.new_zeros(models, batch, self.hidden, dtype=torch.float32)
            outputs = []
            for step in range(steps):
                gates = torch.baddbmm(projected[:, :, step], h, self.w_hh[layer])
                i, f, g, o = gates.float().chunk(4, dim=-1)
                c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
                h = (torch.sigmoid(o) * torch.tanh(c)).to(projected.dtype)
                outputs.append(h)
            sequence = torch.stack(outputs, dim=2)
        return torch.baddbmm(self.head_b, sequence[:, :, -1], self.head_w).squeeze(-1)


def check_equivalence(models: int = 3) -> float:
    """Largest difference between the grouped model and K nn.LSTM models with its weights."""
    torch.manual_seed(0)
    singles = [SequenceRegressor(INPUTS, "lstm", HIDDEN, LAYERS, DROPOUT).eval() for _ in range(models)]
    grouped = GroupedLSTMRegressor(models).eval()
    grouped.load_from(singles)
    windows = torch.randn(models, 7, SEQ_LEN, INPUTS)
    with torch.no_grad():
        expected = torch.stack([model(windows[k]) for k, model in enumerate(singles)])
        return float((grouped(windows) - expected).abs().max())


def amp_autocast(device: torch.device, graphed: bool):
    """rnnfleet's train.amp auto for this device; a CUDA graph's capture needs autocast's
    cache of cast weights off (the cast is then part of the graph)."""
    amp = resolve_amp("auto", device)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(amp)
    return torch.autocast(device.type, dtype=dtype, enabled=dtype is not None, cache_enabled=not graphed), amp


def batch_source(models: int, device: torch.device):
    """Each model's own windows and targets on the device; a function giving a random batch."""
    windows = torch.randn(models, WINDOWS, SEQ_LEN, INPUTS, device=device)
    targets = torch.randn(models, WINDOWS, device=device)
    rows = torch.arange(models, device=device).unsqueeze(1)
    static_picks = torch.empty(models, BATCH, dtype=torch.long, device=device)

    def draw(into: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        picks = torch.randint(0, WINDOWS, (models, BATCH), device=device, out=into if into is not None else None)
        return windows[rows, picks], targets[rows, picks]

    return draw, static_picks


def train_steps(variant: str, models: int, device: torch.device, seconds: float, ready: Path | None, go: Path | None):
    """Warm up, signal ready, wait for go, then count steps for `seconds`. Returns the report."""
    torch.manual_seed(os.getpid())
    if variant == "processes":
        model = SequenceRegressor(INPUTS, "lstm", HIDDEN, LAYERS, DROPOUT).to(device)
    else:
        model = GroupedLSTMRegressor(models).to(device)
    graphed = variant == "graphed"
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, capturable=graphed)
    draw, static_picks = batch_source(1 if variant == "processes" else models, device)
    autocast, amp = amp_autocast(device, graphed)

    def step() -> torch.Tensor:
        windows, targets = draw(static_picks if graphed else None)
        if variant == "processes":
            windows, targets = windows[0], targets[0]
        optimizer.zero_grad(set_to_none=not graphed)
        with autocast:
            predictions = model(windows)
        loss = nn.functional.mse_loss(predictions.float(), targets)
        loss.backward()
        optimizer.step()
        return loss

    run = step
    if graphed:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
        run = graph.replay
    for _ in range(5):
        run()
    synchronize(device)
    if ready is not None:
        ready.write_text("ready")
        while not go.exists():
            time.sleep(0.002)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    started, steps = time.perf_counter(), 0
    while time.perf_counter() - started < seconds:
        for _ in range(5):
            run()
        steps += 5
        synchronize(device)
    elapsed = time.perf_counter() - started
    peak = torch.cuda.max_memory_reserved(device) if device.type == "cuda" else 0
    return {"steps": steps, "seconds": elapsed, "allocator_peak_mb": peak / 2**20, "amp": amp}


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def gpu_used_mb() -> float | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout
        return float(out.split()[0])
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return None


def run_variant(variant: str, models: int, args) -> dict:
    """The variant at K=models in child processes (K for `processes`, else one)."""
    processes = models if variant == "processes" else 1
    folder = Path(tempfile.mkdtemp(prefix="klstm-"))
    go = folder / "go"
    before = gpu_used_mb()
    children = []
    for number in range(processes):
        command = [sys.executable, __file__, "--child", variant, "--models", str(models), "--device", args.device]
        command += ["--seconds", str(args.seconds), "--ready", str(folder / f"ready-{number}"), "--go", str(go)]
        children.append(subprocess.Popen(command, stdout=subprocess.PIPE, text=True))
    deadline = time.time() + args.start_timeout
    while sum((folder / f"ready-{n}").exists() for n in range(processes)) < processes:
        if time.time() > deadline or any(child.poll() not in (None, 0) for child in children):
            for child in children:
                child.kill()
            raise SystemExit(f"{variant} K={models}: not every process got ready")
        time.sleep(0.05)
    go.write_text("go")
    time.sleep(min(1.0, args.seconds / 2))
    during = gpu_used_mb()
    reports = [json.loads(child.communicate()[0].strip().splitlines()[-1]) for child in children]
    if any(child.returncode for child in children):
        raise SystemExit(f"{variant} K={models}: a process failed")
    steps_per_s = [r["steps"] / r["seconds"] for r in reports]
    model_steps = sum(steps_per_s) * (1 if variant == "processes" else models)
    return {
        "variant": variant,
        "K": models,
        "model_steps_per_s": model_steps,
        "steps_per_s_per_model": model_steps / models,
        "gpu_mb_held": (during - before) if during is not None and before is not None else None,
        "allocator_peak_mb_total": sum(r["allocator_peak_mb"] for r in reports),
        "amp": reports[0]["amp"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ks", default="1,4,16,64")
    parser.add_argument("--variants", default="processes,grouped,graphed")
    parser.add_argument("--seconds", type=float, default=3.0, help="timed seconds per variant and K")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--start-timeout", type=float, default=120.0)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--models", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--ready", help=argparse.SUPPRESS)
    parser.add_argument("--go", help=argparse.SUPPRESS)
    args = parser.parse_args()
    device = torch.device(args.device)
    if args.child:
        torch.set_num_threads(1)
        report = train_steps(args.child, args.models, device, args.seconds, Path(args.ready), Path(args.go))
        print(json.dumps(report), flush=True)
        return
    difference = check_equivalence()
    print(f"grouped model vs nn.LSTM with the same weights (CPU, float32): largest difference {difference:.2e}")
    if difference > 1e-4:
        raise SystemExit("the grouped model does not compute what nn.LSTM computes")
    variants = [v for v in args.variants.split(",") if v != "graphed" or device.type == "cuda"]
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"{name}; LSTM({INPUTS}, {HIDDEN}, {LAYERS} layers), seq {SEQ_LEN}, batch {BATCH}, {args.seconds} s each")
    print(f"{'variant':<10}{'K':>4}{'model-steps/s':>15}{'per model':>11}{'GPU MB held':>13}{'allocator MB':>14}")
    for models in map(int, args.ks.split(",")):
        for variant in variants:
            try:
                result = run_variant(variant, models, args)
            except (SystemExit, Exception) as error:  # one failed variant leaves the others to run
                print(f"{variant:<10}{models:>4}  failed: {error}", flush=True)
                continue
            held = f"{result['gpu_mb_held']:13.0f}" if result["gpu_mb_held"] is not None else f"{'-':>13}"
            print(
                f"{variant:<10}{models:>4}{result['model_steps_per_s']:15.1f}{result['steps_per_s_per_model']:11.1f}"
                f"{held}{result['allocator_peak_mb_total']:14.0f}",
                flush=True,
            )
            print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
