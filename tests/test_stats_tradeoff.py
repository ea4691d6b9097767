"""TRIG trade-off maps: one constructed model per relation, the matrix view, errors."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from echo_builder.errors import ConfigError, RecordError
from echo_builder.stats import tradeoff_map, tradeoff_matrix

T = np.linspace(0.0, 1.0, 10)
SCATTER = np.array([0.5, 0.1, 0.9, 0.3, 0.7, 0.2, 0.8, 0.4, 0.6, 0.35])  # unrelated to T (|rho| < 0.3)


def frame(model, x, y, z=None):
    data = {"model": model, "sample_id": [f"s{i}" for i in range(len(x))], "realism": x, "alignment": y}
    if z is not None:
        data["style"] = z
    return pd.DataFrame(data)


def build():
    return pd.concat(
        [
            frame("synergy_model", 0.6 + 0.3 * T, 0.7 + 0.2 * T),
            frame("bottleneck_model", 0.1 + 0.2 * T, 0.05 + 0.3 * T),
            frame("tilt_negative", 0.2 + 0.7 * T, 0.9 - 0.7 * T),
            frame("tilt_high_low", 0.7 + 0.2 * T, 0.1 + 0.2 * T),
            frame("dispersion_model", T, SCATTER),
        ],
        ignore_index=True,
    )


def test_each_relation_on_constructed_models():
    tmap = tradeoff_map(build(), ["realism", "alignment"]).set_index("model")
    assert tmap["relation"].to_dict() == {
        "bottleneck_model": "bottleneck",
        "dispersion_model": "dispersion",
        "synergy_model": "synergy",
        "tilt_high_low": "tilt",
        "tilt_negative": "tilt",
    }
    assert tmap.loc["synergy_model", "rho"] == pytest.approx(1.0)
    assert tmap.loc["tilt_negative", "rho"] == pytest.approx(-1.0)
    expected = stats.spearmanr(T, SCATTER)
    assert tmap.loc["dispersion_model", "rho"] == pytest.approx(expected.statistic)
    assert abs(expected.statistic) < 0.3
    assert tmap.loc["dispersion_model", "p_value"] == pytest.approx(expected.pvalue)
    assert tmap.loc["synergy_model", "mean_x"] == pytest.approx(0.75) and tmap.loc["synergy_model", "n"] == 10
    assert (tmap["reason"] == "").all()


def test_threshold_per_dimension_changes_the_class():
    data = frame("m", 0.6 + 0.3 * T, 0.7 + 0.2 * T)
    tmap = tradeoff_map(data, ["realism", "alignment"], threshold={"realism": 0.9, "alignment": 0.5})
    assert tmap["relation"].item() == "tilt"  # realism mean 0.75 is now "low"
    ratings = data.assign(realism=data["realism"] * 10, alignment=data["alignment"] * 10)
    assert tradeoff_map(ratings, ["realism", "alignment"], threshold=5.5)["relation"].item() == "synergy"


def test_undetermined_with_reason():
    const = frame("const", T, np.full(10, 0.5))
    few = frame("few", [0.1, 0.9], [0.2, 0.8])
    gaps = frame("gaps", T, np.where(T > 0.25, np.nan, T))  # only 3 of 10 scored on both: still enough
    tmap = tradeoff_map(pd.concat([const, few, gaps]), ["realism", "alignment"]).set_index("model")
    assert (
        tmap.loc["const", "relation"] == "undetermined"
        and "alignment is constant" in tmap.loc["const", "reason"]
    )
    assert math.isnan(tmap.loc["const", "rho"])
    assert tmap.loc["few", "relation"] == "undetermined" and "only 2 sample" in tmap.loc["few", "reason"]
    assert tmap.loc["gaps", "n"] == 3 and tmap.loc["gaps", "relation"] == "bottleneck"


def test_three_dimensions_pairs_and_matrix():
    data = frame("m", 0.6 + 0.3 * T, 0.7 + 0.2 * T, 0.9 - 0.5 * T)
    tmap = tradeoff_map(data, ["realism", "alignment", "style"])
    assert list(zip(tmap["dim_x"], tmap["dim_y"], strict=True)) == [
        ("realism", "alignment"),
        ("realism", "style"),
        ("alignment", "style"),
    ]
    rho = tradeoff_matrix(tmap, "m")
    assert list(rho.index) == ["realism", "alignment", "style"]
    np.testing.assert_allclose(rho.to_numpy(), [[1, 1, -1], [1, 1, -1], [-1, -1, 1]], atol=1e-12)
    rel = tradeoff_matrix(tmap, "m", "relation")
    assert rel.loc["style", "realism"] == rel.loc["realism", "style"] == "tilt"
    with pytest.raises(ConfigError, match="not in the trade-off map"):
        tradeoff_matrix(tmap, "nope")


def test_errors():
    data = frame("m", T, T)
    with pytest.raises(ConfigError, match="at least 2 distinct"):
        tradeoff_map(data, ["realism"])
    with pytest.raises(RecordError, match="style"):
        tradeoff_map(data, ["realism", "style"])
    with pytest.raises(ConfigError, match="no value for dimension"):
        tradeoff_map(data, ["realism", "alignment"], threshold={"realism": 0.5})
