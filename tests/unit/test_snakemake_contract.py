"""Every Snakemake function rnnfleet replaces or wraps is in one table with its stock source's
hash, and `make test` fails when the installed Snakemake (or job-step plugin) differs; the one
door (rnnfleet.hooks.apply) applies every patch behind one gate, or none, and its bench switch
leaves out the patches it names."""

from __future__ import annotations

import subprocess
import sys

import pytest
import snakemake
from conftest import REPO

from rnnfleet import hooks
from rnnfleet.hooks import snakemake_contract, snakemake_speedups
from rnnfleet.hooks.snakemake_contract import CONTRACT, RELIED_ON_ELSEWHERE, Patch, differences, installed, locate

SLURM_PLUGIN_FOLDER = REPO / ".venv" / "slurm-plugin"  # make test installs the job-step plugin there


@pytest.fixture
def with_slurm_plugin(monkeypatch):
    if SLURM_PLUGIN_FOLDER.is_dir():
        monkeypatch.syspath_prepend(str(SLURM_PLUGIN_FOLDER))


def test_every_patched_function_is_as_rnnfleet_was_written_for(with_slurm_plugin):
    assert differences() == []


def test_a_changed_or_missing_function_is_named():
    planted = (
        Patch("snakemake.jobs:Job.shellcmd", "planted", "0" * 64),
        Patch("snakemake.jobs:Job.no_such_function", "planted", "0" * 64),
    )
    found = differences(planted)
    assert found[0] == "snakemake.jobs:Job.shellcmd (planted) has changed"
    assert found[1].startswith("snakemake.jobs:Job.no_such_function (planted) not found")


def test_the_speed_ups_replace_only_what_the_table_holds():
    targets = {patch.target for patch in CONTRACT}
    assert {target for target, _ in snakemake_speedups.REPLACEMENTS.values()} <= targets
    assert [*snakemake_speedups.NAMES] == [name for name, by in hooks.PATCHES.items() if by == "snakemake_speedups"]


def test_every_module_that_patches_is_in_the_table_and_behind_the_door():
    assert {patch.by for patch in CONTRACT} == set(hooks.PATCHES.values()) | set(RELIED_ON_ELSEWHERE)


@pytest.fixture
def stock_snakemake(monkeypatch):
    """Whatever a test patches in Snakemake is put back after it."""
    import snakemake.jobs
    import snakemake.rules

    for patch in CONTRACT:
        if installed(patch):
            owner, attribute, current = locate(patch.target)
            monkeypatch.setattr(owner, attribute, current)
    monkeypatch.setattr(snakemake.jobs, "wait_for_files", snakemake.jobs.wait_for_files)
    monkeypatch.setattr(snakemake.rules, "get_function_params", snakemake.rules.get_function_params)


def run_hooks() -> hooks.RunHooks:
    def refuse(*args):
        raise AssertionError("not called while the Snakefile is parsed")

    return hooks.RunHooks([], ("train",), lambda: True, refuse, refuse, refuse)


class JobProcess:
    """A workflow as a job's own Snakemake process sees it (no DAG hooks there)."""

    is_main_process = False


def current(target: str):
    return locate(target)[2]


def test_the_installed_snakemake_opens_the_gate():
    assert hooks.gate() == []


def test_another_release_gets_no_patch_and_the_line_is_left_to_the_run_start(stock_snakemake, monkeypatch, capsys):
    # the Snakefile says once that another release runs (tests/workflow/test_snakemake_version.py)
    monkeypatch.setattr(snakemake, "__version__", "9.28.0")
    before = {patch.target: current(patch.target) for patch in CONTRACT if installed(patch)}

    class MainProcess:
        is_main_process = True

    assert hooks.apply(MainProcess(), run_hooks()) == []
    assert capsys.readouterr().err == ""
    assert {target: current(target) for target in before} == before


def test_a_changed_function_gets_no_patch_at_all_and_one_line(stock_snakemake, monkeypatch, capsys):
    changed = tuple(
        Patch(patch.target, patch.by, "0" * 64) if patch.target.endswith("Job.restart_times") else patch
        for patch in CONTRACT
    )
    monkeypatch.setattr(snakemake_contract, "CONTRACT", changed)
    shellcmd = current("snakemake.jobs:Job.shellcmd")

    class MainProcess:
        is_main_process = True

    assert hooks.apply(MainProcess(), run_hooks()) == []
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "snakemake.jobs:Job.restart_times (retry_policy) has changed" in lines[0], lines
    assert current("snakemake.jobs:Job.shellcmd") is shellcmd  # not even the patches of other functions


def test_a_private_name_snakemake_no_longer_sets_closes_the_gate(monkeypatch):
    private = {**snakemake_contract.PRIVATE_NAMES, "snakemake.jobs:Job": ("_params", "_gone_in_a_new_version")}
    monkeypatch.setattr(snakemake_contract, "PRIVATE_NAMES", private)
    assert hooks.gate() == ["snakemake.jobs:Job no longer sets _gone_in_a_new_version"]


def test_the_bench_switch_leaves_out_the_patches_it_names(stock_snakemake, monkeypatch):
    monkeypatch.setenv(hooks.PATCHES_OFF_VARIABLE, "shellcmd, retry_policy,gc")
    shellcmd, restart_times = current("snakemake.jobs:Job.shellcmd"), current("snakemake.jobs:Job.restart_times")

    applied = hooks.apply(JobProcess(), run_hooks())

    assert {"shellcmd", "retry_policy", "gc"}.isdisjoint(applied) and "input_sizes" in applied
    assert current("snakemake.jobs:Job.shellcmd") is shellcmd
    assert current("snakemake.jobs:Job.restart_times") is restart_times
    update_input_sizes = current("snakemake.scheduling.job_scheduler:JobScheduler.update_input_sizes")
    assert update_input_sizes is snakemake_speedups.update_input_sizes


def test_the_bench_switch_all_leaves_snakemake_stock(stock_snakemake, monkeypatch):
    monkeypatch.setenv(hooks.PATCHES_OFF_VARIABLE, "all")
    before = {patch.target: current(patch.target) for patch in CONTRACT if installed(patch)}
    assert hooks.apply(JobProcess(), run_hooks()) == []
    assert {target: current(target) for target in before} == before


def test_the_bench_switch_refuses_a_name_it_does_not_know(monkeypatch):
    monkeypatch.setenv(hooks.PATCHES_OFF_VARIABLE, "shellcmd,no_such_patch")
    with pytest.raises(ValueError, match="no patch named no_such_patch"):
        hooks.left_out()


def test_the_upgrade_check_prints_the_table_and_its_verdict():
    command = [sys.executable, "-m", "rnnfleet.hooks.snakemake_contract"]
    result = subprocess.run(command, capture_output=True, text=True, env={"PYTHONPATH": str(REPO / "scripts")})
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == len(CONTRACT) + 2 and lines[-1] == "nothing changed"
