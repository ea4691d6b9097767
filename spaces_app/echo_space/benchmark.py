"""The Benchmark tab's data: configs, the sample table, search and filters, and one sample's full view.

A benchmark is a hub-shaped folder (``<folder>/<config>/test-*.parquet`` plus ``README.md``, as the
``echo_dataset`` writer produces and the Hub serves) or a Hub dataset id. Local folders are read with ``pyarrow``
(the table without image bytes; one sample's images on demand), Hub ids through ``datasets`` (downloaded once into
the Hugging Face cache). Everything read is cached per config and safe to call from Gradio's worker threads.

A sample whose ``has_nsfw`` is true (the build's NSFW screening flagged one of its images, ``build --nsfw-check``)
is shown with every image blurred (:func:`blur_flagged`) unless the viewer asks to see flagged images.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from echo_builder.scoring.registry import applicability_flags
from echo_dataset import CONFIG_NAMES
from echo_dataset.features import COLUMN_DOCS, IMAGE_COLUMNS, URL_TWINS
from echo_dataset.loading import BenchmarkNotFoundError, config_files
from echo_dataset.release import feedback_items, token_list, token_url

__all__ = [
    "BLUR_FRACTION",
    "FLAG_COLUMNS",
    "LISTING_COLUMNS",
    "MAX_DISPLAY_SIDE",
    "Benchmark",
    "SampleView",
    "blur_flagged",
    "filter_samples",
    "flag_text",
    "listing",
]

#: Applicability flags of a sample, each once, in the order the metric registry lists them (color, structure,
#: face, text; text_accuracy shares text_rendering's flag).
FLAG_COLUMNS: tuple[str, ...] = applicability_flags()
#: Columns of the sample table shown in the Benchmark tab.
LISTING_COLUMNS = ("id", "prompt", "platform", "inputs", "outputs", "feedback", "flags")
#: Images are shown downscaled so that their longer side is at most this many pixels.
MAX_DISPLAY_SIDE = 1024
#: The Gaussian blur radius of a flagged image shown blurred, as a fraction of its longer side (at least 4 px):
#: 8% leaves colors and layout, no detail (a 1,024 px image gets radius 82).
BLUR_FRACTION = 0.08
_PROMPT_PREVIEW = 160
_SHORT_FLAG = {
    "no_color_shift": "color",
    "structure": "structure",
    "face_identity": "face",
    "text_rendering": "text",
}


def _flag_value(value: Any) -> bool | None:
    """A nullable boolean cell (Python or numpy bool, ``None``, NaN) as ``True``, ``False`` or ``None``."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    return None


def flag_text(value: Any) -> str:
    """``True`` -> ``"yes"``, ``False`` -> ``"no"``, anything else (``None``, missing) -> ``"unknown"``."""
    return {True: "yes", False: "no", None: "unknown"}[_flag_value(value)]


def _is_local(source: str | Path) -> bool:
    text = str(source)
    return Path(text).exists() or "/" not in text or text.startswith((".", "/", "~"))


def _count(value: Any) -> int:
    """Length of a list cell (a list, tuple or numpy array from Parquet); 0 for ``None``. A text cell of the
    authors' release (a JSON / Python-repr list, or one token) counts its items."""
    if value is None:
        return 0
    if isinstance(value, str):
        return len(token_list(value)[0])
    return len(value)


def _feedback_count(value: Any) -> int:
    """Community replies in a ``community_feedback`` cell, whatever its form (list of dicts, JSON, prose)."""
    return len(feedback_items(value))


def _feedback_text(value: Any) -> str:
    """The text of every reply of a ``community_feedback`` cell: echo-bench's ``[{post_url, feedback}]`` or the
    authors' release's text forms (JSON, Python repr, plain prose)."""
    return " ".join(item["feedback"] for item in feedback_items(value))


def blur_flagged(image: Any) -> Any:
    """``image`` (a PIL image) under a Gaussian blur of radius :data:`BLUR_FRACTION` x its longer side (>= 4 px):
    how the Space shows an image of a sample flagged NSFW. Returns a new RGB image of the same size."""
    from PIL import ImageFilter

    radius = max(4, round(max(image.size) * BLUR_FRACTION))
    return image.convert("RGB").filter(ImageFilter.GaussianBlur(radius))


def _image_entries(value: Any) -> list[Any]:
    """An image column cell as a list: encoded images as they are, the release's text tokens as strings."""
    if value is None:
        return []
    if isinstance(value, str):
        return token_list(value)[0]
    return list(value)


def _open_image(entry: Any) -> Any:
    """A ``{"bytes", "path"}`` record (or raw bytes) as a PIL image downscaled for display; ``None`` if absent
    or unreadable (decoded by :func:`echo_builder.imaging.load_rgb`; an unreadable image is logged, not shown)."""
    import logging

    from PIL import Image

    from echo_builder.errors import ImageError
    from echo_builder.imaging import load_rgb

    if entry is None or isinstance(
        entry, str
    ):  # a release token (media id or URL) is not an image: linked only
        return None
    if isinstance(entry, dict) and not entry.get("bytes") and not entry.get("path"):
        return None
    try:
        image = load_rgb(entry, name="benchmark image")
    except ImageError as exc:
        logging.getLogger(__name__).warning("%s", exc)
        return None
    if max(image.size) > MAX_DISPLAY_SIDE:
        image = image.copy()
        image.thumbnail((MAX_DISPLAY_SIDE, MAX_DISPLAY_SIDE), Image.Resampling.LANCZOS)
    return image


@dataclass
class SampleView:
    """Everything the Benchmark tab shows about one sample.

    Attributes:
        sample_id: the sample's ``id``.
        prompt: the prompt, verbatim.
        details: Markdown with platform, date, quality, tier, review and prompt flags.
        input_images: (PIL image, caption) for each input image that was downloaded.
        output_images: (PIL image, caption) for each of the community's output images (the target model's).
        model_outputs: (image path, or the blurred image of a flagged sample, model name) for each model in the
            outputs folder that has this sample.
        feedback: ``post_url`` and ``feedback`` per community reply.
        flags: ``flag``, ``applies`` (yes / no / unknown) and ``meaning`` per applicability flag.
        links: Markdown list of the source posts and image URLs (images that could not be downloaded say so).
        flagged: the sample's ``has_nsfw`` is true; ``blurred``: its images are shown blurred.
    """

    sample_id: str
    prompt: str
    details: str
    input_images: list[tuple[Any, str]] = field(default_factory=list)
    output_images: list[tuple[Any, str]] = field(default_factory=list)
    model_outputs: list[tuple[Any, str]] = field(default_factory=list)
    feedback: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=["post_url", "feedback"]))
    flags: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=["flag", "applies", "meaning"]))
    links: str = ""
    flagged: bool = False
    blurred: bool = False


class Benchmark:
    """A benchmark to browse: a hub-shaped folder or a Hub dataset id, plus optional model outputs.

    Args:
        source: a local hub-shaped folder or a Hub dataset id (``owner/name``).
        outputs: optional ``<outputs>/<model>/<sample_id>.<ext>`` folder of model outputs shown beside each sample.

    Raises:
        BenchmarkNotFoundError: ``source`` is a local path that does not exist or holds no config.
    """

    def __init__(self, source: str | Path, *, outputs: str | Path | None = None) -> None:
        self.source = str(source)
        self.is_local = _is_local(source)
        self.outputs = Path(outputs).expanduser() if outputs else None
        self._lock = threading.Lock()
        self._tables: dict[str, pd.DataFrame] = {}
        self._hub_data: dict[str, Any] = {}
        self._model_files: dict[str, dict[str, Path]] | None = None
        self._configs: list[str] | None = None
        if self.is_local:
            root = Path(self.source).expanduser()
            if not root.is_dir():
                raise BenchmarkNotFoundError(
                    f"benchmark folder {self.source!r} does not exist; give a hub-shaped folder "
                    "(<folder>/<config>/test-*.parquet) or a Hub dataset id (owner/name)"
                )
            self.root = root
            if not self.configs():
                raise BenchmarkNotFoundError(
                    f"no config in {self.source!r}: expected <config>/test-*.parquet for one of "
                    f"{', '.join(CONFIG_NAMES)}"
                )

    # ------------------------------------------------------------------------------------------------- reading
    def configs(self) -> list[str]:
        """Config names: ECHO's own first (in their usual order), then any others, each with data files (read once).

        Raises:
            BenchmarkNotFoundError: a Hub dataset whose configs cannot be read (unknown id, no network).
        """
        if self._configs is not None:
            return self._configs
        if self.is_local:
            present = {p.parent.name for p in self.root.glob("*/test-*.parquet")}
        else:
            import datasets

            try:
                present = set(datasets.get_dataset_config_names(self.source))
            except Exception as exc:  # not found, private, offline: the Hub's errors vary by version
                raise BenchmarkNotFoundError(
                    f"cannot read the configs of Hub dataset {self.source!r} ({type(exc).__name__}: {exc}); "
                    "check the id and network access, or give a local hub-shaped folder"
                ) from None
        self._configs = [c for c in CONFIG_NAMES if c in present] + sorted(present - set(CONFIG_NAMES))
        return self._configs

    def _hub_dataset(self, config: str) -> Any:
        import datasets

        from echo_dataset.loading import load_config

        if config not in self._hub_data:
            data = load_config(self.source, config)
            for column, feature in data.features.items():
                if column in IMAGE_COLUMNS and isinstance(feature, datasets.List):
                    data = data.cast_column(column, datasets.List(datasets.Image(decode=False)))
            self._hub_data[config] = data
        return self._hub_data[config]

    def samples(self, config: str) -> pd.DataFrame:
        """The config's rows without image bytes, in file order, plus ``n_input_images`` and ``n_output_images``.

        Raises:
            BenchmarkNotFoundError: unknown config (the message lists the configs present).
        """
        with self._lock:
            if config not in self._tables:
                self._tables[config] = self._read_table(config)
            return self._tables[config]

    def _read_table(self, config: str) -> pd.DataFrame:
        if config not in self.configs():
            raise BenchmarkNotFoundError(
                f"config {config!r} is not in {self.source!r}; configs present: {', '.join(self.configs())}"
            )
        if self.is_local:
            import pyarrow.parquet as pq

            files = config_files(self.root, config)
            names = pq.read_schema(files[0]).names
            wanted = [c for c in names if c not in IMAGE_COLUMNS]
            table = pd.concat(
                [pq.read_table(f, columns=wanted).to_pandas() for f in files], ignore_index=True
            )

            def image_column(column: str) -> list[Any]:  # reads the image bytes: only without a URL twin
                if column not in names:
                    return [None] * len(table)
                return [
                    v for f in files for v in pq.read_table(f, columns=[column]).column(column).to_pylist()
                ]
        else:
            data = self._hub_dataset(config)
            table = data.remove_columns([c for c in IMAGE_COLUMNS if c in data.column_names]).to_pandas()

            def image_column(column: str) -> list[Any]:
                return list(data[column]) if column in data.column_names else [None] * len(table)

        for column in IMAGE_COLUMNS:
            twin = URL_TWINS[column]
            # the URL twin has one entry per image (downloaded or not): counting it reads no image bytes
            counts = (
                table[twin] if twin in table.columns else pd.Series(image_column(column), index=table.index)
            )
            table[f"n_{column}"] = counts.map(_count).astype(int)
        if "id" not in table.columns or "prompt" not in table.columns:
            raise BenchmarkNotFoundError(
                f"config {config!r} of {self.source!r} has no 'id' and 'prompt' columns"
            )
        return table

    def sample_row(self, config: str, sample_id: str) -> dict[str, Any]:
        """The full row of ``sample_id`` (images as ``{"bytes", "path"}`` records).

        Raises:
            KeyError: no sample with that id in ``config``.
        """
        table = self.samples(config)
        matches = table.index[table["id"] == sample_id]
        if len(matches) == 0:
            raise KeyError(f"no sample {sample_id!r} in config {config!r} of {self.source!r}")
        if not self.is_local:
            return dict(self._hub_dataset(config)[int(matches[0])])
        import pyarrow.parquet as pq

        for f in config_files(self.root, config):
            rows = pq.read_table(f, filters=[("id", "==", sample_id)]).to_pylist()
            if rows:
                return rows[0]
        raise KeyError(f"no sample {sample_id!r} in config {config!r} of {self.source!r}")  # pragma: no cover

    def model_files(self) -> dict[str, dict[str, Path]]:
        """``{model: {sample_id: path}}`` of the outputs folder (empty without one); read once."""
        if self.outputs is None:
            return {}
        if self._model_files is None:
            from echo_builder.judge.run import discover_outputs

            self._model_files = discover_outputs(self.outputs)
        return self._model_files

    def card(self) -> str | None:
        """The dataset card (``README.md``) text, or ``None`` when there is none."""
        if self.is_local:
            path = self.root / "README.md"
            return path.read_text(encoding="utf-8") if path.is_file() else None
        try:
            from huggingface_hub import hf_hub_download

            return Path(hf_hub_download(self.source, "README.md", repo_type="dataset")).read_text(
                encoding="utf-8"
            )
        except Exception:  # no card on the Hub (or offline): the About tab says so
            return None

    # --------------------------------------------------------------------------------------------------- views
    def view(self, config: str, sample_id: str, *, show_flagged: bool = False) -> SampleView:
        """Everything shown for one sample (see :class:`SampleView`). Raises ``KeyError`` for an unknown id.

        A sample flagged NSFW (``has_nsfw`` true) has its input, community-output and model-output images
        blurred (:func:`blur_flagged`) and captioned so, unless ``show_flagged``.
        """
        row = self.sample_row(config, sample_id)
        flagged = _flag_value(row.get("has_nsfw")) is True
        blurred = flagged and not show_flagged
        inputs = _image_entries(row.get("input_images"))
        outputs = _image_entries(row.get("output_images"))
        # the authors' release has no URL twins: its tokens themselves name the images (media id or URL)
        input_urls = row.get("input_image_urls") or [
            token_url(e) if isinstance(e, str) else None for e in inputs
        ]
        output_urls = row.get("output_image_urls") or [
            token_url(e) if isinstance(e, str) else None for e in outputs
        ]
        input_images = [
            (img, f"input {i + 1}") for i, img in enumerate(_open_image(e) for e in inputs) if img is not None
        ]
        output_images = [
            (img, f"community output {i + 1}")
            for i, img in enumerate(_open_image(e) for e in outputs)
            if img is not None
        ]
        model_outputs = [
            (str(files[sample_id]), model)
            for model, files in self.model_files().items()
            if sample_id in files
        ]
        if blurred:
            note = " (flagged NSFW, blurred)"
            input_images = [(blur_flagged(img), caption + note) for img, caption in input_images]
            output_images = [(blur_flagged(img), caption + note) for img, caption in output_images]
            opened = [(_open_image({"path": path, "bytes": None}), model) for path, model in model_outputs]
            model_outputs = [(blur_flagged(img), model + note) for img, model in opened if img is not None]
        feedback = pd.DataFrame(
            feedback_items(row.get("community_feedback")), columns=["post_url", "feedback"]
        )
        flags = pd.DataFrame(
            [
                {"flag": name, "applies": flag_text(row.get(name)), "meaning": COLUMN_DOCS.get(name, "")}
                for name in FLAG_COLUMNS
            ],
            columns=["flag", "applies", "meaning"],
        )
        return SampleView(
            sample_id=sample_id,
            prompt=str(row.get("prompt") or ""),
            details=_details(row, config),
            input_images=input_images,
            output_images=output_images,
            model_outputs=model_outputs,
            feedback=feedback,
            flags=flags,
            links=_links(row, inputs, input_urls, outputs, output_urls),
            flagged=flagged,
            blurred=blurred,
        )


def _details(row: dict[str, Any], config: str) -> str:
    parts = [f"**{row['id']}** in `{config}`"]
    for key, label in (
        ("platform", "platform"),
        ("created_at", "posted"),
        ("quality", "quality"),
        ("tier", "tier"),
    ):
        if row.get(key):
            parts.append(f"{label}: {row[key]}")
    if row.get("review"):
        parts.append(f"review: {row['review']}")
    notes = [
        label
        for key, label in (
            ("prompt_modified", "prompt stitched or filled"),
            ("prompt_fill_blank", "fill-in-the-blank template"),
            ("is_screenshot", "from a conversation screenshot"),
        )
        if row.get(key)
    ]
    if notes:
        parts.append("; ".join(notes))
    if _flag_value(row.get("has_nsfw")) is True:
        parts.append(
            "**flagged NSFW** by the build's screening (images blurred unless 'Show flagged images')"
        )
    return " · ".join(parts)


def _link(url: str | None) -> str:
    return f"<{url}>" if url else "(no URL)"


def _links(
    row: dict[str, Any],
    inputs: Sequence[Any],
    input_urls: Sequence[Any],
    outputs: Sequence[Any],
    output_urls: Sequence[Any],
) -> str:
    lines = ["**Source posts** (the first holds the task)"]
    posts = row.get("source_post_urls") or []
    lines += [f"{i + 1}. {_link(url)}" for i, url in enumerate(posts)] or ["(none recorded)"]
    for title, images, urls in (
        ("Input images", inputs, input_urls),
        ("Output images", outputs, output_urls),
    ):
        if not urls:
            continue
        lines.append(f"\n**{title}**")
        for i, url in enumerate(urls):
            missing = i >= len(images) or images[i] is None or isinstance(images[i], str)
            lines.append(f"{i + 1}. {_link(url)}" + (" (not downloaded)" if missing else ""))
    errors = row.get("media_errors") or []
    if errors:
        lines.append("\n**Media errors**")
        lines += [f"- {error}" for error in errors]
    return "\n".join(lines)


def filter_samples(table: pd.DataFrame, query: str = "", flags: Sequence[str] = ()) -> pd.DataFrame:
    """Rows of ``table`` matching every word of ``query`` and having every flag in ``flags`` set to ``True``.

    Args:
        table: a :meth:`Benchmark.samples` frame.
        query: whitespace-separated words, matched case-insensitively as substrings of the sample's id, prompt
            or community feedback; every word must match (empty: no text filter).
        flags: applicability flag names (:data:`FLAG_COLUMNS`) that must be ``True`` (unknown does not match).

    Raises:
        ValueError: an unknown flag name.
    """
    unknown = [f for f in flags if f not in FLAG_COLUMNS]
    if unknown:
        raise ValueError(f"unknown applicability flag(s) {unknown}; choose from {', '.join(FLAG_COLUMNS)}")
    keep = pd.Series(True, index=table.index)
    for name in flags:
        keep &= table[name].map(lambda v: _flag_value(v) is True) if name in table.columns else False
    words = query.lower().split()
    if words:
        feedback = table["community_feedback"].map(_feedback_text) if "community_feedback" in table else ""
        haystack = (
            table["id"].astype(str) + "\n" + table["prompt"].fillna("").astype(str) + "\n" + feedback
        ).str.lower()
        for word in words:
            keep &= haystack.str.contains(word, regex=False)
    return table[keep]


def listing(table: pd.DataFrame) -> pd.DataFrame:
    """The sample table as shown: id, prompt (first 160 characters), platform, image and feedback counts, flags.

    ``flags`` names the metrics whose applicability flag is ``True`` (``color`` for ``no_color_shift``, ``structure``,
    ``face``, ``text``), and those whose flag is unknown with a ``?`` (``text?``).
    """

    def flags_of(row: pd.Series) -> str:
        shown = []
        for name in FLAG_COLUMNS:
            value = _flag_value(row.get(name))
            if value is True:
                shown.append(_SHORT_FLAG.get(name, name))
            elif value is None and name in row.index:
                shown.append(f"{_SHORT_FLAG.get(name, name)}?")
        return ", ".join(shown)

    def preview(text: Any) -> str:
        text = str(text or "").replace("\n", " ")
        return text if len(text) <= _PROMPT_PREVIEW else text[: _PROMPT_PREVIEW - 1] + "…"

    rows = pd.DataFrame(
        {
            "id": table["id"].astype(str),
            "prompt": table["prompt"].map(preview),
            "platform": table["platform"].fillna("") if "platform" in table else "",
            "inputs": table["n_input_images"].astype(int),
            "outputs": table["n_output_images"].astype(int),
            "feedback": table["community_feedback"].map(_feedback_count)
            if "community_feedback" in table
            else 0,
            "flags": table.apply(flags_of, axis=1) if len(table) else pd.Series(dtype=str),
        },
        columns=list(LISTING_COLUMNS),
    )
    return rows.reset_index(drop=True)
