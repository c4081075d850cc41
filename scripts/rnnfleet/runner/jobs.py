"""The jobs as the scripts run them (in the job's own process or in a warm worker): each
holds a job whole (read its inputs, run the core, write its outputs and metrics), failures
explained by orphans.run_job_guard (errors.job_guard for a job of a live run), the train job's retries explained in the log.

Imported by a job's process or a warm worker only, never by the job client: torch and
pandas load here.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from rnnfleet.atomic_files import write_json
from rnnfleet.errors import (
    ATTEMPT_PREFIX,
    ERROR_PREFIX,
    NOT_RETRIED,
    OUT_OF_MEMORY,
    UserError,
    last_marked_line,
    log,
)
from rnnfleet.faults import (
    pause_point,
    raise_injected_out_of_memory,
    raise_injected_pretrain_crash,
    raise_injected_train_crash,
)
from rnnfleet.precision import resolve_amp
from rnnfleet.prep.arrays import PreparedArrays
from rnnfleet.prep.arrays_file import load_arrays, save_arrays
from rnnfleet.prep.prepare import bars_label
from rnnfleet.runner.device import (
    blas_threads,
    cap_gpu_memory,
    claim_device,
    configure_threads,
    job_process,
    job_resources,
    limit_blas_threads,
    placement_note,
    release_gpu_memory,
    start_job_measure,
    torch_threads,
)
from rnnfleet.runner.orphans import run_job_guard
from rnnfleet.train.modelfile import save_checkpoint
from rnnfleet.train.updating import NO_PREVIOUS_MODEL

if TYPE_CHECKING:
    from rnnfleet.train.fit import Settings

# Snakemake deletes a job's log before each attempt; a failed attempt's log is kept here
# for the next attempt, which copies it to the top of its own log.
EARLIER_ATTEMPTS_DIR = Path(".snakemake") / "rnnfleet-attempts"


def preprocess_job(dataset: str, threads: int, **preprocess_kwargs) -> None:
    """preprocess_one(**preprocess_kwargs) with numpy's BLAS on the job's `threads`, failing
    with one line that names the file."""
    with run_job_guard(dataset):
        limit_blas_threads(threads)
        preprocess_one(dataset=dataset, **preprocess_kwargs)


def predict_job(
    dataset: str,
    model_path: str,
    csv_path: str | list[str],
    forecasts_path: str,
    threads: int,
    read_format: dict,
    times_zone_free: bool = False,
    **forecast_kwargs,
) -> None:
    """The predict rule's job: rnnfleet.forecast.predict.forecast_csv of the model file on the recent
    bars (one file, or the dataset's files), the forecasts written atomically, with `threads`
    torch threads. times_zone_free: the dataset's times are zone-free, so its bars are read
    with format.timezone at its default, as its params say (rules/datasets.smk, zone_checked).
    forecast_kwargs: last, max_bad_fraction, trusted_plugins (the rule's params)."""
    from rnnfleet.forecast.predict import forecast_csv  # torch loads with it
    from rnnfleet.settings import without_unused_zone

    with run_job_guard(dataset):
        configure_threads(threads)
        forecast_csv(
            model_path=model_path,
            csv_path=csv_path,
            forecasts_path=forecasts_path,
            read_format=without_unused_zone(read_format) if times_zone_free else read_format,
            **forecast_kwargs,
        )


def export_job(
    dataset: str, model_path: str, bar_files: list[str], onnx_path: str, threads: int, **export_kwargs
) -> None:
    """The export_onnx rule's job: rnnfleet.forecast.export_onnx.export_one of the model file, checked
    on its bars, to onnx_path (its one line in the log either way; exit status 1 when nothing
    was written). export_kwargs: max_bad_fraction, trusted_plugins (the rule's params)."""
    from rnnfleet.forecast.export_onnx import export_one  # torch and onnx load with it

    with run_job_guard(dataset):
        configure_threads(threads)
        written = export_one(model_path, bar_files, onnx_path, **export_kwargs)
    if not written:
        raise SystemExit(1)


def train_job(
    attempt: int,
    attempts: int,
    log_path: str,
    device: str,
    model_hparams: dict,
    train_hparams: dict,
    evaluate: dict,
    update: dict,
    columns: dict | None = None,
    tuned_from: dict | None = None,
    **job,
) -> None:
    """train_one on `device` (train.device: a run-time setting, not a hyper-parameter) for
    Snakemake's attempt number `attempt` (1 = first try) of `attempts`; job: train_one's
    other arguments (dataset, paths, threads, gpu_mem_gb, process_started_at).

    A retry follows only an out-of-memory error (or a stop, or on a cluster a death without
    a message, such as a batch system's cancel): any other error's line ends with NOT_RETRIED
    (a warm child killed by a signal: errors.KILLED_BY), and rnnfleet.hooks.retry_policy has
    Snakemake not launch the job again; a Snakemake where that hook is off launches it again
    anyway, and that attempt stops at once, saying why.
    """
    from rnnfleet.train.fit import Settings  # torch loads with it: not at the top

    settings = Settings(model_hparams, {**train_hparams, "device": device}, evaluate, update, columns)
    dataset, gpu_mem_gb = job["dataset"], job["gpu_mem_gb"]
    earlier_attempts_log = EARLIER_ATTEMPTS_DIR / f"{dataset}.log"
    if attempt == 1:
        earlier_attempts_log.unlink(missing_ok=True)  # left by an earlier run
    try:
        with run_job_guard(dataset, attempt=attempt, gpu_mem_gb=gpu_mem_gb, attempts=attempts):
            if attempt > 1:
                check_retry_helps(attempt, attempts, earlier_attempts_log, gpu_mem_gb)
            raise_injected_out_of_memory(attempt)
            raise_injected_train_crash(dataset)
            # The model file stays at its path until the new one is renamed over it.
            train_one(**job, settings=settings, previous_model=job["model_path"], tuned_from=tuned_from)
    except SystemExit:
        sys.stderr.flush()
        EARLIER_ATTEMPTS_DIR.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(log_path, earlier_attempts_log)
        raise
    earlier_attempts_log.unlink(missing_ok=True)


def check_retry_helps(attempt: int, attempts: int, earlier_attempts_log: Path, gpu_mem_gb: int) -> None:
    if earlier_attempts_log.exists():
        print(earlier_attempts_log.read_text(), end="", file=sys.stderr)
    previous = last_marked_line(earlier_attempts_log)
    if previous is not None and previous.startswith(ERROR_PREFIX) and OUT_OF_MEMORY not in previous:
        print(
            f"{ATTEMPT_PREFIX}{attempt} of {attempts}: Snakemake launched this training again after an error "
            "more memory would not help; it stops at once",
            file=sys.stderr,
        )
        problem = previous[len(ERROR_PREFIX) :].replace(NOT_RETRIED, "")
        raise UserError(problem)  # job_guard adds NOT_RETRIED
    print(
        f"{ATTEMPT_PREFIX}{attempt} of {attempts}: retry {attempt - 1} of {attempts - 1} of this training, "
        f"with gpu_mem {gpu_mem_gb} GB",
        file=sys.stderr,
    )
    if previous is None:
        print("the previous attempt ended without an error message (killed?)", file=sys.stderr)
    elif OUT_OF_MEMORY in previous:
        print("the previous attempt ran out of GPU memory", file=sys.stderr)
    else:
        print(f"the previous attempt ended with: {previous}", file=sys.stderr)


def files_version(paths: list[str]) -> list[tuple[int, int, int, int] | None]:
    """(device, inode, size, mtime) of each file: another value means another file or new
    content; None for a path that is gone."""
    versions = []
    for path in paths:
        try:
            status = os.stat(path)
        except OSError:
            versions.append(None)
            continue
        versions.append((status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns))
    return versions


def preprocess_one(data_files: list[str], arrays_path: str, **settings) -> PreparedArrays:
    """The preprocess job: the dataset's bar files in, array file out; notes and a one-line
    summary to stderr. settings: the keyword arguments of prepare_dataset, as
    rnnfleet.settings.preprocess_settings builds them from the config. A file that is
    replaced, rewritten or deleted while the job runs fails the job (UserError) and leaves no
    array file: arrays newer than the file would keep the next run from reading the new content."""
    from rnnfleet.prep.incremental import keep_for_next_append, prepared_arrays

    read_versions = files_version(data_files)
    # Appended to the previous arrays where it can be (rnnfleet.prep.incremental), with the
    # settings hash an update checks the arrays were made with.
    arrays, notes = prepared_arrays(data_files, arrays_path, settings)
    csv_path = bars_label(data_files, settings.get("dataset", ""))
    for note in notes:
        print(f"{csv_path}: note: {note}", file=sys.stderr)
    pause_point("preprocess")
    Path(arrays_path).parent.mkdir(parents=True, exist_ok=True)
    save_arrays(arrays, arrays_path)
    if files_version(data_files) != read_versions:
        Path(arrays_path).unlink()
        raise UserError(
            f"{csv_path}: changed while it was read (replaced, rewritten or deleted during the run); "
            "nothing was written, the next run reads it again"
        )
    keep_for_next_append(arrays_path, arrays)
    print(
        f"{csv_path}: {arrays.rows} rows x {len(arrays.feature_names)} features ({', '.join(arrays.feature_names)}), "
        f"target {arrays.target} -> {arrays_path} (train windows end before row {arrays.train_end}, validation "
        f"from row {arrays.val_start} to {arrays.split.val_end}, test from row {arrays.split.test_start})",
        file=sys.stderr,
    )
    return arrays


def train_one(
    dataset: str,
    arrays_path: str,
    model_path: str,
    metrics_path: str,
    settings: Settings,
    threads: int,
    gpu_mem_gb: int,
    process_started_at: float | None = None,
    previous_model: str | None = None,
    pretrained_path: str | None = None,
    pretrain_log_path: str | None = None,
    tuned_from: dict | None = None,
) -> dict:
    """The train job: arrays in; model file and metrics JSON out (each written atomically),
    fitted by rnnfleet.train.fit.fit_dataset on the device this job claims; previous_model: the model file this job replaces;
    pretrained_path (train.init fleet): the fleet's pretrained model it may start from; absent
    when the pretrain job failed (the job then runs without it: rnnfleet.hooks.past_failed_inputs),
    and this one trains from scratch with the error line of pretrain_log_path. Returns the metrics."""
    from rnnfleet.forecast.predict import forecast_at_last_bar  # torch loads with these: a preprocess job never does
    from rnnfleet.train.fit import fit_dataset

    startup_seconds = time.time() - process_started_at if process_started_at else None  # ~0 when warm
    cpu_started = start_job_measure()  # the training's own CPU and peak memory, warm worker or not
    configure_threads(threads)
    device, gpu_slot = claim_device(settings.train.get("device", "auto"), gpu_mem_gb)
    cap_gpu_memory(device, gpu_mem_gb)
    amp = resolve_amp(settings.loop.amp, device)
    log(
        f"{dataset}: training on {device} with {threads} thread(s), amp {amp}, gpu_mem {gpu_mem_gb} GB declared ({placement_note()})"
    )
    load_started = time.perf_counter()
    arrays = load_arrays(arrays_path)
    facts = {"device": str(device), "amp": amp, "torch_threads": torch_threads(), "blas_threads": blas_threads()}
    facts |= job_process()
    facts |= {"startup_seconds": startup_seconds, "process_started_at": process_started_at}
    facts["load_seconds"] = time.perf_counter() - load_started
    if tuned_from:  # tune.apply: the search's file these settings came from (rnnfleet.tune)
        facts["tuned_from"] = tuned_from
    try:
        fleet = None
        if pretrained_path:
            from rnnfleet.train.fleet_start import failed_fleet_start, fleet_start

            if os.path.exists(pretrained_path):
                fleet = fleet_start(pretrained_path, arrays, settings.model, settings.train)
            else:
                fleet = failed_fleet_start(pretrained_path, pretrain_log_path)
        fitted = fit_dataset(dataset, arrays, read_previous_model(previous_model), settings, device, facts, fleet)
        fitted.add_metrics(forecast_at_last_bar(fitted.model, fitted.checkpoint, arrays))  # the fleet's forecasts table
        save_started = time.perf_counter()
        save_checkpoint(fitted.checkpoint, model_path)
        metrics = {**fitted.metrics, "save_seconds": time.perf_counter() - save_started, "finished_at": time.time()}
        metrics |= job_resources(cpu_started)
        write_json(metrics, metrics_path)
    finally:
        release_gpu_memory(device)
        gpu_slot.release()
    for line in fitted.summary(model_path):
        log(line)
    return metrics


def read_previous_model(path: str | None) -> tuple[dict | None, str | None]:
    """(the contents of the model file at path, None), or (None, why there is none to update)."""
    from rnnfleet.train.modelfile import ModelFileError, load_checkpoint

    if not path or not os.path.exists(path):
        return None, NO_PREVIOUS_MODEL
    try:
        return load_checkpoint(path), None
    except ModelFileError as error:
        return None, f"the previous model does not load ({error})"


def pretrain_job(
    members_json: str, model_path: str, lineage_path: str, settings: dict, device: str, threads: int, gpu_mem_gb: int
) -> None:
    """The pretrain rule's job (rules/pretrain.smk): the fleet's array files and the datasets
    left out (rnnfleet.workflow.pretrain_plan.fleet_members, as JSON) in; the pretrained model file and
    its lineage JSON out, each written atomically,
    trained by rnnfleet.train.pretraining.pretrain on the device this job claims (as a train job)."""
    from rnnfleet.bars.joining import file_sha256
    from rnnfleet.train.pretraining import pretrain  # torch loads with it

    with run_job_guard("pretrain", gpu_mem_gb=gpu_mem_gb):
        configure_threads(threads)
        claimed, gpu_slot = claim_device(device, gpu_mem_gb)
        cap_gpu_memory(claimed, gpu_mem_gb)
        log(f"pretrain: on {claimed} with {threads} thread(s), gpu_mem {gpu_mem_gb} GB declared ({placement_note()})")
        try:
            raise_injected_pretrain_crash()
            members = json.loads(members_json)
            checkpoint, lineage = pretrain(members["arrays"], settings, claimed, log, members["left_out"])
            save_checkpoint(checkpoint, model_path)
            write_json({**lineage, "sha256": file_sha256(model_path)}, lineage_path)
        finally:
            release_gpu_memory(claimed)
            gpu_slot.release()
        log(f"pretrain: -> {model_path} (cutoff {lineage['cutoff']})")


# ---- the settings search (rules/tune.smk, rnnfleet.tune) ----------------------------------------


def dataset_arrays(arrays_json: str) -> dict[str, str]:
    """{dataset: its array file} of a JSON list of prep/<dataset>.npz paths."""
    return {Path(path).stem: path for path in json.loads(arrays_json)}


def tune_worker_job(
    worker: int, search: dict, arrays_json: str, record_path: str, device: str, threads: int, gpu_mem_gb: int
) -> None:
    """The tune_worker rule's job: trials of the shared study (rnnfleet.tune.search.run_worker)
    on the sample's arrays cut at their validation end, until the budget is spent; what it
    did in record_path (JSON), written atomically at the end."""
    from rnnfleet.tune.search import (
        Budget,
        fail_abandoned_trials,
        make_objective,
        open_study,
        run_worker,
        seeded_sampler,
        spent_before,
        validation_only,
    )

    with run_job_guard(f"tune worker {worker}", gpu_mem_gb=gpu_mem_gb):
        paths = dataset_arrays(arrays_json)
        if not paths:
            raise UserError("tune: no dataset to search on (tune.sample, tune.datasets)")
        configure_threads(threads)
        claimed, gpu_slot = claim_device(device, gpu_mem_gb)
        cap_gpu_memory(claimed, gpu_mem_gb)
        log(
            f"tune worker {worker}: on {claimed} with {threads} thread(s), study {search['study']}, {len(paths)} dataset(s)"
        )
        try:
            # Loaded whole, then cut: nothing from the validation end on reaches a fit.
            datasets = {name: validation_only(load_arrays(path)) for name, path in paths.items()}
            Path(search["journal"]).parent.mkdir(parents=True, exist_ok=True)
            study = open_study(search["journal"], search["study"])
            failed = fail_abandoned_trials(study, worker, search["workers"])
            if failed:
                log(f"tune worker {worker}: trial(s) {failed} left running by a stopped worker told FAIL (not counted)")
            sampler = seeded_sampler(search["seed"], worker, spent_before(study))
            study = open_study(search["journal"], search["study"], sampler)
            for name, settings in search["own"].items():
                log(f"tune worker {worker}: {name}: settings of its own (datasets sheet) over each trial's: {settings}")
            objective = make_objective(
                datasets, search["train"], search["model"], search["own"], search["epochs"], claimed, log
            )
            budget = Budget(search["trials"], search["minutes"])
            done = run_worker(study, worker, search["space"], objective, budget, log)
        finally:
            release_gpu_memory(claimed)
            gpu_slot.release()
        write_json({"worker": worker, "study": search["study"], "trials": done}, record_path)


def tune_report_job(search: dict, trials_path: str, best_path: str, page_path: str) -> None:
    """The tune_report rule's job: trials.csv, best.yaml and tune.html of the study
    (rnnfleet.tune.results), and the best-of-N line in the log."""
    from rnnfleet.tune.heldout import best_line
    from rnnfleet.tune.results import write_results
    from rnnfleet.tune.search import open_study

    with run_job_guard("tune report"):
        study = open_study(search["journal"], search["study"])
        evidence = {"sample": search["sample"], "epochs": search["epochs"], "space": search["space"]}
        paths = {"trials": trials_path, "best": best_path, "page": page_path}
        log(best_line(write_results(study, search["space"], evidence, paths)))


def tune_verdict_job(
    defaults: dict,
    own: dict,
    best_path: str,
    arrays_json: str,
    verdict_path: str,
    skills_path: str,
    device: str,
    threads: int,
    gpu_mem_gb: int,
) -> None:
    """The tune_verdict rule's job: best.yaml's settings and the defaults trained on the
    held-out datasets (with their own settings, `own`) and compared on their test periods
    (rnnfleet.tune.heldout); the verdict line in verdict_path, the per-dataset test skills
    in skills_path."""
    import yaml

    from rnnfleet.atomic_files import atomic_write
    from rnnfleet.tune.heldout import held_out_comparison

    with run_job_guard("tune verdict", gpu_mem_gb=gpu_mem_gb):
        with open(best_path) as handle:
            chosen = yaml.safe_load(handle)["settings"]
        configure_threads(threads)
        claimed, gpu_slot = claim_device(device, gpu_mem_gb)
        cap_gpu_memory(claimed, gpu_mem_gb)
        try:
            loaders = {
                name: (lambda path=path: load_arrays(path)) for name, path in dataset_arrays(arrays_json).items()
            }
            for name, settings in own.items():
                log(f"tune verdict: {name}: settings of its own (datasets sheet) over both arms': {settings}")
            result = held_out_comparison(loaders, chosen, defaults, own, claimed, log)
        finally:
            release_gpu_memory(claimed)
            gpu_slot.release()
        write_json(result, skills_path)
        with atomic_write(verdict_path) as handle:
            handle.write((result["line"] + "\n").encode())
        log(result["line"])
