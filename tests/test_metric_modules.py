"""Every ``metrics/<name>/`` folder is a complete evaluate module; the judge and win-rate modules compute right."""

from __future__ import annotations

import ast
import io
import math
import re
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image

from echo_builder import metrics as metric_modules
from tests.conftest import REPO_ROOT
from tests.test_judge import GREEN, RED, color_rater

evaluate = pytest.importorskip("evaluate")
MODULES = sorted(
    p for p in metric_modules.MODULES_DIR.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))
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
    for module in ("color", "structure", "faces", "text", "text_accuracy"):
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
    module = evaluate.load(metric_modules.path("win_rate"))
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
    module = evaluate.load(metric_modules.path("echo_judge"))
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
    color = evaluate.load(metric_modules.path("color_shift"))
    out = color.compute(predictions=[before, after], references=[[after], [after]], pooled=True)
    assert out["scores"][1] == 0.0 and out["scores"][0] > 20 and out["deltas"][0][2] < -20
    assert out["color_shift"] == pytest.approx(out["scores"][0] / 2)
    structure = evaluate.load(metric_modules.path("structure_distance"))
    small = [before.resize((256, 384)), after.resize((256, 384))]
    out = structure.compute(predictions=small, references=[[small[1]], [small[1]]], weights="random:0")
    assert out["scores"][1] == pytest.approx(0.0, abs=1e-7) and out["scores"][0] > 0
    faces = evaluate.load(metric_modules.path("face_identity"))
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
    module = evaluate.load(metric_modules.path("text_rendering"))
    out = module.compute(
        predictions=[Image.new("RGB", (64, 64), RED)],
        prompts=['a poster that says "SALE"'],
        judges=["openai:judge"],
        judge_options={"openai:judge": {"base_url": openai_server.base_url}},
    )
    assert out["scores"] == [1.0] and out["ratings"]["openai:judge"] == [10.0]


def test_wrong_inputs_give_clear_errors(tmp_path):
    module = evaluate.load(metric_modules.path("color_shift"))
    img = Image.new("RGB", (8, 8), (10, 20, 30))
    with pytest.raises(ValueError, match="Mismatch in the number of predictions"):
        module.compute(predictions=[img, img], references=[[img]])


# ------------------------------------------------------------------------ evaluate's conventions (issue 14 item 7)
def _kwargs_description(folder: Path) -> str:
    tree = ast.parse((folder / f"{folder.name}.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "_KWARGS_DESCRIPTION":
            return ast.literal_eval(node.value)
    raise AssertionError(f"{folder.name} has no _KWARGS_DESCRIPTION")


@pytest.mark.parametrize("folder", MODULES, ids=lambda p: p.name)
def test_docstring_examples_run_as_doctests(folder, openai_server, monkeypatch):
    """Each module's examples run as written (evaluate.load of the local folder); judges answer on loopback."""
    import doctest

    if folder.name == "structure_distance":
        pytest.importorskip("torch")
        pytest.importorskip("timm")
    if folder.name == "face_identity":
        pytest.importorskip("dlib")
    if folder.name == "text_accuracy":
        pytest.importorskip("rapidocr_onnxruntime")
    openai_server.reply = lambda body: "Looks right. [[8]]"
    monkeypatch.setenv("OPENAI_BASE_URL", openai_server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-doctest")
    monkeypatch.chdir(REPO_ROOT)
    text = _kwargs_description(folder)
    test = doctest.DocTestParser().get_doctest(text, {}, folder.name, str(folder), 0)
    assert len(test.examples) >= 3, "the module documents no runnable example"
    report: list[str] = []
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    result = runner.run(test, out=report.append)
    assert result.failed == 0, "".join(report)


def test_a_single_reference_image_per_prediction_is_accepted():
    module = evaluate.load(metric_modules.path("color_shift"))
    grey, warm = Image.new("RGB", (8, 8), (100, 100, 100)), Image.new("RGB", (8, 8), (103, 100, 96))
    single = module.compute(predictions=[warm, grey], references=[grey, grey])
    listed = module.compute(predictions=[warm, grey], references=[[grey], [grey]])
    assert single["scores"] == listed["scores"] == [5.0, 0.0]


def test_an_unreadable_image_is_nan_with_a_reason_not_an_exception(tmp_path):
    from echo_builder.scoring.color import color_shift

    module = evaluate.load(metric_modules.path("color_shift"))
    grey = Image.new("RGB", (8, 8), (100, 100, 100))
    bad = [str(tmp_path / "missing.png"), b"", b"not an image", np.zeros((4, 4, 7), np.uint8), grey]
    out = module.compute(predictions=bad, references=[grey] * len(bad))
    direct = color_shift([[grey]] * len(bad), bad, on_image_error="nan")
    assert out["nan_reasons"] == direct.nan_reasons  # the very reason the image itself gives
    assert all(math.isnan(v) for v in out["scores"][:4]) and out["scores"][4] == 0.0
    assert "missing.png" in out["nan_reasons"][0] and "empty, 0 bytes" in out["nan_reasons"][1]
    assert "not an image format" in out["nan_reasons"][2] and "H x W x 7" not in out["nan_reasons"][3]
    assert "got shape (4, 4, 7)" in out["nan_reasons"][3]


def test_win_rate_accepts_integer_sample_ids():
    module = evaluate.load(metric_modules.path("win_rate"))
    as_int = module.compute(model=["a", "b", "a", "b"], sample_id=[1, 1, 2, 2], score=[7, 4, 3, 5], n_boot=50)
    as_str = module.compute(
        model=["a", "b", "a", "b"], sample_id=["1", "1", "2", "2"], score=[7, 4, 3, 5], n_boot=50
    )
    assert as_int["win_rate"] == as_str["win_rate"] == {"a": 0.5, "b": 0.5}


# ------------------------------------------------------------- the pixels given are the pixels scored (item 14.1)
def _jpeg_decoded() -> Image.Image:
    """A noisy photo-like image decoded from JPEG, as ``load_dataset`` hands it over (``format == "JPEG"``)."""
    rng = np.random.default_rng(3)
    noisy = rng.integers(20, 236, (48, 64, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(noisy).save(buf, format="JPEG", quality=70)
    return Image.open(io.BytesIO(buf.getvalue()))


def _palette_with_transparency() -> Image.Image:
    """4 x 4 palette image: left half index 0 = (50, 50, 50) marked transparent, right half index 1 = grey 100."""
    img = Image.new("P", (4, 4), 1)
    img.putpalette([50, 50, 50, 100, 100, 100] + [0] * (256 * 3 - 6))
    img.paste(0, (0, 0, 2, 4))
    img.info["transparency"] = 0
    return img


GREY100 = Image.new("RGB", (8, 8), (100, 100, 100))


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        # the transparent half is composited on white (255, outside levels 5..250): only the grey 100 half counts
        (_palette_with_transparency, 0.0),
        # uint16 40000 -> high byte 156 per channel: |156 - 100| * sqrt(3)
        (lambda: np.full((6, 6, 3), 40000, np.uint16), 56 * math.sqrt(3)),
        # RGBA (200, 100, 100) at alpha 0 -> white, dropped; the opaque half (100, 100, 100) is what counts
        (
            lambda: np.concatenate(
                [
                    np.full((4, 2, 4), (200, 100, 100, 0), np.uint8),
                    np.full((4, 2, 4), (100, 100, 100, 255), np.uint8),
                ],
                axis=1,
            ),
            0.0,
        ),
        # int32 (mode "I") flat grey 100 is grey 100, not 100 / 256
        (lambda: Image.fromarray(np.full((4, 4), 100, np.int32)), 0.0),
        (_jpeg_decoded, None),  # None: whatever the scoring function gives on the decoded pixels
    ],
    ids=["palette_transparency", "uint16_array", "rgba_array", "mode_I", "decoded_jpeg"],
)
def test_color_shift_module_scores_the_pixels_it_is_given(make, expected):
    from echo_builder.scoring.color import color_shift

    module = evaluate.load(metric_modules.path("color_shift"))
    direct = float(color_shift([[GREY100]], [make()]).values[0])
    got = module.compute(predictions=[make()], references=[GREY100])["scores"][0]
    assert got == direct  # exact: no lossy round trip inside the module
    if expected is not None:
        assert got == pytest.approx(expected, abs=1e-9)


def test_module_spaces_pin_the_gradio_the_package_supports():
    """Each module's Space installs the gradio range of the package's ``space`` extra (its app is written for it)."""
    import tomllib

    extra = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"][
        "space"
    ]
    (pin,) = [r for r in extra if r.startswith("gradio") and not r.startswith("gradio_")]
    folders = sorted(p.parent for p in (REPO_ROOT / "echo_builder" / "metrics").glob("*/requirements.txt"))
    assert len(folders) >= 6
    for folder in folders:
        lines = [line.strip() for line in (folder / "requirements.txt").read_text().splitlines()]
        gradio = [line for line in lines if line.startswith("gradio")]
        assert gradio == [pin], folder.name
