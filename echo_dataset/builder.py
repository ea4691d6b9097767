"""``EchoBench``: a ``datasets`` builder that reads a curation build folder directly.

An alternative to :func:`echo_dataset.writer.write_hub_folder` (no loading script: the class is imported and used
in code). It reads the latest sample stage present under ``<data_dir>/stages/`` (``applicability``, ``tier``,
``screenshots``, ``templates``, ``roles``, ``media``, then ``extract``), routes samples the way the writer's caller
does (:func:`echo_dataset.rows.route_sample_dict`) and encodes them exactly as the writer does, so both paths give
the same rows::

    builder = EchoBench(config_name="text_to_image", data_dir="runs/gpt-image", cache_dir="/tmp/hf")
    builder.download_and_prepare()
    dataset = builder.as_dataset("test")
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import datasets

from echo_dataset import CONFIG_NAMES, SPLIT
from echo_dataset.errors import InvalidHubFolderError
from echo_dataset.features import features_for
from echo_dataset.pseudonym import DEFAULT_SALT, author_identifiers, build_salt
from echo_dataset.rows import route_sample_dict, row_from_sample_dict
from echo_dataset.writer import encode_rows, load_images

__all__ = ["SAMPLE_STAGES", "EchoBench", "EchoBenchConfig", "latest_sample_stage"]

#: Stages whose ``stages/<name>.jsonl`` holds samples, latest first.
SAMPLE_STAGES = ("applicability", "tier", "screenshots", "templates", "roles", "media", "extract")


def latest_sample_stage(build_dir: str | Path) -> Path:
    """The ``stages/<stage>.jsonl`` of the latest sample stage in ``build_dir``."""
    stages = Path(build_dir) / "stages"
    for name in SAMPLE_STAGES:
        if (stages / f"{name}.jsonl").is_file():
            return stages / f"{name}.jsonl"
    raise InvalidHubFolderError(
        f"no sample stage output in {str(stages)!r}: expected one of "
        f"{', '.join(n + '.jsonl' for n in SAMPLE_STAGES)}; run `echo-bench build` first"
    )


@dataclass
class EchoBenchConfig(datasets.BuilderConfig):
    """One ECHO config. ``media_root`` defaults to ``<data_dir>/media``; ``pseudonymize`` and ``salt`` as in
    :func:`echo_dataset.writer.write_hub_folder`; ``salt=None`` (the default) uses the build's own salt
    (``<data_dir>/stages/salt``, as the build's dataset does), or the public default salt when the build has
    none. Authors' handles and user ids from ``stages/collect.jsonl`` are replaced inside URLs, as in the build."""

    media_root: str | None = None
    pseudonymize: bool = True
    salt: str | None = None


class EchoBench(datasets.GeneratorBasedBuilder):
    """ECHO's configs built from a curation run folder (``data_dir``)."""

    BUILDER_CONFIG_CLASS = EchoBenchConfig
    BUILDER_CONFIGS: ClassVar[list[EchoBenchConfig]] = [
        EchoBenchConfig(name=c, description=f"ECHO {c} samples") for c in CONFIG_NAMES
    ]
    DEFAULT_CONFIG_NAME = "text_to_image"

    def _info(self) -> datasets.DatasetInfo:
        return datasets.DatasetInfo(
            description="ECHO benchmark samples curated from social media (arXiv 2510.15021).",
            features=features_for(self.config.name),
            citation="arXiv:2510.15021",
        )

    def _split_generators(self, dl_manager: Any) -> list[datasets.SplitGenerator]:
        if not self.config.data_dir:
            raise InvalidHubFolderError("EchoBench needs data_dir= the curation build folder")
        build = Path(self.config.data_dir)
        if (build / "changes.json").is_file():
            # a refresh (build --previous / --takedowns): the stage files hold this window's curation only, without
            # the rows carried over and with the samples a takedown withheld
            raise InvalidHubFolderError(
                f"{build} is a refreshed build (it has changes.json): its stage files are not the dataset; load "
                f"its Parquet files instead (datasets.load_dataset({str(build)!r}, config) or "
                "echo_dataset.load_config)"
            )
        media = Path(self.config.media_root) if self.config.media_root else build / "media"
        return [
            datasets.SplitGenerator(
                name=SPLIT,
                gen_kwargs={"path": str(latest_sample_stage(build)), "media_root": str(media)},
            )
        ]

    def _generate_examples(self, path: str, media_root: str):
        rows = []
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    sample = json.loads(line)
                    if route_sample_dict(sample) == self.config.name:
                        rows.append(row_from_sample_dict(sample))
        build = Path(path).parent.parent
        salt = self.config.salt or build_salt(build, create=False) or DEFAULT_SALT
        identifiers: list[str] = []
        collected = build / "stages" / "collect.jsonl"
        if self.config.pseudonymize and collected.is_file():
            with open(collected, encoding="utf-8") as handle:
                identifiers = author_identifiers(json.loads(line) for line in handle if line.strip())
        encoded = encode_rows(
            rows,
            self.config.name,
            media_root=media_root if Path(media_root).is_dir() else None,
            pseudonymize_rows=self.config.pseudonymize,
            salt=salt,
            identifiers=identifiers,
        )
        for row in encoded:
            yield row["id"], load_images(row)
