"""Every ``metrics/<name>/`` folder is a complete evaluate module; the judge and win-rate modules compute right."""

from __future__ import annotations

import ast
import math
import re
from pathlib import Path

import pytest
import yaml
from PIL import Image

from tests.conftest import REPO_ROOT
from tests.test_judge import GREEN, RED, color_rater

evaluate = pytest.importorskip("evaluate")
MODULES = sorted(
    p for p in (REPO_ROOT / "metrics").iterdir() if p.is_dir() and not p.name.startswith((".", "_"))
)


@pytest.mark.parametrize("folder", MODULES, ids=lambda p: p.name)
def test_module_folder_is_complete(folder: Path):
    name = folder.name
    for required in (f"{name}.py", "README.md", "requirements.txt", "app.py"):
        assert (folder / required).is_file(), f"{folder} lacks {required}"
    card = (folder / "README.md").read_text()
    front = yaml.safe_load(re.match(r"^---\n(.*?)\n---\n", card, re.DOTALL).group(1))
    assert {"title", "description", "tags", "sdk", "app_file"} <= set(front) and "evaluate" in front["tags"]
    for section in ("## Inputs", "## Outputs", "## Limitations", "## Citation"):
        assert section in card, f"{name} card lacks {section!r}"
    # the card states the direction the code declares (behaviour as data, once)
    for module in ("color", "structure", "faces", "text"):
        __import__(f"echo_builder.scoring.{module}")
    from echo_builder.scoring import METRIC_SPECS

    spec = METRIC_SPECS.get(name)
    direction = "lower is better" if spec is not None and not spec.higher_is_better else "higher is better"
    assert direction in card, f"{name} card does not say {direction!r}"
    requirements = (folder / "requirements.txt").read_text().split()
    assert "echo-bench" in requirements
    for source in (f"{name}.py", "app.py"):
        tree = ast.parse((folder / source).read_text())
        # evaluate's dependency scanner reads one import per line
        assert all(len(node.names) == 1 for node in ast.walk(tree) if isinstance(node, ast.Import))


def test_win_rate_module_matches_a_hand_count():
    module = evaluate.load(str(REPO_ROOT / "metrics" / "win_rate"))
    # p1: a 7 > b 4 > c 2; p2: a 3 < b 5, c missing; p3: a 6 = b 6 = c 6
    rows = [
        ("a", "p1", 7),
        ("b", "p1", 4),
        ("c", "p1", 2),
        ("a", "p2", 3),
        ("b", "p2", 5),
        ("c", "p2", None),
        ("a", "p3", 6),
        ("b", "p3", 6),
        ("c", "p3", 6),
    ]
    model, sample, score = zip(*rows, strict=True)
    out = module.compute(model=list(model), sample_id=list(sample), score=list(score), n_boot=200)
    # a: beats b, c on p1; loses to b, beats missing c on p2; ties both on p3 -> (2 + 1 + 1) / 6
    assert out["win_rate"] == pytest.approx({"a": 4 / 6, "b": (1 + 2 + 1) / 6, "c": (0 + 0 + 1) / 6})
    assert out["n_missing"] == {"a": 0, "b": 0, "c": 1} and out["n_comparisons"] == {"a": 6, "b": 6, "c": 6}
    assert out["models"][-1] == "c"
    assert all(out["ci_low"][m] <= out["win_rate"][m] <= out["ci_high"][m] for m in out["models"])


def test_echo_judge_module_with_a_loopback_judge(openai_server, tmp_path):
    openai_server.reply = color_rater
    module = evaluate.load(str(REPO_ROOT / "metrics" / "echo_judge"))
    out = module.compute(
        predictions=[Image.new("RGB", (80, 60), GREEN), Image.new("RGB", (80, 60), RED)],
        references=[[Image.new("RGB", (80, 60), RED)], []],
        prompts=["make it green", "a red square"],
        judges=["openai:judge"],
        judge_options={"openai:judge": {"base_url": openai_server.base_url}},
        cache_dir=str(tmp_path / "cache"),
    )
    assert out["scores"] == [8.0, 2.0] and out["echo_judge"] == 5.0
    assert out["statuses"] == {"openai:judge": ["ok", "ok"]} and out["nan_reasons"] == [None, None]
    assert "Final: [[8]]" in out["raw_texts"]["openai:judge"][0]
    openai_server.reply = lambda body: "I'm sorry, I can't help with that."
    refused = module.compute(
        predictions=[Image.new("RGB", (80, 60), GREEN)],
        references=[[]],
        prompts=["other prompt"],
        judges=["openai:judge"],
        judge_options={"openai:judge": {"base_url": openai_server.base_url}},
    )
    assert math.isnan(refused["scores"][0]) and math.isnan(refused["echo_judge"])
    assert refused["statuses"]["openai:judge"] == ["refusal"] and "declined" in refused["nan_reasons"][0]


def test_image_metric_modules_compute_offline(shared_data):
    pairs = shared_data / "image_pairs" / "yellow_tint"
    before, after = Image.open(pairs / "gpt4o_before.webp"), Image.open(pairs / "gpt4o_after.webp")
    color = evaluate.load(str(REPO_ROOT / "metrics" / "color_shift"))
    out = color.compute(predictions=[before, after], references=[[after], [after]], pooled=True)
    assert out["scores"][1] == 0.0 and out["scores"][0] > 20 and out["deltas"][0][2] < -20
    assert out["color_shift"] == pytest.approx(out["scores"][0] / 2)
    structure = evaluate.load(str(REPO_ROOT / "metrics" / "structure_distance"))
    small = [before.resize((256, 384)), after.resize((256, 384))]
    out = structure.compute(predictions=small, references=[[small[1]], [small[1]]], weights="random:0")
    assert out["scores"][1] == pytest.approx(0.0, abs=1e-7) and out["scores"][0] > 0
    faces = evaluate.load(str(REPO_ROOT / "metrics" / "face_identity"))
    skimage_data = pytest.importorskip("skimage.data")
    astronaut = Image.fromarray(skimage_data.astronaut())
    out = faces.compute(
        predictions=[astronaut.transpose(Image.Transpose.FLIP_LEFT_RIGHT)], references=[[astronaut]]
    )
    assert out["scores"][0] > 0.9 and out["backend"].startswith("dlib")
    no_face = faces.compute(predictions=[astronaut], references=[[Image.fromarray(skimage_data.coffee())]])
    assert math.isnan(no_face["scores"][0]) and "no face" in no_face["nan_reasons"][0]


def test_text_rendering_module_with_a_loopback_judge(openai_server, tmp_path):
    openai_server.reply = lambda body: "The text reads SALE correctly. [[10]]"
    module = evaluate.load(str(REPO_ROOT / "metrics" / "text_rendering"))
    out = module.compute(
        predictions=[Image.new("RGB", (64, 64), RED)],
        prompts=['a poster that says "SALE"'],
        judges=["openai:judge"],
        judge_options={"openai:judge": {"base_url": openai_server.base_url}},
    )
    assert out["scores"] == [1.0] and out["ratings"]["openai:judge"] == [10.0]


def test_wrong_inputs_give_clear_errors(tmp_path):
    module = evaluate.load(str(REPO_ROOT / "metrics" / "color_shift"))
    img = Image.new("RGB", (8, 8), (10, 20, 30))
    with pytest.raises(ValueError, match="Mismatch in the number of predictions"):
        module.compute(predictions=[img, img], references=[[img]])
    with pytest.raises(ValueError, match="expected format"):
        module.compute(predictions=[img], references=[img])  # references must be lists of images
    with pytest.raises(FileNotFoundError, match=r"missing\.png"):
        module.compute(predictions=[str(tmp_path / "missing.png")], references=[[img]])
