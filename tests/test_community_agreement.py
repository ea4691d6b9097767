"""Community agreement (``echo-bench agreement RUN --community``): a benchmark whose replies have known polarity
(rules-labelled "amazing result" / "it changed her face", one reply relabelled by a stage file), its community
outputs laid out by ``community-outputs`` and judged by scripted loopback judges whose ratings are drawn so that
one orders 80% of (liked, disliked) pairs like the community and one rates at random. The acceptance numbers:
~0.8 with an interval holding it, ~0.5 for the random judge; every number equal to a brute-force count."""

from __future__ import annotations

import io
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from PIL import Image

from echo_builder.cli import cli
from echo_builder.errors import ConfigError
from echo_builder.judge.community import auc_and_pair_agreement, community_agreement, community_verdicts
from tests.test_judge import _images

N = 40  # liked and disliked outputs each


def _png(rgb) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (16, 16), rgb).save(buf, format="PNG")
    return buf.getvalue()


def _scripted_ratings():
    """Per output: (community verdict, 80%-judge rating, random-judge rating), in a shuffled order.

    The 80% judge rates the liked outputs 2, 4, 6, 8 and 10 (eight each) and the disliked ones 1, 3 and 5 (13, 14
    and 13): it puts a liked output above a disliked one in (13 + 0.8 * 14 + 0.6 * 13) / 40 = 80% of the pairs,
    never a tie. The random judge's ratings ignore the verdict: each side gets 1..10 four times each, so it orders
    half the untied pairs each way."""
    rng = np.random.default_rng(7)
    agree_pos = rng.permutation([2, 4, 6, 8, 10] * 8)
    agree_neg = rng.permutation([1] * 13 + [3] * 14 + [5] * 13)
    rand_pos, rand_neg = rng.permutation(list(range(1, 11)) * 4), rng.permutation(list(range(1, 11)) * 4)
    rows = [("positive", int(a), int(r)) for a, r in zip(agree_pos, rand_pos, strict=True)]
    rows += [("negative", int(a), int(r)) for a, r in zip(agree_neg, rand_neg, strict=True)]
    return [rows[k] for k in rng.permutation(len(rows))]


def _brute(pos, neg):
    conc = sum(p > n for p in pos for n in neg)
    disc = sum(p < n for p in pos for n in neg)
    tied = len(pos) * len(neg) - conc - disc
    return (conc + 0.5 * tied) / (len(pos) * len(neg)), conc / (conc + disc), tied / (len(pos) * len(neg))


def _write_benchmark(folder, rows):
    """A text_to_image build folder: feedback of known polarity, the output image encoding both ratings (red =
    the 80% judge's rating x 20, green = the random judge's), and two rows without a verdict."""
    feedback_type = pa.list_(pa.struct([("post_url", pa.string()), ("feedback", pa.string())]))
    image_type = pa.list_(pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
    ids, prompts, feedback, outputs = [], [], [], []
    for i, (verdict, agree, rand) in enumerate(rows):
        ids.append(f"s{i:03d}")
        prompts.append(f"prompt {i}")
        text = "amazing result" if verdict == "positive" else "it changed her face"
        if i == 0:
            text = "hmm"  # no cue: the stage file below says positive
        feedback.append([{"post_url": f"https://x.com/u/status/{i}", "feedback": text}])
        outputs.append([{"bytes": _png((agree * 20, rand * 20, 0)), "path": None}])
    for j, text in enumerate(["what prompt?", "amazing, but it changed her face"]):  # not_a_verdict, mixed
        ids.append(f"x{j}")
        prompts.append("extra")
        feedback.append([{"post_url": f"https://x.com/u/status/x{j}", "feedback": text}])
        outputs.append([{"bytes": _png((200, 200, 0)), "path": None}])
    table = pa.table(
        {"id": ids, "prompt": prompts, "input_images": [[] for _ in ids], "output_images": outputs,
         "community_feedback": feedback},
        schema=pa.schema([("id", pa.string()), ("prompt", pa.string()), ("input_images", image_type),
                          ("output_images", image_type), ("community_feedback", feedback_type)]),
    )  # fmt: skip
    (folder / "text_to_image").mkdir(parents=True)
    pq.write_table(table, folder / "text_to_image" / "test-00000-of-00001.parquet")
    (folder / "stages").mkdir()
    record = {"sample_id": "s000", "index": 0, "post_url": "https://x.com/u/status/0", "feedback": "hmm",
              "verdict": "positive", "source": "model", "error": None}  # fmt: skip
    (folder / "stages" / "feedback_verdict.jsonl").write_text(json.dumps(record) + "\n")
    (folder / "report.json").write_text(
        json.dumps({"stages": [{"name": "feedback_verdict", "labeller": "feedback-verdict-v1"}]})
    )
    return folder


def _judges(body):
    red, green, _ = _images(body)[-1].resize((1, 1)).getpixel((0, 0))
    return f"[[{round((red if body['model'] == 'agree80' else green) / 20)}]]"


def _invoke(*args):
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    """The benchmark, its community outputs and one judge run of both scripted judges (made once: the tests
    that change the benchmark work on a copy)."""
    from tests.helpers.openai_server import FakeOpenAIServer

    tmp_path = tmp_path_factory.mktemp("community")
    rows = _scripted_ratings()
    bench = _write_benchmark(tmp_path / "bench", rows)
    outputs = tmp_path / "outputs"
    said = _invoke(
        "community-outputs", "--benchmark", str(bench), "--config", "text_to_image", "--out", str(outputs)
    )
    assert (
        f"wrote {2 * N + 2} community outputs" in said
        and len(list((outputs / "community").iterdir())) == 2 * N + 2
    )
    (outputs / "other").mkdir()  # a second model (four outputs), so that the run can be ranked
    for name in sorted(p.name for p in (outputs / "community").iterdir())[:4]:
        (outputs / "other" / name).write_bytes(_png((100, 100, 0)))
    run = tmp_path / "run"
    with FakeOpenAIServer(_judges) as openai_server:
        _invoke("judge", "--benchmark", str(bench), "--config", "text_to_image", "--outputs", str(outputs),
                "--out", str(run), "--base-url", openai_server.base_url, "--concurrency", "8",
                "--judge", "openai:agree80", "--judge", "openai:random")  # fmt: skip
    return rows, bench, run


def test_an_80_percent_judge_reads_0_8_and_a_random_one_0_5(judged):
    rows, _, run = judged
    report = json.loads(_invoke("agreement", str(run), "--community", "--format", "json"))
    by_judge = {r["judge"]: r for r in report["judges"]}
    assert set(by_judge) == {"openai:agree80", "openai:random", "ensemble (mean rating)"}
    assert report["labels"] == {
        "items": 2 * N + 2, "from_stage_file": 1, "from_rules": 2 * N + 1, "labeller": "feedback-verdict-v1",
        "outputs": {"positive": N, "negative": N, "mixed": 1, "not_a_verdict": 1},
    }  # fmt: skip
    for name, column in (("openai:agree80", 1), ("openai:random", 2)):
        row = by_judge[name]
        pos = [r[column] for r in rows if r[0] == "positive"]
        neg = [r[column] for r in rows if r[0] == "negative"]
        auc, pair, ties = _brute(pos, neg)
        assert (row["n_positive"], row["n_negative"], row["n_pairs"], row["n_unrated"]) == (N, N, N * N, 0)
        assert row["auc"] == pytest.approx(auc, abs=1e-12)
        assert row["pair_agreement"] == pytest.approx(pair, abs=1e-12)
        assert row["tie_rate"] == pytest.approx(ties, abs=1e-12)
        assert row["auc_ci_low"] <= row["auc"] <= row["auc_ci_high"]
        assert row["pair_agreement_ci_low"] <= row["pair_agreement"] <= row["pair_agreement_ci_high"]
    ensemble = by_judge["ensemble (mean rating)"]  # the mean of both judges' ratings, per output
    mean = {v: [(r[1] + r[2]) / 2 for r in rows if r[0] == v] for v in ("positive", "negative")}
    auc, pair, ties = _brute(mean["positive"], mean["negative"])
    assert (ensemble["auc"], ensemble["pair_agreement"]) == pytest.approx((auc, pair), abs=1e-12)
    agree, rand = by_judge["openai:agree80"], by_judge["openai:random"]
    # the acceptance numbers: the 80% judge near 0.8, its interval holding 0.8; the random judge near 0.5
    assert agree["tie_rate"] == 0 and agree["auc"] == agree["pair_agreement"]
    assert agree["pair_agreement"] == pytest.approx(0.8, abs=1e-12)
    assert agree["pair_agreement_ci_low"] < 0.8 < agree["pair_agreement_ci_high"]
    assert agree["pair_agreement_ci_high"] - agree["pair_agreement_ci_low"] < 0.3
    assert agree["mann_whitney_p"] < 1e-4
    assert rand["pair_agreement"] == pytest.approx(0.5, abs=1e-12) and rand["auc"] == pytest.approx(
        0.5, abs=1e-12
    )
    assert rand["tie_rate"] == pytest.approx(0.1, abs=1e-12)
    assert rand["pair_agreement_ci_low"] < 0.5 < rand["pair_agreement_ci_high"]
    assert rand["auc_ci_low"] < 0.5 < rand["auc_ci_high"] and rand["mann_whitney_p"] > 0.05
    assert agree["pair_agreement_ci_low"] > rand["pair_agreement_ci_high"]  # the two judges are told apart
    # seeded: the same numbers again; another seed moves only the intervals
    again = json.loads(_invoke("agreement", str(run), "--community", "--format", "json"))
    assert again == report
    other = json.loads(_invoke("agreement", str(run), "--community", "--format", "json", "--seed", "3"))
    assert other["judges"][0]["auc"] == report["judges"][0]["auc"]
    assert other["judges"][0]["auc_ci_low"] != report["judges"][0]["auc_ci_low"]
    table = _invoke("agreement", str(run), "--community")
    assert f"{N} liked, {N} disliked, 1 mixed, 1 without a verdict" in table
    assert f"{agree['auc']:6.3f}" in table.splitlines()[3]


def _copy(judged, tmp_path):
    import shutil

    rows, bench, run = judged
    shutil.copytree(bench, tmp_path / "bench")
    shutil.copytree(run, tmp_path / "run")
    return rows, tmp_path / "bench", tmp_path / "run"


def test_the_stage_file_outranks_the_lexicon(judged, tmp_path):
    _, bench, _ = _copy(judged, tmp_path)
    verdicts, provenance = community_verdicts(bench, "text_to_image")
    assert verdicts["s000"] == "positive" and verdicts["x0"] == "not_a_verdict" and verdicts["x1"] == "mixed"
    (bench / "stages" / "feedback_verdict.jsonl").unlink()
    verdicts, provenance = community_verdicts(bench, "text_to_image")
    assert verdicts["s000"] == "not_a_verdict" and provenance["labeller"] == "feedback-verdict-rules-v1"


def test_bad_input_gets_a_clear_error(judged, tmp_path):
    _, bench, run = _copy(judged, tmp_path)
    with pytest.raises(ConfigError, match="no rating of the model 'people'"):
        community_agreement(run, model="people")
    (bench / "stages" / "feedback_verdict.jsonl").write_text(
        '{"sample_id": "s1", "index": 0, "feedback": "f", "verdict": "meh"}\n'
    )
    with pytest.raises(ConfigError, match="line 1: unknown verdict 'meh'"):
        community_agreement(run, bench)
    result = CliRunner().invoke(cli, ["agreement", str(run), "--community", "--human", str(run / "run.json")])
    assert result.exit_code == 2 and "--community takes a judge RUN only" in result.output
    (tmp_path / "not-a-run").mkdir()
    with pytest.raises(
        ConfigError, match=r"not-a-run: no run\.json, so not an `echo-bench judge --out` folder"
    ):
        community_agreement(tmp_path / "not-a-run")
    (tmp_path / "not-a-run" / "run.json").write_text("{}")
    with pytest.raises(ConfigError, match=r"run\.json does not name the benchmark and config"):
        community_agreement(tmp_path / "not-a-run")
    from echo_builder.judge.community import write_community_outputs
    from echo_dataset.loading import BenchmarkNotFoundError

    with pytest.raises(ConfigError, match="already holds files"):
        write_community_outputs(bench, "text_to_image", judged[2].parent / "outputs")
    with pytest.raises(BenchmarkNotFoundError, match="config 'nope'"):
        write_community_outputs(bench, "nope", tmp_path / "fresh")
    assert not (tmp_path / "fresh").exists()  # a bad config writes nothing


def test_auc_matches_brute_force_with_ties():
    rng = np.random.default_rng(1)
    pos, neg = rng.integers(1, 6, 25).astype(float), rng.integers(1, 5, 18).astype(float)
    got = auc_and_pair_agreement(pos, neg, n_boot=200, seed=0)
    auc, pair, ties = _brute(list(pos), list(neg))
    assert (got["auc"], got["pair_agreement"], got["tie_rate"]) == pytest.approx((auc, pair, ties), abs=1e-12)
    assert got["auc_ci_low"] <= got["auc"] <= got["auc_ci_high"]
    every_tie = auc_and_pair_agreement([5, 5], [5], n_boot=20)
    assert every_tie["auc"] == 0.5 and every_tie["pair_agreement"] != every_tie["pair_agreement"]  # NaN
    assert every_tie["mann_whitney_p"] == 1.0
    with pytest.raises(ConfigError, match="0 disliked"):
        auc_and_pair_agreement([1.0], [])


def test_the_validity_card_reports_it(judged, tmp_path):
    _, _, run = _copy(judged, tmp_path)
    _invoke("leaderboard", str(run), "--n-boot", "200", "--format", "json")
    card = json.loads((run / "validity.json").read_text())["community_agreement"]
    direct = community_agreement(run, n_boot=200, seed=0)
    assert card["available"] is True and card["judges"] == direct["judges"]
    assert card["labels"]["outputs"]["positive"] == N
    text = (run / "validity.md").read_text()
    section = text.split("## Agreement with the community", 1)[1].split("## Anchor drift", 1)[0]
    assert f"liked {N} and disliked {N}" in section
    agree = next(r for r in direct["judges"] if r["judge"] == "openai:agree80")
    assert f"| openai:agree80 | overall | {N} | {N} | 0.800 |" in section
    assert f"[{agree['auc_ci_low']:.3f}, {agree['auc_ci_high']:.3f}]" in section
    assert text.count("Not measured:") == 2  # humans and anchor drift only


def test_stage_labels_match_by_position_then_text():
    from echo_builder.judge.community import _StageLabels

    labels = _StageLabels(
        [
            {"sample_id": "a", "index": 0, "feedback": "@ben_x great", "verdict": "positive"},
            {
                "sample_id": "d",
                "index": 0,
                "feedback": "ugly",
                "verdict": "negative",
            },  # two samples that shared
            {
                "sample_id": "d",
                "index": 0,
                "feedback": "nice",
                "verdict": "positive",
            },  # id "d" before renaming
        ]
    )
    assert labels.get("a", 0, "@user_1234 great") == "positive"  # a pseudonymized mention: found by position
    assert labels.get("d", 0, "nice") == "positive" and labels.get("d", 0, "ugly") == "negative"
    assert labels.get("d-2", 0, "ugly") == "negative"  # the renamed one: found by its text
    assert labels.get("d", 0, "other") is None and labels.get("z", 0, "unknown") is None
