"""A few broken datasets among good ones: the table, the figures and the report still show
everything else; later runs retry only what failed; writes that fail say why in one line."""

from __future__ import annotations

import csv
import errno
import html
import math
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import (
    add_datasets,
    decoded,
    pending_jobs,
    planned_reasons,
    planned_rules,
    report_results,
    snakemake,
    snakemake_as,
    write_config,
)

from rnnfleet.atomic_files import atomic_write
from rnnfleet.errors import WRITE_CAUSES, WriteError, job_guard
from rnnfleet.faults import FULL_DISK, TRAIN_CRASH
from rnnfleet.train.modelfile import save_checkpoint
from rnnfleet.train.models import load_model

pytestmark = pytest.mark.long  # minutes: started first (tests/conftest.py)

GOOD = ["A_1m", "B_1m", "C_1m", "D_1m"]
BROKEN = "BROKEN_1m"  # a data error: zero prices
CRASHING = "CRASH_1m"  # its training crashes (a test fault), a failure that may pass
CRASH = {TRAIN_CRASH: CRASHING}
FIGURES = ("results/metrics.html", "results/skill.png")


def break_file(workdir: Path) -> None:
    path = workdir / "data" / f"{BROKEN}.csv"
    lines = path.read_text().splitlines()
    cells = lines[7].split(",")
    cells[3] = "0"  # low
    lines[7] = ",".join(cells)
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def failed_run(tmp_path_factory) -> tuple[Path, object]:
    """Six datasets, one with a data error and one whose training crashes; then the report."""
    workdir = tmp_path_factory.mktemp("partial")
    add_datasets(workdir, [*GOOD, BROKEN, CRASHING])
    break_file(workdir)
    write_config(workdir, data_dir="data")
    result = snakemake(workdir, check=False, env=CRASH)
    snakemake(workdir, "--report", "report.html")
    return workdir, result


def table(workdir: Path) -> dict[str, dict]:
    with open(workdir / "results" / "metrics.csv", encoding="utf-8") as handle:
        return {row["dataset"]: row for row in csv.DictReader(handle)}


def mtimes(workdir: Path, pattern: str) -> dict[str, int]:
    return {path.name: path.stat().st_mtime_ns for path in sorted(workdir.glob(pattern))}


def copy_of(failed_run, tmp_path: Path) -> Path:
    workdir = tmp_path / "run"
    shutil.copytree(failed_run[0], workdir, symlinks=True)
    return workdir


def test_the_table_tells_a_data_error_from_a_failure_that_may_pass(failed_run):
    workdir, result = failed_run
    assert result.returncode != 0
    rows = table(workdir)
    assert {name: rows[name]["status"] for name in rows} == {
        **dict.fromkeys(GOOD, "ok"),
        BROKEN: "data error",
        CRASHING: "failed",
    }
    assert rows[BROKEN]["error"].startswith(f"preprocess: data/{BROKEN}.csv: zero or negative price")
    assert rows[CRASHING]["error"].startswith(f"train: {CRASHING}: internal error RuntimeError: test fault")
    assert "1 of them are data errors" in result.stderr
    # The fleet's correction is over the datasets that were scored, and says so.
    assert {row["fleet_tests"] for row in rows.values()} == {str(len(GOOD))}
    assert all(rows[name]["fleet_verdict"] for name in GOOD)
    assert rows[BROKEN]["fleet_verdict"] == rows[CRASHING]["fleet_verdict"] == ""
    start_page = (workdir / "results" / "report_start.rst").read_text()
    assert f"Of {len(GOOD)} dataset(s) with a test score" in start_page
    # The fleet's forecasts: every dataset has a row, the failed ones say why they have none.
    with open(workdir / "results" / "forecasts.csv", encoding="utf-8") as handle:
        forecasts = {row["dataset"]: row for row in csv.DictReader(handle)}
    assert set(forecasts) == set(rows)
    assert all(forecasts[name]["forecast"] and forecasts[name]["status"] == "ok" for name in GOOD)
    assert forecasts[BROKEN]["forecast"] == forecasts[CRASHING]["forecast"] == ""
    assert forecasts[BROKEN]["status"] == "data error"
    for name in GOOD:  # the price band, as rnnfleet predict writes it
        row = {key: float(value) for key, value in forecasts[name].items() if key.startswith(("forecast", "close"))}
        assert row["forecast_close_low"] == pytest.approx(row["close"] * math.exp(row["forecast_low"]), rel=1e-12)
        assert row["forecast_close_high"] == pytest.approx(row["close"] * math.exp(row["forecast_high"]), rel=1e-12)
        assert row["forecast_close_low"] < row["forecast_close_high"]
    # The model column names only files that are there: a deploy script reads it.
    assert all(forecasts[name]["model"] == f"models/{name}.pt" for name in GOOD)
    assert all((workdir / forecasts[name]["model"]).is_file() for name in GOOD)
    assert forecasts[BROKEN]["model"] == forecasts[CRASHING]["model"] == ""
    assert forecasts[BROKEN]["error"].startswith("no model: preprocess: ")
    assert forecasts[CRASHING]["error"].startswith(f"no model: train: {CRASHING}: internal error")


def test_the_report_holds_every_good_loss_curve_and_lists_the_failures(failed_run):
    workdir, _ = failed_run
    results = report_results((workdir / "report.html").read_text())
    curves = sorted(entry["labels"]["dataset"] for path, entry in results.items() if "loss_curves" in path)
    assert curves == GOOD
    overview = {entry["labels"]["figure"]: entry for entry in results.values() if "figure" in entry["labels"]}
    assert set(overview) == {"summary table", "skill by dataset", "interval coverage"}
    table_html = decoded(overview["summary table"]).decode()
    assert "2 dataset(s) not done" in table_html
    rows = table(workdir)
    for dataset in (BROKEN, CRASHING):
        assert f"<b>{dataset}</b>: {rows[dataset]['status']}: {html.escape(rows[dataset]['error'])}" in table_html


def test_a_rerun_retries_only_the_failures_and_redraws_nothing_when_they_fail_again(failed_run, tmp_path):
    workdir = copy_of(failed_run, tmp_path)
    models, figures = mtimes(workdir, "models/*.pt"), mtimes(workdir, "results/**/*.*")

    dry_run = snakemake(workdir, "-n", env=CRASH).stdout
    assert set(pending_jobs(dry_run, "preprocess")) == {BROKEN}
    assert set(pending_jobs(dry_run, "train")) == {BROKEN, CRASHING}
    # summarize and plots are listed as waiting on those two alone: they run only if both succeed
    assert planned_rules(dry_run) == {"preprocess": 1, "train": 2, "summarize": 1, "plots": 1, "all": 1}
    for reason in planned_reasons(dry_run, ("summarize", "plots")):
        updated = reason.removeprefix("Input files updated by another job: ").split(", ")
        assert {path for path in updated if path.startswith("metrics/")} == {
            f"metrics/{BROKEN}.json",
            f"metrics/{CRASHING}.json",
        }, reason
    result = snakemake(workdir, check=False, env=CRASH)

    assert result.returncode != 0
    assert f"data/{BROKEN}.csv: zero or negative price" in (workdir / "logs/preprocess" / f"{BROKEN}.log").read_text()
    assert "internal error RuntimeError" in (workdir / "logs/train" / f"{CRASHING}.log").read_text()
    assert mtimes(workdir, "models/*.pt") == models
    assert mtimes(workdir, "results/**/*.*") == figures  # table, page, overview and curves untouched


def test_fixing_the_broken_file_trains_only_it_and_redraws_the_figures(failed_run, tmp_path):
    workdir = copy_of(failed_run, tmp_path)
    models, figures = mtimes(workdir, "models/*.pt"), mtimes(workdir, "results/*.*")
    add_datasets(workdir, [BROKEN])  # a good file now

    result = snakemake(workdir, check=False, env=CRASH)  # the crash is still there

    assert result.returncode != 0
    assert set(mtimes(workdir, "models/*.pt")) == {f"{name}.pt" for name in [*GOOD, BROKEN]}
    assert {name: mtime for name, mtime in mtimes(workdir, "models/*.pt").items() if name in models} == models
    rows = table(workdir)
    assert rows[BROKEN]["status"] == "ok" and rows[CRASHING]["status"] == "failed"
    assert sorted(path.stem for path in (workdir / "results/loss_curves").glob("*.svg")) == sorted([*GOOD, BROKEN])
    redrawn = mtimes(workdir, "results/*.*")
    assert all(redrawn[name] != figures[name] for name in ("metrics.html", "skill.png"))

    snakemake(workdir)  # the crash has passed: Snakemake's own summarize and plots take over
    assert {row["status"] for row in table(workdir).values()} == {"ok"}
    assert len(list((workdir / "results/loss_curves").glob("*.svg"))) == 6
    assert "not done" not in (workdir / "results/metrics.html").read_text()
    assert not (workdir / "results/not_done.txt").exists()
    assert "Nothing to be done" in snakemake(workdir, "-n").stdout


def test_a_full_disk_while_a_model_is_written_gives_one_plain_line(tmp_path):
    add_datasets(tmp_path, ["A_1m", "B_1m"])
    write_config(tmp_path, data_dir="data")

    result = snakemake(tmp_path, check=False, env={FULL_DISK: "models/B_1m.pt"})

    line = "ERROR: models/B_1m.pt: cannot be written: the disk is full (no space left on device)"
    assert result.returncode != 0 and line in result.stderr
    log = (tmp_path / "logs/train/B_1m.log").read_text()
    assert line in log and "Traceback" not in log and "unexpected pos" not in log
    assert not list((tmp_path / "models").glob(".*")) and not (tmp_path / "models/B_1m.pt").exists()
    assert (tmp_path / "models/A_1m.pt").exists()


def test_a_full_disk_while_the_results_are_written_gives_one_plain_line(tmp_path):
    add_datasets(tmp_path, ["A_1m"])
    write_config(tmp_path, data_dir="data")

    result = snakemake(tmp_path, check=False, env={FULL_DISK: "results/*"})

    line = "results/metrics.csv: cannot be written: the disk is full (no space left on device)"
    assert result.returncode != 0
    assert f"ERROR: {line}" in (tmp_path / "logs/summarize.log").read_text()  # the summarize job
    assert f"rnnfleet: ERROR: {line}" in result.stderr  # and the run's own attempt after it
    assert "Traceback" not in result.stderr
    assert (tmp_path / "models/A_1m.pt").exists()


def test_a_full_disk_while_the_forecasts_are_written_keeps_the_previous_ones_until_the_next_run(tmp_path):
    add_datasets(tmp_path, ["A_1m"])
    write_config(tmp_path, data_dir="data")
    snakemake(tmp_path)
    previous = (tmp_path / "results/forecasts.csv").read_bytes()
    add_datasets(tmp_path, ["B_1m"])  # the table and the forecasts are written again

    failed = snakemake(tmp_path, check=False, env={FULL_DISK: "results/forecasts.csv"})

    line = (
        "results/forecasts.csv: cannot be written: the disk is full (no space left on device); free some space "
        "and run again; the previous forecasts.csv is kept"
    )
    assert failed.returncode != 0 and "Traceback" not in failed.stderr
    assert f"ERROR: {line}" in (tmp_path / "logs/summarize.log").read_text()  # the summarize job
    assert f"rnnfleet: ERROR: {line}" in failed.stderr  # and the run's own attempt after it
    assert (tmp_path / "results/forecasts.csv").read_bytes() == previous  # never deleted
    assert planned_rules(snakemake(tmp_path, "-n").stdout).get("summarize") == 1
    snakemake(tmp_path)  # a plain run writes it
    with open(tmp_path / "results/forecasts.csv", encoding="utf-8") as handle:
        assert [row["dataset"] for row in csv.DictReader(handle)] == ["A_1m", "B_1m"]


def mounted_tmpfs(folder: Path, options: str) -> bool:
    """Mount a small tmpfs on folder; False where this user or system cannot."""
    folder.mkdir()
    if shutil.which("mount") is None:
        return False
    return (
        subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True).returncode
        == 0
    )


@pytest.fixture
def full_disk(tmp_path) -> Path:
    """A really full file system: a 200 KB tmpfs with 8 KB left (needs the right to mount)."""
    folder = tmp_path / "full"
    if not mounted_tmpfs(folder, "size=200k"):
        pytest.skip("cannot mount a tmpfs here; the injected ENOSPC tests cover a full disk")
    try:
        (folder / "filler").write_bytes(bytes(192 * 1024))
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


@pytest.fixture
def read_only_folder(tmp_path) -> Path:
    """A read-only file system (root ignores permission bits, not a read-only mount)."""
    folder = tmp_path / "read_only"
    if not mounted_tmpfs(folder, "size=64k,ro"):
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def test_a_full_logs_folder_fails_each_job_with_a_line_naming_its_log(tmp_path):
    add_datasets(tmp_path, ["A_1m", "B_1m"])
    write_config(tmp_path, data_dir="data")
    if not mounted_tmpfs(tmp_path / "logs", "size=64k"):
        pytest.skip("cannot mount a tmpfs here")
    try:
        (tmp_path / "logs" / "filler").write_bytes(bytes(64 * 1024 - 4096))
        (tmp_path / "logs" / "more").write_bytes(bytes(4096))  # every block of it taken
        result = snakemake(tmp_path, check=False)
    finally:
        subprocess.run(["umount", str(tmp_path / "logs")], check=True)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    for dataset in ("A_1m", "B_1m"):
        log = f"logs/preprocess/{dataset}.log"
        assert f"rnnfleet: ERROR: {log}: the job's log cannot be written: its file system is full" in result.stderr
        reason = f"preprocess: its log {log} could not be written (no space left in its file system)"
        assert f"  {dataset}: failed: {reason}" in result.stderr
        assert (table(tmp_path)[dataset]["status"], table(tmp_path)[dataset]["error"]) == ("failed", reason)


def test_a_full_logs_folder_during_a_retrain_gives_the_rows_their_error(tmp_path):
    # The re-train's job removes its old log first: the folder is nearly, not quite, full.
    add_datasets(tmp_path, ["A_1m"])
    write_config(tmp_path, data_dir="data")
    snakemake(tmp_path)
    logs, kept = tmp_path / "logs", tmp_path / "logs_before"
    logs.rename(kept)
    if not mounted_tmpfs(logs, "size=64k"):
        pytest.skip("cannot mount a tmpfs here")
    try:
        shutil.copytree(kept, logs, dirs_exist_ok=True)
        (logs / "filler").write_bytes(bytes(os.statvfs(logs).f_bfree * os.statvfs(logs).f_frsize - 4096))
        (logs / "more").write_bytes(bytes(4096))  # every block of it taken
        result = snakemake(tmp_path, "--config", "train={'epochs': 3}", check=False)
    finally:
        subprocess.run(["umount", str(logs)], check=True)
    reason = "failed: train: its log logs/train/A_1m.log could not be written (no space left in its file system)"
    assert result.returncode != 0 and f"  A_1m: previous model kept: {reason}" in result.stderr, result.stderr[-3000:]
    assert (table(tmp_path)["A_1m"]["status"], table(tmp_path)["A_1m"]["error"]) == ("previous model kept", reason)


def test_a_full_snakemake_folder_stops_the_run_with_one_line_naming_it(tmp_path):
    add_datasets(tmp_path, ["A_1m"])
    write_config(tmp_path, data_dir="data")
    folder = tmp_path / ".snakemake"
    if not mounted_tmpfs(folder, "size=64k"):
        pytest.skip("cannot mount a tmpfs on .snakemake here (mount refused)")
    try:
        (folder / "filler").write_bytes(bytes(64 * 1024 - 4096))
        (folder / "more").write_bytes(bytes(4096))  # every block of it taken
        results = [snakemake(tmp_path, *arguments, check=False) for arguments in ([], ["-n"])]
    finally:
        subprocess.run(["umount", str(folder)], check=True)
    line = (
        f"{folder}: cannot be written: its file system is full (0 bytes left), and Snakemake keeps its lock, "
        "records and logs there; free some space there and run again; nothing was run"
    )
    for result in results:
        output = result.stdout + result.stderr
        assert result.returncode != 0 and line in output, output[-3000:]
        assert "Traceback" not in output and "Logging error" not in output and "Errno" not in output
    assert not (tmp_path / "prep").exists() and not (tmp_path / "models").exists()


def test_a_full_snakemake_folder_when_a_model_is_kept_aside_stops_with_one_line_naming_it(tmp_path):
    # Room for the run to start (over 1 MB), not for Snakemake's copy of the model it re-trains.
    add_datasets(tmp_path, ["A_1m"])
    write_config(tmp_path, data_dir="data", model={"hidden_size": 112, "num_layers": 2})
    snakemake(tmp_path)
    model = tmp_path / "models/A_1m.pt"
    previous = model.read_bytes()
    folder, records = tmp_path / ".snakemake", tmp_path / "records"
    folder.rename(records)
    if not mounted_tmpfs(folder, "size=3m"):
        pytest.skip("cannot mount a tmpfs on .snakemake here (mount refused)")
    try:
        shutil.copytree(records, folder, symlinks=True, dirs_exist_ok=True)
        room = os.statvfs(folder).f_bavail * os.statvfs(folder).f_frsize
        (folder / "filler").write_bytes(bytes(room - 1100 * 1024))
        assert len(previous) > 1100 * 1024
        result = snakemake(tmp_path, "--config", "train={'epochs': 3}", check=False)
        left_over = list((folder / "backups").rglob("*.pt"))
    finally:
        subprocess.run(["umount", str(folder)], check=True)
    line = (
        f"{folder}/backups: cannot be written: the disk is full (no space left on device); free some space and run "
        "again; Snakemake keeps there the copy of models/A_1m.pt it puts back if the job that replaces it fails, so "
        "the run stopped before that job: models/A_1m.pt is untouched and was not made again, and the jobs not "
        "started yet were not run"
    )
    output = result.stdout + result.stderr
    assert result.returncode != 0 and line in output, output[-3000:]
    assert "Traceback" not in output and "Errno" not in output
    assert model.read_bytes() == previous and left_over == []


def test_a_model_written_to_a_really_full_disk_says_so(full_disk):
    import torch

    with pytest.raises(WriteError) as raised:
        save_checkpoint({"weights": torch.zeros(20_000)}, full_disk / "X_1m.pt")
    assert str(raised.value) == f"{full_disk}/X_1m.pt: cannot be written: {WRITE_CAUSES[errno.ENOSPC]}"
    assert sorted(path.name for path in full_disk.iterdir()) == ["filler"]  # no partial file left


def test_a_file_written_to_a_read_only_file_system_says_so(read_only_folder):
    with pytest.raises(WriteError) as raised, atomic_write(read_only_folder / "metrics.csv") as handle:
        handle.write(b"dataset\n")
    assert str(raised.value) == f"{read_only_folder}/metrics.csv: cannot be written: {WRITE_CAUSES[errno.EROFS]}"


def test_a_job_whose_own_write_fails_ends_with_the_plain_line(capsys):
    # A file not written through atomic_write (a library's own): job_guard names the path and cause.
    with pytest.raises(SystemExit), job_guard("X_1m"):
        raise OSError(errno.EACCES, os.strerror(errno.EACCES), "results/loss_curves/X_1m.png")
    line = capsys.readouterr().err.strip()
    assert line == f"ERROR: results/loss_curves/X_1m.png: {WRITE_CAUSES[errno.EACCES]}"


def owned_by(account, folder: Path) -> None:
    for path in [folder, *folder.rglob("*")]:
        os.chown(path, account.pw_uid, account.pw_gid, follow_symlinks=False)


def test_read_only_results_folders_stop_the_run_with_one_line_naming_the_key(intruder, shared_tmp):
    # As a second account: root ignores permission bits. Snakemake alone says "write-protected"
    # in several lines for the curves folder, and for results/ crashes with a PermissionError
    # traceback while removing the old table.
    workdir = shared_tmp / "run"
    workdir.mkdir()
    add_datasets(workdir, ["A_1m"])
    write_config(workdir, data_dir="data")
    owned_by(intruder, workdir)
    first = snakemake_as(intruder, workdir)
    assert first.returncode == 0, first.stderr[-3000:]
    model = workdir / "models/A_1m.pt"
    trained = model.stat().st_mtime_ns

    (workdir / "results/loss_curves").chmod(0o555)
    line = "results/loss_curves (config key paths.results): cannot be written: " + WRITE_CAUSES[errno.EACCES]
    for arguments in (["-n"], []):
        result = snakemake_as(intruder, workdir, "--forcerun", "train", *arguments)
        output = result.stdout + result.stderr  # a dry-run reports on stdout
        assert result.returncode != 0 and line in output, output[-3000:]
        assert "ProtectedOutputException" not in output and "Traceback" not in output

    (workdir / "results/loss_curves").chmod(0o755)
    (workdir / "results").chmod(0o555)
    result = snakemake_as(intruder, workdir, "--forcerun", "train")
    line = f"results (config key paths.results): cannot be written: {WRITE_CAUSES[errno.EACCES]}; nothing was run"
    assert result.returncode != 0 and line in result.stderr, result.stderr[-3000:]
    assert "PermissionError" not in result.stderr and "Traceback" not in result.stderr
    assert model.stat().st_mtime_ns == trained  # stopped before the first job
    (workdir / "results").chmod(0o755)


@pytest.fixture
def models_mount(tmp_path) -> Path:
    """tmp_path with two trained datasets whose models folder is a mount point (a tmpfs)."""
    add_datasets(tmp_path, ["A_1m", "B_1m"])
    write_config(tmp_path, data_dir="data")
    snakemake(tmp_path)
    saved = {path.name: path.read_bytes() for path in (tmp_path / "models").iterdir()}
    shutil.rmtree(tmp_path / "models")
    if not mounted_tmpfs(tmp_path / "models", "size=8m"):
        message = "mounting a tmpfs needs root on Linux"
        if os.environ.get("CI"):
            pytest.fail(message + " (CI must run this test)")
        pytest.skip(message)
    try:
        for name, data in saved.items():
            (tmp_path / "models" / name).write_bytes(data)
        yield tmp_path
    finally:
        subprocess.run(["umount", str(tmp_path / "models")], check=True)


def test_a_models_folder_that_is_a_mount_point_keeps_its_models_when_every_retrain_fails(models_mount):
    # Every re-train fails, so the folder is empty when Snakemake removes empty output folders
    # at the end of the run: on a mount point that is EBUSY, which used to end the run with a
    # traceback before the previous models were put back (the folder stayed empty).
    workdir = models_mount
    models = {path.name: path.read_bytes() for path in (workdir / "models").iterdir()}
    result = snakemake(workdir, "--forcerun", "train", check=False, env={TRAIN_CRASH: "*"})
    assert result.returncode != 0
    assert "Device or resource busy" not in result.stderr and "Traceback" not in result.stderr
    assert "2 of 2 datasets are not done" in result.stderr
    assert {path.name: path.read_bytes() for path in (workdir / "models").iterdir()} == models
    assert {row["status"] for row in table(workdir).values()} == {"previous model kept"}


def test_a_model_file_that_no_longer_loads_makes_its_dataset_pending(tmp_path):
    # One run, one damage per dataset: emptied, cut short, overwritten; A_1m's model is whole.
    damaged = {"B_1m": "emptied", "C_1m": "cut short", "D_1m": "overwritten"}
    add_datasets(tmp_path, ["A_1m", *damaged])
    write_config(tmp_path, data_dir="data")
    snakemake(tmp_path)
    for dataset, damage in damaged.items():
        model = tmp_path / f"models/{dataset}.pt"
        whole = model.read_bytes()
        model.write_bytes(
            {"emptied": b"", "cut short": whole[: len(whole) // 2], "overwritten": os.urandom(len(whole))}[damage]
        )

    dry_run = snakemake(tmp_path, "-n")
    assert sorted(pending_jobs(dry_run.stdout, "train")) == sorted(damaged)
    for dataset in damaged:
        assert f"rnnfleet: models/{dataset}.pt: does not load: " in dry_run.stdout + dry_run.stderr
    # A_1m's forecasts need none of the others' models.
    assert pending_jobs(snakemake(tmp_path, "-n", "predictions/A_1m.csv").stdout, "train") == {}

    snakemake(tmp_path)
    for dataset in damaged:
        load_model(tmp_path / f"models/{dataset}.pt")
    assert "Nothing to be done" in snakemake(tmp_path, "-n").stdout
