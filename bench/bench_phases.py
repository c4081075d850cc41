"""Where a dataset's seconds go, phase by phase: one preprocess and one train job, in process.

    .venv/bin/python bench/bench_phases.py                                   # both workloads
    .venv/bin/python bench/bench_phases.py --workloads one-day --datasets 40 --run-datasets 40

Workloads (generated one-day datasets of 1,440 one-minute bars):
  one-day   bench_speed.py's many-small model: LSTM 64x2, seq 60, batch 128, 2 epochs, no early stop
  default   the workflow's defaults (config.yaml: 20 epochs, early stopping with patience 3)
The evaluate settings are the workflow's defaults in both (a 1,000-resample bootstrap).

The real functions of rnnfleet.runner.jobs (preprocess_one, train_one) run one dataset after
another in this process, as a warm worker runs them, with a clock wrapped around each
function the breakdown names (set up here, nothing in rnnfleet changed): each phase's time
is its own, the phases it calls taken out. The table (summarize) and the figures (plots, one
process) are made once over every dataset, as a run's end makes them, and shown per dataset.
The first dataset warms the process up and is not counted. With --run-datasets N a real
`snakemake --cores <cores>` run of N datasets adds what the jobs cost beyond their work: a
train job's wall time (Snakemake's benchmark file) less the time inside train_one (its
metrics), and the run's wall per dataset. Last, what a figure's file costs to write synced
to the disk and not (the report's figures are not synced). Appends one JSON line per
workload to bench/out/phases.jsonl.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import functools
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO / "scripts"))

from bench_speed import workflow_config  # noqa: E402

from rnnfleet.synthetic import write_synthetic_csv  # noqa: E402

SCHEMA = REPO / "schemas" / "config.schema.yaml"
ROWS = 1440
WORKLOADS = ("one-day", "default")
TRAIN_JOB = "train job"
PREPROCESS_JOB = "preprocess job"
OPTIMIZER_STEPS = "steps (the loop's and the evaluation's own: the optimizer steps)"


class PhaseClock:
    """Seconds of each phase, its own time only: a wrapped function's time less that of the
    wrapped functions it calls."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self._inner: list[float] = []

    def wrap(self, owner, name: str, phase: str) -> None:
        """Replace owner.name (a module's function, looked up there at call time) by a timed one."""
        original: Callable = getattr(owner, name)

        @functools.wraps(original)
        def timed(*args, **kwargs):
            started = time.perf_counter()
            self._inner.append(0.0)
            try:
                return original(*args, **kwargs)
            finally:
                total = time.perf_counter() - started
                self.seconds[phase] += total - self._inner.pop()
                if self._inner:
                    self._inner[-1] += total

        setattr(owner, name, timed)

    def take(self) -> dict[str, float]:
        """The seconds so far, then zero."""
        taken, self.seconds = dict(self.seconds), defaultdict(float)
        return taken


def wrap_job_phases(clock: PhaseClock) -> None:
    """The clocks of the breakdown: every function a preprocess and a train job spend time in."""
    from rnnfleet.forecast import predict
    from rnnfleet.prep import incremental as appending
    from rnnfleet.prep import prepare
    from rnnfleet.runner import jobs
    from rnnfleet.scores import intervals, test_period
    from rnnfleet.train import evaluate as scoring
    from rnnfleet.train import fit as fitting
    from rnnfleet.train import loop as training

    phases = [
        (jobs, "preprocess_one", PREPROCESS_JOB + ": the rest (settings hash, file checks, log)"),
        (appending, "prepared_arrays", "appending or not: the previous arrays checked"),
        (appending, "prepare_dataset", "prepare_dataset's own (columns, latest window)"),
        (prepare, "read_clean_bars", "read and clean the bars"),
        (prepare, "check_one_minute_bars", "one-minute check"),
        (prepare, "check_quality", "quality flags"),
        (prepare, "find_gaps", "gaps"),
        (prepare, "compute_features", "features and targets"),
        (prepare, "split_and_normalise", "split and normalise"),
        (prepare, "row_digests", "row digests"),
        (jobs, "save_arrays", "array file written"),
        (jobs, "train_one", TRAIN_JOB + ": the rest (threads, device, log lines)"),
        (jobs, "load_arrays", "array file read"),
        (jobs, "read_previous_model", "previous model read"),
        (fitting, "fit_dataset", "fit_dataset's own"),
        (fitting, "training_fingerprint", "fingerprint and plan"),
        (fitting, "plan_training", "fingerprint and plan"),
        (fitting, "walk_forward", "folds"),
        (fitting, "train_and_evaluate", OPTIMIZER_STEPS),
        (scoring, "train", OPTIMIZER_STEPS),
        (scoring, "evaluate", OPTIMIZER_STEPS),
        (training, "build_model", "model built"),
        (training, "evaluate_windows", "validation (every epoch)"),
        (training, "on_cpu", "best epoch's state copied"),
        (scoring, "window_outputs", "test outputs"),
        (intervals, "calibration_scores", "interval calibration"),
        (intervals, "head_calibration", "interval calibration"),
        (scoring, "score_test_period", "test scoring's own"),
        (test_period, "bootstrap_skill_interval", "bootstrap: test skill"),
        (intervals, "bootstrap_skill_interval", "bootstrap: interval coverage"),
        (test_period, "diebold_mariano", "Diebold-Mariano"),
        (scoring, "test_series", "test series"),
        (scoring, "pinball_scores", "pinball scores"),
        (fitting, "refit_on_all_rows", "refit"),
        (fitting, "scored_metrics", "metrics"),
        (fitting, "build_checkpoint", "model file contents"),
        (predict, "forecast_at_last_bar", "forecast at the last bar"),
        (jobs, "save_checkpoint", "model file written"),
        (jobs, "write_json", "metrics file written"),
        (jobs, "job_resources", "job resources measured"),
    ]
    for owner, name, phase in phases:
        clock.wrap(owner, name, phase)


def full_config(workload: str, data_dir: Path, args) -> dict:
    """The workflow's config of the workload, the schema's defaults filled in."""
    from snakemake.utils import validate

    config: dict = {"data_dir": str(data_dir)}
    if workload == "one-day":
        config = workflow_config(argparse.Namespace(epochs=2), data_dir)
    config.setdefault("train", {})["threads"] = 1
    validate(config, schema=str(SCHEMA))
    return config


def run_in_process(config: dict, names: list[str], data_dir: Path, work: Path, clock: PhaseClock) -> list[dict]:
    """preprocess_one and train_one of each dataset in turn: each dataset's phase seconds."""
    from rnnfleet.runner.jobs import preprocess_one, train_one
    from rnnfleet.settings import preprocess_settings, train_hyper_parameters
    from rnnfleet.train.fit import Settings

    settings = Settings(
        config["model"], train_hyper_parameters(config), config["evaluate"], config["update"], config["columns"]
    )
    per_dataset = []
    for name in names:
        arrays_path = str(work / "prep" / f"{name}.npz")
        clock.take()
        started = time.perf_counter()
        with contextlib.redirect_stderr(io.StringIO()):  # the jobs' log lines
            preprocess_one([str(data_dir / f"{name}.csv")], arrays_path, **preprocess_settings(config), dataset=name)
            preprocess_seconds = time.perf_counter() - started
            train_one(
                dataset=name,
                arrays_path=arrays_path,
                model_path=str(work / "models" / f"{name}.pt"),
                metrics_path=str(work / "metrics" / f"{name}.json"),
                settings=settings,
                threads=1,
                gpu_mem_gb=2,
            )
        phases = clock.take()
        phases["(wall) " + PREPROCESS_JOB] = preprocess_seconds
        phases["(wall) " + TRAIN_JOB] = time.perf_counter() - started - preprocess_seconds
        per_dataset.append(phases)
    return per_dataset


RUN_END_PHASES = (
    ("summary", "write_summary", "table (summarize)"),
    ("plots", "write_table_html", "figures: the table page"),
    ("plots", "draw_skill_overview", "figures: the skill overview"),
    ("plots", "draw_coverage_overview", "figures: the interval coverage"),
    ("plots", "write_start_page", "figures: the report's start page"),
    ("loss_curves", "draw_loss_curves", "figures: loss curves"),
    ("fleet_charts", "pyplot", "figures: matplotlib imported"),
)


def wrap_run_end_phases(clock: PhaseClock) -> None:
    """The clocks of what a run's end makes once over every dataset (summarize, plots)."""
    from rnnfleet.report import charts, loss_curves, plots, summary

    modules = {"summary": summary, "plots": plots, "loss_curves": loss_curves, "fleet_charts": charts}
    for module, name, phase in RUN_END_PHASES:
        clock.wrap(modules[module], name, phase)


def run_end_seconds(config: dict, work: Path, clock: PhaseClock) -> dict[str, float]:
    """The table and the figures of every dataset in `work`, made once as a run's end makes
    them (the figures in one process): the seconds of each phase."""
    from rnnfleet.report.plots import draw_report_figures
    from rnnfleet.report.summary import write_summary

    metrics = sorted(str(path) for path in (work / "metrics").glob("*.json"))
    results = work / "results"
    clock.take()
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        write_summary(
            metrics_paths=metrics,
            table_path=str(results / "metrics.csv"),
            forecasts_path=str(results / "forecasts.csv"),
            model_pattern=str(work / "models" / "{dataset}.pt"),
            fleet=config["fleet"],
            quality_thresholds=config["quality"],
            dataset_quality={},
        )
        draw_report_figures(
            table_path=str(results / "metrics.csv"),
            metrics_paths=metrics,
            loss_curves_folder=str(results / "loss_curves"),
            skill_plot_path=str(results / "skill.png"),
            coverage_plot_path=str(results / "coverage.png"),
            table_html_path=str(results / "metrics.html"),
            start_template_path=str(REPO / "report" / "workflow.rst"),
            start_page_path=str(results / "report_start.rst"),
            processes=1,
        )
    return clock.take()


def real_run_costs(config: dict, data_dir: Path, work: Path, cores: int) -> dict[str, float]:
    """A real snakemake run of the datasets in data_dir: median seconds of a train job beyond
    train_one, of a preprocess job, and the run's wall per dataset."""
    import yaml

    work.mkdir(parents=True)
    (work / "config.yaml").write_text(yaml.safe_dump({**config, "data_dir": str(data_dir)}))
    command = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(work), "--cores", str(cores)]
    started = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, cwd=work)
    wall = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"the run failed:\n{result.stderr[-3000:]}")

    def job_walls(rule: str) -> dict[str, float]:
        return {
            path.stem: float(next(csv.DictReader(path.open(), delimiter="\t"))["s"])
            for path in (work / "benchmarks" / rule).glob("*.tsv")
        }

    train_walls = job_walls("train")
    beyond = []
    for path in (work / "metrics").glob("*.json"):
        metrics = json.loads(path.read_text())
        inside = metrics["finished_at"] - metrics["process_started_at"] - (metrics["startup_seconds"] or 0)
        beyond.append(train_walls[path.stem] - inside)
    return {
        "train job wall (median)": statistics.median(train_walls.values()),
        "train job beyond train_one (median)": statistics.median(beyond),
        "preprocess job wall (median)": statistics.median(job_walls("preprocess").values()),
        "run wall per dataset": wall / len(train_walls),
        "run wall per dataset x cores": wall * cores / len(train_walls),
    }


def breakdown(per_dataset: list[dict]) -> dict[str, float]:
    """Median seconds of each phase over the datasets."""
    phases = {phase for seconds in per_dataset for phase in seconds}
    return {phase: statistics.median(seconds.get(phase, 0.0) for seconds in per_dataset) for phase in phases}


def print_breakdown(medians: dict[str, float], end: dict[str, float], datasets: int) -> dict[str, float]:
    """The table of phases, largest first; returns the summary figures."""
    preprocess_wall, train_wall = medians.pop("(wall) " + PREPROCESS_JOB), medians.pop("(wall) " + TRAIN_JOB)
    per_dataset_end = {phase: seconds / datasets for phase, seconds in end.items()}
    total = preprocess_wall + train_wall + sum(per_dataset_end.values())
    print(f"{'phase (median s per dataset)':<58}{'seconds':>9}{'share':>8}")
    for phase, seconds in sorted({**medians, **per_dataset_end}.items(), key=lambda item: -item[1]):
        print(f"  {phase:<56}{seconds:9.4f}{seconds / total:8.1%}")
    steps = medians.get(OPTIMIZER_STEPS, 0.0)
    overhead = total - steps
    print(f"  {'preprocess job (in process)':<56}{preprocess_wall:9.4f}")
    print(f"  {'train job (in process)':<56}{train_wall:9.4f}")
    print(f"  {'dataset total (in process, with its share of the run end)':<56}{total:9.4f}")
    print(f"beyond the optimizer steps: {overhead:.4f} s of {total:.4f} s ({overhead / total:.1%})")
    return {"total": total, "steps": steps, "overhead": overhead, "overhead_share": overhead / total}


def run_workload(workload: str, args, root: Path, clock: PhaseClock) -> dict:
    data_dir = root / workload / "data"
    names = [f"S{index:04d}_1m" for index in range(args.datasets + 1)]
    for index, name in enumerate(names):
        write_synthetic_csv(data_dir / f"{name}.csv", ROWS, 1000 + index)
    config = full_config(workload, data_dir, args)
    work = root / workload / "in-process"
    per_dataset = run_in_process(config, names, data_dir, work, clock)[1:]  # the first warms up
    (work / "metrics" / f"{names[0]}.json").unlink()
    end = run_end_seconds(config, work, clock)
    print(
        f"\n{workload}: {args.datasets} datasets x {ROWS} bars, {config['model']['cell']} "
        f"{config['model']['num_layers']}x{config['model']['hidden_size']}, {config['train']['epochs']} epochs "
        f"(patience {config['train']['patience']}), bootstrap {config['evaluate']['bootstrap']}; load {load_text()}"
    )
    medians = breakdown(per_dataset)
    record = {"workload": workload, "datasets": args.datasets, "phases": dict(medians), "run_end": end}
    record |= print_breakdown(medians, end, args.datasets)
    if args.run_datasets:
        costs = real_run_costs(config, data_dir, root / workload / "run", args.cores)
        for what, seconds in costs.items():
            print(f"real run of {len(names)} datasets, {what}: {seconds:.3f} s")
        record["real_run"] = costs
    return record


def figure_write_ms(folder: Path, writes: int = 60) -> dict[str, float]:
    """Median milliseconds of atomic_write of a loss curve's size (30 KB), synced to the disk
    (model, metrics and array files) and not (the report's figures), interleaved."""
    from rnnfleet.atomic_files import atomic_write

    payload, seconds = os.urandom(30_000), {"synced": [], "not synced": []}
    folder.mkdir(parents=True, exist_ok=True)
    for index in range(writes):
        for how in ("synced", "not synced") if index % 2 else ("not synced", "synced"):
            started = time.perf_counter()
            with atomic_write(folder / f"curve{index % 10}.svg", durable=how == "synced") as handle:
                handle.write(payload)
            seconds[how].append(time.perf_counter() - started)
    return {how: 1000 * statistics.median(values) for how, values in seconds.items()}


def load_text() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help=f"of {', '.join(WORKLOADS)}")
    parser.add_argument("--datasets", type=int, default=20, help="datasets timed per workload")
    parser.add_argument("--run-datasets", action="store_true", help="also a real snakemake run of the datasets")
    parser.add_argument("--cores", type=int, default=os.cpu_count())
    parser.add_argument("--out", default=str(BENCH / "out"))
    args = parser.parse_args()
    from rnnfleet.runner.device import tune_cpu_allocator

    tune_cpu_allocator()  # as a job's process does
    clock = PhaseClock()
    wrap_job_phases(clock)
    wrap_run_end_phases(clock)
    with tempfile.TemporaryDirectory(prefix="rnnfleet-phases-") as root:
        records = [run_workload(workload, args, Path(root), clock) for workload in args.workloads.split(",")]
        writes = figure_write_ms(Path(root) / "writes")
    print(
        f"\nwriting a 30 KB figure: {writes['synced']:.2f} ms synced to the disk, {writes['not synced']:.2f} ms not "
        f"({writes['synced'] / writes['not synced']:.1f}x)"
    )
    Path(args.out).mkdir(parents=True, exist_ok=True)
    with open(Path(args.out) / "phases.jsonl", "a") as handle:
        for record in records:
            record |= {"figure_write_ms": writes}
            handle.write(json.dumps({"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "load": load_text(), **record}) + "\n")


if __name__ == "__main__":
    main()
