"""The one Normalisation: fitted on a training part, recorded in a model file and read back to
the same numbers, applied to features as the arrays were, inverted per horizon."""

from __future__ import annotations

import numpy as np
import pytest

from rnnfleet.prep.normalise import Normalisation, fit_normalisation, normalise, normalised_rows


@pytest.mark.parametrize("horizons", [1, 3])
def test_a_fitted_normalisation_survives_the_model_files_record_and_applies_as_the_arrays_do(horizons):
    rng = np.random.default_rng(0)
    features = rng.normal(5.0, 2.0, (200, 4))
    features[:, 2] = 1.0  # a constant feature: its std is 1
    targets = rng.normal(0.0, 1e-3, 200 if horizons == 1 else (200, horizons))
    fitted = Normalisation.fit(features[:150], targets[:150], "log_return")

    assert [np.asarray(a).tolist() for a in fitted.statistics] == [
        np.asarray(b).tolist() for b in fit_normalisation(features[:150], targets[:150], "log_return")
    ]
    assert fitted.feature_std[2] == 1.0 and fitted.feature_mean.dtype == np.float32
    read_back = Normalisation.from_record(fitted.record())
    for ours, theirs in zip(read_back.statistics, fitted.statistics, strict=True):
        np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))
    np.testing.assert_array_equal(
        read_back.features(features), normalised_rows(features, targets, fitted.statistics)[0]
    )
    np.testing.assert_array_equal(read_back.features(features), normalise(features, *fitted.statistics[:2]))
    offsets, scales = read_back.target_scaling(horizons)
    assert offsets.shape == scales.shape == (horizons,)
    scaled = normalised_rows(features, targets, fitted.statistics)[1]
    back = scaled.astype(np.float64) * scales + offsets if horizons > 1 else scaled * scales[0] + offsets[0]
    np.testing.assert_allclose(back, targets, atol=1e-9)  # float32 scaled targets: inverted to ~1e-10
