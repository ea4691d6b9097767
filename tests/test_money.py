"""Money: the price table, cost in run.json / report.json / the card, and --max-cost (stops cleanly, resumes)."""

from __future__ import annotations

import json
import logging

import pytest
from click.testing import CliRunner
from PIL import Image

from echo_builder.backends.spend import Budget, estimate_input_tokens
from echo_builder.cli import cli
from echo_builder.errors import BudgetExceededError, ConfigError
from echo_builder.judge.run import run_judging
from echo_builder.prices import load_prices
from tests.helpers.benchmark import make_benchmark, make_outputs

# list prices of gpt-4o in the shipped table, USD per 1M tokens, written out here independently of the code
GPT4O_IN, GPT4O_OUT = 2.50, 10.00


def _server_tokens(body: dict) -> tuple[int, int]:
    """The token counts the loopback server reports for ``body`` (its rule, restated): prompt = JSON length // 4,
    completion = words of the reply."""
    return len(json.dumps(body["messages"])) // 4, 2  # every scripted reply below is two words


def _usd(bodies, per_in: float, per_out: float) -> float:
    tokens = [_server_tokens(b) for b in bodies]
    return sum(i * per_in + o * per_out for i, o in tokens) / 1e6


def _price_file(tmp_path, name="judge-x", input_=1.0, output=3.0):
    path = tmp_path / "prices.yaml"
    path.write_text(
        "models:\n"
        f"  {name}: {{input: {input_}, output: {output}, batch_input: 0.5, batch_output: 1.5,\n"
        "    date: 2026-01-01, source: https://example.org/prices}\n"
    )
    return path


# -- the price table -----------------------------------------------------------------------------------------------
def test_shipped_prices_lookup_and_cost():
    prices = load_prices()
    assert prices.price("gpt-4o").input == GPT4O_IN and prices.price("gpt-4o").output == GPT4O_OUT
    # the spec, a bare model and a dated snapshot of it find the same entry; an own snapshot entry wins
    assert prices.lookup("openai:gpt-4o")[0] == "gpt-4o"
    assert prices.lookup("openai:gpt-4o-2024-08-06")[0] == "gpt-4o"
    assert prices.lookup("gpt-4o-2024-05-13")[0] == "gpt-4o-2024-05-13"
    assert prices.lookup("openai:gpt-4o-mini")[0] == "gpt-4o-mini"
    cost = prices.cost("openai:gpt-4o", 1_000_000, 200_000)
    assert cost.usd == pytest.approx(2.50 + 0.2 * 10.00)
    assert prices.cost("openai:gpt-4o", 1_000_000, 0, batch=True).usd == pytest.approx(1.25)
    for name, entry in prices.prices.items():  # every shipped entry is dated and sourced
        assert entry.date.year >= 2025 and entry.source.startswith("https://"), name


def test_unknown_model_costs_null_with_a_warning(caplog):
    prices = load_prices()
    with caplog.at_level(logging.WARNING):
        cost = prices.cost("transformers:/models/qwen", 100, 10)
    assert cost.usd is None and cost.to_dict() == {"input_tokens": 100, "output_tokens": 10, "usd": None}
    assert "no price for model 'transformers:/models/qwen'" in caplog.text


def test_user_price_file_adds_and_replaces(tmp_path):
    prices = load_prices(_price_file(tmp_path, name="gpt-4o", input_=7.0, output=9.0))
    assert prices.price("gpt-4o").input == 7.0 and prices.price("gpt-4o-mini").input == 0.15
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "models:\n  m: {input: -1, output: 1, batch_input: 1, batch_output: 1, date: 2026-01-01}\n"
    )
    with pytest.raises(ConfigError, match=r"model 'm': input: .*greater than or equal to 0.*source"):
        load_prices(bad)
    with pytest.raises(ConfigError, match="does not exist"):
        load_prices(tmp_path / "missing.yaml")


def test_budget_needs_a_price_and_a_positive_cap():
    with pytest.raises(ConfigError, match="no price for 'openai:mystery'"):
        Budget(1.0, load_prices(), "openai:mystery")
    with pytest.raises(ConfigError, match="> 0"):
        Budget(0.0, load_prices(), "openai:gpt-4o")


# -- judge runs ----------------------------------------------------------------------------------------------------
@pytest.fixture
def small_bench(tmp_path):
    samples = [f"s{i}" for i in range(6)]
    folder = make_benchmark(
        tmp_path / "bench", "text_to_image", [{"id": s, "prompt": f"prompt {s}"} for s in samples]
    )
    outputs = make_outputs(
        tmp_path / "outputs",
        {
            m: {s: Image.new("RGB", (32, 32), (i * 40, 90 + 60 * j, 30)) for i, s in enumerate(samples)}
            for j, m in enumerate("ab")
        },
    )
    return folder, outputs


def test_run_json_cost_equals_tokens_times_prices(small_bench, openai_server, tmp_path):
    openai_server.reply = lambda body: "Fine. [[6]]"
    folder, outputs = small_bench
    opts = {"openai:gpt-4o": {"base_url": openai_server.base_url}}
    result = run_judging(
        folder,
        "text_to_image",
        outputs,
        ["openai:gpt-4o"],
        tmp_path / "run",
        judge_options=opts,
        progress=False,
    )
    bodies = list(openai_server.log.bodies)
    assert len(bodies) == 12
    info = json.loads((tmp_path / "run" / "run.json").read_text())["judges"][0]
    expected = _usd(bodies, GPT4O_IN, GPT4O_OUT)
    assert info["cost"]["usd"] == pytest.approx(expected, abs=1e-6)
    assert info["cost"]["input_tokens"] == sum(_server_tokens(b)[0] for b in bodies)
    assert info["price"]["entry"] == "gpt-4o" and info["price"]["date"] == "2025-08-15"
    assert result.summary["cost_usd"] == pytest.approx(expected, abs=1e-6)
    # a rerun is served from the cache: it spends nothing, but the replies it used still cost what they cost
    rerun = run_judging(
        folder,
        "text_to_image",
        outputs,
        ["openai:gpt-4o"],
        tmp_path / "run",
        judge_options=opts,
        progress=False,
    )
    assert openai_server.calls == 12
    judge = rerun.summary["judges"][0]
    assert judge["cost"]["usd"] == 0.0
    assert judge["cost_with_cache"]["usd"] == pytest.approx(expected, abs=1e-6)


def test_unpriced_judge_has_null_cost_and_a_price_file_prices_it(small_bench, openai_server, tmp_path):
    openai_server.reply = lambda body: "Fine. [[6]]"
    folder, outputs = small_bench
    opts = {"openai:judge-x": {"base_url": openai_server.base_url}}
    args = (folder, "text_to_image", outputs, ["openai:judge-x"])
    plain = run_judging(*args, tmp_path / "r1", judge_options=opts, progress=False)
    assert plain.summary["judges"][0]["cost"]["usd"] is None and plain.summary["cost_usd"] is None
    priced = run_judging(
        *args, tmp_path / "r2", judge_options=opts, progress=False, prices_file=_price_file(tmp_path)
    )
    expected = _usd(openai_server.log.bodies[12:], 1.0, 3.0)
    assert priced.summary["judges"][0]["cost"]["usd"] == pytest.approx(expected, abs=1e-6)


def test_a_batch_run_is_priced_at_the_batch_api_prices(small_bench, openai_server, tmp_path):
    openai_server.reply = lambda body: "Fine. [[6]]"
    folder, outputs = small_bench
    opts = {"openai:judge-x": {"base_url": openai_server.base_url}}
    batched = run_judging(
        folder, "text_to_image", outputs, ["openai:judge-x"], tmp_path / "run", judge_options=opts,
        progress=False, prices_file=_price_file(tmp_path), batch=True, batch_poll_s=1.0,
    )  # fmt: skip
    bodies = [line["body"] for line in openai_server.batch_api.lines]
    assert len(bodies) == 12
    judge = batched.summary["judges"][0]
    # the price file's batch prices (0.5 / 1.5 per 1M), not its interactive ones (1.0 / 3.0)
    assert judge["cost"]["usd"] == pytest.approx(_usd(bodies, 0.5, 1.5), abs=1e-6)
    assert judge["cost_with_cache"]["usd"] == pytest.approx(_usd(bodies, 0.5, 1.5), abs=1e-6)


def test_max_cost_stops_before_the_budget_and_the_run_resumes(small_bench, openai_server, tmp_path):
    openai_server.reply = lambda body: "Fine. [[6]]"
    folder, outputs = small_bench
    prices = _price_file(tmp_path)
    out = tmp_path / "run"
    common = [
        "judge",
        "--benchmark",
        str(folder),
        "--config",
        "text_to_image",
        "--outputs",
        str(outputs),
        "--out",
        str(out),
        "--judge",
        "openai:judge-x",
        "--base-url",
        openai_server.base_url,
        "--concurrency",
        "4",
        "--prices",
        str(prices),
    ]
    # one call: about 1,000 input tokens (1 USD/M) and at most 1,024 output tokens (3 USD/M): ~0.004 USD
    budget = 0.02
    stopped = CliRunner().invoke(cli, [*common, "--max-cost", str(budget)])
    assert stopped.exit_code == 1
    assert "--max-cost 0.02 USD reached" in stopped.output and "higher --max-cost" in stopped.output
    first = list(openai_server.log.bodies)
    assert 0 < len(first) < 12
    assert _usd(first, 1.0, 3.0) <= budget  # what the server billed stays under the cap
    assert not (out / "verdicts.parquet").exists() and (out / "cache" / "calls.sqlite").is_file()
    # the same command with more money continues: no call is repeated, every judgment is made once
    done = CliRunner().invoke(cli, [*common, "--max-cost", "1"])
    assert done.exit_code == 0, done.output
    bodies = openai_server.log.bodies
    assert len(bodies) == 12
    assert len({json.dumps(b, sort_keys=True) for b in bodies}) == 12
    summary = json.loads((out / "run.json").read_text())
    assert summary["statuses"] == {"ok": 12}
    assert summary["budget"]["max_usd"] == 1.0
    assert summary["budget"]["spent_usd"] == pytest.approx(_usd(bodies[len(first) :], 1.0, 3.0), abs=1e-6)


def test_budget_calibrates_on_the_first_reply_of_a_stage():
    """Estimates scale by what the server reported: a stage whose calls use 3x the rule's input tokens is
    estimated at 3x once its first reply has come."""
    from echo_builder.backends.base import GenerationParams, Message, TextPart, Usage, run_sync

    budget = Budget(1.0, load_prices(), "openai:gpt-4o")
    messages = (Message("user", (TextPart("x" * 300),)),)
    params = GenerationParams(max_tokens=10)
    rule = estimate_input_tokens(messages)
    assert rule == 100
    before = budget.estimate_usd(messages, params, "judge")

    async def one() -> None:
        ticket = await budget.reserve(messages, params, "judge")
        budget.settle(ticket, Usage(input_tokens=300, output_tokens=4))

    run_sync(one())
    assert budget.spent_usd == pytest.approx((300 * GPT4O_IN + 4 * GPT4O_OUT) / 1e6)
    assert budget.estimate_usd(messages, params, "judge") == pytest.approx(
        (300 * GPT4O_IN + 10 * GPT4O_OUT) / 1e6
    )
    assert before == pytest.approx((100 * GPT4O_IN + 10 * GPT4O_OUT) / 1e6)
    with pytest.raises(BudgetExceededError):
        run_sync(Budget(1e-6, load_prices(), "gpt-4o").reserve(messages, params, "judge"))


# -- builds --------------------------------------------------------------------------------------------------------
def _build_tokens(body: dict) -> tuple[int, int]:
    """What the loopback server reports for a build call (its rule, restated)."""
    from tests.test_build_vlm import scripted

    return len(json.dumps(body["messages"])) // 4, len(scripted(body).split())


def test_build_report_and_card_price_each_stage_and_max_cost_resumes(openai_server, tmp_path):
    from tests.helpers.media_server import MediaServer
    from tests.test_build_vlm import _command, _setup, scripted

    openai_server.reply = scripted
    prices = _price_file(tmp_path, name="vlm", input_=2.0, output=5.0)
    with MediaServer() as media:
        posts = _setup(tmp_path, media)
        full = tmp_path / "full"
        result = CliRunner().invoke(cli, [*_command(posts, full, openai_server), "--prices", str(prices)])
        assert result.exit_code == 0, result.output
        bodies = list(openai_server.log.bodies)
        expected = sum(i * 2.0 + o * 5.0 for i, o in map(_build_tokens, bodies)) / 1e6
        report = json.loads((full / "report.json").read_text())
        assert report["cost"]["usd"] == pytest.approx(expected, abs=1e-6)
        assert report["cost"]["price"]["entry"] == "vlm"
        stages = {s["name"]: s for s in report["stages"]}
        relevance = [b for b in bodies if "Rate the post" in json.dumps(b["messages"])]
        assert stages["relevance"]["cost"]["usd"] == pytest.approx(
            sum(i * 2.0 + o * 5.0 for i, o in map(_build_tokens, relevance)) / 1e6, abs=1e-6
        )
        per_stage = sum(s["cost"]["usd"] for s in report["stages"] if "cost" in s)
        assert per_stage == pytest.approx(expected, abs=1e-5)
        assert "query" in stages and "cost" not in stages["query"]  # a stage that calls no model
        card = (full / "README.md").read_text()
        assert f"- Curation cost: {expected:.2f} USD for " in card and "`vlm` as of 2026-01-01" in card

        # the same build under a cap: stops with the spend under it, then --resume finishes it, repeating nothing
        n_full = len(bodies)
        capped = tmp_path / "capped"
        cap = 0.012
        stopped = CliRunner().invoke(
            cli, [*_command(posts, capped, openai_server), "--prices", str(prices), "--max-cost", str(cap)]
        )
        assert stopped.exit_code == 1 and "reached" in stopped.output, stopped.output
        first = openai_server.log.bodies[n_full:]
        assert 0 < len(first) < n_full
        assert sum(i * 2.0 + o * 5.0 for i, o in map(_build_tokens, first)) / 1e6 <= cap
        resumed = CliRunner().invoke(
            cli, [*_command(posts, capped, openai_server), "--prices", str(prices), "--resume"]
        )
        assert resumed.exit_code == 0, resumed.output
        assert len(openai_server.log.bodies) == 2 * n_full  # every call made once across the two runs
        assert json.loads((capped / "report.json").read_text())["cost"] == report["cost"]


# -- estimate --------------------------------------------------------------------------------------------------------
def test_estimate_judge_defaults_then_history(small_bench, openai_server, tmp_path):
    openai_server.reply = lambda body: "Fine. [[6]]"
    folder, outputs = small_bench
    base = [
        "estimate",
        "judge",
        "--benchmark",
        str(folder),
        "--config",
        "text_to_image",
        "--outputs",
        str(outputs),
        "--judge",
        "openai:gpt-4o",
    ]
    shown = CliRunner().invoke(cli, base, catch_exceptions=False)
    assert shown.exit_code == 0, shown.output
    # 6 samples x 2 models, text-to-image: one image (the output) per call; defaults 400 text + 425 per image, 250 out
    calls, tin, tout = 12, 12 * (400 + 425), 12 * 250
    line = next(x for x in shown.output.splitlines() if x.startswith("openai:gpt-4o"))
    assert line.split()[2:6] == [str(calls), f"{tin:,}", f"{tout:,}", f"{(tin * 2.5 + tout * 10) / 1e6:.4f}"]
    assert line.endswith("default") and openai_server.calls == 0
    pairwise = CliRunner().invoke(cli, [*base, "--mode", "pairwise"], catch_exceptions=False)
    assert pairwise.output.splitlines()[2].split()[2] == "12"  # one pair per sample, both orders
    # after a run, its cache is the history: the estimate of the same run is what it cost
    opts = {"openai:gpt-4o": {"base_url": openai_server.base_url}}
    run_judging(
        folder,
        "text_to_image",
        outputs,
        ["openai:gpt-4o"],
        tmp_path / "run",
        judge_options=opts,
        progress=False,
    )
    again = CliRunner().invoke(
        cli, [*base, "--cache", str(tmp_path / "run" / "cache")], catch_exceptions=False
    )
    line = next(x for x in again.output.splitlines() if x.startswith("openai:gpt-4o"))
    assert line.split()[5] == f"{_usd(openai_server.log.bodies, GPT4O_IN, GPT4O_OUT):.4f}"
    assert "history (12 calls)" in line and "2025-08-15" in again.output


def test_estimate_build_counts_posts_and_uses_history(openai_server, tmp_path):
    from tests.helpers.media_server import MediaServer
    from tests.test_build_vlm import _command, _setup, scripted

    openai_server.reply = scripted
    prices = _price_file(tmp_path, name="vlm", input_=2.0, output=5.0)
    with MediaServer() as media:
        posts = _setup(tmp_path, media)
        args = ["estimate", "build", str(posts), "--backend", "openai:vlm", "--target-model", "GPT-4o"]
        args += ["--prices", str(prices)]
        first = CliRunner().invoke(cli, args, catch_exceptions=False)
        assert first.exit_code == 0, first.output
        rows = {x.split()[1]: x.split() for x in first.output.splitlines() if x.startswith("openai:vlm")}
        assert rows["relevance"][2] == "3"  # the three posts mention GPT-4o
        assert {r[2] for r in rows.values()} == {"3"}  # no history: one call per rated post per stage
        out = tmp_path / "built"
        built = CliRunner().invoke(cli, [*_command(posts, out, openai_server), "--prices", str(prices)])
        assert built.exit_code == 0, built.output
        actual = json.loads((out / "report.json").read_text())["cost"]["usd"]
        again = CliRunner().invoke(cli, [*args, "--cache", str(out / "cache")], catch_exceptions=False)
        total = next(x for x in again.output.splitlines() if x.startswith("total:"))
        assert float(total.split()[1]) == pytest.approx(actual, abs=2e-4)
        assert not (tmp_path / "stages").exists() and not list(tmp_path.glob("*.sqlite"))


def test_metrics_max_cost_caps_the_text_rendering_judge(openai_server, tmp_path):
    openai_server.reply = lambda body: "Legible. [[9]]"
    samples = [{"id": f"s{i}", "prompt": f'a sign saying "OPEN {i}"'} for i in range(8)]
    bench = make_benchmark(tmp_path / "bench", "text_to_image", samples)
    make_outputs(
        tmp_path / "outputs",
        {"m": {s["id"]: Image.new("RGB", (24, 24), (i * 30, 9, 9)) for i, s in enumerate(samples)}},
    )
    args = [
        "metrics",
        "--benchmark",
        str(bench),
        "--config",
        "text_to_image",
        "--outputs",
        str(tmp_path / "outputs"),
    ]
    args += ["--metric", "text_rendering", "--judge", "openai:judge-x", "--base-url", openai_server.base_url]
    args += ["--prices", str(_price_file(tmp_path)), "--out", str(tmp_path / "metrics")]
    stopped = CliRunner().invoke(cli, [*args, "--max-cost", "0.01"])
    assert stopped.exit_code == 1 and "--max-cost 0.01 USD reached" in stopped.output, stopped.output
    first = list(openai_server.log.bodies)
    assert 0 < len(first) < 8 and _usd(first, 1.0, 3.0) <= 0.01
    done = CliRunner().invoke(cli, args)
    assert done.exit_code == 0, done.output
    assert len(openai_server.log.bodies) == 8  # the first run's replies came from the cache
