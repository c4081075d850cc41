"""train.compare_init's verdicts: the fleet's start against scratch.

What it promises:
- The unit of evidence is the dataset. Across datasets, the paired differences of test skill
  (the fit from the fleet's start less the fit from scratch, each on the dataset's own test
  period) are independent draws of the training; the fleet's verdict (fleet_start_verdict)
  is a two-sided exact sign test over them, with their mean and its 95% bootstrap interval.
- Per dataset, one fit from each start says nothing about the start: a paired test of two
  single fits treats the fits as fixed, while what varies is the training (another seed
  "beats" the first as often). A dataset gets a verdict only with train.compare_init_seeds
  of at least 2: an exact permutation test of its fits' test skills across seeds, corrected
  across the fleet as fleet_verdict is (the `fleet:` settings); else ONE_FIT.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from rnnfleet.scores.multiple_testing import adjusted_p_values, as_number

# The metrics (and table columns) of a comparison: the kept model's start is `init`.
COMPARE_COLUMNS = (
    "init_fleet_test_skill",  # the fit from the pretrained model (the mean over its seeds)
    "init_scratch_test_skill",  # the fit from scratch (the mean over its seeds)
    "init_pretrained_test_skill",  # the pretrained model itself: one model for all, a forward pass
    "init_fleet_best_epoch",  # 0: the fit kept the pretrained weights unchanged
    "init_fleet_seconds",
    "init_scratch_seconds",
    "init_seeds",  # fits per start (train.compare_init_seeds)
    "init_seeds_pvalue",  # with 2 or more seeds: the permutation test across seeds
    "init_verdict",
    "init_qvalue",
)
FLEET_START_BETTER, FLEET_START_WORSE, NO_DIFFERENCE = (
    "the fleet's start beat scratch across seeds (fleet-corrected)",
    "the fleet's start was worse than scratch across seeds (fleet-corrected)",
    "no difference across seeds after the fleet's correction",
)
ONE_FIT = "one fit each: no verdict"
# Below this many datasets compared the fleet's verdict says it cannot tell.
FEWEST_DATASETS = 6
INTERVAL_DRAWS = 10_000


@dataclass(frozen=True)
class StartVerdict:
    """The fleet's verdict on its start: over `compared` datasets, the start's fit beat
    scratch's on `better`, was worse on `worse`; the mean difference of test skill and its 95%
    interval; the sign test's two-sided p-value; and the verdict in words."""

    compared: int
    better: int
    worse: int
    mean: float
    low: float
    high: float
    p_value: float
    words: str


def sign_test_p_value(better: int, worse: int) -> float:
    """Two-sided exact binomial sign test of better against worse (ties left out)."""
    trials = better + worse
    if trials == 0:
        return 1.0
    fewer = min(better, worse)
    tail = sum(math.comb(trials, count) for count in range(fewer + 1)) / 2.0**trials
    return min(1.0, 2.0 * tail)


def fleet_start_verdict(differences: list[float], alpha: float = 0.05, seed: int = 0) -> StartVerdict:
    """The fleet's verdict (see the module doc) of the datasets' paired differences of test
    skill, the fit from the fleet's start less the fit from scratch (NaN left out)."""
    return paired_verdict(differences, "the fleet's start", "scratch", "train from scratch", alpha, seed)


def paired_verdict(
    differences: list[float], arm: str, other: str, advice: str, alpha: float = 0.05, seed: int = 0
) -> StartVerdict:
    """The verdict of `arm` against `other` from the datasets' paired differences of test
    skill (arm less other, NaN left out): a two-sided exact sign test and the mean's 95%
    bootstrap interval; fewer than FEWEST_DATASETS cannot tell. `advice` ends the words
    when the arm is not better (e.g. "train from scratch")."""
    values = np.array([value for value in differences if not math.isnan(value)], dtype=np.float64)
    better, worse = int((values > 0).sum()), int((values < 0).sum())
    if not len(values):
        return StartVerdict(0, 0, 0, math.nan, math.nan, math.nan, 1.0, "no dataset compared")
    means = np.random.default_rng(seed).choice(values, (INTERVAL_DRAWS, len(values))).mean(axis=1)
    low, high = (float(value) for value in np.quantile(means, [0.025, 0.975]))
    mean, p_value = float(values.mean()), sign_test_p_value(better, worse)
    counted = f"better on {better} of {len(values)} datasets, test skill {mean:+.4f} [{low:+.4f}, {high:+.4f}]"
    if len(values) < FEWEST_DATASETS:
        words = f"too few datasets to tell ({len(values)}, fewer than {FEWEST_DATASETS}): {counted}"
    elif p_value <= alpha and mean > 0:
        words = f"{arm} beat {other}: {counted} (sign test p {p_value:.3g})"
    elif p_value <= alpha and mean < 0:
        words = f"{arm} was worse than {other}: {counted} (sign test p {p_value:.3g}): {advice}"
    else:
        words = f"{arm} is no better than {other}: {counted} (sign test p {p_value:.3g}): {advice}"
    return StartVerdict(len(values), better, worse, mean, low, high, p_value, words)


def seeds_p_value(fleet_skills: list[float], scratch_skills: list[float]) -> float:
    """Two-sided exact permutation p-value of the difference of mean test skill between one
    dataset's fits from the fleet's start and from scratch, each a different seed: every way to
    split the fits into two groups of these sizes."""
    pooled = np.array([*fleet_skills, *scratch_skills], dtype=np.float64)
    size, observed = len(fleet_skills), abs(np.mean(fleet_skills) - np.mean(scratch_skills))
    total = pooled.sum()
    as_extreme = splits = 0
    for group in itertools.combinations(range(len(pooled)), size):
        chosen = pooled[list(group)].sum()
        difference = chosen / size - (total - chosen) / (len(pooled) - size)
        as_extreme += abs(difference) >= observed - 1e-12
        splits += 1
    return as_extreme / splits


def init_verdicts(rows: list[dict], method: str, fdr: float) -> list[dict]:
    """The table's rows with init_verdict over the datasets compared (status ok): with
    several seeds per start, their init_seeds_pvalue adjusted as fleet_verdict's
    (rnnfleet.scores.multiple_testing) into init_qvalue and a verdict; with one, ONE_FIT."""
    compared = [
        row.get("status", "ok") == "ok" and row.get("init_scratch_test_skill") not in (None, "") for row in rows
    ]
    p_values = [
        as_number(row.get("init_seeds_pvalue")) if is_compared else math.nan
        for row, is_compared in zip(rows, compared, strict=True)
    ]
    q_values = adjusted_p_values(p_values, method) if not all(map(math.isnan, p_values)) else p_values
    filled = []
    for row, is_compared, q_value in zip(rows, compared, q_values, strict=True):
        if not is_compared:
            filled.append(row)
            continue
        verdict = ONE_FIT
        if not math.isnan(q_value):
            verdict = NO_DIFFERENCE
            if q_value <= fdr:
                gain = as_number(row.get("init_fleet_test_skill")) - as_number(row.get("init_scratch_test_skill"))
                verdict = FLEET_START_BETTER if gain > 0 else FLEET_START_WORSE
        filled.append({**row, "init_qvalue": "" if math.isnan(q_value) else q_value, "init_verdict": verdict})
    return filled


def rows_start_verdict(rows: list[dict]) -> StartVerdict | None:
    """The fleet's verdict over the table's rows compared (None: no comparison in the run)."""
    differences = [
        as_number(row.get("init_fleet_test_skill")) - as_number(row.get("init_scratch_test_skill"))
        for row in rows
        if row.get("init_verdict")
    ]
    return fleet_start_verdict(differences) if differences else None
