"""The speed benchmark runs end to end (tiny sizes; no timing is asserted here)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from conftest import REPO, chromium_or_skip

pytestmark = pytest.mark.long  # minutes: started first (tests/conftest.py)


def test_speed_bench_runs_every_variant_and_reports_ratios(tmp_path):
    # One workload: with --datasets, --rows and --epochs given, the two differ only in name.
    # One dataset and 3 timed steps of the allocator comparison: every variant and both step
    # timings still run; their sizes are no part of what is checked here.
    command = [sys.executable, str(REPO / "bench" / "bench_speed.py"), "--workloads", "many-small"]
    command += ["--datasets", "1", "--rows", "600", "--epochs", "1", "--reps", "1", "--cores", "2"]
    command += ["--step-steps", "3"]
    command += ["--variants", "naive,tight,snakemake,tight-fp32,fp32,one-proc", "--out", str(tmp_path)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "x naive" in result.stdout and "snakemake / best one-process" in result.stdout
    assert "Snakemake's own CPU" in result.stdout and "vs fp32 (float32)" in result.stdout
    assert "snakemake / tight (models/min)" in result.stdout and "fp32 / tight-fp32" in result.stdout
    records = [json.loads(line) for line in (tmp_path / "speed.jsonl").read_text().splitlines()]
    assert [record["workload"] for record in records] == ["many-small"]
    for record in records:
        variants = {"naive", "tight", "snakemake", "tight-fp32", "fp32", "one-proc-1t", "one-proc-2t"}
        assert set(record["models_per_min"]) == variants
        assert record["snakemake_vs_tight"] > 0 and record["fp32_vs_tight-fp32"] > 0
        assert all(value > 0 for value in record["models_per_min"].values())
        # The same work in every variant: the same training windows (the split, the test period held out).
        assert set(record["train_windows"]) == variants and len(set(record["train_windows"].values())) == 1
        assert "(the same work)" in result.stdout
        assert record["snakemake_split_seconds"]["train_seconds"] > 0
        assert record["snakemake_snakemake_cpu_per_job_s"] > 0
        assert 0 < record["snakemake_snakemake_machine_share"] < 1
        assert abs(record["val_loss_vs_fp32"]) < 1  # a ratio, not a loss
        assert all(record["step_ms"][timing] > 0 for timing in ("tuned_allocator", "glibc_default"))


def test_timeline_bench_sees_every_job_its_warm_child_and_the_phases():
    command = [sys.executable, str(REPO / "bench" / "bench_timeline.py"), "--datasets", "2", "--rows", "600"]
    command += ["--epochs", "1", "--cores", "2"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    counts = dict(re.findall(r"^(\w+ \w+)\s+(\d+)\s", result.stdout, re.MULTILINE))
    assert counts == {
        "warm server": "1",
        "preprocess client": "2",
        "train client": "2",
        "warm child": "4",  # each preprocess and train job ran warm
        "summarize client": "1",
        "plots client": "1",
    }
    for phase in ("first warm child", "first training starts", "last training ends", "plots starts", "exits"):
        assert phase in result.stdout


def test_phases_bench_times_every_phase_of_a_dataset_in_process(tmp_path):
    command = [sys.executable, str(REPO / "bench" / "bench_phases.py"), "--workloads", "one-day", "--datasets", "1"]
    result = subprocess.run([*command, "--out", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "beyond the optimizer steps" in result.stdout
    (record,) = [json.loads(line) for line in (tmp_path / "phases.jsonl").read_text().splitlines()]
    phases = record["phases"]
    for phase in ("read and clean the bars", "validation (every epoch)", "bootstrap: test skill", "model file written"):
        assert phases[phase] > 0, phase
    assert record["run_end"]["figures: loss curves"] > 0 and 0 < record["overhead_share"] < 1


def test_peers_bench_without_the_peer_scores_rnnfleet_and_exports_its_arrays(tmp_path):
    """neuralforecast is not installed here (the bench installs it in a venv of its own);
    the rest of the bench runs: rnnfleet's side, the arrays the peer would read, the table."""
    command = [sys.executable, str(REPO / "bench" / "bench_peers.py"), "--datasets", "2", "--epochs", "1"]
    command += ["--variants", "snakemake", "--no-peer", "--cores", "2", "--out", str(tmp_path)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(r"^snakemake\s+[\d.]+\s+[\d.]+\s+[+-]\d\.\d{4}$", result.stdout, re.MULTILINE), result.stdout
    (record,) = [json.loads(line) for line in (tmp_path / "peers.jsonl").read_text().splitlines()]
    assert set(record["sides"]["snakemake"]["test_skill"]) == {"S0000_1m", "S0001_1m"}


def test_peer_skill_scores_forecasts_on_rnnfleets_test_windows():
    sys.path.insert(0, str(REPO / "bench"))
    import numpy as np
    from bench_peers import peer_skill

    test = {"rows": np.array([1, 2]), "actual": np.array([1.0, -2.0])}
    # rows 1 and 2 of the forecasts: errors 0.5 and 1 against the naive zero's 1 and 2
    assert peer_skill([9.0, 0.5, -1.0], test) == 1 - (0.25 + 1.0) / (1.0 + 4.0)


def test_peer_comparison_leads_with_the_ratios_at_equal_precision(capsys):
    sys.path.insert(0, str(REPO / "bench"))
    from argparse import Namespace

    from bench_peers import print_comparison

    def side(seconds: float, **precision) -> dict:
        return {"seconds": seconds, "test_skill": {"S0000_1m": 0.1}, **precision}

    results = {
        "snakemake": side(10.0, amp=["bf16"]),
        "neuralforecast-bf16": side(11.0, precision="bf16"),
        "fp32": side(20.0, amp=["off"]),
        "neuralforecast": side(21.0, precision="fp32"),
    }
    summary = print_comparison(Namespace(datasets=6, days=30, epochs=20, patience=3), results)
    ratios = [line for line in capsys.readouterr().out.splitlines() if " / neuralforecast" in line]
    assert [line.split(":")[0] for line in ratios] == [
        "equal precision (bf16 / bf16)",
        "equal precision (fp32 / fp32)",
        "across precisions (bf16 / fp32)",
        "across precisions (fp32 / bf16)",
    ]
    assert summary["snakemake_vs_neuralforecast-bf16"]["ratio"] == 11.0 / 10.0
    assert summary["fp32_vs_neuralforecast"]["equal_precision"] and summary["days"] == 30


def day_files_bench(tmp_path, name: str, days: str) -> tuple[str, dict]:
    """bench_<name>.py on 2 datasets of `days` day files, 2 epochs: its output and its one record."""
    command = [sys.executable, str(REPO / "bench" / f"bench_{name}.py"), "--datasets", "2", "--days", days]
    command += ["--epochs", "2", "--cores", "2", "--out", str(tmp_path)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    (record,) = [json.loads(line) for line in (tmp_path / f"{name}.jsonl").read_text().splitlines()]
    return result.stdout, record


def test_update_bench_updates_every_model_and_reports_ratios_against_a_full_retrain(tmp_path):
    output, record = day_files_bench(tmp_path, "update", "4")
    assert "update / full: run " in output and "test skill, update - full" in output
    assert record["runs"]["update"]["made"] == ["update 1"] and record["runs"]["full"]["made"] == ["full"]
    assert record["runs"]["update"]["train_windows"] < record["runs"]["full"]["train_windows"]
    assert record["cost_ratio_train_jobs"] > 0 and abs(record["skill_difference_mean"]) < 1


def test_morning_bench_reads_only_the_new_day_and_reports_its_share_of_a_full_retrain(tmp_path):
    output, record = day_files_bench(tmp_path, "morning", "3")
    assert "morning / full: " in output and "no-op morning" in output
    (history,) = record["histories"]
    morning, full = history["runs"]["morning"], history["runs"]["full"]
    assert morning["made"] == ["update 1"] and full["made"] == ["full"]
    assert morning["files_read"] == 2 and full["files_read"] == 2 * 4  # one new day each; every day
    assert morning["forecasts"] == full["forecasts"] == 2
    assert history["cost_ratio"] > 0 and history["noop_seconds"] > 0
    assert "test skill's 95% interval" in output and morning["test_windows"] > 0 and morning["test_interval_width"] > 0


def test_heads_bench_times_heads_the_single_forecast_and_another_checkouts_and_prints_the_ratios(tmp_path):
    command = [sys.executable, str(REPO / "bench" / "bench_heads.py"), "--rows", "1200", "--epochs", "1"]
    command += ["--reps", "1", "--amp", "off", "--before", str(REPO / "scripts"), "--out", str(tmp_path)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(r"heads / single: \d+\.\d{3}", result.stdout) and "single / before: " in result.stdout
    record = json.loads((tmp_path / "heads.jsonl").read_text())
    assert set(record["median"]) == {"single", "heads", "before"} and all(v > 0 for v in record["median"].values())


def test_transfer_bench_compares_scratch_the_fleets_start_and_one_model_for_all_on_both_fleets(tmp_path):
    command = [sys.executable, str(REPO / "bench" / "bench_transfer.py"), "--datasets", "2", "--rows", "600"]
    command += ["--epochs", "1", "--out", str(tmp_path)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    (record,) = [json.loads(line) for line in (tmp_path / "transfer.jsonl").read_text().splitlines()]
    assert [fleet["fleet"] for fleet in record["results"]] == ["shared", "unrelated"]
    for fleet in record["results"]:
        skills = [fleet[f"{side}_mean_test_skill"] for side in ("scratch", "fleet", "one_for_all")]
        assert all(-1 < skill < 1 for skill in skills) and len(set(skills)) == 3
        assert fleet["fleet_better"] + fleet["fleet_worse"] <= 2 and fleet["time_ratio"] > 0
        assert f"{fleet['fleet']:9} 2 x 600 bars: mean test skill scratch" in result.stdout


def test_transfer_bench_workflow_mode_reads_the_workflows_fleet_verdict_on_both_fleets(tmp_path):
    command = [sys.executable, str(REPO / "bench" / "bench_transfer.py"), "--workflow", "--datasets", "3"]
    command += ["--rows", "600", "--epochs", "1", "--cores", "2", "--out", str(tmp_path)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    (record,) = [json.loads(line) for line in (tmp_path / "transfer.jsonl").read_text().splitlines()]
    assert record["mode"] == "workflow" and [fleet["fleet"] for fleet in record["results"]] == ["shared", "unrelated"]
    for fleet in record["results"]:
        assert (fleet["datasets"], fleet["seed"]) == (3, 0) and fleet["better"] + fleet["worse"] <= 3
        assert fleet["verdict"].startswith("too few datasets to tell (3, fewer than 6)")
        assert fleet["kept_fleet"] == 3 and fleet["seconds"] > 0  # the start's fit is kept, as train.init asks
        kept, scratch, start = (fleet[f"{side}_mean_test_skill"] for side in ("kept", "scratch", "fleet"))
        assert all(-1 < skill < 1 for skill in (kept, scratch, start)) and scratch != start
        assert kept == pytest.approx(start)
        assert fleet["kept_better"] == fleet["better"] and 0 < fleet["kept_sign_flip_pvalue"] <= 1
        assert f"{fleet['fleet']:9} 3 x 600 bars, workflow: {fleet['verdict']}; mean test skill kept" in result.stdout


def test_transfer_bench_draws_a_runaway_dataset_again_so_every_fleet_is_finite():
    sys.path.insert(0, str(REPO / "bench"))
    import numpy as np
    from bench_transfer import fleet_returns

    fleet = fleet_returns("shared", 2, 3000, np.random.default_rng(1))  # its 2nd draw runs away to inf
    assert len(fleet) == 2 and all(np.isfinite(returns).all() for returns in fleet)


def test_fleet_tests_bench_prints_each_tests_share_against_its_level():
    command = [sys.executable, str(REPO / "bench" / "bench_fleet_tests.py"), "--series", "5", "--windows", "300"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "5 series of 300 windows, lag 60" in result.stdout
    assert len(re.findall(r"ratio to (the level|0\.025) \d+\.\d\d", result.stdout)) == 4


def test_report_bench_builds_both_reports_opens_them_and_prints_the_ratios(tmp_path):
    browser = chromium_or_skip()
    command = [sys.executable, str(REPO / "bench" / "bench_report.py"), "--sizes", "3", "--trained", "2"]
    command += ["--rows", "600", "--reps", "1", "--baseline", "HEAD", "--browser", browser, "--out", str(tmp_path)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "3 datasets (2 trained, the others copies)" in result.stdout and "new / today: size " in result.stdout
    (record,) = [json.loads(line) for line in (tmp_path / "report.jsonl").read_text().splitlines()]
    (fleet,) = record["fleets"]
    assert fleet["new"]["table_rows"] == 3  # the unpacked zip's table, read in the browser
    assert fleet["new"]["files_in_zip"] > 3 and fleet["today"]["report_mb"] > fleet["new"]["report_mb"] > 0
    assert all(fleet[side]["start_page_s"] > 0 and fleet[side]["table_s"] > 0 for side in ("today", "new"))


def test_batched_lstm_bench_checks_the_grouped_model_against_nn_lstm_and_times_both_layouts():
    command = [sys.executable, str(REPO / "bench" / "bench_batched_lstm.py"), "--device", "cpu", "--ks", "1"]
    result = subprocess.run(
        [*command, "--variants", "grouped,processes", "--seconds", "0.3"], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "grouped model vs nn.LSTM with the same weights" in result.stdout
    records = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert [(record["variant"], record["K"]) for record in records] == [("grouped", 1), ("processes", 1)]
    assert all(record["model_steps_per_s"] > 0 for record in records)


def test_gpu_samples_says_which_phase_stayed_within_its_trainings_declared_memory(tmp_path):
    # Two phases of made-up nvidia-smi samples: two trainings within 2 x 2 GB, then one above its 2 GB.
    samples, phases = tmp_path / "samples.txt", tmp_path / "phases.txt"
    samples.write_text("G 1.0 50 1000\nP 1.0 11 600\nP 1.0 12 700\nG 2.0 90 3000\nP 2.0 11 2500\nG 2.1 [N/A] 1\n")
    phases.write_text("0.5 1.5 two 2 2\n1.5 2.5 one-above 1 2\n")
    command = [sys.executable, str(REPO / "bench" / "gpu_samples.py"), str(samples), str(phases)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    rows = {line.split()[0]: line for line in result.stdout.splitlines()[1:]}
    assert rows["two"].split()[1:8] == ["50", "50", "2", "700", "2048", "1300", "4096"] and "yes" in rows["two"]
    assert "NO (a process above its own declared)" in rows["one-above"]


def test_paths_bench_runs_each_path_says_which_ran_and_prints_the_ratios(tmp_path):
    command = [sys.executable, str(REPO / "bench" / "bench_paths.py"), "--datasets", "1", "--rows", "900"]
    command += ["--paths", "fork,spawn", "--out", str(tmp_path)]  # the cold path: as a run with warm_workers false
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    records = [json.loads(line) for line in (tmp_path / "paths.jsonl").read_text().splitlines()]
    # each run took the path it is named after
    assert {record["path"]: record["workers"] for record in records} == {"fork": ["warm"], "spawn": ["spawned"]}
    assert all(record["seconds"] > 0 and record["train_job_wall"] > 0 for record in records)
    assert re.search(r"spawn / fork, overhead per model: -?\d+\.\d\d", result.stdout)
