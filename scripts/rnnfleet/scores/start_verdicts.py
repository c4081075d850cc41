"""train.compare_init's verdicts: the fleet's start against scratch, per dataset over the
fleet, with the same correction as fleet_verdict (the `fleet:` settings)."""

from __future__ import annotations

import math

from rnnfleet.scores.multiple_testing import adjusted_p_values, as_number

# The metrics (and table columns) of a comparison: the kept model's start is `init`.
COMPARE_COLUMNS = (
    "init_fleet_test_skill",  # the fit from the pretrained model
    "init_scratch_test_skill",  # the fit from scratch
    "init_pretrained_test_skill",  # the pretrained model itself: one model for all, a forward pass
    "init_dm_stat",  # Diebold-Mariano on the test windows, fleet start - scratch (< 0: the fleet start's loss is lower)
    "init_dm_pvalue",
    "init_fleet_seconds",
    "init_scratch_seconds",
    "init_verdict",  # over the fleet: the same correction as fleet_verdict (the `fleet:` settings)
    "init_qvalue",
)
FLEET_START_BETTER, FLEET_START_WORSE, NO_DIFFERENCE = (
    "the fleet's start beat scratch (fleet-corrected)",
    "the fleet's start was worse than scratch (fleet-corrected)",
    "no difference after the fleet's correction",
)


def init_verdicts(rows: list[dict], method: str, fdr: float) -> list[dict]:
    """The table's rows with init_qvalue and init_verdict over the datasets compared (status
    ok, an init_dm_pvalue): their p-values adjusted as fleet_verdict's (rnnfleet.scores.multiple_testing)."""
    p_values = [as_number(row.get("init_dm_pvalue")) if row.get("status", "ok") == "ok" else math.nan for row in rows]
    if all(math.isnan(value) for value in p_values):
        return rows
    filled = []
    for row, q_value in zip(rows, adjusted_p_values(p_values, method), strict=True):
        statistic = as_number(row.get("init_dm_stat"))
        verdict = ""
        if not math.isnan(q_value) and not math.isnan(statistic):
            verdict = NO_DIFFERENCE
            if q_value <= fdr:
                verdict = FLEET_START_BETTER if statistic < 0 else FLEET_START_WORSE
        filled.append({**row, "init_qvalue": "" if math.isnan(q_value) else q_value, "init_verdict": verdict})
    return filled
