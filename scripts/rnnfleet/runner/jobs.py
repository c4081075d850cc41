"""The jobs as the scripts run them (in the job's own process or in a warm worker): each
holds a job whole (read its inputs, run the core, write its outputs and metrics), failures
explained by orphans.run_job_guard (errors.job_guard for a job of a live run), the train job's retries explained in the log.

Imported by a job's process or a warm worker only, never by the job client: torch and
pandas load here.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

from rnnfleet.checkpoint import write_json
from rnnfleet.data import PreparedArrays, bars_label, prepare_dataset, save_arrays
from rnnfleet.errors import (
    ATTEMPT_PREFIX,
    ERROR_PREFIX,
    NOT_RETRIED,
    OUT_OF_MEMORY,
    UserError,
    last_marked_line,
)
from rnnfleet.faults import pause_point, raise_injected_out_of_memory, raise_injected_train_crash
from rnnfleet.runner.orphans import run_job_guard
from rnnfleet.updating import (
    FULL,
    NO_PREVIOUS_MODEL,
    UPDATE,
    UPDATE_DEFAULTS,
    Plan,
    fit_record,
    made_label,
    next_lineage,
    plan_training,
    settings_sha256,
    skill_drop,
    training_fingerprint,
    update_from_row,
    update_windows,
    with_normalisation,
)

# Snakemake deletes a job's log before each attempt; a failed attempt's log is kept here
# for the next attempt, which copies it to the top of its own log.
EARLIER_ATTEMPTS_DIR = Path(".snakemake") / "rnnfleet-attempts"
# The schema's `evaluate:` defaults, for callers that pass no settings (benchmarks, tests);
# tests/unit/test_scores.py checks they agree.
EVALUATE_DEFAULTS = {
    "cost_bps": 1.0,
    "block_bars": 60,
    "bootstrap": 1000,
    "production": "scored",
    "folds": 0,
    "window": "expanding",
    "step": 0,
}
# The evaluate settings of rnnfleet.training.score_test_period.
SCORING_KEYS = ("cost_bps", "block_bars", "bootstrap")


def preprocess_job(dataset: str, **preprocess_kwargs) -> None:
    """preprocess_one(**preprocess_kwargs), failing with one line that names the file."""
    with run_job_guard(dataset):
        preprocess_one(dataset=dataset, **preprocess_kwargs)


def train_job(attempt: int, attempts: int, log_path: str, device: str, **train_kwargs) -> None:
    """train_one(**train_kwargs) on `device` (train.device: a run-time setting, not a
    hyper-parameter) for Snakemake's attempt number `attempt` (1 = first try) of `attempts`.

    A retry follows only an out-of-memory error (or a death without a message, such as a
    kill): any other error's line ends with NOT_RETRIED, and rnnfleet.hooks.retry_policy has
    Snakemake not launch the job again; a Snakemake where that hook is off launches it again
    anyway, and that attempt stops at once, saying why.
    """
    dataset, gpu_mem_gb = train_kwargs["dataset"], train_kwargs["gpu_mem_gb"]
    train_kwargs["train_hparams"] = {**train_kwargs["train_hparams"], "device": device}
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
            train_one(**train_kwargs, previous_model=train_kwargs["model_path"])
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
    from dataclasses import replace

    read_versions = files_version(data_files)
    arrays, notes = prepare_dataset(data_files, **settings)
    # What an update checks the arrays were made with (the dataset's name aside).
    arrays = replace(arrays, settings_sha256=settings_sha256({**settings, "dataset": None}))
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
    model_hparams: dict,
    train_hparams: dict,
    threads: int,
    gpu_mem_gb: int,
    columns: dict | None = None,
    process_started_at: float | None = None,
    evaluate: dict | None = None,
    update: dict | None = None,
    previous_model: str | None = None,
) -> dict:
    """The train job: arrays in; model file and metrics JSON out (each written atomically),
    the metrics with the test period's scores (evaluate: the `evaluate:` settings). With
    evaluate folds > 0, first the walk-forward folds (rnnfleet.walkforward: those an earlier
    attempt finished are read back), then the scored model; with production "refit", last
    the re-fit on all rows, which the model file then holds. When previous_model (the
    model this job replaces) can be updated with the new bars (rnnfleet.updating.plan_training,
    update: the `update:` settings), the scored model is that update instead of a fit from
    scratch, unless its skill falls too far below its full fit's. Returns the metrics."""
    # Here, not at the top: a preprocess job run in its own process never loads torch.
    import torch

    from rnnfleet.checkpoint import save_checkpoint
    from rnnfleet.data import load_arrays
    from rnnfleet.precision import resolve_amp
    from rnnfleet.runner.device import (
        cap_gpu_memory,
        claim_device,
        configure_threads,
        job_process,
        placement_note,
        release_gpu_memory,
    )
    from rnnfleet.training import (
        all_rows_train,
        build_checkpoint,
        describe_training,
        log,
        plugin_hashes,
        refit_on_all_rows,
        score_test_period,
        train_model,
        usable_windows,
    )
    from rnnfleet.walkforward import folds_metrics, walk_forward

    # Interpreter start and imports: the job's fixed cost before any work (~0 in a warm worker).
    startup_seconds = time.time() - process_started_at if process_started_at else None
    configure_threads(threads)
    device, gpu_slot = claim_device(train_hparams.get("device", "auto"), gpu_mem_gb)
    cap_gpu_memory(device, gpu_mem_gb)
    amp = resolve_amp(train_hparams.get("amp", "auto"), device)
    log(
        f"{dataset}: training on {device} with {threads} thread(s), amp {amp}, gpu_mem {gpu_mem_gb} GB declared "
        f"({placement_note()})"
    )

    load_started = time.perf_counter()
    arrays = load_arrays(arrays_path)
    load_seconds = time.perf_counter() - load_started
    evaluate = {**EVALUATE_DEFAULTS, **(evaluate or {})}
    update = {**UPDATE_DEFAULTS, **(update or {})}
    seq_len, seed = int(train_hparams["seq_len"]), int(train_hparams["seed"])
    scoring = {key: evaluate[key] for key in SCORING_KEYS}
    fingerprint = training_fingerprint(
        arrays, model_hparams, train_hparams, columns, evaluate, plugin_hashes(arrays, model_hparams)
    )
    fit_plan = plan_training(*read_previous_model(previous_model), arrays, fingerprint, update, evaluate)
    log(f"{dataset}: {fit_plan.label}")

    def train_and_score(part: PreparedArrays, hparams: dict = train_hparams, start=None):
        trained = train_model(part, model_hparams, hparams, device, start)
        return trained, score_test_period(part, trained, seq_len, **scoring, seed=seed)

    try:
        plan, fold_entries = walk_forward(dataset, arrays, model_hparams, train_hparams, evaluate, train_and_score, log)
        update_metrics = {}
        if fit_plan.kind == UPDATE:
            fit_plan, update_metrics, updated = update_model(
                dataset, fit_plan, arrays, update, train_hparams, train_and_score
            )
            if updated:
                arrays, result, test_scores = updated
        if fit_plan.kind == FULL:
            result, test_scores = train_and_score(arrays)
        windows = usable_windows(arrays, seq_len)
        metrics = {
            "dataset": dataset,
            "val_loss": result.val_loss,
            "naive_val_loss": result.naive_val_loss,
            "skill": result.skill,
            **test_scores,
            **describe_training(arrays, model_hparams),
            "best_epoch": result.best_epoch,
            "epochs_run": result.epochs_run,
            "train_seconds": result.train_seconds,
            "device": str(device),
            "amp": amp,
            "torch_threads": torch.get_num_threads(),
            **job_process(),  # worker (warm or cold), pid, warm_server_pid
            "rows": arrays.rows,
            **arrays.quality,  # the data-quality flags (rnnfleet.quality)
            "train_windows": len(windows.train),
            "val_windows": len(windows.val),
            "startup_seconds": startup_seconds,
            "process_started_at": process_started_at,
            "load_seconds": load_seconds,
            "setup_seconds": result.setup_seconds,
            "history": result.history,
        }
        if result.val_accuracy is not None:
            metrics |= {"val_accuracy": result.val_accuracy, "naive_val_accuracy": result.naive_val_accuracy}
        if plan:
            metrics |= folds_metrics(plan, fold_entries, result, test_scores)
        product = result
        metrics["product"] = evaluate["production"]
        metrics |= update_metrics
        record = fit_record(
            "full" if fit_plan.kind == FULL else "update",
            arrays,
            metrics,
            result.train_seconds,
            update_metrics.get("new_rows", 0),
        )
        lineage = next_lineage(fit_plan, arrays, fingerprint, record)
        metrics |= {"made": made_label(lineage), "made_reason": fit_plan.label, "lineage": lineage}
        if evaluate["production"] == "refit":
            log(f"{dataset}: refit for production: {result.best_epoch} epoch(s) (the scored model's best) on all rows")
            product = refit_on_all_rows(arrays, model_hparams, train_hparams, device, result.best_epoch)
            metrics |= {"refit_epochs": product.epochs_run, "refit_seconds": product.train_seconds}
            metrics["refit_train_windows"] = len(usable_windows(all_rows_train(arrays), seq_len).train)
        save_started = time.perf_counter()
        checkpoint = build_checkpoint(
            dataset,
            product,
            arrays,
            model_hparams,
            train_hparams,
            metrics,
            columns,
            product=evaluate["production"],
            lineage=lineage,
        )
        save_checkpoint(checkpoint, model_path)
        metrics["save_seconds"] = time.perf_counter() - save_started
        metrics["finished_at"] = time.time()
        write_json(metrics, metrics_path)
    finally:
        release_gpu_memory(device)
        gpu_slot.release()
    if test_scores:  # before the verdict line, which ends the log
        log(
            f"{dataset}: test period ({test_scores['test_windows']} windows): test skill {test_scores['test_skill']:+.4f}, "
            f"95% interval [{test_scores['test_skill_low']:+.4f}, {test_scores['test_skill_high']:+.4f}]: "
            f"{test_scores['test_verdict']}"
        )
    if plan:
        sd = metrics["folds_skill_sd"]
        log(
            f"{dataset}: walk-forward over {len(plan)} fold(s): test skill mean {metrics['folds_skill_mean']:+.4f}"
            + (f", sd {sd:.4f}" if sd is not None else "")
            + f"; {metrics['folds_positive']} above 0, {metrics['folds_beat']} beat the baseline"
        )
    log(
        f"{dataset}: best epoch {result.best_epoch} of {result.epochs_run}, val_loss {result.val_loss:.5f} "
        f"vs naive ({metrics['baseline']}) {result.naive_val_loss:.5f} (skill {result.skill:+.4f}) -> {model_path}"
        + (" (re-fitted on all rows: evaluate.production refit)" if product is not result else "")
        + (f" ({metrics['made']} since the full fit)" if fit_plan.kind == UPDATE else "")
    )
    return metrics


def read_previous_model(path: str | None) -> tuple[dict | None, str | None]:
    """(the contents of the model file at path, None), or (None, why there is none to update)."""
    from rnnfleet.checkpoint import ModelFileError, load_checkpoint

    if not path or not os.path.exists(path):
        return None, NO_PREVIOUS_MODEL
    try:
        return load_checkpoint(path), None
    except ModelFileError as error:
        return None, f"the previous model does not load ({error})"


def update_model(dataset: str, plan: Plan, arrays: PreparedArrays, update: dict, train_hparams: dict, train_and_score):
    """The training of an UPDATE plan (rnnfleet.updating): (the plan, the update's metrics,
    (the arrays it trained on, its TrainingResult, its test scores)). Where no training window
    ends after update_from_row, or the update's skill falls more than update.max_skill_drop
    below its full fit's, the plan returned is FULL and the last item None."""
    from rnnfleet.training import StartState, log

    previous = plan.previous
    if not update["refit_normalisation"]:
        arrays = with_normalisation(arrays, previous["normalisation"])
    from_row = update_from_row(previous, update["recent_bars"])
    train_windows = len(update_windows(arrays, int(train_hparams["seq_len"]), from_row))
    if not train_windows:
        plan = Plan(FULL, f"no training window ends after row {from_row} (update.recent_bars)")
        log(f"{dataset}: {plan.label}")
        return plan, {}, None
    log(
        f"{dataset}: update {previous['lineage']['updates'] + 1}: from the previous model's weights and "
        f"optimizer state, {train_windows} training window(s) ending at or after row {from_row}, "
        f"at most {update['epochs']} epoch(s)"
    )
    hparams = {**train_hparams, "epochs": update["epochs"], "lr": update["lr"] or train_hparams["lr"]}
    start = StartState(previous["state_dict"], previous["optimizer_state"], from_row)
    result, test_scores = train_and_score(arrays, hparams, start)
    update_metrics = {
        "new_rows": arrays.rows - int(previous["lineage"]["rows"]),
        "update_start_val_loss": result.start_val_loss,
        "update_train_windows": train_windows,
        "update_seconds": result.train_seconds,
    }
    dropped = skill_drop(
        {"skill": result.skill, **test_scores}, previous["lineage"]["full_fit"], update["max_skill_drop"]
    )
    if dropped:
        plan = Plan(FULL, dropped)
        log(f"{dataset}: {plan.label}")
        return plan, {"discarded_update": update_metrics}, None
    return plan, update_metrics, (arrays, result, test_scores)
