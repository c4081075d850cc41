"""The fleet's verdicts through the real snakemake: among many datasets of pure noise (fat
tails, volatility clustering: nothing to predict) and a few with structure, the correction
keeps the structured ones and calls no noise dataset a winner; the table, the chart and
the report's start page say how many beat the baseline before and after it; adding a
dataset re-trains that one alone and re-writes every row's fleet columns."""

from __future__ import annotations

import math

import numpy as np
import pytest
import yaml
from conftest import copy_of_run, planned_rules, snakemake, summary_by_dataset, write_bars_of_returns, write_config

from rnnfleet.synthetic import write_synthetic_csv

NOISE = [f"NOISE{number:02d}_1m" for number in range(24)]
STRUCTURED = ["AR_A_1m", "AR_B_1m", "AR_C_1m"]
ROWS = 2500
BEATS_AFTER = "beats the baseline after the fleet correction"


def write_noise_csv(path, rows: int, seed: int) -> None:
    """Bars whose log returns are GARCH(1,1) with Student t(3) shocks and whose volume is
    independent of them: clustered volatility and fat tails, no predictable mean."""
    rng = np.random.default_rng(seed)
    shocks = rng.standard_t(3, rows) / np.sqrt(3.0)
    returns, variance = np.zeros(rows), 1e-6
    for t in range(rows):
        returns[t] = np.sqrt(variance) * shocks[t]
        variance = 5e-8 + 0.1 * returns[t] ** 2 + 0.85 * variance
    write_bars_of_returns(path, returns, rng)


def benjamini_hochberg(p_values: list[float]) -> list[float]:
    """The adjusted p-values by their definition, written out the slow way."""
    m = len(p_values)
    ranked = sorted(p_values)
    return [min(min(1.0, m / (k + 1) * ranked[k]) for k in range(ranked.index(p), m)) for p in p_values]


@pytest.fixture(scope="module")
def fleet_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("fleet")
    for number, name in enumerate(NOISE):
        write_noise_csv(workdir / "data" / f"{name}.csv", ROWS, 100 + number)
    for number, name in enumerate(STRUCTURED):
        write_synthetic_csv(workdir / "data" / f"{name}.csv", ROWS, 200 + number)
    write_config(
        workdir,
        data_dir="data",
        model={"cell": "lstm", "hidden_size": 16, "num_layers": 1, "dropout": 0.0},
        train={"epochs": 3, "patience": 2, "lr": 0.003},
        preprocess={"test_fraction": 0.3},
    )
    snakemake(workdir)
    snakemake(workdir, "--report", "report.html")
    return workdir, summary_by_dataset(workdir)


def test_the_structured_datasets_win_after_the_correction_and_no_noise_dataset_does(fleet_run):
    _, rows = fleet_run
    assert all(rows[name]["fleet_verdict"] == BEATS_AFTER for name in STRUCTURED), {
        name: (rows[name]["test_dm_pvalue"], rows[name]["fleet_qvalue"]) for name in STRUCTURED
    }
    noise_after = [name for name in NOISE if rows[name]["fleet_verdict"] == BEATS_AFTER]
    noise_alone = [name for name in NOISE if rows[name]["test_verdict"] == "beats the baseline"]
    assert not noise_after, noise_after
    assert set(noise_after) <= set(noise_alone)
    assert {row["fleet_tests"] for row in rows.values()} == {str(len(NOISE) + len(STRUCTURED))}
    assert {row["fleet_correction"] for row in rows.values()} == {"bh fdr=0.1"}


def test_the_q_values_are_the_benjamini_hochberg_adjustment_of_the_tables_p_values(fleet_run):
    _, rows = fleet_run
    names = sorted(rows)
    expected = benjamini_hochberg([float(rows[name]["test_dm_pvalue"]) for name in names])
    assert [float(rows[name]["fleet_qvalue"]) for name in names] == pytest.approx(expected, rel=1e-9)
    for name in names:  # the verdict follows the q-value and the sign of the statistic
        q_value, statistic = float(rows[name]["fleet_qvalue"]), float(rows[name]["test_dm_stat"])
        assert (rows[name]["fleet_verdict"] == BEATS_AFTER) == (q_value <= 0.1 and statistic < 0)


def test_every_return_model_has_a_sharpe_ratio_deflated_for_the_fleets_size(fleet_run):
    workdir, rows = fleet_run
    sharpes = [float(row["test_sharpe"]) for row in rows.values()]
    by_luck = {float(row["fleet_sharpe_by_luck"]) for row in rows.values()}
    assert len(by_luck) == 1 and 0 < by_luck.pop() < max(sharpes)
    for row in rows.values():
        deflated = float(row["test_sharpe_deflated_prob"])
        assert 0 <= deflated <= 1 and int(row["test_sharpe_trades"]) > 100
    best = max(rows.values(), key=lambda row: float(row["test_sharpe"]))
    assert best["dataset"] in STRUCTURED
    # Real structure is far above what the best of 27 skill-less datasets would show by luck.
    assert all(float(rows[name]["test_sharpe_deflated_prob"]) > 0.9 for name in STRUCTURED)


def test_the_report_says_how_many_beat_the_baseline_before_and_after_the_correction(fleet_run):
    workdir, rows = fleet_run
    tested = len(rows)
    alone = sum(row["test_verdict"] == "beats the baseline" for row in rows.values())
    after = sum(row["fleet_verdict"] == BEATS_AFTER for row in rows.values())
    headline = (
        f"Of {tested} dataset(s) with a test score, {alone} beat their baseline alone (the 95% interval of the "
        f"test skill above 0); with no skill anywhere, about {tested * 0.025:.1f} would, by luck. After the fleet "
        f"correction (Benjamini-Hochberg at a false discovery rate of 0.1, over those {tested}), {after} beat it"
    )
    start_page = (workdir / "results" / "report_start.rst").read_text()
    assert headline in " ".join(start_page.split())
    assert headline in " ".join((workdir / "report.html").read_text().split())
    table_html = (workdir / "results" / "metrics.html").read_text()
    assert headline in table_html
    # The winners that survive the correction ranked first, apart from the rest.
    order = [
        "" if line.startswith('<tr class="divider"') else line.split("<td>", 2)[1].split("<")[0]
        for line in table_html.splitlines()
        if line.startswith("<tr class")
    ]
    divider = order.index("")
    assert set(order[:divider]) == {name for name, row in rows.items() if row["fleet_verdict"] == BEATS_AFTER}


def model_times(workdir) -> dict[str, int]:
    return {path.name: path.stat().st_mtime_ns for path in (workdir / "models").iterdir()}


def test_a_new_dataset_trains_alone_and_rewrites_every_rows_fleet_columns(fleet_run, tmp_path):
    workdir, before = copy_of_run(fleet_run[0], tmp_path), fleet_run[1]
    models = model_times(workdir)
    write_synthetic_csv(workdir / "data" / "AR_D_1m.csv", ROWS, 299)
    dry_run = snakemake(workdir, "-n").stdout
    assert planned_rules(dry_run) == {"preprocess": 1, "train": 1, "summarize": 1, "plots": 1, "all": 1}
    snakemake(workdir)
    after = summary_by_dataset(workdir)
    assert {name: time for name, time in model_times(workdir).items() if name in models} == models
    assert {row["fleet_tests"] for row in after.values()} == {str(len(before) + 1)}
    changed = [name for name in before if after[name]["fleet_qvalue"] != before[name]["fleet_qvalue"]]
    assert len(changed) > len(before) // 2  # one more test: every q-value is scaled anew
    # A changed rate re-writes the table and the report, and re-trains nothing.
    config = yaml.safe_load((workdir / "config.yaml").read_text())
    config["fleet"] = {"method": "by", "fdr": 0.05}
    (workdir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    assert planned_rules(snakemake(workdir, "-n").stdout) == {"summarize": 1, "plots": 1, "all": 1}
    snakemake(workdir)
    rows = summary_by_dataset(workdir)
    assert {row["fleet_correction"] for row in rows.values()} == {"by fdr=0.05"}
    assert all(math.isfinite(float(row["fleet_qvalue"])) for row in rows.values())
    # The same from the command line (Snakemake hands the nested value over as YAML text).
    override = ("--config", "fleet={method: bh, fdr: 0.2}")
    assert planned_rules(snakemake(workdir, "-n", *override).stdout) == {"summarize": 1, "plots": 1, "all": 1}
    snakemake(workdir, *override)
    assert {row["fleet_correction"] for row in summary_by_dataset(workdir).values()} == {"bh fdr=0.2"}
