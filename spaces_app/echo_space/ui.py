"""The Gradio Blocks of the Space: Benchmark, Leaderboard, Metric playground and About tabs.

:class:`EchoSpace` holds the data sources and the handler of each event; :func:`build_demo` lays the components
out and wires them. Every handler is also a named API endpoint (``api_name``), callable with ``gradio_client``:

- ``/filter_samples`` (config, query, flags) -> (count text, sample table, sample-id dropdown)
- ``/show_sample`` (config, sample_id, show_flagged=False) -> (prompt, details, input gallery, community-output
  gallery, model-output gallery, feedback table, applicability table, source links); the images of a sample
  flagged NSFW (``has_nsfw``) come blurred unless ``show_flagged``
- ``/leaderboard`` (run, missing) -> (summary, table, plots gallery, failure counts, position bias)
- ``/validity_card`` (run, missing) -> the run's validity card (Markdown, as ``echo-bench leaderboard`` writes it)
- ``/paper_win_rates`` (run) -> (heading, ECHO's published win rates beside the run's, for the run's config)
- ``/score_pair`` (input image, output image, prompt) -> (metric table, color swatch, color summary)
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import gradio as gr
import pandas as pd

from echo_space.about import about_markdown, metric_specs_table
from echo_space.analysis import add_analysis_tab
from echo_space.benchmark import FLAG_COLUMNS, Benchmark, filter_samples, listing
from echo_space.leaderboard import RunSource
from echo_space.playground import PLAYGROUND_COLUMNS, score_pair
from echo_space.settings import SpaceSettings

__all__ = ["CSS", "MAX_LISTED", "EchoSpace", "allowed_paths", "build_demo", "theme"]

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

#: System fonts only: the default theme would fetch Google fonts, which a Space without network cannot.
_SANS = [
    "ui-sans-serif",
    "system-ui",
    "-apple-system",
    "Segoe UI",
    "Roboto",
    "Helvetica",
    "Arial",
    "sans-serif",
]
_MONO = ["ui-monospace", "SFMono-Regular", "Menlo", "Consolas", "Liberation Mono", "monospace"]
#: Rows listed at most in the sample table (and the sample menu); a search narrows larger configs.
MAX_LISTED = 500
_GALLERY = {"columns": 3, "height": "auto", "object_fit": "contain", "allow_preview": True}
CSS = """
#echo-links a { word-break: break-all; }
"""


def theme() -> Any:
    """Gradio's default theme with system fonts (no font download)."""
    return gr.themes.Default(font=_SANS, font_mono=_MONO)


class EchoSpace:
    """The Space's data sources and event handlers (plain Python values in, Gradio values out).

    Args:
        settings: what to show (see :class:`~echo_space.settings.SpaceSettings`).
        max_listed: rows listed at most in the sample table (ECHO's ``analysis`` config has ~29k rows; sending
            them all would stall the browser); the count says how many match in all.

    Raises:
        BenchmarkNotFoundError: the benchmark folder does not exist or holds no config.
    """

    def __init__(self, settings: SpaceSettings, *, max_listed: int = MAX_LISTED) -> None:
        self.settings = settings
        self.max_listed = max_listed
        self.benchmark = Benchmark(settings.benchmark, outputs=settings.outputs)
        self.runs: dict[str, RunSource] = {}
        for source in settings.runs:
            run = RunSource(source, n_boot=settings.n_boot)
            name, k = run.name, 2
            while name in self.runs:  # two runs with the same folder name stay apart
                name, k = f"{run.name} ({k})", k + 1
            self.runs[name] = run

    def warm(self) -> None:
        """Rank every run (ECHO's default: missing outputs lose) in a background thread, so the first visitor
        does not wait for the bootstrap; an error is left for the Leaderboard tab to show."""
        import threading

        def work() -> None:
            for run in self.runs.values():
                try:
                    run.view("loss")
                except Exception:  # shown by the handler when someone opens the run
                    continue

        if self.runs:
            threading.Thread(target=work, name="echo-space-warm", daemon=True).start()

    # ------------------------------------------------------------------------------------------- benchmark
    def filter_samples(self, config: str, query: str = "", flags: list[str] | None = None) -> tuple[Any, ...]:
        """Handler of ``/filter_samples``: (count Markdown, listing table, sample dropdown update)."""
        try:
            table = self.benchmark.samples(config)
            shown = filter_samples(table, query or "", flags or [])
        except (KeyError, ValueError, FileNotFoundError) as exc:
            raise gr.Error(str(exc)) from None
        count = f"**{len(shown)}** of {len(table)} samples in `{config}`"
        if query or flags:
            count += (
                " match" + (f" '{query}'" if query else "") + (f" with {', '.join(flags)}" if flags else "")
            )
        if len(shown) > self.max_listed:
            shown = shown.iloc[: self.max_listed]
            count += f"; the first {self.max_listed} are listed (search to narrow)"
        ids = shown["id"].astype(str).tolist()
        # the menu shows each id with the start of its prompt; its value is the id
        labels = [f"{i} · {_short(p)}" for i, p in zip(ids, shown["prompt"], strict=True)]
        menu = gr.Dropdown(choices=list(zip(labels, ids, strict=True)), value=ids[0] if ids else None)
        return count, listing(shown), menu

    def show_sample(self, config: str, sample_id: str | None, show_flagged: bool = False) -> tuple[Any, ...]:
        """Handler of ``/show_sample``: prompt, details, the three galleries, feedback, flags and links. The
        images of a sample flagged NSFW are blurred unless ``show_flagged`` (the "Show flagged images" box)."""
        if not sample_id:
            empty = pd.DataFrame()
            return "", "No sample selected.", [], [], [], empty, empty, ""
        try:
            view = self.benchmark.view(config, sample_id, show_flagged=bool(show_flagged))
        except (KeyError, ValueError, FileNotFoundError) as exc:
            raise gr.Error(str(exc).strip("'\"")) from None
        return (
            view.prompt,
            view.details,
            view.input_images,
            view.output_images,
            view.model_outputs,
            view.feedback,
            view.flags,
            view.links,
        )

    def pick_row(self, table: pd.DataFrame, event: gr.SelectData) -> Any:
        """A click on the sample table selects that row's sample (its ``id`` cell)."""
        row = event.index[0] if isinstance(event.index, (list, tuple)) else event.index
        if row is None or table is None or not 0 <= row < len(table):
            return gr.Dropdown()
        return gr.Dropdown(value=str(table.iloc[row]["id"]))

    # ----------------------------------------------------------------------------------------- leaderboard
    def leaderboard(self, run: str | None, missing: str = "loss") -> tuple[Any, ...]:
        """Handler of ``/leaderboard``: (summary, table, plots, failure counts, position bias)."""
        from echo_builder.errors import EchoError

        if not self.runs:
            hidden = gr.Dataframe(visible=False)
            message = (
                "No judge run configured: start the Space with `--run RUN_DIR_OR_HUB_ID` (or set ECHO_RUN)."
            )
            return message, None, [], hidden, hidden
        if run not in self.runs:
            raise gr.Error(f"unknown run {run!r}; runs: {', '.join(self.runs)}")
        try:
            view = self.runs[run].view(missing)  # type: ignore[arg-type]
        except (EchoError, OSError, ValueError) as exc:
            raise gr.Error(f"cannot rank run {run!r}: {exc}") from None
        return (
            view.summary,
            view.table,
            view.plots,
            gr.Dataframe(value=view.failures, visible=not view.failures.empty),
            gr.Dataframe(value=view.position_bias, visible=not view.position_bias.empty),
        )

    def validity_card(self, run: str | None, missing: str = "loss") -> str:
        """Handler of ``/validity_card``: the run's validity card (Markdown) shown beside its leaderboard."""
        from echo_builder.errors import EchoError

        if not self.runs:
            return "No judge run configured."
        if run not in self.runs:
            raise gr.Error(f"unknown run {run!r}; runs: {', '.join(self.runs)}")
        try:
            return self.runs[run].view(missing).validity  # type: ignore[arg-type]
        except (EchoError, OSError, ValueError) as exc:
            raise gr.Error(f"cannot rank run {run!r}: {exc}") from None

    def paper_win_rates(self, run: str | None) -> tuple[str, pd.DataFrame]:
        """Handler of ``/paper_win_rates``: (heading, table) of ECHO's published win rates beside the run's on the
        run's config; with no run, or a run that cannot be ranked, the paper's numbers for both configs."""
        from echo_builder.errors import EchoError
        from echo_builder.judge.published import PAPER_LABEL
        from echo_space.leaderboard import paper_table

        source = self.runs.get(run) if run else None
        if source is not None:
            try:
                config = source.run_info().get("config")
                view = source.view("loss")
            except (EchoError, OSError, ValueError):
                source = None
            else:
                if view.paper is not None and not view.paper.empty:
                    heading = (
                        f"### ECHO's published win rates, {PAPER_LABEL}, beside run `{run}` (`{config}`)\n"
                        "Models are matched by name; the paper's numbers come from another judge setup and "
                        "other opponents, so compare orderings and rough gaps, not digits."
                    )
                    return heading, view.paper
        tables = [paper_table(None, c).assign(config=c) for c in ("image_to_image", "text_to_image")]
        heading = f"### ECHO's published win rates (I2I and T2I), {PAPER_LABEL}"
        both = pd.concat(tables, ignore_index=True)
        return heading, both[["config", "paper_model", "paper_win_rate", "paper_source"]]

    # ------------------------------------------------------------------------------------------ playground
    def score_pair(self, input_image: Any, output_image: Any, prompt: str = "") -> tuple[Any, ...]:
        """Handler of ``/score_pair``: (metric table, swatch image, color summary Markdown)."""
        from echo_builder.errors import ImageError

        if output_image is None:
            raise gr.Error("Upload an output image (and an input image for the input-based metrics).")
        s = self.settings
        try:
            result = score_pair(
                input_image,
                output_image,
                prompt or "",
                dino_weights=s.dino_weights,
                face_backend=s.face_backend,
                judges=s.judges,
                judge_options=s.judge_options,
            )
        except (ImageError, ValueError) as exc:
            raise gr.Error(str(exc)) from None
        color = result.color
        if math.isnan(color["magnitude"]):
            text = f"**Color shift**: NaN ({result.table.loc[0, 'note']})"
        else:
            ins = ", ".join(f"{c:.1f}" for c in color["input_means"])
            outs = ", ".join(f"{c:.1f}" for c in color["output_means"])
            text = (
                f"**Color shift** {color['magnitude']:.2f} levels (lower is better): mean RGB of the input "
                f"({ins}) -> output ({outs}). Left swatch: input, right: output."
            )
        return result.table, result.swatch, text


def _short(text: Any, limit: int = 60) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def build_demo(settings: SpaceSettings | EchoSpace) -> Any:
    """The Space as a ``gr.Blocks`` (not launched). Launch it with ``theme=theme(), css=CSS`` and
    ``allowed_paths=allowed_paths(space)`` so model outputs outside the working directory can be shown."""
    space = settings if isinstance(settings, EchoSpace) else EchoSpace(settings)
    configs = space.benchmark.configs()
    with gr.Blocks(title="ECHO benchmark", analytics_enabled=False) as demo:
        gr.Markdown(
            "# ECHO: a benchmark from what people post\n"
            f"Benchmark `{space.benchmark.source}` · configs {', '.join(f'`{c}`' for c in configs)}"
        )
        with gr.Tabs():
            with gr.Tab("Benchmark", id="benchmark"):
                _benchmark_tab(space, configs, demo)
            with gr.Tab("Leaderboard", id="leaderboard"):
                _leaderboard_tab(space, demo)
            with gr.Tab("Metric playground", id="playground"):
                _playground_tab(space)
            add_analysis_tab(space.settings.analysis)  # --analysis / ECHO_ANALYSIS: an analyze folder
            with gr.Tab("About", id="about"):
                intro, details = about_markdown(space.benchmark.card(), space.benchmark.source)
                gr.Markdown(intro, elem_id="echo-about")
                gr.Dataframe(
                    metric_specs_table(),
                    label="The community-driven metrics: direction, range, unit, source",
                    interactive=False,
                    wrap=True,
                    elem_id="echo-about-metrics",
                )
                gr.Markdown(details, elem_id="echo-about-card")
    demo.echo_space = space  # type: ignore[attr-defined]
    return demo


def allowed_paths(space: EchoSpace) -> list[str]:
    """Folders Gradio may serve files from: the model outputs and the runs' plot folders."""
    paths = [str(run.work_dir) for run in space.runs.values()]
    if space.benchmark.outputs is not None:
        paths.append(str(Path(space.benchmark.outputs).resolve()))
    return paths


def _benchmark_tab(space: EchoSpace, configs: list[str], demo: Any) -> None:
    with gr.Row():
        config = gr.Dropdown(configs, value=configs[0] if configs else None, label="Config", scale=1)
        query = gr.Textbox(
            label="Search",
            placeholder="words in the id, prompt or feedback; Enter",
            scale=3,
            elem_id="echo-search",
        )
        flags = gr.CheckboxGroup(list(FLAG_COLUMNS), label="Metric applies (flag is true)", scale=3)
        show_flagged = gr.Checkbox(
            value=False,
            label="Show flagged images",
            info="Samples the build's NSFW screening flagged are shown blurred.",
            scale=1,
            elem_id="echo-show-flagged",
        )
    count = gr.Markdown(elem_id="echo-count")
    table = gr.Dataframe(
        label="Samples (click a row to show it; flags: the metrics that apply, '?' = unknown)",
        interactive=False,
        wrap=True,
        max_height=360,
        column_widths=["17%", "45%", "7%", "6%", "7%", "7%", "11%"],
        elem_id="echo-samples",
    )
    # custom values: the choices change per session with the filter, and API calls name any id of the config
    sample = gr.Dropdown(label="Sample", choices=[], allow_custom_value=True, elem_id="echo-sample")
    with gr.Row():
        with gr.Column(scale=2):
            prompt = gr.Textbox(label="Prompt", interactive=False, lines=3, elem_id="echo-prompt")
            details = gr.Markdown(elem_id="echo-details")
        with gr.Column(scale=1):
            links = gr.Markdown(elem_id="echo-links")
    with gr.Row():
        # PNG: lossless, so what is shown is the image in the dataset, pixel for pixel (up to the display size)
        inputs = gr.Gallery(label="Input images", format="png", elem_id="echo-inputs", **_GALLERY)
        outputs = gr.Gallery(
            label="Community outputs (target model)", format="png", elem_id="echo-outputs", **_GALLERY
        )
    models = gr.Gallery(label="Model outputs", elem_id="echo-model-outputs", **{**_GALLERY, "columns": 4})
    with gr.Row():
        feedback = gr.Dataframe(
            label="Community feedback",
            interactive=False,
            wrap=True,
            column_widths=["35%", "65%"],
            elem_id="echo-feedback",
        )
        flag_table = gr.Dataframe(
            label="Applicability flags",
            interactive=False,
            wrap=True,
            column_widths=["22%", "13%", "65%"],
            elem_id="echo-flags",
        )

    filter_args = {
        "fn": space.filter_samples,
        "inputs": [config, query, flags],
        "outputs": [count, table, sample],
    }
    config.change(**filter_args, api_name="filter_samples")
    query.submit(**filter_args, api_visibility="private")
    flags.change(**filter_args, api_visibility="private")
    demo.load(**filter_args, api_visibility="private")
    show_args = {
        "fn": space.show_sample,
        "inputs": [config, sample, show_flagged],
        "outputs": [prompt, details, inputs, outputs, models, feedback, flag_table, links],
    }
    sample.change(**show_args, api_name="show_sample")
    show_flagged.change(**show_args, api_visibility="private")
    table.select(space.pick_row, inputs=[table], outputs=[sample], api_visibility="private")


def _leaderboard_tab(space: EchoSpace, demo: Any) -> None:
    names = list(space.runs)
    with gr.Row():
        run = gr.Dropdown(names, value=names[0] if names else None, label="Judge run", scale=2)
        missing = gr.Radio(
            ["loss", "skip"],
            value="loss",
            label="A model without an output for a prompt",
            info="loss: it loses that comparison (ECHO's default); skip: the comparison is left out",
            scale=2,
        )
    summary = gr.Markdown(elem_id="echo-run-summary")
    table = gr.Dataframe(
        label="Leaderboard (best first)", interactive=False, wrap=True, elem_id="echo-leaderboard"
    )
    plots = gr.Gallery(label="Plots", columns=2, height=1250, object_fit="contain", elem_id="echo-plots")
    with gr.Row():
        failures = gr.Dataframe(
            label="Judge failures per model and judge", interactive=False, elem_id="echo-failures"
        )
        bias = gr.Dataframe(label="Position bias per judge (pairwise runs)", interactive=False, visible=False)
    args = {
        "fn": space.leaderboard,
        "inputs": [run, missing],
        "outputs": [summary, table, plots, failures, bias],
    }
    run.change(**args, api_name="leaderboard")
    missing.change(**args, api_visibility="private")
    demo.load(**args, api_visibility="private")
    with gr.Accordion("Validity card: how far this ranking's judges can be trusted", open=False):
        validity = gr.Markdown(elem_id="echo-validity")
    card_args = {"fn": space.validity_card, "inputs": [run, missing], "outputs": [validity]}
    run.change(**card_args, api_name="validity_card")
    missing.change(**card_args, api_visibility="private")
    demo.load(**card_args, api_visibility="private")
    paper_heading = gr.Markdown(elem_id="echo-paper-heading")
    paper = gr.Dataframe(
        label="From the paper (ECHO, arXiv 2510.15021)", interactive=False, elem_id="echo-paper"
    )
    paper_args = {"fn": space.paper_win_rates, "inputs": [run], "outputs": [paper_heading, paper]}
    run.change(**paper_args, api_name="paper_win_rates")
    demo.load(**paper_args, api_visibility="private")


def _playground_tab(space: EchoSpace) -> None:
    gr.Markdown(
        "Upload an input image and a model's output (and the prompt, for text rendering). Each metric is computed "
        "as `echo-bench metrics` does; where it does not apply, or cannot run in this Space, its value is empty "
        "and the note says why."
    )
    with gr.Row():
        source = gr.Image(type="filepath", image_mode=None, label="Input image", elem_id="echo-play-input")
        output = gr.Image(type="filepath", image_mode=None, label="Output image", elem_id="echo-play-output")
    prompt = gr.Textbox(label="Prompt (optional)", lines=2)
    button = gr.Button("Compute metrics", variant="primary", elem_id="echo-play-run")
    table = gr.Dataframe(
        headers=list(PLAYGROUND_COLUMNS),
        label="Metrics (empty value: NaN, the note says why)",
        interactive=False,
        wrap=True,
        column_widths=["14%", "9%", "7%", "40%", "9%", "21%"],
        elem_id="echo-play-table",
    )
    with gr.Row():
        swatch = gr.Image(
            label="Mean colors: input | output", height=140, format="png", elem_id="echo-play-swatch"
        )
        color = gr.Markdown(elem_id="echo-play-color")
    button.click(
        space.score_pair,
        inputs=[source, output, prompt],
        outputs=[table, swatch, color],
        api_name="score_pair",
    )
