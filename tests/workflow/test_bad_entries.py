"""Entries of data_dir that are not usable files, among good datasets, in one real run by a
normal user (root reads files whatever their mode): each costs its own dataset alone.

The run is started as the second local account (conftest.intruder) on a copy of the
workflow and data that this account owns. Its first preprocess job that reads a file to the
end is paused (rnnfleet.faults); meanwhile that file is replaced and the file of a dataset
whose job has not started yet is deleted.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sysconfig
import tempfile
import time
from pathlib import Path

import pytest
from conftest import REPO, add_datasets, pending_jobs, python_for, summary_by_dataset, write_config

from rnnfleet.errors import DATA_ERROR_NOTE
from rnnfleet.faults import PAUSE_AT, PAUSE_FILE, RESUME
from rnnfleet.synthetic import write_synthetic_csv
from rnnfleet.train.models import load_model

GOOD = ["A_1m", "B_1m", "C_1m", "D_1m"]  # one is replaced and one deleted during the run
UNREADABLE = "UNREADABLE_1m"  # mode 000
# Left out at discovery: {file name: what the one line says}.
SKIPPED = {
    "FOLDER_1m.csv": "is a folder, not a file (a dataset is one file)",
    "DANGLING_1m.csv": "is a symbolic link to '../gone/DANGLING_1m.csv', which does not exist",
    "PIPE_1m.csv": "is not a regular file (a pipe, socket or device)",  # reading it would wait forever
}
WORKFLOW_PARTS = ["Snakefile", "config.yaml", "rules", "scripts", "schemas", "envs", "report", "profiles"]


def account_run(account, python: str, folder: Path, *args: str, env=None, **popen_kwargs) -> subprocess.Popen:
    """The real snakemake, as `account`, on folder/workflow in folder/run, one job at a time."""
    site_packages = sysconfig.get_paths()["purelib"]  # this venv's packages, for that Python
    return subprocess.Popen(
        [python, "-m", "snakemake", "-s", str(folder / "workflow" / "Snakefile"), "-d", str(folder / "run")]
        + ["--cores", "1", *args],
        cwd=folder / "run",
        user=account.pw_uid,
        group=account.pw_gid,
        extra_groups=[],
        env={
            "PATH": f"{os.path.dirname(python)}:/usr/bin:/bin",
            "HOME": str(folder / "home"),
            "PYTHONPATH": site_packages,
            "LANG": "C.UTF-8",
            **(env or {}),
        },
        **popen_kwargs,
    )


def owned_by(account, folder: Path) -> None:
    for parent, names, files in os.walk(folder):
        for name in [".", *names, *files]:
            os.chown(os.path.join(parent, name), account.pw_uid, account.pw_gid, follow_symlinks=False)


@pytest.fixture(scope="module")
def bad_entries_run(intruder):
    """(run folder, the run's output, its exit status, the dataset replaced, the dataset
    deleted, the dry-run's output after it)."""
    python = python_for(intruder)
    folder = Path(tempfile.mkdtemp(prefix="rnnfleet-bad-entries-", dir="/tmp"))
    try:
        (folder / "workflow").mkdir()
        for part in WORKFLOW_PARTS:
            source, copy = REPO / part, folder / "workflow" / part
            if source.is_dir():
                shutil.copytree(source, copy, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(source, copy)
        workdir = folder / "run"
        add_datasets(workdir, [*GOOD, UNREADABLE])
        (workdir / "data" / "FOLDER_1m.csv").mkdir()
        write_synthetic_csv(workdir / "data" / "FOLDER_1m.csv" / "inside_1m.csv", 100, 1)
        (workdir / "data" / "DANGLING_1m.csv").symlink_to("../gone/DANGLING_1m.csv")
        os.mkfifo(workdir / "data" / "PIPE_1m.csv")
        write_config(workdir, data_dir="data")
        (folder / "home").mkdir()
        owned_by(intruder, folder)
        (workdir / "data" / f"{UNREADABLE}.csv").chmod(0)
        check = account_run(intruder, python, folder, "--version", stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if check.wait(120) != 0:
            pytest.fail(f"{intruder.pw_name} cannot run snakemake with {python}: {check.stdout.read().decode()}")

        marker, output_path = folder / "paused", folder / "output.txt"
        with open(output_path, "w") as output:
            run = account_run(
                intruder,
                python,
                folder,
                env={PAUSE_AT: "preprocess", PAUSE_FILE: str(marker)},
                stdout=output,
                stderr=subprocess.STDOUT,
            )
            deadline = time.monotonic() + 300
            while not (marker.exists() and marker.read_text().isdigit()):
                assert run.poll() is None, output_path.read_text()
                assert time.monotonic() < deadline, "no preprocess job reached its pause"
                time.sleep(0.05)
            # One job at a time: the paused one is the only good dataset with a log yet.
            started = [name for name in GOOD if (workdir / "logs" / "preprocess" / f"{name}.log").exists()]
            assert len(started) == 1, started
            replaced = started[0]
            deleted = next(name for name in GOOD if name != replaced)
            new_file = workdir / "data" / f".{replaced}.new"
            write_synthetic_csv(new_file, 400, 99)
            os.replace(new_file, workdir / "data" / f"{replaced}.csv")
            (workdir / "data" / f"{deleted}.csv").unlink()
            marker.write_text(RESUME)
            returncode = run.wait(600)
        dry_run = account_run(intruder, python, folder, "-n", stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        dry_run_output = dry_run.communicate(timeout=300)[0].decode()
        yield workdir, output_path.read_text(), returncode, replaced, deleted, dry_run_output
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def failing_entries(replaced: str, deleted: str) -> dict[str, tuple[str, str]]:
    """{dataset: (summary status, what its one line says)}."""
    return {
        UNREADABLE: ("data error", f"data/{UNREADABLE}.csv: cannot be read (Permission denied){DATA_ERROR_NOTE}"),
        deleted: ("data error", f"data/{deleted}.csv: cannot be read (No such file or directory){DATA_ERROR_NOTE}"),
        replaced: ("failed", f"data/{replaced}.csv: changed while it was read (replaced, rewritten or deleted"),
    }


@pytest.mark.parametrize("kind", ["unreadable", "deleted during the run", "replaced during the run"])
def test_an_unusable_dataset_file_fails_its_dataset_alone_with_one_line(bad_entries_run, kind):
    workdir, output, _, replaced, deleted, _ = bad_entries_run
    dataset = {"unreadable": UNREADABLE, "deleted during the run": deleted, "replaced during the run": replaced}[kind]
    status, problem = failing_entries(replaced, deleted)[dataset]
    log = (workdir / "logs" / "preprocess" / f"{dataset}.log").read_text()
    error_lines = [line for line in log.splitlines() if line.startswith("ERROR")]
    assert len(error_lines) == 1 and "Traceback" not in log, log
    assert error_lines[0].startswith(f"ERROR: {problem}"), error_lines[0]
    assert error_lines[0] in output
    assert not (workdir / "prep" / f"{dataset}.npz").exists()
    assert summary_by_dataset(workdir)[dataset]["status"] == status


@pytest.mark.parametrize("file_name", sorted(SKIPPED))
def test_an_entry_that_is_not_a_file_is_left_out_with_one_line(bad_entries_run, file_name):
    workdir, output, _, _, _, dry_run_output = bad_entries_run
    lines = [line for line in output.splitlines() if f"data/{file_name}" in line]
    assert lines == [f"rnnfleet: WARNING: data/{file_name}: {SKIPPED[file_name]}; skipped, not a dataset of this run"]
    dataset = file_name.removesuffix(".csv")
    assert dataset not in summary_by_dataset(workdir)
    made_for_it = [path for path in workdir.rglob(f"{dataset}*") if path.relative_to(workdir).parts[0] != "data"]
    assert made_for_it == []  # no job, log or output
    assert f"data/{file_name}" in dry_run_output  # told again on every run


def test_every_other_dataset_trains_and_the_results_are_written(bad_entries_run):
    workdir, output, returncode, replaced, deleted, _ = bad_entries_run
    assert returncode != 0, output[-3000:]  # the run says that something failed
    # What ended the whole run before (stock Snakemake), for every dataset:
    assert "Missing files after" not in output and "Error recording metadata" not in output
    failing = failing_entries(replaced, deleted)
    trained = sorted(set(GOOD) - set(failing))
    assert len(trained) == 2
    summary = summary_by_dataset(workdir)
    assert set(summary) == {*trained, *failing}
    for dataset in trained:
        load_model(workdir / "models" / f"{dataset}.pt")
        assert summary[dataset]["status"] == "ok"
        assert (workdir / "results" / "loss_curves" / f"{dataset}.svg").stat().st_size > 0
    for figure in ("metrics.html", "skill.png"):
        assert (workdir / "results" / figure).stat().st_size > 0
    assert sorted((workdir / "results" / "not_done.txt").read_text().split()) == sorted(failing)
    assert f"{len(failing)} of {len(summary)} datasets are not done" in output


def test_the_next_run_does_not_train_the_good_datasets_again(bad_entries_run):
    workdir, _, _, replaced, deleted, dry_run_output = bad_entries_run
    # The deleted file is no dataset any more; the other two are tried again, nothing else.
    assert set(pending_jobs(dry_run_output, "train")) == {replaced, UNREADABLE}, dry_run_output
    assert set(pending_jobs(dry_run_output, "preprocess")) == {replaced, UNREADABLE}, dry_run_output
