"""Verdicts over the fleet (rnnfleet.scores.multiple_testing): Benjamini-Hochberg and Benjamini-Yekutieli
against hand-computed q-values and the 1995 paper's example, the deflated Sharpe ratio
against Bailey and Lopez de Prado's worked example, and the table's fleet columns."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rnnfleet.report import charts, start_page, table_page
from rnnfleet.report import rows as report_rows
from rnnfleet.scores import multiple_testing, test_period

# Benjamini and Hochberg (1995), section 4: 15 p-values of a clinical trial; at 0.05 the
# procedure rejects the four smallest (Bonferroni: three).
BH_1995 = [0.0001, 0.0004, 0.0019, 0.0095, 0.0201, 0.0278, 0.0298, 0.0344, 0.0459, 0.3240]
BH_1995 += [0.4262, 0.5719, 0.6528, 0.7590, 1.0000]


def test_benjamini_hochberg_rejects_the_four_of_the_1995_example():
    q_values = multiple_testing.adjusted_p_values(BH_1995, "bh")
    assert [q <= 0.05 for q in q_values] == [True] * 4 + [False] * 11


def test_adjusted_p_values_by_hand_in_the_order_given():
    # sorted 0.01, 0.03, 0.04, 0.20 -> m/j * p = 0.04, 0.06, 0.0533, 0.20 -> running minimum from the top
    p_values = [0.01, 0.04, 0.03, 0.20]
    assert multiple_testing.adjusted_p_values(p_values, "bh") == pytest.approx([0.04, 0.16 / 3, 0.16 / 3, 0.20])
    harmonic = 1 + 1 / 2 + 1 / 3 + 1 / 4
    assert multiple_testing.adjusted_p_values(p_values, "by") == pytest.approx(
        [0.04 * harmonic, 0.16 / 3 * harmonic, 0.16 / 3 * harmonic, 0.20 * harmonic]
    )
    assert multiple_testing.adjusted_p_values([0.9, 0.95], "by") == [1.0, 1.0]  # capped at 1


def test_a_missing_p_value_is_not_counted():
    q_values = multiple_testing.adjusted_p_values([math.nan, 0.01, 0.04], "bh")
    assert math.isnan(q_values[0]) and q_values[1:] == pytest.approx([0.02, 0.04])
    assert all(math.isnan(q) for q in multiple_testing.adjusted_p_values([math.nan], "bh"))
    with pytest.raises(ValueError, match="method"):
        multiple_testing.adjusted_p_values([0.1], "bonferroni")


def test_the_procedure_keeps_the_share_of_false_calls_under_its_rate():
    """900 true nulls (uniform p-values) and 100 real effects, 200 times over: the mean
    share of nulls among the rejections is at most the rate (BH: 0.9 * 0.1 in theory)."""
    rng = np.random.default_rng(0)
    shares = []
    for _ in range(200):
        p_values = np.concatenate([rng.uniform(size=900), rng.uniform(size=100) * 1e-3])
        rejected = np.asarray(multiple_testing.adjusted_p_values(p_values.tolist(), "bh")) <= 0.1
        shares.append(rejected[:900].sum() / max(1, rejected.sum()))
    assert np.mean(shares) <= 0.1
    assert np.mean(shares) > 0.05  # not trivially zero: the procedure is not over-strict


def test_fleet_verdict_goes_by_the_sign_of_the_statistic():
    assert multiple_testing.fleet_verdict(0.01, -3.0, 0.1) == multiple_testing.BEATS_AFTER
    assert multiple_testing.fleet_verdict(0.01, 3.0, 0.1) == multiple_testing.WORSE_AFTER
    assert multiple_testing.fleet_verdict(0.2, -3.0, 0.1) == multiple_testing.NOT_DISTINGUISHABLE_AFTER
    assert multiple_testing.fleet_verdict(math.nan, -3.0, 0.1) == ""


def test_deflated_sharpe_of_the_papers_example():
    """Bailey and Lopez de Prado (2014), the numerical example: an annualised Sharpe ratio
    of 2.5 over 1,250 daily returns (skew -3, kurtosis 10), the best of 100 trials whose
    annualised Sharpe ratios have variance 0.5: the expected best of 100 is 0.1132 per day
    (1.79 annualised) and the deflated Sharpe ratio 0.90."""
    benchmark = multiple_testing.expected_max_sharpe(100, 0.5 / 250)
    assert benchmark == pytest.approx(0.1132, abs=5e-4)
    deflated = multiple_testing.probabilistic_sharpe(2.5 / math.sqrt(250), benchmark, 1250, -3.0, 10.0)
    assert deflated == pytest.approx(0.9004, abs=2e-3)


def test_expected_max_sharpe_is_the_mean_best_of_skill_less_trials():
    rng = np.random.default_rng(1)
    simulated = rng.standard_normal((20_000, 100)).max(axis=1).mean() * 0.2
    assert multiple_testing.expected_max_sharpe(100, 0.04) == pytest.approx(simulated, rel=0.02)
    assert multiple_testing.expected_max_sharpe(1, 0.04) == 0.0


def test_the_best_sharpe_ratio_by_luck_is_that_of_the_best_of_skill_less_datasets():
    """50 datasets of 200 trades each with no skill (iid returns, mean 0): the mean of the
    best of their estimated Sharpe ratios, simulated, is what the fleet calls luck."""
    rng = np.random.default_rng(2)
    returns = rng.standard_normal((2000, 50, 200))
    best = (returns.mean(axis=2) / returns.std(axis=2, ddof=1)).max(axis=1).mean()
    assert multiple_testing.expected_max_sharpe(50, multiple_testing.luck_variance([200.0] * 50)) == pytest.approx(
        best, rel=0.03
    )
    assert multiple_testing.luck_variance([]) == 0.0


def test_probabilistic_sharpe_at_the_benchmark_is_one_half():
    assert multiple_testing.probabilistic_sharpe(0.1, 0.1, 500, 0.0, 3.0) == pytest.approx(0.5)
    assert math.isnan(multiple_testing.probabilistic_sharpe(0.1, 0.0, 1, 0.0, 3.0))


def test_sharpe_moments_by_hand():
    moments = multiple_testing.sharpe_moments(np.array([1.0, 2.0, 3.0, 4.0]))
    assert moments["sharpe"] == pytest.approx(2.5 / np.std([1, 2, 3, 4], ddof=1))
    assert moments["skew"] == pytest.approx(0.0)
    assert moments["kurtosis"] == pytest.approx(1.64)  # (2 * 1.5**4 + 2 * 0.5**4) / 4 / 1.25**2
    assert math.isnan(multiple_testing.sharpe_moments(np.array([1.0, 1.0]))["sharpe"])


def test_fleet_columns_count_only_the_datasets_with_a_test():
    rows = [
        {"dataset": "A", "status": "ok", "test_dm_pvalue": 0.001, "test_dm_stat": -3.3, "test_sharpe": 0.2},
        {"dataset": "B", "status": "ok", "test_dm_pvalue": 0.5, "test_dm_stat": 0.7, "test_sharpe": -0.1},
        {"dataset": "C", "status": "failed", "test_dm_pvalue": "", "error": "train: boom"},
        {"dataset": "D", "status": "ok", "test_dm_pvalue": "", "test_dm_stat": ""},  # no test part
    ]
    for row in rows[:2]:
        row.update(test_sharpe_trades=400, test_trade_skew=0.0, test_trade_kurtosis=3.0)
    filled = multiple_testing.fleet_columns(rows, "bh", 0.1)
    assert [row["fleet_tests"] for row in filled] == [2, 2, 2, 2]
    assert filled[0]["fleet_qvalue"] == pytest.approx(0.002)
    assert filled[0]["fleet_verdict"] == multiple_testing.BEATS_AFTER
    assert filled[1]["fleet_verdict"] == multiple_testing.NOT_DISTINGUISHABLE_AFTER
    assert filled[2]["fleet_qvalue"] == filled[2]["fleet_verdict"] == filled[3]["fleet_verdict"] == ""
    by_luck = multiple_testing.expected_max_sharpe(2, 1 / 399)
    assert filled[0]["fleet_sharpe_by_luck"] == pytest.approx(by_luck)
    assert filled[0]["test_sharpe_deflated_prob"] == pytest.approx(
        multiple_testing.probabilistic_sharpe(0.2, by_luck, 400, 0.0, 3.0)
    )
    assert "test_sharpe_deflated_prob" not in filled[2]


# --- what the table's page, the chart and the start page say --------------------------------


def fleet_table_rows() -> list[dict[str, str]]:
    """Three rows as the plots job reads them: a winner after the correction, one that beats
    its baseline alone only (ranked above the winner by skill) and one not distinguishable."""
    rows = [
        {"dataset": "LUCKY", "test_skill": "0.09", "test_verdict": test_period.BEATS, "test_dm_pvalue": "0.03",
         "test_dm_stat": "-2.2"},
        {"dataset": "REAL", "test_skill": "0.05", "test_verdict": test_period.BEATS, "test_dm_pvalue": "0.0001",
         "test_dm_stat": "-3.9"},
        {"dataset": "FLAT", "test_skill": "0.01", "test_verdict": test_period.NOT_DISTINGUISHABLE,
         "test_dm_pvalue": "0.6", "test_dm_stat": "-0.5"},
    ]  # fmt: skip
    for row in rows:
        row.update(test_skill_low="-0.1", test_skill_high="0.2", status="ok")
    return [{key: str(value) for key, value in row.items()} for row in multiple_testing.fleet_columns(rows, "bh", 0.1)]


def test_the_winners_after_the_correction_rank_first_apart_from_the_rest(tmp_path):
    rows = fleet_table_rows()  # q-values: REAL 3 * 0.0001, LUCKY 3 / 2 * 0.03 = 0.045, FLAT 0.6
    assert [row["fleet_verdict"] for row in rows] == [
        multiple_testing.BEATS_AFTER,
        multiple_testing.BEATS_AFTER,
        multiple_testing.NOT_DISTINGUISHABLE_AFTER,
    ]
    rows[0]["fleet_verdict"] = multiple_testing.NOT_DISTINGUISHABLE_AFTER  # as at a stricter rate
    assert [row["dataset"] for row in report_rows.best_first(rows)] == ["REAL", "LUCKY", "FLAT"]
    assert [report_rows.verdict_class(row) for row in rows] == ["lucky", "winner", "unclear"]
    table_page.write_table_html(rows, list(rows[0]), tmp_path / "table.html")
    lines = [line for line in (tmp_path / "table.html").read_text().splitlines() if line.startswith("<tr class")]
    assert [line.split('"')[1] for line in lines] == ["winner", "divider", "lucky", "unclear"]
    assert "Above: the 1 that beat the baseline after the fleet correction" in lines[1]
    charts.draw_skill_overview(rows, tmp_path / "skill.png")
    assert (tmp_path / "skill.png").stat().st_size > 1000


def test_the_headline_counts_the_winners_before_and_after_and_those_luck_gives(tmp_path):
    rows = fleet_table_rows()
    rows[0]["fleet_verdict"] = multiple_testing.NOT_DISTINGUISHABLE_AFTER
    counts = report_rows.fleet_counts(rows)
    assert (counts.tested, counts.alone, counts.after, counts.method, counts.rate) == (
        3, 2, 1, "Benjamini-Hochberg", 0.1
    )  # fmt: skip
    assert counts.alone_by_luck == pytest.approx(0.075)
    text = start_page.fleet_headline(counts)
    assert "Of 3 dataset(s) with a test score, 2 beat their baseline alone" in text
    assert "about 0.1 would, by luck" in text and "over those 3), 1 beat it" in text
    template = tmp_path / "workflow.rst"
    template.write_text(f"Title\n=====\n\nIntro.\n\n{start_page.HEADLINE_MARKER}\n\nMore.\n")
    start_page.write_start_page(template, rows, tmp_path / "start.rst")
    start = (tmp_path / "start.rst").read_text()
    assert (
        f"**The fleet.** {start_page.fleet_numbers(rows, start_page.rst_literal)} {start_page.fleet_headline(counts, start_page.rst_literal)}"
        in start
    )
    assert start.index("**The fleet.**") < start.index("More.")
    assert report_rows.fleet_counts([{"dataset": "A", "val_skill": "0.1"}]) is None


def test_a_large_fleets_skill_chart_is_a_distribution_with_the_winners_named(tmp_path, monkeypatch):
    """Past MAX_FOREST_ROWS datasets the chart is a histogram, not one bar per dataset; the
    winners after the correction are listed on it."""
    rng = np.random.default_rng(3)
    rows = [
        {"dataset": f"N{number:04d}_1m", "test_dm_pvalue": float(p), "test_dm_stat": -1.0, "status": "ok"}
        for number, p in enumerate(rng.uniform(size=1000))
    ]
    rows += [
        {"dataset": f"REAL{number}_1m", "test_dm_pvalue": 1e-9, "test_dm_stat": -6.0, "status": "ok"}
        for number in range(20)
    ]
    for row in rows:
        skill = 0.1 if row["dataset"].startswith("REAL") else rng.normal(0, 0.01)
        row.update(test_skill=skill, test_skill_low=skill - 0.02, test_skill_high=skill + 0.02)
        row["test_verdict"] = test_period.verdict(row["test_skill_low"], row["test_skill_high"])
    table = [{key: str(value) for key, value in row.items()} for row in multiple_testing.fleet_columns(rows, "bh", 0.1)]
    texts = []
    monkeypatch.setattr("matplotlib.axes.Axes.text", lambda axes, *args, **kwargs: texts.append(args[2]))
    forest = []
    monkeypatch.setattr("matplotlib.axes.Axes.errorbar", lambda axes, *args, **kwargs: forest.append(args))
    charts.draw_skill_overview(table, tmp_path / "skill.png")
    assert (tmp_path / "skill.png").stat().st_size > 1000 and forest == []  # a histogram: no bars
    (listed,) = texts
    winners = sum(row["fleet_verdict"] == multiple_testing.BEATS_AFTER for row in table)
    assert winners >= 20 and listed.startswith("Winners after the fleet correction:\nREAL")
    assert listed.count("\n") == charts.MAX_NAMED_WINNERS + 1 and f"... and {winners - 15} more" in listed


def test_the_fleets_numbers_count_what_the_table_says():
    rows = [
        {"dataset": f"D{number}", "status": "ok", "made": "full", "test_skill": str(skill)}
        for number, skill in enumerate([0.3, 0.2, 0.1, 0.0, -0.1, -0.2, -0.3])
    ]
    rows[1]["made"] = "update 2"
    rows[2]["quality_flags"] = "flat_bars 40.0%"
    rows += [
        {"dataset": "BAD", "status": "data error", "test_skill": ""},
        {"dataset": "CRASH", "status": "failed", "test_skill": ""},
    ]
    assert start_page.fleet_numbers(rows, start_page.rst_literal) == (
        "9 dataset(s): 6 trained from scratch, 1 updated (column ``made``), 2 not done (1 data error, 1 failed), "
        "1 flagged for data quality. Best test skill: ``D0`` +0.3000, ``D1`` +0.2000, ``D2`` +0.1000; "
        "worst: ``D4`` -0.1000, ``D5`` -0.2000, ``D6`` -0.3000."
    )
    assert start_page.fleet_numbers([{"dataset": "A", "val_skill": "0.1", "made": "full"}]) == (
        "1 dataset(s): 1 trained from scratch, 0 updated (column made). Best val skill: A +0.1000."
    )


def test_the_fleets_numbers_say_how_the_forecast_intervals_held():
    rows = [
        {"dataset": "A", "test_coverage": "0.91", "test_coverage_low": "0.88", "test_coverage_high": "0.94"},
        {"dataset": "B", "test_coverage": "0.97", "test_coverage_low": "0.95", "test_coverage_high": "0.99"},
        {"dataset": "C", "test_coverage": "0.89", "test_coverage_low": "0.85", "test_coverage_high": "0.93"},
        {"dataset": "D", "test_coverage": ""},  # a direction target: no interval
    ]
    assert start_page.coverage_text(rows) == (
        " The 90% forecast intervals held in a median 91.0% of the test windows; 1 of 3 dataset(s) with a "
        "coverage clearly off 90% (its 95% interval excludes it: column test_coverage)."
    )
    assert start_page.coverage_text(rows[3:]) == ""


def test_a_forecasts_row_says_why_a_dataset_has_no_forecast_and_names_only_model_files_that_are_there(tmp_path):
    from rnnfleet.report.summary import forecast_row

    pattern = str(tmp_path / "{dataset}.pt")
    for name in "ABC":
        (tmp_path / f"{name}.pt").write_bytes(b"a model")
    ok = forecast_row({"dataset": "A", "status": "ok", "forecast": 0.001, "forecast_time": "t"}, pattern)
    assert (ok["forecast"], ok["time"], ok["model"], ok["error"]) == (0.001, "t", str(tmp_path / "A.pt"), "")
    old = forecast_row({"dataset": "B", "status": "ok"}, pattern)
    assert old["error"].startswith("no forecast: its model or array file is from an earlier rnnfleet")
    kept = forecast_row(
        {"dataset": "C", "status": "failed", "error": "train: C: boom"}, pattern
    )  # an earlier model kept
    assert (kept["status"], kept["model"], kept["error"]) == (
        "failed",
        str(tmp_path / "C.pt"),
        "no forecast this run: train: C: boom",
    )
    never = forecast_row({"dataset": "D", "status": "data error", "error": "preprocess: bad"}, pattern)  # never trained
    assert (never["model"], never["error"]) == ("", "no model: preprocess: bad")


def test_a_forecasts_row_from_an_earlier_rnnfleets_metrics_has_todays_column_names_in_horizon_order(tmp_path):
    """docs/outputs.md, "Renamed columns": a model trained before the forecast tables shared
    one vocabulary (its metrics name the heads' columns after the target's forecast column,
    and lack the target's name and the interval's coverage) still gives today's columns."""
    from rnnfleet.report.summary import forecast_row, write_forecasts

    heads = {f"forecast_log_return_h{h}{suffix}": h for h in (1, 15, 5) for suffix in ("", "_q95", "_low_90", "_q5")}
    row = {
        "dataset": "A",
        "status": "ok",
        "forecast": 0.001,
        "forecast_low": -0.01,
        "target": "log_return over 1, 15, 5 bar(s)",
        "interval_coverage": 0.9,
        "forecast_heads": dict(sorted(heads.items())),  # as a metrics file's sorted keys give them
    }
    forecast = forecast_row(row, "models/{dataset}.pt")
    assert (forecast["target"], forecast["coverage"]) == ("log_return", 0.9)
    write_forecasts([row], "models/{dataset}.pt", tmp_path / "forecasts.csv")
    columns = (tmp_path / "forecasts.csv").read_text().splitlines()[0].split(",")
    assert columns[columns.index("error") + 1 :] == [
        f"forecast_h{h}{suffix}" for h in (1, 5, 15) for suffix in ("", "_q5", "_q95", "_low_90")
    ]
