"""The Space in a real browser: headless Chromium (Debian's ``chromium``) driven by Playwright's sync API.

Each tab is loaded and used as a person would (click a sample row, upload two images, press the button); the test
asserts that images have really loaded (``naturalWidth > 0``) and that tables hold the expected rows, and saves a
screenshot of each tab under the test's ``tmp_path``. It skips when Playwright or a Chromium binary is missing
(``.ci/run`` installs Debian's ``chromium``; Playwright's own browser downloads are not used).
"""

from __future__ import annotations

import os
import shutil
from urllib.parse import urlparse

import pyarrow.parquet as pq
import pytest

from tests.space.conftest import N_BOOT

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:'future.no_silent_downcasting' is deprecated"),
    pytest.mark.filterwarnings("ignore:The copy keyword is deprecated"),
]

TIMEOUT_MS = 60_000  # generous: CI machines are shared and the first request warms every cache


def _chromium() -> str:
    for candidate in (os.environ.get("ECHO_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if candidate and (path := shutil.which(candidate)):
            return path
    pytest.skip("no Chromium binary found (apt-get install chromium, or set ECHO_CHROMIUM=/path/to/chrome)")


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="pip install playwright (the dev extra has it)"
    )
    executable = _chromium()
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, headless=True, args=["--no-sandbox"])
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(browser, space):
    """A page on the Space; every request that leaves the loopback interface is recorded in ``page.outside``."""
    page = browser.new_page(viewport={"width": 1400, "height": 1800})
    page.set_default_timeout(TIMEOUT_MS)
    page.outside = []

    def record(request):
        url = urlparse(request.url)
        if url.scheme in ("http", "https", "ws", "wss") and url.hostname not in ("127.0.0.1", "localhost"):
            page.outside.append(request.url)

    page.on("request", record)
    page.goto(space.local_url)
    yield page
    page.close()


def _images_loaded(page, selector: str, count: int) -> None:
    """Wait until at least ``count`` ``<img>`` under ``selector`` exist and every one has decoded pixels."""
    page.wait_for_function(
        """([selector, count]) => {
            const images = [...document.querySelectorAll(selector)];
            return images.length >= count && images.every(i => i.complete && i.naturalWidth > 0);
        }""",
        arg=[f"{selector} img", count],
    )


def _rows(page, selector: str, count: int) -> list[list[str]]:
    """Wait until the Dataframe ``selector`` shows exactly ``count`` body rows; return their cells' text."""
    page.wait_for_function(
        "([selector, count]) => document.querySelectorAll(selector).length === count",
        arg=[f"{selector} .virtual-row", count],
    )
    return page.eval_on_selector_all(
        f"{selector} .virtual-row",
        "rows => rows.map(r => [...r.querySelectorAll('[role=gridcell]')].map(c => c.innerText.trim()))",
    )


def _parquet(demo_dir, config: str) -> list[dict]:
    return pq.read_table(demo_dir / "benchmark" / config / "test-00000-of-00001.parquet").to_pylist()


def test_benchmark_tab_lists_samples_and_shows_a_clicked_one(page, demo_dir, tmp_path):
    rows = _parquet(demo_dir, "image_to_image")
    listed = _rows(page, "#echo-samples", len(rows))
    assert [r[0] for r in listed] == [r["id"] for r in rows]
    # the first sample is shown on load; clicking the second row shows that one
    page.wait_for_function(
        "p => document.querySelector('#echo-prompt textarea').value === p", arg=rows[0]["prompt"]
    )
    page.click('#echo-samples [data-testid="cell-1-1"]')
    page.wait_for_function(
        "p => document.querySelector('#echo-prompt textarea').value === p", arg=rows[1]["prompt"]
    )
    _images_loaded(page, "#echo-inputs", len(rows[1]["input_images"]))
    _images_loaded(page, "#echo-outputs", len(rows[1]["output_images"]))
    _images_loaded(page, "#echo-model-outputs", 3)  # the demo's three models
    sources = page.eval_on_selector_all("#echo-inputs img", "images => images.map(i => i.src)")
    assert all(urlparse(src).hostname == "127.0.0.1" for src in sources)  # served by the Space itself
    feedback = _rows(page, "#echo-feedback", len(rows[1]["community_feedback"]))
    assert [f[1] for f in feedback] == [f["feedback"] for f in rows[1]["community_feedback"]]
    flags = dict(r[:2] for r in _rows(page, "#echo-flags", 4))
    assert flags["face_identity"] == {True: "yes", False: "no", None: "unknown"}[rows[1]["face_identity"]]
    links = page.inner_text("#echo-links")
    assert all(url in links for url in rows[1]["source_post_urls"])
    page.screenshot(path=str(tmp_path / "benchmark.png"), full_page=True)
    # a search narrows the table
    search = page.locator("#echo-search textarea, #echo-search input").first
    search.fill("umbrella")
    search.press("Enter")
    matching = [r["id"] for r in rows if "umbrella" in r["prompt"]]
    assert [r[0] for r in _rows(page, "#echo-samples", len(matching))] == matching
    assert page.outside == []


def test_leaderboard_tab_shows_the_table_and_the_plots(page, demo_dir, tmp_path):
    from echo_builder.judge.leaderboard import leaderboard_from_run

    expected = leaderboard_from_run(demo_dir / "runs" / "image_to_image", n_boot=N_BOOT, seed=0).table
    page.get_by_role("tab", name="Leaderboard").click()
    shown = _rows(page, "#echo-leaderboard", len(expected))
    assert [r[1] for r in shown] == list(expected["model"])
    assert [float(r[2]) for r in shown] == pytest.approx(list(expected["win_rate"]), abs=5e-4)
    _images_loaded(page, "#echo-plots", 3)
    assert "openai:judge-a" in page.inner_text("#echo-run-summary")
    # the validity card opens beside the leaderboard: judge-b's one parse failure on lumen-2 is in its table
    page.get_by_text("Validity card: how far this ranking's judges can be trusted").click()
    page.wait_for_function(
        "() => document.querySelector('#echo-validity')?.innerText.includes('Anchor drift')"
    )
    card = page.inner_text("#echo-validity")
    assert "Failures and refusals per model and judge" in card and "0.333" in card
    page.screenshot(path=str(tmp_path / "leaderboard.png"), full_page=True)
    assert page.outside == []


def test_metric_playground_scores_an_uploaded_pair(page, demo_dir, tmp_path):
    from echo_builder.scoring.color import color_shift

    row = next(r for r in _parquet(demo_dir, "image_to_image") if "woman" in r["prompt"])
    source = tmp_path / "input.png"
    source.write_bytes(row["input_images"][0]["bytes"])
    output = demo_dir / "outputs" / "lumen-2" / f"{row['id']}.png"
    page.get_by_role("tab", name="Metric playground").click()
    page.set_input_files("#echo-play-input input[type=file]", str(source))
    page.set_input_files("#echo-play-output input[type=file]", str(output))
    _images_loaded(page, "#echo-play-input", 1)
    _images_loaded(page, "#echo-play-output", 1)
    page.click("#echo-play-run")
    from echo_builder.scoring.registry import METRICS

    table = _rows(page, "#echo-play-table", len(METRICS.names()))
    assert [r[0] for r in table] == METRICS.names()  # every registered metric, in the registry's order
    assert float(table[0][1]) == pytest.approx(color_shift([[source]], [output]).values[0], abs=1e-6)
    assert table[1][1] == "" and "--dino-weights" in table[1][3]  # NaN shows empty, with its reason
    _images_loaded(page, "#echo-play-swatch", 1)
    assert "Color shift" in page.inner_text("#echo-play-color")
    page.screenshot(path=str(tmp_path / "playground.png"), full_page=True)
    assert page.outside == []


def test_about_tab_renders_the_card_and_the_metrics(page, tmp_path):
    page.get_by_role("tab", name="About").click()
    page.wait_for_selector("#echo-about h2")
    assert "What ECHO is" in page.inner_text("#echo-about")
    from echo_builder.scoring.registry import METRICS

    rows = _rows(page, "#echo-about-metrics", len(METRICS.names()))
    assert [r[0] for r in rows] == METRICS.names()  # every registered metric, in the registry's order
    card = page.inner_text("#echo-about-card")
    assert "How this benchmark was made" in card and "@inproceedings{echo2026" in card
    # the card's column docs keep their angle brackets (they were once swallowed as HTML tags)
    assert "One '<url or media id>: <reason>' per image" in card
    page.screenshot(path=str(tmp_path / "about.png"), full_page=True)
    assert page.outside == []
