"""``echo-bench import echo2025``: the authors' ECHO release -> a normal echo-bench benchmark folder.

The release (``echo-bench/echo2025`` on the Hub, or a local folder in the Hub layout,
``<config>/test-*.parquet``) stores images as string tokens and feedback and boxes as text; see
:mod:`echo_dataset.release`. :func:`import_release` reads it leniently and writes a benchmark with the same writer
``build`` uses (:func:`echo_dataset.writer.write_hub_folder`), so ``judge``, ``metrics``, ``generate`` and the Space
read it like any other:

- every cell is parsed without raising (JSON, Python repr, prose, empty) and each cell not in JSON is counted per
  column (:attr:`ImportReport.parse_problems`);
- image tokens become URLs (an X media id -> ``https://pbs.twimg.com/media/<ID>?format=jpg&name=orig``); a local
  copy in the authors' download-script layout under ``images`` is used first
  (``images_to_image/<id>/input_images/input_<k>.<ext>``, ``k`` from 1 in column order; ``output_images/output_<k>``
  likewise), else the media stage downloads it (:func:`echo_builder.stages.media.run_media`: guarded,
  content-addressed in ``OUT/media``, so a rerun fetches nothing twice); ``offline`` uses local copies and the
  store only and counts what is missing, per image, in the row's ``media_errors`` and in the report;
- screenshots (``is_screenshot``) take the download script's crops (``crops/input_<k>_crop_<j>.<ext>``) when
  present, else are cropped from their boxes (clamped to the image, shrunk 10 px inward, as the ``screenshots``
  stage does); the crops become the sample's input images and the boxes stay in ``input_bboxes``;
- metric-assignment JSON files attach as the applicability columns: an id with an assignment gets ``True`` for
  each metric listed and ``False`` for the others; an id without one keeps ``None`` (unknown, never "not
  applicable");
- official ids are kept; text is kept verbatim (no pseudonymization: the release is already public as published).
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from echo_builder.errors import ConfigError
from echo_builder.input_files import parse_json, read_text
from echo_builder.records import ApplicabilityFlags, BoundingBox, Feedback, MediaRef, Sample
from echo_dataset import CONFIG_NAMES, SPLIT
from echo_dataset.release import (
    BOX_COLUMNS,
    MEDIA_URL_TEMPLATE,
    RELEASE_ID,
    boxes_per_image,
    feedback_items,
    lenient_bool,
    parse_cell,
    token_list,
    token_url,
)

__all__ = ["ASSIGNMENT_METRICS", "IMPORT_RECORD", "ImportReport", "import_release", "read_assignments"]

#: File in OUT that records an import (its report); an OUT holding it may be imported into again (resume).
IMPORT_RECORD = "import.json"
#: Metric names in the authors' assignment files (lower case, words) -> echo-bench's applicability column.
ASSIGNMENT_METRICS = {
    "no color shift": "no_color_shift",
    "no colour shift": "no_color_shift",
    "color shift": "no_color_shift",
    "colour shift": "no_color_shift",
    "spatial position preservation": "structure",
    "structure preservation": "structure",
    "structure": "structure",
    "structure distance": "structure",
    "face identity preservation": "face_identity",
    "face identity": "face_identity",
    "text rendering": "text_rendering",
}
_FLAGS = tuple(ApplicabilityFlags.model_fields)  # the dataset's flag columns (echo_dataset.features)
_SAFE_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")
_IMAGE_DIRS = ("images_to_image", "image_to_image", "text_to_image", "analysis")
_QUALITIES = ("Benchmark", "Analysis", "Trash")
_MAX_LISTED_MISSING = 200


@dataclass
class ImportReport:
    """What an import read, resolved and could not resolve (also written to ``OUT/import.json``).

    Attributes:
        source: the Hub id or local folder read; ``revision``: the Hub commit when known.
        rows: rows written per config; ``skipped``: rows not written (no id, duplicate id), per reason.
        images: per config, image references by outcome: ``resolved`` (``local``, ``download``, ``store``,
            ``embedded``) and ``missing``.
        missing: ``"<config>/<id>: <token>: <reason>"`` of the first :data:`_MAX_LISTED_MISSING` missing images.
        parse_problems: per column, cells that were not JSON (``python repr``, ``prose``) or could not be read
            (``unreadable``).
        crops: screenshot crops used (``local``) or made from boxes (``from boxes``); screenshots left whole.
        assignments: ids with flags attached, ids in the files but not in the release, metric names not known.
    """

    source: str
    revision: str | None = None
    rows: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    images: dict[str, dict[str, int]] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    parse_problems: dict[str, dict[str, int]] = field(default_factory=dict)
    crops: dict[str, int] = field(default_factory=dict)
    assignments: dict[str, Any] = field(default_factory=dict)
    out_dir: str = ""

    def problem(self, column: str, kind: str) -> None:
        counts = self.parse_problems.setdefault(column, {})
        counts[kind] = counts.get(kind, 0) + 1

    def as_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()}

    def summary_lines(self) -> list[str]:
        """The summary ``import`` prints: rows and images per config, parse problems by column."""
        lines = [f"imported {self.source}" + (f" @ {self.revision}" if self.revision else "")]
        lines.append(f"{'config':<16} {'rows':>6} {'images':>7} {'resolved':>9} {'missing':>8}")
        for config in CONFIG_NAMES:
            if config not in self.rows:
                continue
            img = self.images.get(config, {})
            resolved = sum(v for k, v in img.items() if k != "missing")
            lines.append(
                f"{config:<16} {self.rows[config]:>6} {resolved + img.get('missing', 0):>7} {resolved:>9} "
                f"{img.get('missing', 0):>8}"
            )
        problems = "; ".join(
            f"{column}: " + ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))
            for column, kinds in sorted(self.parse_problems.items())
        )
        lines.append(f"parse problems by column: {problems or 'none'}")
        if any(self.skipped.values()):
            lines.append(
                "rows skipped: " + ", ".join(f"{n} {why}" for why, n in sorted(self.skipped.items()))
            )
        if self.crops:
            lines.append("screenshots: " + ", ".join(f"{n} {k}" for k, n in sorted(self.crops.items())))
        if self.assignments:
            a = self.assignments
            lines.append(
                f"assignments: {a.get('ids_flagged', 0)} ids flagged, {a.get('ids_not_in_release', 0)} ids not "
                f"in the release, unknown metric names: {', '.join(a.get('unknown_metrics', [])) or 'none'}"
            )
        return lines


# ------------------------------------------------------------------------------------------------ reading
def _local_files(root: Path, config: str) -> list[Path]:
    for folder in (root / config, root / "data" / config):
        files = sorted(folder.glob(f"{SPLIT}-*.parquet")) or sorted(folder.glob("*.parquet"))
        if files:
            return files
    return []


def _hub_offline() -> bool:
    return any(
        os.environ.get(name, "").lower() in ("1", "true", "yes", "on")
        for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
    )


def read_release(
    source: str,
    revision: str | None = None,
    *,
    cache_dir: str | Path | None = None,
) -> tuple[dict[str, list[dict[str, Any]]], str | None]:
    """Rows per config of the release at ``source`` (a local folder in the Hub layout, or a Hub id), and the
    Hub revision (commit) when known. ``cache_dir``: where ``datasets`` caches a Hub download (default: the
    Hugging Face cache).

    Raises:
        ConfigError: no such folder and not a loadable Hub id (offline, unknown, unreachable), or no config found;
            one line saying which.
    """
    path = Path(source).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ConfigError(
                f"release source {source!r} is a file; give a folder in the Hub layout or a Hub id"
            )
        import pyarrow.parquet as pq

        rows: dict[str, list[dict[str, Any]]] = {}
        for config in CONFIG_NAMES:
            files = _local_files(path, config)
            if files:
                try:
                    rows[config] = [r for f in files for r in pq.read_table(f).to_pylist()]
                except Exception as exc:  # a torn or foreign file: one line naming it
                    raise ConfigError(
                        f"cannot read {config!r} of {source!r}: {type(exc).__name__}: {exc}"
                    ) from None
        if not rows:
            raise ConfigError(
                f"no Parquet files of the configs {', '.join(CONFIG_NAMES)} in {source!r} (expected "
                f"<config>/{SPLIT}-*.parquet, the Hub layout)"
            )
        return rows, revision
    parts = str(source).split("/")
    if len(parts) != 2 or not all(parts) or str(source).startswith((".", "~")):
        raise ConfigError(f"release source {source!r} is neither a local folder nor a Hub id (owner/name)")
    if _hub_offline():
        raise ConfigError(
            f"release {source!r} is not a local folder, and Hugging Face is offline (HF_HUB_OFFLINE), so it "
            "cannot be downloaded; give a local copy in the Hub layout"
        )
    try:
        import datasets
    except ImportError:  # pragma: no cover - datasets is a core dependency
        raise ConfigError("reading a Hub release needs `pip install datasets`") from None
    try:
        names = datasets.get_dataset_config_names(str(source), revision=revision)
    except Exception as exc:
        reason = (str(exc).strip().splitlines() or [""])[0][:300]
        raise ConfigError(f"cannot read Hub dataset {source!r} ({type(exc).__name__}: {reason})") from None
    rows = {}
    for config in (c for c in CONFIG_NAMES if c in names):
        try:
            data = datasets.load_dataset(
                str(source),
                config,
                split=SPLIT,
                revision=revision,
                cache_dir=str(cache_dir) if cache_dir is not None else None,
            )
            for column, feature in data.features.items():
                if isinstance(feature, datasets.Image):
                    data = data.cast_column(column, datasets.Image(decode=False))
                elif isinstance(feature, datasets.List) and isinstance(feature.feature, datasets.Image):
                    data = data.cast_column(column, datasets.List(datasets.Image(decode=False)))
            rows[config] = list(data)
        except Exception as exc:
            reason = (str(exc).strip().splitlines() or [""])[0][:300]
            raise ConfigError(
                f"cannot load {source!r} config {config!r} ({type(exc).__name__}: {reason})"
            ) from None
    if not rows:
        raise ConfigError(f"Hub dataset {source!r} has none of the configs {', '.join(CONFIG_NAMES)}")
    if revision is None or not re.fullmatch(r"[0-9a-f]{40}", revision):
        try:
            from huggingface_hub import HfApi

            revision = HfApi().dataset_info(str(source), revision=revision).sha or revision
        except Exception:  # the revision is a courtesy in the card; its absence is not an error
            pass
    return rows, revision


# ----------------------------------------------------------------------------------------------- assignments
def _metric_column(name: Any) -> str | None:
    words = " ".join(re.sub(r"[^a-z0-9]+", " ", str(name).lower()).split())
    if words in ASSIGNMENT_METRICS:
        return ASSIGNMENT_METRICS[words]
    return words.replace(" ", "_") if words.replace(" ", "_") in _FLAGS else None


def _listed(value: Any) -> list[Any]:
    """A JSON value as a list of names or ids: a list as it is, a string or number as one item, else none."""
    if isinstance(value, list):
        return [v for v in value if isinstance(v, (str, int)) and not isinstance(v, bool)]
    if isinstance(value, (str, int)) and not isinstance(value, bool):
        return [value]
    return []


def read_assignments(folder: str | Path) -> tuple[dict[str, set[str]], list[str]]:
    """Metric assignments of every ``*.json`` file in ``folder``: id -> applicability columns that apply, and the
    metric names that are not known.

    Each file is either ``{metric name: [ids]}`` (or ``{metric: {id: bool}}``), ``{id: [metric names]}`` (or
    ``{id: metric name}``, ``{id: {metric: bool}}``), or a list of ``{"id": ..., "metrics": [...]}`` records.
    Names are read case- and punctuation-insensitively (``No Color Shift`` -> ``no_color_shift``, ``Spatial
    Position Preservation`` -> ``structure``, ``Face Identity Preservation`` -> ``face_identity``, ``Text
    Rendering`` -> ``text_rendering``). An id listed with no metric is assigned none (all ``False``).

    Raises:
        ConfigError: the folder does not exist, has no ``.json`` file, or a file is not JSON (one line naming it).
    """
    root = Path(folder)
    if not root.is_dir():
        raise ConfigError(f"--assignments {str(root)!r} is not a folder")
    files = sorted(root.rglob("*.json"))
    if not files:
        raise ConfigError(f"--assignments {str(root)!r} holds no .json file")
    applies: dict[str, set[str]] = {}
    unknown: set[str] = set()

    def add(sample_id: Any, metric: Any, value: Any = True) -> None:
        column = _metric_column(metric)
        if column is None:
            unknown.add(str(metric))
            return
        flags = applies.setdefault(str(sample_id), set())
        if lenient_bool(value) is True:
            flags.add(column)

    for file in files:
        what = f"assignment file {str(file)!r}"
        data = parse_json(read_text(file, what), what)  # a regular file, UTF-8, JSON of sane depth
        if isinstance(data, list):
            for record in data:
                if isinstance(record, Mapping) and "id" in record:
                    applies.setdefault(str(record["id"]), set())
                    for m in _listed(record.get("metrics", record.get("metric"))):
                        add(record["id"], m)
            continue
        if not isinstance(data, Mapping):
            raise ConfigError(f"assignment file {str(file)!r} is neither a JSON object nor a list")
        for key, value in data.items():
            if _metric_column(key) is not None:  # {metric: [ids]} / {metric: {id: bool}}
                if isinstance(value, Mapping):
                    for sample_id, flag in value.items():
                        add(sample_id, key, flag)
                else:
                    for sample_id in _listed(value):
                        add(sample_id, key)
            else:  # {id: [metrics]} / {id: metric} / {id: {metric: bool}}
                applies.setdefault(str(key), set())
                if isinstance(value, Mapping):
                    for metric, flag in value.items():
                        add(key, metric, flag)
                else:
                    for metric in _listed(value):
                        add(key, metric)
    return applies, sorted(unknown)


# -------------------------------------------------------------------------------------------------- import
def _check_out(out: Path, source: str, images: Path | None) -> None:
    """Refuse, before the release is read, an ``--out`` that is a file, the source or the images folder, a folder
    of other files or another command's output, or an earlier import holding a symbolic link where import
    writes (see :func:`_check_writable_paths`)."""
    from echo_builder.outlock import is_lock_file
    from echo_dataset.safe_io import claim_output, read_marker

    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {str(out)!r} is a file; give a folder")
    src = Path(source).expanduser()
    for other, what in ((src, "the release source"), (images, "the --images folder")):
        if other is not None and other.exists() and other.resolve() == out.resolve():
            raise ConfigError(f"--out {str(out)!r} is {what}; choose another folder")
    if not out.is_dir():
        return
    foreign = [p for p in out.iterdir() if p.name not in _SEEDED and not is_lock_file(p.name)]
    if foreign and (read_marker(out) or {}).get("kind") != "import":
        # claim_output says why, with the details (it refuses a folder it did not write)
        claim_output(out, "import", what="import folder", allowed=_SEEDED, scan_links=False)
    _check_writable_paths(out)


#: what may be in OUT before the import claims it: its own Hub download (``.hf-cache``, which holds the Hub
#: client's own symbolic links, snapshot -> blob, and is never written through by echo-bench)
_SEEDED = frozenset({".hf-cache"})


def _check_writable_paths(out: Path) -> None:
    """No symbolic link where import writes: the record, the card, the configs' folders, the media store."""
    from echo_dataset import CONFIG_NAMES
    from echo_dataset.safe_io import check_inside, refuse_links

    for name in (IMPORT_RECORD, "README.md", "media", ".hf-cache", *CONFIG_NAMES):
        check_inside(out, out / name)
    if (out / "media").is_dir():
        refuse_links(out / "media")


def _claim_out(out: Path) -> None:
    """Create and mark ``out`` right before the first write (a failed read of the release leaves nothing)."""
    from echo_dataset.safe_io import claim_output, mark_output

    claim_output(out, "import", what="import folder", allowed=_SEEDED, scan_links=False)
    _check_writable_paths(out)
    mark_output(out, "import")


def _local_images(images: Path | None, sample_id: str, kind: str) -> dict[int, str]:
    """``k`` -> relative path (to ``images``) of the local copy of image ``k`` of ``kind`` (``input`` /
    ``output``): the first file named ``<kind>_<k>.*`` (by name) in the first of :data:`_IMAGE_DIRS` that has one.

    Each folder is listed once per sample and kind (not once per image token: a row of 100,000 tokens beside
    100,000 files was quadratic, a glob of the whole folder per token)."""
    if images is None or not _SAFE_ID.fullmatch(sample_id):
        return {}
    prefix = f"{kind}_"
    found: dict[int, str] = {}
    for folder in _IMAGE_DIRS:
        base = images / folder / sample_id / f"{kind}_images"
        if not base.is_dir():
            continue
        names: dict[int, list[str]] = {}
        try:
            entries = list(os.scandir(base))
        except OSError:
            continue
        for entry in entries:
            digits, dot, _ = entry.name.removeprefix(prefix).partition(".")
            # exactly what the glob "<kind>_<k>.*" matches: k in plain decimal digits, then a dot
            if not (entry.name.startswith(prefix) and dot and digits.isascii() and digits.isdigit()):
                continue
            if str(int(digits)) != digits:  # "input_01.png" is not image 1
                continue
            try:
                if not entry.is_file():  # follows a symbolic link, as Path.is_file did
                    continue
            except OSError:
                continue
            names.setdefault(int(digits), []).append(entry.name)
        for k, candidates in names.items():
            found.setdefault(k, f"{folder}/{sample_id}/{kind}_images/{min(candidates)}")
    return found


def _local_crops(images: Path | None, sample_id: str) -> list[tuple[int, int, str]]:
    """``(k, j, relative path)`` of the download script's crops of a sample, in numeric order."""
    if images is None or not _SAFE_ID.fullmatch(sample_id):
        return []
    found = []
    for folder in _IMAGE_DIRS:
        base = images / folder / sample_id / "crops"
        if base.is_dir():
            for p in base.iterdir():
                match = re.fullmatch(r"input_(\d+)_crop_(\d+)\.[A-Za-z0-9]+", p.name)
                if match and p.is_file():
                    found.append((int(match[1]), int(match[2]), p.relative_to(images).as_posix()))
            if found:
                break
    return sorted(found)


def _images_root(images: str | Path | None) -> Path | None:
    if images is None:
        return None
    root = Path(images).expanduser()
    if not root.is_dir():
        raise ConfigError(f"--images {str(root)!r} is not a folder")
    if not any((root / d).is_dir() for d in _IMAGE_DIRS) and (root / "data").is_dir():
        return root / "data"  # the download script's folder itself, or the one above its data/
    return root


def _refs(
    tokens: Sequence[Any],
    kind: str,
    sample_id: str,
    images: Path | None,
    template: str,
    embedded: list[tuple[int, Any]],
) -> list[MediaRef]:
    refs = []
    local_copies = _local_images(images, sample_id, kind) if tokens else {}
    for k, token in enumerate(tokens, start=1):
        if isinstance(token, Mapping):  # an embedded image (the -mit variant): stored directly
            embedded.append((len(refs), token))
            refs.append(MediaRef(type="image", media_id=f"embedded:{sample_id}:{kind}_{k}"))
            continue
        text = str(token).strip()
        url = token_url(text, template)
        media_id = text if url is not None and not text.lower().startswith(("http://", "https://")) else None
        local = local_copies.get(k)
        refs.append(
            MediaRef(type="image", url=url, media_id=media_id or (None if url else text or None), path=local)
        )
    return refs


def _store_embedded(store: Any, ref: MediaRef, image: Mapping[str, Any]) -> tuple[MediaRef, str | None]:
    from echo_builder.stages.media import _EXT, _check_image

    data = image.get("bytes")
    if not data:
        return ref, "embedded image without bytes"
    try:
        width, height, n_frames, fmt = _check_image(bytes(data), ref.media_id or "embedded image")
    except Exception as exc:  # a bad embedded image is that image's error only
        return ref, str(exc)
    entry = store.put(
        ref.media_id, bytes(data), ext=_EXT.get(fmt, "bin"), width=width, height=height, n_frames=n_frames
    )
    return ref.model_copy(
        update={
            "sha256": entry["sha256"],
            "path": store.relative(entry["sha256"]),
            "width": width,
            "height": height,
        }
    ), None


def _crop_from_boxes(
    sample: Sample, boxes: dict[int, list[tuple[float, float, float, float]]], store_root: Path
) -> tuple[list[MediaRef], list[BoundingBox], int]:
    """Crops of each input image's boxes (clamped, shrunk 10 px inward), the boxes kept, and boxes dropped."""
    from echo_builder.errors import ImageError
    from echo_builder.imaging import load_rgb
    from echo_builder.stages.templates_screenshots import CROP_MARGIN_PX, _crop

    crops: list[MediaRef] = []
    kept: list[BoundingBox] = []
    dropped = 0
    for k, image_boxes in sorted(boxes.items()):
        ref = sample.input_images[k - 1] if 0 < k <= len(sample.input_images) else None
        if ref is None or ref.path is None:
            dropped += len(image_boxes)
            continue
        try:
            original = load_rgb(store_root / ref.path)
        except (ImageError, OSError):
            dropped += len(image_boxes)
            continue
        width, height = original.size
        for x1, y1, x2, y2 in image_boxes:
            x1, x2 = float(max(0, round(min(x1, x2)))), float(min(width, round(max(x1, x2))))
            y1, y2 = float(max(0, round(min(y1, y2)))), float(min(height, round(max(y1, y2))))
            if x2 - x1 <= 2 * CROP_MARGIN_PX or y2 - y1 <= 2 * CROP_MARGIN_PX:
                dropped += 1
                continue
            box = BoundingBox(x1=x1, y1=y1, x2=x2, y2=y2, role="input")
            crop = _crop(original, box, store_root)
            if crop is None:  # pragma: no cover - excluded by the size check above
                dropped += 1
                continue
            kept.append(box)
            crops.append(crop.model_copy(update={"url": ref.url, "media_id": ref.media_id}))
    return crops, kept, dropped


def import_release(
    source: str = RELEASE_ID,
    out_dir: str | Path = "echo2025",
    *,
    images: str | Path | None = None,
    assignments: str | Path | None = None,
    offline: bool = False,
    media_allow: Sequence[str] = (),
    revision: str | None = None,
    media_url_template: str = MEDIA_URL_TEMPLATE,
    concurrency: int = 8,
    on_progress: Callable[[str], None] | None = None,
) -> ImportReport:
    """Import the authors' release into ``out_dir`` (see the module docstring); returns the :class:`ImportReport`.

    Args:
        source: a Hub id (default :data:`echo_dataset.release.RELEASE_ID`; also ``echo-bench/echo2025-mit``) or a
            local folder in the Hub layout.
        out_dir: the benchmark folder to write: new, empty, or an earlier import (rerun: stored images are reused).
            Nothing is written outside it.
        images: the authors' download-script folder (``data/`` or its parent): local copies used first.
        assignments: a folder of metric-assignment JSON files (see :func:`read_assignments`).
        offline: download nothing; images not found locally or in ``OUT/media`` are counted missing.
        media_allow: non-public hosts the media stage may fetch from (``--media-allow``; a local mirror).
        revision: Hub revision to read (branch, tag or commit).
        media_url_template: URL of an X media id, ``{media_id}`` replaced (a mirror of pbs.twimg.com).
        concurrency: parallel downloads.

    Raises:
        ConfigError: a foreign non-empty ``out_dir``, an unreadable source, ``images`` or ``assignments``; before
            anything is written.
    """
    from echo_builder.dataset_rows import sample_to_row
    from echo_builder.stages.media import MediaPolicy, MediaStore, fetch_media, run_media

    if "{media_id}" not in media_url_template:
        raise ConfigError(f"media URL template {media_url_template!r} has no {{media_id}} placeholder")
    out = Path(out_dir).expanduser()
    images_root = _images_root(images)
    _check_out(out, str(source), images_root)
    policy = MediaPolicy.from_entries(media_allow)
    flags_by_id, unknown_metrics = read_assignments(assignments) if assignments is not None else ({}, [])
    # a Hub download is cached inside OUT (OUT/.hf-cache; publish uploads only the dataset's files)
    raw, revision = read_release(str(source), revision, cache_dir=out / ".hf-cache")
    report = ImportReport(source=str(source), revision=revision, out_dir=str(out))
    say = on_progress or (lambda message: None)

    samples: dict[str, list[Sample]] = {}
    boxes_of: dict[str, dict[int, list[tuple[float, float, float, float]]]] = {}
    embedded_of: dict[tuple[str, str], list[tuple[int, Any]]] = {}
    seen: set[str] = set()
    for config, rows in raw.items():
        say(f"reading {config}: {len(rows)} rows")
        samples[config] = []
        for row in rows:
            sample_id = str(row.get("id") or "").strip()
            if not sample_id:
                report.skipped["without an id"] = report.skipped.get("without an id", 0) + 1
                continue
            if sample_id in seen:
                report.skipped["duplicate id"] = report.skipped.get("duplicate id", 0) + 1
                continue
            seen.add(sample_id)
            refs: dict[str, list[MediaRef]] = {}
            for column, kind in (("input_images", "input"), ("output_images", "output")):
                tokens, form = token_list(row.get(column))
                if form in ("python", "prose"):
                    report.problem(column, "python repr" if form == "python" else "text, not a list")
                embedded: list[tuple[int, Any]] = []
                refs[column] = _refs(tokens, kind, sample_id, images_root, media_url_template, embedded)
                if embedded:
                    embedded_of[(sample_id, column)] = embedded
            feedback_cell = row.get("community_feedback")
            parsed, form = parse_cell(feedback_cell)
            if form in ("python", "prose"):
                report.problem("community_feedback", "python repr" if form == "python" else "prose")
            feedback = tuple(Feedback(**item) for item in feedback_items(feedback_cell))
            box_column = next((c for c in BOX_COLUMNS if c in row), None)
            if box_column is not None:
                parsed, form = parse_cell(row.get(box_column))
                dropped: list[str] = []
                boxes = boxes_per_image(parsed, dropped) if form != "prose" else None
                if boxes is None:
                    report.problem(box_column, "unreadable")
                    boxes = {}
                elif form == "python":
                    report.problem(box_column, "python repr")
                for _ in dropped:
                    report.problem(box_column, "unreadable box")
                if boxes:
                    boxes_of[sample_id] = boxes
            flags = flags_by_id.get(sample_id)
            quality = row.get("quality") if row.get("quality") in _QUALITIES else None
            benchmark = config != "analysis"
            samples[config].append(
                Sample(
                    id=sample_id,
                    prompt=str(row.get("prompt") or ""),
                    prompt_modified=bool(lenient_bool(row.get("prompt_modified"))),
                    prompt_fill_blank=bool(lenient_bool(row.get("prompt_fill_blank"))),
                    quality=quality or ("Benchmark" if benchmark else "Analysis"),
                    tier="Benchmark" if benchmark else "Analysis",
                    community_feedback=feedback,
                    input_images=tuple(refs["input_images"]),
                    output_images=tuple(refs["output_images"]),
                    is_screenshot=bool(lenient_bool(row.get("is_screenshot"))),
                    needs_input_images=config == "image_to_image",
                    applicability=ApplicabilityFlags(**{f: f in flags for f in _FLAGS})
                    if flags is not None
                    else ApplicabilityFlags(),
                    platform="x",
                    has_nsfw=lenient_bool(row.get("has_nsfw")),
                )
            )
    report.assignments = (
        {
            "ids_flagged": sum(1 for i in flags_by_id if i in seen),
            "ids_not_in_release": sum(1 for i in flags_by_id if i not in seen),
            "unknown_metrics": unknown_metrics,
        }
        if assignments is not None
        else {}
    )

    _claim_out(out)
    store = MediaStore(out / "media")
    everything = [s for config in samples.values() for s in config]
    say(f"resolving images of {len(everything)} samples" + (" (offline)" if offline else ""))
    media = run_media(
        everything,
        store,
        offline=offline,
        allow=policy,
        local_root=images_root,
        concurrency=concurrency,
    )
    resolved = {s.id: s for s in media.samples}
    written: dict[str, list[dict[str, Any]]] = {}
    for config, config_samples in samples.items():
        counts: Counter[str] = Counter()
        written[config] = []
        for original in config_samples:
            sample = resolved[original.id]
            errors = list(sample.media_errors)
            columns: dict[str, list[MediaRef]] = {}
            # the embedded images' ids: the media stage's errors for them are dropped, and the store's own errors
            # for them added after the others
            stored: set[str] = set()
            added: list[str] = []
            for column in ("input_images", "output_images"):
                column_refs = list(getattr(sample, column))
                for position, image in embedded_of.get((sample.id, column), []):
                    stored.add(f"media_id:{column_refs[position].media_id}")
                    column_refs[position], error = _store_embedded(store, column_refs[position], image)
                    if error:
                        added.append(f"{column_refs[position].media_id}: {error}")
                columns[column] = column_refs
            if stored:  # one pass (one per embedded image was quadratic): drop what starts with a stored id
                lengths = {len(p) for p in stored}
                errors = [e for e in errors if not any(e[:n] in stored for n in lengths)] + added
            sample = sample.model_copy(
                update={
                    "input_images": tuple(columns["input_images"]),
                    "output_images": tuple(columns["output_images"]),
                    "media_errors": tuple(errors),
                }
            )
            if sample.is_screenshot:
                sample = _screenshot(
                    sample, images_root, boxes_of.get(sample.id, {}), store, report, fetch_media
                )
            elif sample.id in boxes_of:
                boxes = [
                    BoundingBox(x1=min(a, c), y1=min(b, d), x2=max(a, c), y2=max(b, d))
                    for bs in boxes_of[sample.id].values()
                    for a, b, c, d in bs
                    if a != c and b != d
                ]
                sample = sample.model_copy(update={"input_bboxes": tuple(boxes)})
            reasons = _first_error_by_prefix(sample.media_errors)  # one pass, not one per missing image
            for ref in (*sample.input_images, *sample.output_images):
                if ref.path is None:
                    counts["missing"] += 1
                    reason = reasons.get(f"{ref.url or ref.media_id}", "")
                    if len(report.missing) < _MAX_LISTED_MISSING:
                        report.missing.append(f"{config}/{sample.id}: {reason or (ref.url or ref.media_id)}")
                else:
                    counts["resolved"] += 1
            written[config].append(sample_to_row(sample))
        report.rows[config] = len(written[config])
        report.images[config] = dict(counts)
    _write(out, written, store.root, report)
    return report


def _first_error_by_prefix(errors: Sequence[str]) -> dict[str, str]:
    """``key`` -> the first of ``errors`` that starts with ``key + ":"``, for every such key (each text cut at each
    of its colons): the lookup a missing image's reason needs, built in one pass over a row's errors."""
    first: dict[str, str] = {}
    for error in errors:
        at = error.find(":")
        while at != -1:
            first.setdefault(error[:at], error)
            at = error.find(":", at + 1)
    return first


def _screenshot(
    sample: Sample,
    images: Path | None,
    boxes: dict[int, list[tuple[float, float, float, float]]],
    store: Any,
    report: ImportReport,
    fetch_media: Any,
) -> Sample:
    """The sample with its screenshot replaced by crops: the download script's, else cut from the boxes."""
    local = _local_crops(images, sample.id)
    crops: list[MediaRef] = []
    if local:
        outcomes = fetch_media(
            [MediaRef(type="image", path=rel) for _, _, rel in local], store, local_root=images
        )
        for _, _, rel in local:
            outcome = outcomes[rel]
            if outcome.path is not None:
                crops.append(
                    MediaRef(
                        type="image",
                        sha256=outcome.sha256,
                        path=outcome.path,
                        width=outcome.width,
                        height=outcome.height,
                    )
                )
        report.crops["local crops"] = report.crops.get("local crops", 0) + len(crops)
    kept: list[BoundingBox] = []
    if boxes:
        made, kept, dropped = _crop_from_boxes(sample, boxes, store.root)
        if dropped:
            report.crops["boxes dropped"] = report.crops.get("boxes dropped", 0) + dropped
        if not crops:
            crops = made
            report.crops["crops from boxes"] = report.crops.get("crops from boxes", 0) + len(made)
    if not crops:
        report.crops["screenshots left whole"] = report.crops.get("screenshots left whole", 0) + 1
        return sample.model_copy(update={"input_bboxes": tuple(kept)})
    return sample.model_copy(update={"input_images": tuple(crops), "input_bboxes": tuple(kept)})


def _write(
    out: Path, rows: Mapping[str, list[dict[str, Any]]], media_root: Path, report: ImportReport
) -> None:
    from echo_dataset.writer import write_hub_folder

    missing = sum(c.get("missing", 0) for c in report.images.values())
    where = f"`{report.source}`" + (
        f" at revision `{report.revision}`" if report.revision else " (revision not known)"
    )
    description = (
        f"The authors' ECHO release {where}, imported by `echo-bench import echo2025`: official ids, prompts and "
        f"feedback kept verbatim, image tokens resolved to images. {missing} image(s) could not be resolved (each "
        "named in its row's `media_errors`; all in `import.json`)."
        + (
            " Parse problems (cells not in JSON), by column: "
            + "; ".join(
                f"{c}: " + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
                for c, kinds in sorted(report.parse_problems.items())
            )
            + "."
            if report.parse_problems
            else ""
        )
    )
    context = {
        "pretty_name": "ECHO 2025 (official release, imported)",
        "description": description,
        "target_model": "as in the source release",
        "backend": None,
        "license_note": (
            f"As stated by the source release {report.source}; the posts, prompts and images remain their authors'. "
            "This folder is a local conversion for evaluation."
        ),
        "pseudonymized": False,
        "stages": [
            {
                "name": f"import {c}",
                "in": report.rows.get(c, 0),
                "out": report.rows.get(c, 0),
                "failures": n.get("missing", 0),
            }
            for c, n in report.images.items()
        ],
    }
    write_hub_folder(rows, out, media_root=media_root, card_context=context, pseudonymize=False)
    from echo_dataset.safe_io import write_json

    write_json(out, out / IMPORT_RECORD, report.as_json(), indent=2, sort_keys=True)  # never through a link
