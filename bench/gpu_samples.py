"""GPU use per phase of a GPU check, from nvidia-smi samples (bench/gpu_check.sh writes both files).

    python bench/gpu_samples.py SAMPLES PHASES

SAMPLES: lines `G <unix time> <utilisation %> <memory used MiB>` (the whole card) and
`P <unix time> <pid> <used MiB>` (one compute process: its CUDA context plus its allocator).
PHASES: lines `<unix time start> <unix time end> <name> <trainings at once> <declared GB each>`.
Prints per phase: the card's mean and peak utilisation, the most training processes seen
at once, the largest process (context and allocator together) against what each training
declared, and the most all of them held at once against trainings x declared. The last
column says whether N trainings declaring G GB stayed within N x G GB.
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from pathlib import Path


def read_samples(path: Path):
    card, processes = [], defaultdict(dict)  # processes: time -> {pid: MiB}
    for line in path.read_text().splitlines():
        parts = line.split()
        try:
            if parts[0] == "G" and len(parts) == 4:
                card.append((float(parts[1]), float(parts[2]), float(parts[3])))
            elif parts[0] == "P" and len(parts) == 4:
                processes[float(parts[1])][parts[2]] = float(parts[3])
        except (ValueError, IndexError):
            continue  # a line nvidia-smi wrote as [N/A] or cut short
    return card, processes


def main() -> None:
    card, processes = read_samples(Path(sys.argv[1]))
    print(
        f"{'phase':<26}{'util mean':>10}{'util max':>9}{'procs':>6}{'largest MiB':>12}{'declared MiB':>13}"
        f"{'all MiB':>9}{'N x G MiB':>10}  within N x G"
    )
    for line in Path(sys.argv[2]).read_text().splitlines():
        start, end, name, at_once, declared_gb = line.split()
        start, end, at_once, declared = float(start), float(end), int(at_once), int(declared_gb) * 1024
        utilisation = [u for t, u, _ in card if start <= t <= end]
        snapshots = [pids for t, pids in processes.items() if start <= t <= end]
        most = max((len(pids) for pids in snapshots), default=0)
        largest = max((max(pids.values()) for pids in snapshots if pids), default=0)
        together = max((sum(pids.values()) for pids in snapshots if pids), default=0)
        mean_use = f"{statistics.mean(utilisation):10.0f}" if utilisation else f"{'-':>10}"
        max_use = f"{max(utilisation):9.0f}" if utilisation else f"{'-':>9}"
        budget = at_once * declared
        print(
            f"{name:<26}{mean_use}{max_use}{most:6d}{largest:12.0f}{declared:13d}{together:9.0f}{budget:10d}  "
            f"{'yes' if together <= budget else 'NO'}{'' if largest <= declared else ' (a process above its own declared)'}"
        )


if __name__ == "__main__":
    main()
