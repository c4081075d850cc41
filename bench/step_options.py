"""Faster steps for small RNNs on a CPU? Each candidate against rnnfleet's step, one process, one thread.

    .venv/bin/python bench/step_options.py                    # bf16 and fp32, 60 steps each
    .venv/bin/python bench/step_options.py --amp off --steps 200 --rounds 5

The step is rnnfleet's (rnnfleet.train.loop's loop, written out here: the windows an
`unfold` view of one feature tensor, a batch one gather by a shuffled index, autocast where
bf16, Adam, the loss summed without a sync) on bench_speed.py's model (LSTM 5 -> 64 x 2,
seq 60, batch 128) and a one-day dataset's training windows. Each candidate changes one
thing:
  contiguous-windows  the windows copied into one contiguous tensor once, batches gathered from it
  seq-first           the model batch_first=False, a batch gathered straight into (seq, batch, features)
  fused-adam          torch.optim.Adam(fused=True)
  mkldnn-off          torch.backends.mkldnn off (the native LSTM kernels)
  sync-every-step     loss.item() every step (what rnnfleet avoids)
  compile             torch.compile of the model (its compile time is printed apart)
Milliseconds per step: the median over `rounds` rounds of `steps` steps (after 5 warm-up
steps), the candidates interleaved step by step so that each sees the same load; each
candidate's loss after the first round, from the same seed, batch order and dropout masks,
against the baseline's (float32: the same to float tolerance?).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))

import torch  # noqa: E402
from torch import nn  # noqa: E402

from rnnfleet.runner.device import tune_cpu_allocator  # noqa: E402
from rnnfleet.train.models import SequenceRegressor  # noqa: E402

CANDIDATES = ("baseline", "contiguous-windows", "seq-first", "fused-adam", "mkldnn-off", "sync-every-step", "compile")
ROWS, FEATURES, SEQ_LEN, BATCH = 1440, 5, 60, 128


class SeqFirst(SequenceRegressor):
    """The same model on (seq, batch, features) input."""

    def __init__(self) -> None:
        super().__init__(FEATURES, "lstm", 64, 2, 0.1)
        self.rnn.batch_first = False

    def forward(self, windows: torch.Tensor) -> torch.Tensor:
        outputs, _ = self.rnn(windows)
        return self.head(outputs[-1]).squeeze(-1)


@dataclass
class Trainer:
    """One candidate's model, optimizer and step."""

    step: Callable[[torch.Tensor], torch.Tensor]  # a batch's window numbers -> the step's loss (no sync)
    compile_seconds: float = 0.0
    rng_state: torch.Tensor = field(default_factory=lambda: torch.manual_seed(0).get_state())


def make_trainer(candidate: str, features: torch.Tensor, targets: torch.Tensor, amp: bool) -> Trainer:
    torch.manual_seed(0)
    model: nn.Module = SeqFirst() if candidate == "seq-first" else SequenceRegressor(FEATURES, "lstm", 64, 2, 0.1)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, fused=candidate == "fused-adam" or None)
    windows = features.unfold(0, SEQ_LEN, 1).transpose(1, 2)
    if candidate == "contiguous-windows":
        windows = windows.contiguous()
    window_targets = targets[SEQ_LEN - 1 :]
    offsets = torch.arange(SEQ_LEN)

    def backend() -> contextlib.AbstractContextManager:
        return torch.backends.mkldnn.flags(enabled=False) if candidate == "mkldnn-off" else contextlib.nullcontext()

    compile_seconds = 0.0
    if candidate == "compile":
        started = time.perf_counter()
        model = torch.compile(model)
        model(windows[:BATCH]).sum().backward()  # compiles forward and backward
        optimizer.zero_grad(set_to_none=True)
        compile_seconds = time.perf_counter() - started

    def step(batch: torch.Tensor) -> torch.Tensor:
        model.train()
        inputs = features[offsets[:, None] + batch[None, :]] if candidate == "seq-first" else windows[batch]
        with backend(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            predictions = model(inputs).float().reshape(-1)
        loss = nn.functional.mse_loss(predictions, window_targets[batch])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if candidate == "sync-every-step":
            loss.item()
        return loss.detach()

    return Trainer(step, compile_seconds)


def timed_step(trainer: Trainer, batch: torch.Tensor) -> tuple[float, float]:
    """Seconds of one step of `trainer` on `batch`, and its loss, on the trainer's own
    random stream (its dropout masks do not depend on the other candidates)."""
    torch.set_rng_state(trainer.rng_state)
    started = time.perf_counter()
    loss = trainer.step(batch)
    seconds = time.perf_counter() - started
    trainer.rng_state = torch.get_rng_state()
    return seconds, float(loss)


def batches(generator: torch.Generator, train_windows: int, steps: int) -> list[torch.Tensor]:
    """`steps` batches of shuffled training window numbers, epoch after epoch."""
    out: list[torch.Tensor] = []
    while len(out) < steps:
        order = torch.randperm(train_windows, generator=generator)
        out += [order[start : start + BATCH] for start in range(0, train_windows - BATCH + 1, BATCH)]
    return out[:steps]


def measure(amp: bool, candidates: list[str], steps: int, rounds: int) -> dict[str, dict]:
    torch.manual_seed(0)
    features, targets = torch.randn(ROWS, FEATURES), torch.randn(ROWS)
    train_windows = int(ROWS * 0.65) - 2 * SEQ_LEN
    trainers = {}
    for name in candidates:
        try:
            trainers[name] = make_trainer(name, features, targets, amp)
        except Exception as error:  # a candidate this torch or CPU cannot run is reported, not fatal
            print(f"  {name}: failed to set up ({type(error).__name__}: {str(error).splitlines()[0][:120]})")
    generator = torch.Generator().manual_seed(0)
    per_step: dict[str, list[float]] = {name: [] for name in trainers}
    losses: dict[str, float] = {}
    for round_number in range(rounds + 1):  # round 0 warms up
        for batch in batches(generator, train_windows, steps if round_number else 5):
            for name, trainer in trainers.items():  # interleaved step by step: the same load for each
                seconds, losses[name] = timed_step(trainer, batch)
                if round_number:
                    per_step[name].append(seconds)
        if round_number == 1:
            first_losses = dict(losses)
    return {
        name: {
            "ms": 1000 * statistics.median(per_step[name]),
            "loss": first_losses[name],
            "compile_seconds": trainers[name].compile_seconds,
        }
        for name in trainers
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--amp", default="bf16,off", help="bf16, off or both")
    parser.add_argument("--candidates", default=",".join(CANDIDATES))
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    tune_cpu_allocator()  # as a job's process does
    torch.set_num_threads(1)
    load = " ".join(f"{value:.2f}" for value in os.getloadavg())
    print(f"LSTM 5 -> 64 x 2, seq {SEQ_LEN}, batch {BATCH}, 1 thread, torch {torch.__version__}; load {load}")
    for amp in args.amp.split(","):
        results = measure(amp == "bf16", args.candidates.split(","), args.steps, args.rounds)
        base = results["baseline"]
        print(f"\namp {amp}: {'candidate':<20}{'ms/step':>9}{'x baseline':>12}{'loss - baseline':>17}")
        for name, result in results.items():
            extra = f"  (compile {result['compile_seconds']:.1f} s)" if result["compile_seconds"] else ""
            print(
                f"         {name:<20}{result['ms']:9.2f}{base['ms'] / result['ms']:11.2f}x"
                f"{result['loss'] - base['loss']:+17.2e}{extra}"
            )


if __name__ == "__main__":
    main()
