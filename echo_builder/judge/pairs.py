"""Preference pairs for training a judge (or a reward model) from a judge run and human votes.

OpenING (arXiv 2411.18499) trained its IntJudge on pairwise preferences between generated outputs; a judged ECHO run
holds such preferences, and human votes on its samples hold better ones. :func:`export_pairs` writes them in a
folder any preference-training code can read:

```
DIR/
  pairs.jsonl        one object per pair (fields below), sorted by sample, model pair, source
  images/outputs/<model>/<sample_id>.<ext>     each model output once (copied, or hard-linked with link=True)
  images/inputs/<sample_id>/<k>.<ext>          the sample's input images (image-to-image), in order
  skipped.jsonl      one object per pair left out, with the reason (a missing or unreadable image, an unknown sample)
  README.md          the layout and how to load it
  .echo-bench.json   marks the folder as an export (a rerun rewrites pairs.jsonl, skipped.jsonl, README.md)
```

A pair object: ``id`` (``<source>/<sample_id>/<model_a>/<model_b>``), ``sample_id``, ``config``, ``prompt``,
``input_images`` (paths relative to DIR), ``model_a``, ``model_b`` (``model_a < model_b``), ``image_a``,
``image_b`` (relative paths), ``preferred`` (``"a"``, ``"b"`` or ``"tie"``), ``chosen`` / ``rejected`` (the
preferred and the other image path; ``null`` for a tie), ``chosen_model`` / ``rejected_model`` (likewise),
``source`` (``judge_majority`` or ``human``), ``votes_a`` / ``votes_b`` / ``votes_tie`` (int: judges, or human
voters, for each outcome), ``n_votes`` (their sum), ``judges`` (judge backend ids for ``judge_majority``; ``[]``
for humans) and ``mode`` (the run's judge mode; ``human`` for votes).

How the outcome is decided: per judge as the leaderboard does (pairwise runs: both presentation orders, a
disagreement between them is a tie; single-answer runs: the higher rating wins, equal ratings tie), then across
judges by strict majority (:func:`echo_builder.stats.majority_vote`; no majority: a tie). Human votes on the same
comparison are combined the same way. Comparisons with a missing output are left out: there is no image to
train on. Community votes (replies of the posts' authors) are not a source yet.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from echo_builder.errors import ConfigError

__all__ = ["PAIRS_FILE", "SKIPPED_FILE", "ExportResult", "export_pairs"]

#: The pairs file and the file of pairs left out, in an export folder.
PAIRS_FILE = "pairs.jsonl"
SKIPPED_FILE = "skipped.jsonl"
_KIND = "pairs"
_SAFE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_PREFERRED = {1.0: "a", 0.0: "b", 0.5: "tie"}


@dataclass
class ExportResult:
    """What :func:`export_pairs` wrote: the folder, pairs per source, and the pairs left out with reasons."""

    out_dir: Path
    n_pairs: dict[str, int] = field(default_factory=dict)
    skipped: list[dict[str, str]] = field(default_factory=list)
    n_images: int = 0


def _component(name: str) -> str:
    """``name`` as one safe path component: kept when plain (letters, digits, ``.``, ``_``, ``-``; not ``.``-led),
    otherwise ``x-`` and a SHA-256 prefix, so no name can climb out of the folder or hide a separator."""
    if _SAFE.fullmatch(name) and ".." not in name:
        return name
    return "x-" + hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:20]


def _image_suffix(data: bytes) -> str | None:
    """The file suffix of encoded image bytes (``.png``, ``.jpg``, ...), ``None`` when Pillow cannot read them."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as img:
            fmt = (img.format or "").lower()
    except (UnidentifiedImageError, OSError, ValueError):
        return None
    return {"jpeg": ".jpg", "tiff": ".tif"}.get(fmt, f".{fmt}" if fmt else None)


def _judge_pairs(verdicts: Sequence[Any]) -> Any:
    """Majority-voted comparisons (one row per sample and model pair) with vote counts, from the run's verdicts."""
    import pandas as pd

    from echo_builder.judge.leaderboard import pairwise_comparisons, verdict_ratings
    from echo_builder.stats import majority_vote, pseudo_pairwise

    pairwise = [v for v in verdicts if v.mode == "pairwise"]
    if pairwise:
        per_judge = pairwise_comparisons(pairwise, missing="skip")[0]
    else:
        per_judge = pseudo_pairwise(verdict_ratings(verdicts), missing="skip")
    if per_judge.empty:
        return pd.DataFrame(
            columns=["sample_id", "model_a", "model_b", "outcome", "votes_a", "votes_b", "votes_tie"]
        )
    return majority_vote(per_judge)


def _human_pairs(path: str | Path) -> Any:
    from echo_builder.stats import load_votes, majority_vote, votes_to_comparisons

    votes = load_votes(path)
    if "sample_id" not in votes.columns:
        raise ConfigError(
            f"{path}: votes need a sample_id column naming the benchmark sample each vote is about"
        )
    human = votes_to_comparisons(votes.astype({"sample_id": str}), id_column="sample_id")
    return majority_vote(human.assign(judge=[f"human-{i}" for i in range(len(human))]), judge_name="human")


class _Images:
    """Copies (or hard-links) images into ``DIR/images`` once each and remembers their relative paths."""

    def __init__(self, root: Path, link: bool) -> None:
        self.root, self.link, self.done = root, link, {}

    def output(self, model: str, sample_id: str, source: Path | None) -> str:
        key = ("output", model, sample_id)
        if key in self.done:
            return self.done[key]
        if source is None:
            raise LookupError(f"model {model!r} has no output file for sample {sample_id!r}")
        try:
            data = source.read_bytes()
        except OSError as exc:
            raise LookupError(f"output {source} cannot be read ({exc.strerror or exc})") from None
        if _image_suffix(data) is None:
            raise LookupError(f"output {source} is not a readable image")
        rel = f"images/outputs/{_component(model)}/{_component(sample_id)}{source.suffix.lower()}"
        self._put(rel, data, source)
        self.done[key] = rel
        return rel

    def inputs(self, sample_id: str, images: Sequence[Mapping[str, Any]]) -> list[str]:
        key = ("inputs", sample_id)
        if key in self.done:
            return self.done[key]
        paths = []
        for k, image in enumerate(images):
            data = image.get("bytes") if isinstance(image, Mapping) else None
            suffix = _image_suffix(data) if isinstance(data, (bytes, bytearray)) else None
            if suffix is None:
                raise LookupError(
                    f"input image {k} of sample {sample_id!r} is missing or not a readable image"
                )
            rel = f"images/inputs/{_component(sample_id)}/{k}{suffix}"
            self._put(rel, bytes(data), None)
            paths.append(rel)
        self.done[key] = paths
        return paths

    def _put(self, rel: str, data: bytes, source: Path | None) -> None:
        from echo_dataset.safe_io import check_inside, ensure_dir, write_bytes

        path = self.root / rel
        ensure_dir(self.root, path.parent)
        if self.link and source is not None:
            check_inside(self.root, path)
            try:
                if path.exists():
                    path.unlink()
                os.link(source, path)  # a link's target, never the link itself
                return
            except OSError:  # another file system, or links not allowed: copy instead
                pass
        write_bytes(self.root, path, data)


def export_pairs(
    run_dir: str | Path,
    out_dir: str | Path,
    *,
    benchmark: str | Path | None = None,
    outputs: str | Path | None = None,
    config: str | None = None,
    human_votes: str | Path | None = None,
    link: bool = False,
) -> ExportResult:
    """Write the run's judge-majority preference pairs (and pairs from ``human_votes``) into ``out_dir``.

    Args:
        run_dir: a judge run folder (``echo-bench judge --out RUN``).
        out_dir: the export folder: absent, empty, or an earlier export (replaced). Nothing is written outside it.
        benchmark, outputs, config: the benchmark, its config and the model outputs folder judged; default what the
            run's ``run.json`` recorded (``benchmark``, ``config``, ``outputs``).
        human_votes: pairwise votes with ``sample_id``, ``model_a``, ``model_b``, ``winner`` (JSON, JSONL or CSV),
            exported as ``source: human``.
        link: hard-link output images instead of copying them (falls back to a copy across file systems).

    Returns:
        :class:`ExportResult`: pairs written per source and the pairs skipped (``id``, ``reason``).

    Raises:
        ConfigError: the run has no verdicts; benchmark, config or outputs are neither given nor recorded; votes
            without ``sample_id``. OutputFolderError: ``out_dir`` holds files that are not an export.
    """
    from echo_builder.judge.results import read_run_meta
    from echo_builder.judge.run import discover_outputs
    from echo_builder.judge.verdicts_file import read_verdicts
    from echo_dataset.loading import read_config
    from echo_dataset.safe_io import claim_output, mark_output, write_text

    verdicts = read_verdicts(run_dir)
    if not verdicts:
        raise ConfigError(f"{run_dir}: the run has no verdicts")
    meta = read_run_meta(run_dir) or {}
    benchmark = benchmark or meta.get("benchmark")
    config = config or meta.get("config")
    outputs = outputs or meta.get("outputs")
    for name, value in (("--benchmark", benchmark), ("--config", config), ("--outputs", outputs)):
        if not value:
            raise ConfigError(f"{run_dir}/run.json does not record {name.lstrip('-')}; give {name}")
    judge_pairs = _judge_pairs(verdicts)
    human = _human_pairs(human_votes) if human_votes is not None else None
    samples = {
        str(row["id"]): row
        for row in read_config(benchmark, config, columns=["id", "prompt", "input_images"])
    }
    files = discover_outputs(outputs)

    out = Path(out_dir)
    claim_output(out, _KIND, signatures=(PAIRS_FILE,), what="pairs export")
    mark_output(out, _KIND)
    images = _Images(out, link)
    judges = sorted({v.judge for v in verdicts})
    mode = meta.get("mode") or verdicts[0].mode
    result = ExportResult(out)
    rows: list[dict[str, Any]] = []
    tables = [("judge_majority", judge_pairs, judges, mode)]
    if human is not None:
        tables.append(("human", human, [], "human"))
    for source, table, names, how in tables:
        result.n_pairs[source] = 0
        for r in table.itertuples(index=False):
            sample_id, a, b = str(r.sample_id), str(r.model_a), str(r.model_b)
            pair_id = f"{source}/{sample_id}/{a}/{b}"
            try:
                sample = samples.get(sample_id)
                if sample is None:
                    raise LookupError(f"sample {sample_id!r} is not in config {config!r} of {benchmark}")
                inputs = images.inputs(
                    sample_id, [i for i in sample.get("input_images") or [] if i is not None]
                )
                image_a = images.output(a, sample_id, files.get(a, {}).get(sample_id))
                image_b = images.output(b, sample_id, files.get(b, {}).get(sample_id))
            except LookupError as exc:
                result.skipped.append({"id": pair_id, "reason": str(exc.args[0])})
                continue
            preferred = _PREFERRED[float(r.outcome)]
            chosen = {"a": (image_a, a), "b": (image_b, b)}.get(preferred, (None, None))
            rejected = {"a": (image_b, b), "b": (image_a, a)}.get(preferred, (None, None))
            votes = (int(r.votes_a), int(r.votes_b), int(r.votes_tie))
            rows.append(
                {
                    "id": pair_id,
                    "sample_id": sample_id,
                    "config": config,
                    "prompt": sample.get("prompt") or "",
                    "input_images": inputs,
                    "model_a": a,
                    "model_b": b,
                    "image_a": image_a,
                    "image_b": image_b,
                    "preferred": preferred,
                    "chosen": chosen[0],
                    "rejected": rejected[0],
                    "chosen_model": chosen[1],
                    "rejected_model": rejected[1],
                    "source": source,
                    "votes_a": votes[0],
                    "votes_b": votes[1],
                    "votes_tie": votes[2],
                    "n_votes": sum(votes),
                    "judges": names,
                    "mode": how,
                }
            )
            result.n_pairs[source] += 1
    rows.sort(key=lambda row: (row["sample_id"], row["model_a"], row["model_b"], row["source"]))
    write_text(out, out / PAIRS_FILE, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
    write_text(
        out, out / SKIPPED_FILE, "".join(json.dumps(s, ensure_ascii=False) + "\n" for s in result.skipped)
    )
    write_text(out, out / "README.md", _readme(result, config, mode))
    result.n_images = sum(len(v) if isinstance(v, list) else 1 for v in images.done.values())
    return result


def _readme(result: ExportResult, config: str, mode: str) -> str:
    counts = ", ".join(f"{source} {n}" for source, n in result.n_pairs.items())
    return f"""# Preference pairs (echo-bench export-pairs)

Pairs of model outputs for one prompt with the preferred one, from an ECHO judge run (config `{config}`, judge
mode `{mode}`) and, when given, human votes. Pairs per source: {counts}; left out: {len(result.skipped)} (see
`{SKIPPED_FILE}`). Community votes are not a source yet.

## Layout

- `{PAIRS_FILE}`: one JSON object per line: `id`, `sample_id`, `config`, `prompt`, `input_images` (list of paths),
  `model_a`, `model_b`, `image_a`, `image_b`, `preferred` (`a`, `b` or `tie`), `chosen` / `rejected` (image paths;
  null for a tie), `chosen_model` / `rejected_model`, `source` (`judge_majority` or `human`), `votes_a`, `votes_b`,
  `votes_tie`, `n_votes`, `judges`, `mode`. Image paths are relative to this folder; `model_a` sorts before
  `model_b` (it is not the position a judge saw first).
- `images/outputs/<model>/<sample_id>.<ext>` and `images/inputs/<sample_id>/<k>.<ext>`: the images. Names with
  characters other than letters, digits, `.`, `_`, `-` are replaced by `x-` and a hash.
- `{SKIPPED_FILE}`: `id` and `reason` of every pair left out (a missing or unreadable image, an unknown sample).

`judge_majority`: each judge's verdict per pair (pairwise runs: both presentation orders, disagreement between
them is a tie; single-answer runs: the higher 1-10 rating wins), then strict majority across judges (no majority:
a tie). `human`: the majority of the human votes on that pair.

## Load

```python
import datasets

folder = "PATH/TO/THIS/FOLDER"
pairs = datasets.load_dataset("json", data_files=f"{{folder}}/{PAIRS_FILE}", split="train")
decided = pairs.filter(lambda row: row["preferred"] != "tie")  # chosen / rejected, as preference trainers expect
decided = decided.map(lambda row: {{k: f"{{folder}}/{{row[k]}}" for k in ("chosen", "rejected")}})
decided = decided.cast_column("chosen", datasets.Image()).cast_column("rejected", datasets.Image())
```
"""
