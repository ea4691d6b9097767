"""PNG plots are written and readable; importing the statistics package does not import matplotlib."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from echo_builder.errors import ConfigError
from echo_builder.stats import (
    bootstrap_win_rates,
    head_to_head,
    plot_head_to_head,
    plot_tradeoff_heatmap,
    plot_win_rates,
    tradeoff_map,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def comparisons():
    rng = np.random.default_rng(0)
    rows = []
    for p in range(40):
        for a, b, p_a in (("A", "B", 0.7), ("A", "C", 0.8), ("B", "C", 0.6)):
            rows.append((f"p{p}", "h", a, b, float(rng.random() < p_a)))
    return pd.DataFrame(rows, columns=["sample_id", "judge", "model_a", "model_b", "outcome"])


def assert_png(path, min_size=(100, 100)):
    assert path.read_bytes()[:8] == PNG_MAGIC
    with Image.open(path) as img:
        assert img.size[0] >= min_size[0] and img.size[1] >= min_size[1]
        # not a blank canvas: more than a handful of distinct colours
        assert len(img.convert("RGB").getcolors(maxcolors=1 << 20) or []) > 10


def test_win_rates_plot_with_intervals(tmp_path):
    table = bootstrap_win_rates(comparisons(), n_boot=200)
    path = plot_win_rates(table, tmp_path / "nested" / "win_rates.png", title="win rates")
    assert path == tmp_path / "nested" / "win_rates.png"
    assert_png(path)
    plain = plot_win_rates(table[["model", "win_rate"]], tmp_path / "plain.png")
    assert_png(plain)


def test_head_to_head_plot(tmp_path):
    assert_png(plot_head_to_head(head_to_head(comparisons()), tmp_path / "h2h.png"))
    with pytest.raises(ConfigError, match="square"):
        plot_head_to_head(pd.DataFrame(np.zeros((2, 3))), tmp_path / "bad.png")


def test_tradeoff_heatmap(tmp_path):
    t = np.linspace(0, 1, 12)
    scores = pd.concat(
        [
            pd.DataFrame({"model": m, "sample_id": range(12), "realism": t, "alignment": y, "style": z})
            for m, y, z in (("m1", 0.6 + 0.3 * t, 1 - t), ("m2", np.roll(t, 5), np.full(12, 0.4)))
        ]
    )
    tmap = tradeoff_map(scores, ["realism", "alignment", "style"])
    assert_png(plot_tradeoff_heatmap(tmap, tmp_path / "tradeoff.png", title="trade-offs"))
    assert_png(plot_tradeoff_heatmap(tmap, tmp_path / "one.png", models=["m2"]))


def test_import_is_light():
    code = (
        "import sys, echo_builder.stats; "
        "heavy = [m for m in ('matplotlib', 'torch', 'transformers', 'openai', 'scipy.stats') if m in sys.modules]; "
        "print(heavy)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
