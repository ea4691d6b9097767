"""Model prices: token counts to US dollars.

The package ships ``echo_builder/prices.yaml``: per model, list prices in USD per 1 million tokens for input and
output tokens, interactive and Batch API, each entry with the ``date`` it was read and its ``source`` page. They
are list prices as of that date, not a quote; a user's own file (``--prices FILE``) replaces entries of the same
name and adds new ones.

Cost of one call = ``input_tokens * input / 1e6 + output_tokens * output / 1e6`` (``batch_input`` and
``batch_output`` for Batch API calls). A model with no entry has no cost: ``None`` (JSON ``null``) with a warning,
never ``0``, so a report never claims an unpriced run was free.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from echo_builder.errors import ConfigError
from echo_builder.secrets import get_logger
from echo_dataset.safe_yaml import load_yaml, shown_key

__all__ = ["DEFAULT_PRICES", "Price", "PriceTable", "TokenCost", "load_prices"]

log = get_logger(__name__)
#: The shipped price file (package data).
DEFAULT_PRICES = "prices.yaml"
#: A dated snapshot suffix after a priced model name: ``-2024-08-06`` or ``-20250514``.
_SNAPSHOT_SUFFIX = re.compile(r"-(\d{4}-\d{2}-\d{2}|\d{8})")


class Price(BaseModel):
    """List prices of one model, USD per 1 million tokens (each finite, >= 0), as of ``date``, from ``source``."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    batch_input: float = Field(ge=0)
    batch_output: float = Field(ge=0)
    date: dt.date
    source: str = Field(min_length=1)

    def cost(self, input_tokens: int, output_tokens: int, *, batch: bool = False) -> float:
        """USD of ``input_tokens`` and ``output_tokens`` (whole numbers >= 0) at interactive or batch prices."""
        per_in, per_out = (self.batch_input, self.batch_output) if batch else (self.input, self.output)
        return (input_tokens * per_in + output_tokens * per_out) / 1e6


@dataclass(frozen=True)
class TokenCost:
    """Tokens and their price for one model: ``usd`` is ``None`` when the model has no price."""

    input_tokens: int
    output_tokens: int
    usd: float | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "usd": None if self.usd is None else round(self.usd, 6),
        }


class PriceTable:
    """Prices by model name, looked up by backend spec or model (see :meth:`price`).

    Args:
        prices: name -> :class:`Price`.
        sources: the files they were read from, in order (for reports).
    """

    def __init__(self, prices: dict[str, Price], sources: tuple[str, ...] = ()) -> None:
        self.prices = dict(prices)
        self.sources = sources
        self._warned: set[str] = set()

    def lookup(self, model: str) -> tuple[str, Price] | None:
        """``(entry name, price)`` for ``model``, or ``None``.

        ``model`` is a backend spec (``openai:gpt-4o-2024-08-06``) or a bare model name. Tried in order: the full
        spec, the model after the ``backend:`` prefix, then that model less a dated snapshot suffix
        (``-2024-08-06``, ``-20250514``) when an entry names the rest.
        """
        names = [model]
        if ":" in model:
            names.append(model.split(":", 1)[1])
        for name in list(names):
            match = _SNAPSHOT_SUFFIX.search(name)
            if match and match.end() == len(name):
                names.append(name[: match.start()])
        for name in names:
            if name in self.prices:
                return name, self.prices[name]
        return None

    def price(self, model: str) -> Price | None:
        """The :class:`Price` of ``model`` (see :meth:`lookup`), or ``None`` with a warning (once per model)."""
        found = self.lookup(model)
        if found is None:
            if model not in self._warned:
                self._warned.add(model)
                log.warning(
                    "no price for model %r: its cost is recorded as null (add it to a --prices file)", model
                )
            return None
        return found[1]

    def cost(self, model: str, input_tokens: int, output_tokens: int, *, batch: bool = False) -> TokenCost:
        """The :class:`TokenCost` of ``input_tokens`` and ``output_tokens`` of ``model``; ``usd`` ``None`` when
        unpriced."""
        price = self.price(model)
        usd = None if price is None else price.cost(input_tokens, output_tokens, batch=batch)
        return TokenCost(input_tokens, output_tokens, usd)

    def describe(self, model: str) -> dict[str, Any] | None:
        """The price entry used for ``model`` as JSON (name, prices, date, source), or ``None``."""
        found = self.lookup(model)
        if found is None:
            return None
        name, price = found
        return {"entry": name, **price.model_dump(mode="json")}


def _read(text: str, where: str) -> dict[str, Price]:
    data = load_yaml(text, f"price file {where}", error=ConfigError)  # safe, bounded; never quotes the file
    has_models = isinstance(data, dict) and isinstance(data.get("models"), dict)
    has_platforms_only = (
        isinstance(data, dict) and "models" not in data and isinstance(data.get("platforms"), dict)
    )
    if not (has_models or has_platforms_only):  # a file of platform prices alone is a price file too
        raise ConfigError(
            f"price file {where}: expected a mapping with a 'models' mapping of model -> prices (and/or a "
            "'platforms' mapping of platform -> per-post price)"
        )
    # keys shown only when identifier-like (never a line of a file that is no price file), in file order
    unknown = [shown_key(k) or f"key {i}" for i, k in enumerate(data, 1) if k not in ("models", "platforms")]
    if unknown:
        raise ConfigError(
            f"price file {where}: unknown top-level keys {', '.join(unknown)}; only 'models' and 'platforms' are read"
        )
    prices: dict[str, Price] = {}
    for name, entry in (data.get("models") or {}).items():
        if not isinstance(name, str) or not name:
            raise ConfigError(f"price file {where}: model name {name!r} is not a non-empty string")
        try:
            prices[name] = Price.model_validate(entry)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'entry'}: {e['msg']}" for e in exc.errors()
            )
            raise ConfigError(
                f"price file {where}: model {name!r}: {problems} (each entry needs input, output, "
                "batch_input, batch_output in USD per 1M tokens, a date and a source)"
            ) from None
    return prices


def load_prices(path: str | Path | None = None) -> PriceTable:
    """The shipped price table, with the entries of ``path`` (a YAML file shaped like ``prices.yaml``) on top.

    Raises:
        ConfigError: ``path`` does not exist or is not a valid price file (naming the file and the entry).
    """
    shipped = resources.files("echo_builder").joinpath(DEFAULT_PRICES).read_text(encoding="utf-8")
    prices = _read(shipped, f"echo_builder/{DEFAULT_PRICES}")
    sources = [f"echo_builder/{DEFAULT_PRICES}"]
    if path is not None:
        file = Path(path)
        if not file.is_file():
            raise ConfigError(f"price file {str(file)!r} does not exist")
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"price file {str(file)!r} cannot be read: {exc}") from None
        prices.update(_read(text, repr(str(file))))
        sources.append(str(file))
    return PriceTable(prices, tuple(sources))


class PlatformPrice(BaseModel):
    """What a platform's API bills for reading posts (``platforms:`` of ``prices.yaml``).

    Attributes:
        per_post_read: US dollars per post returned by a search or lookup (X's pay-per-use pricing).
        date, source: when and where the price was read.
    """

    model_config = ConfigDict(extra="forbid")

    per_post_read: float = Field(ge=0)
    date: dt.date
    source: str


def platform_price(platform: str, path: str | Path | None = None) -> PlatformPrice | None:
    """The per-post price of ``platform`` (``x``) from the ``platforms:`` section of the shipped ``prices.yaml``,
    or of ``path`` when that file names it; ``None`` for a platform that does not bill per post.

    Raises:
        ConfigError: an entry that is not ``{per_post_read, date, source}`` (naming the file and the platform).
    """
    texts = [
        (resources.files("echo_builder").joinpath(DEFAULT_PRICES).read_text(encoding="utf-8"), DEFAULT_PRICES)
    ]
    if path is not None:
        texts.append((Path(path).read_text(encoding="utf-8"), str(path)))
    found: PlatformPrice | None = None
    for text, where in texts:
        _read(text, where)  # the same checks as the model prices
        entry = (load_yaml(text, f"price file {where}", error=ConfigError).get("platforms") or {}).get(
            platform
        )
        if entry is None:
            continue
        try:
            found = PlatformPrice.model_validate(entry)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'entry'}: {e['msg']}" for e in exc.errors()
            )
            raise ConfigError(f"price file {where}: platform {platform!r}: {problems}") from None
    return found
