"""Milliseconds per training step of one LSTM on CPU, with or without rnnfleet's allocator tuning.

python bench/step_time.py --tuned|--default --threads 1 --steps 60
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tuned", action="store_true")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--hidden-size", type=int, default=64)
    parser.add_argument("--num-layers", type=int, default=2)
    parser.add_argument("--seq-len", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=128)
    args = parser.parse_args()
    if args.tuned:
        from rnnfleet.runner.device import tune_cpu_allocator

        tune_cpu_allocator()
    import torch

    from rnnfleet.train.models import SequenceRegressor

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = SequenceRegressor(5, "lstm", args.hidden_size, args.num_layers, 0.1)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(args.batch_size, args.seq_len, 5), torch.randn(args.batch_size)
    timings = []
    for step in range(args.steps + 5):
        started = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        if step >= 5:  # warm-up steps excluded
            timings.append(time.perf_counter() - started)
    timings.sort()
    print(f"{1000 * timings[len(timings) // 2]:.2f}")


if __name__ == "__main__":
    main()
