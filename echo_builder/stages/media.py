"""The media stage: download every image a sample references once, into a content-addressed store.

Flow 1, ``media`` row of ``spec/ECHO.md``. Images land in a :class:`MediaStore` under their SHA-256; an index maps
each source URL to its hash, so a URL is fetched once across samples and across runs (a rerun makes no request for
a URL already stored). Failures never drop a sample: the reason is appended to ``Sample.media_errors`` and the
reference is kept, unhashed, so the URL survives for later stages.

Security rules of :func:`fetch_media` (media URLs come from untrusted posts; the network half lives in
:mod:`echo_builder.stages.media_http`, the address policy in :mod:`echo_builder.stages.media_policy`):

* only ``http`` and ``https`` URLs without credentials are fetched; every other scheme is refused; a URL that
  cannot be parsed (bad port, unclosed IPv6 literal, control character, space or invalid IDNA in the host, no
  host), from a post or from a redirect's ``Location``, is a recorded error of that image only;
* the host is resolved (with a deadline) and *every* address is checked by :class:`MediaPolicy`: private,
  loopback, multicast, reserved and unspecified addresses are refused unless an ``allow`` entry
  (``--media-allow``) names them; link-local and cloud-metadata addresses (:data:`NEVER_ALLOWED`) are refused
  always; an IPv6 address embedding an IPv4 one (mapped, compatible, 6to4, Teredo, NAT64) is judged as that IPv4
  address. The connection goes to a checked address (no second DNS lookup) and the peer actually connected to is
  checked again, so DNS rebinding cannot bypass the policy; TLS still verifies the host name;
* redirects are followed by hand, at most :data:`MAX_REDIRECTS`, and each hop is checked again;
* one URL takes at most ``deadline_s`` seconds in all (DNS, connect, TLS, redirects, headers, body, retries and
  their waits): at the deadline its sockets are shut down, so a server dripping bytes cannot hold it longer;
* the body is capped at ``max_bytes`` both by ``Content-Length`` and by the bytes actually received;
* the content type must be ``image/*``, and the bytes must decode with Pillow (first frame of animations)
  within :data:`echo_builder.imaging.MAX_PIXELS` (decompression-bomb guard);
* environment proxies are not used (they would bypass the address check).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from echo_builder import imaging
from echo_builder.errors import ConfigError, ImageError
from echo_builder.records import MediaRef, Sample
from echo_builder.stages.base import StageFailure
from echo_builder.stages.media_http import MAX_REDIRECTS, _Deadline, _get_once, _Permanent, _Transient
from echo_builder.stages.media_policy import (
    LOOPBACK,
    NEVER_ALLOWED,
    MediaPolicy,
    embedded_ipv4,
)
from echo_builder.stages.registry import StageContext, StageDefinition, StageOutput, declare_stage

__all__ = [
    "LOOPBACK",
    "MAX_REDIRECTS",
    "NEVER_ALLOWED",
    "FetchOutcome",
    "MediaPolicy",
    "MediaResult",
    "MediaStore",
    "embedded_ipv4",
    "fetch_media",
    "media_key",
    "run_media",
]

_EXT = {"JPEG": "jpg", "MPO": "jpg", "PNG": "png", "GIF": "gif", "WEBP": "webp", "TIFF": "tif", "BMP": "bmp"}
OFFLINE_MISS = "offline and not in the media store"


@dataclass(frozen=True)
class FetchOutcome:
    """What became of one media reference.

    Attributes:
        sha256: hex SHA-256 of the stored bytes, ``None`` on failure.
        path: file path relative to the store root (``ab/ab12....png``), ``None`` on failure.
        width, height: pixel size of the decoded first frame (EXIF orientation applied).
        error: the reason of a failure, ``None`` on success.
        n_frames: frames of an animated GIF/WebP/PNG (1 for stills).
        source: ``download``, ``store`` (already stored, no request), ``local`` (imported file) or ``error``.
        content_type, size: the server's content type and the stored size in bytes.
    """

    sha256: str | None = None
    path: str | None = None
    width: int | None = None
    height: int | None = None
    error: str | None = None
    n_frames: int = 1
    source: str = "error"
    content_type: str | None = None
    size: int | None = None


class MediaStore:
    """Content-addressed image store: ``root/<sha[:2]>/<sha>.<ext>`` plus ``root/index.jsonl``.

    Each index line maps a source (URL or local path) to ``sha256``, ``ext``, ``content_type``, ``size`` (bytes),
    ``width``, ``height`` (pixels) and ``n_frames``; later lines win, a torn last line is ignored. Files are
    written atomically (temp file, then ``os.replace``), so a killed run never leaves a half file under its name.
    Safe to share between threads of one process.
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.index_path = self.root / "index.jsonl"
        self._lock = threading.Lock()
        self._by_source: dict[str, dict[str, Any]] = {}
        self._by_sha: dict[str, dict[str, Any]] = {}
        if self.index_path.exists():
            for line in self.index_path.read_text(encoding="utf-8").split("\n"):
                try:
                    entry = json.loads(line)
                    self._by_source[entry["source"]] = entry
                    self._by_sha[entry["sha256"]] = entry
                except (ValueError, KeyError, TypeError):
                    continue  # torn line of a killed run

    def path_for(self, sha256: str) -> Path | None:
        """Absolute path of the stored file with this hash, ``None`` when not stored."""
        entry = self._by_sha.get(sha256)
        if entry is not None:
            candidate = self.root / sha256[:2] / f"{sha256}.{entry['ext']}"
            if candidate.is_file():
                return candidate
        folder = self.root / sha256[:2]
        return next(iter(sorted(folder.glob(f"{sha256}.*"))), None) if folder.is_dir() else None

    def has(self, sha256: str) -> bool:
        """Whether a file with this hash is stored."""
        return self.path_for(sha256) is not None

    def lookup(self, source: str) -> dict[str, Any] | None:
        """The index entry of ``source`` (URL or local path) when its file is present, else ``None``."""
        entry = self._by_source.get(source)
        return entry if entry is not None and self.has(entry["sha256"]) else None

    def describe(self, sha256: str) -> dict[str, Any] | None:
        """The index entry of a stored hash, measuring the file when the index does not know it."""
        entry = self._by_sha.get(sha256)
        if entry is not None and self.has(sha256):
            return entry
        path = self.path_for(sha256)
        if path is None:
            return None
        width, height, n_frames, _ = _check_image(path.read_bytes(), str(path))
        return dict(sha256=sha256, ext=path.suffix[1:], width=width, height=height, n_frames=n_frames)

    def relative(self, sha256: str) -> str:
        """Path of a stored hash relative to the root, with forward slashes."""
        path = self.path_for(sha256)
        if path is None:
            raise KeyError(sha256)
        return path.relative_to(self.root).as_posix()

    def put(self, source: str, data: bytes, **meta: Any) -> dict[str, Any]:
        """Store ``data`` (already checked) and index it under ``source``; ``meta`` needs ``ext``."""
        sha = hashlib.sha256(data).hexdigest()
        target = self.root / sha[:2] / f"{sha}.{meta['ext']}"
        if not target.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.replace(tmp, target)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        entry = {"source": source, "sha256": sha, "size": len(data), **meta}
        with self._lock:
            with open(self.index_path, "a", encoding="utf-8") as f:
                f.write(json.dumps(entry, sort_keys=True) + "\n")
            self._by_source[source] = entry
            self._by_sha[sha] = entry
        return entry


def media_key(ref: MediaRef) -> str:
    """How a reference is named in outcomes and in ``media_errors``: its URL, else its path, else its media id."""
    return ref.url or ref.path or (f"media_id:{ref.media_id}" if ref.media_id else "<empty media reference>")


def _check_image(data: bytes, name: str) -> tuple[int, int, int, str]:
    """Decode ``data`` fully (first frame); return ``(width, height, n_frames, format)`` or raise ``_Permanent``."""
    if not data:
        raise _Permanent("empty body (0 bytes)")
    try:  # the one guarded decoder: every Pillow failure arrives as ImageError
        img = imaging.open_image(data, name=name, verify=True)
        fmt, n_frames = img.format or "", int(getattr(img, "n_frames", 1) or 1)
        rgb = imaging.to_rgb8(img, name=name)
    except ImageError as exc:
        raise _Permanent(str(exc).removeprefix(f"{name}: ")) from None
    return rgb.width, rgb.height, n_frames, fmt


def _outcome(entry: dict[str, Any], store: MediaStore, source: str) -> FetchOutcome:
    known = {k: entry[k] for k in ("width", "height", "n_frames", "content_type", "size") if k in entry}
    return FetchOutcome(sha256=entry["sha256"], path=store.relative(entry["sha256"]), source=source, **known)


def _download(url: str, store: MediaStore, opts: dict[str, Any]) -> FetchOutcome:
    entry = store.lookup(url)
    if entry is not None:
        return _outcome(entry, store, "store")
    if opts["offline"]:
        return FetchOutcome(error=OFFLINE_MISS)
    attempt = 0
    with _Deadline(opts["deadline_s"]) as deadline:
        while True:
            attempt += 1
            try:
                data, ctype = _get_once(url, opts, deadline)
                width, height, n_frames, fmt = _check_image(data, url)
                ext = _EXT.get(fmt, fmt.lower() or "bin")
                meta = {
                    "ext": ext,
                    "content_type": ctype,
                    "width": width,
                    "height": height,
                    "n_frames": n_frames,
                }
                return _outcome(store.put(url, data, **meta), store, "download")
            except _Permanent as exc:
                return FetchOutcome(error=str(exc))
            except _Transient as exc:
                if attempt >= opts["max_attempts"]:
                    return FetchOutcome(error=f"{exc} (gave up after {attempt} attempts)")
                wait = opts["backoff_s"] * 2 ** (attempt - 1)
                if exc.retry_after_s is not None:
                    wait = max(wait, exc.retry_after_s)
                wait = min(wait, opts["max_retry_after_s"])
                if wait >= deadline.remaining():
                    return FetchOutcome(
                        error=f"{exc} (gave up after {attempt} attempts: the next one would start after the "
                        f"{deadline.seconds:g} s total deadline per URL)"
                    )
                time.sleep(wait)


def _import_local(path: Path, store: MediaStore, max_bytes: int) -> FetchOutcome:
    try:
        size = path.stat().st_size
        if size > max_bytes:
            return FetchOutcome(error=f"local file of {size:,} bytes is over the {max_bytes:,} byte limit")
        data = path.read_bytes()
        width, height, n_frames, fmt = _check_image(data, str(path))
    except OSError as exc:
        return FetchOutcome(error=f"cannot read local file ({exc.strerror or exc})")
    except _Permanent as exc:
        return FetchOutcome(error=str(exc))
    ext = _EXT.get(fmt, fmt.lower() or "bin")
    entry = store.put(str(path), data, ext=ext, width=width, height=height, n_frames=n_frames)
    return _outcome(entry, store, "local")


def _resolve(ref: MediaRef, store: MediaStore, opts: dict[str, Any], local_root: Path | None) -> FetchOutcome:
    if ref.sha256 and store.has(ref.sha256):
        entry = store.describe(ref.sha256)
        if entry is not None:
            return _outcome(entry, store, "store")
    if ref.path:
        local = Path(ref.path) if local_root is None else local_root / ref.path
        if local_root is not None and not local.resolve().is_relative_to(local_root.resolve()):
            return FetchOutcome(error=f"local path escapes {local_root}")
        if local.is_file():
            return _import_local(local, store, opts["max_bytes"])
        if not ref.url:
            return FetchOutcome(error="local file not found")
    if ref.url:
        return _download(ref.url, store, opts)
    if ref.media_id:
        return FetchOutcome(
            error="media id without a URL cannot be fetched (an X media key needs the X API to become a URL)"
        )
    return FetchOutcome(error="media reference has neither url, path nor media id")


def fetch_media(
    refs: Iterable[MediaRef | str],
    store: MediaStore,
    *,
    offline: bool = False,
    allow: Iterable[str] | MediaPolicy = (),
    max_bytes: int = 50_000_000,
    timeout_s: float = 30.0,
    deadline_s: float = 120.0,
    max_attempts: int = 3,
    backoff_s: float = 1.0,
    max_retry_after_s: float = 60.0,
    concurrency: int = 8,
    local_root: str | Path | None = None,
) -> dict[str, FetchOutcome]:
    """Fetch (or import, or find in ``store``) each distinct reference once; never raises for a bad image or URL.

    Args:
        refs: :class:`MediaRef` or URL strings. A ref whose ``sha256`` is stored is not fetched; one with an
            existing local ``path`` (resolved under ``local_root`` when given, and refused if it escapes it) is
            hashed and imported; else its ``url`` is downloaded; a bare X ``media_id`` is an error.
        store: the :class:`MediaStore`; a URL already indexed with its file present makes no request.
        offline: use only the store; a missing URL fails with ``"offline and not in the media store"``.
        allow: non-public addresses that may be fetched (a local mirror): ``--media-allow`` entries
            (``HOST[:PORT]`` or CIDR, see :meth:`MediaPolicy.from_entries`) or a :class:`MediaPolicy`. Public
            addresses are always allowed, :data:`NEVER_ALLOWED` ones never.
        max_bytes: body size cap in bytes (Content-Length, received bytes, and the size of a local file).
        timeout_s: connect, DNS lookup and per-read timeout in seconds (a stalled server).
        deadline_s: total seconds one URL may take, all attempts, redirects, connects, header and body reads and
            retry waits included; a download still running then is abandoned and recorded as such.
        max_attempts: tries per URL on 429, 5xx, timeouts and dropped connections (other errors are final).
        backoff_s: first retry wait in seconds, doubled each retry; ``Retry-After`` is honoured, every wait is
            capped at ``max_retry_after_s`` seconds, and no retry starts that would end past ``deadline_s``.
        concurrency: parallel downloads.

    Returns:
        :func:`media_key` -> :class:`FetchOutcome`, in first-seen order. See the module docstring for security.

    Raises:
        ValueError: a count below 1 or a time that is not a positive finite number of seconds.
        ConfigError: an ``allow`` entry that cannot be parsed or names a never-allowed address.
    """
    if max_attempts < 1 or concurrency < 1 or max_bytes < 1:
        raise ValueError("max_attempts, concurrency and max_bytes must be >= 1")
    times = {
        "timeout_s": timeout_s,
        "deadline_s": deadline_s,
        "backoff_s": backoff_s,
        "max_retry_after_s": max_retry_after_s,
    }
    for name, value in times.items():
        positive = name in ("timeout_s", "deadline_s")
        if not (
            isinstance(value, (int, float))
            and math.isfinite(value)
            and (value > 0 or (not positive and value == 0))
        ):
            raise ValueError(
                f"{name} must be a {'positive' if positive else 'non-negative'} finite number of seconds, got {value!r}"
            )
    opts = {
        "offline": offline,
        "policy": allow if isinstance(allow, MediaPolicy) else MediaPolicy.from_entries(allow),
        "max_bytes": max_bytes,
        "timeout_s": timeout_s,
        "deadline_s": deadline_s,
        "max_attempts": max_attempts,
        "backoff_s": backoff_s,
        "max_retry_after_s": max_retry_after_s,
    }
    root = Path(local_root) if local_root is not None else None
    unique: dict[str, MediaRef] = {}
    for ref in refs:
        ref = MediaRef(url=ref) if isinstance(ref, str) else ref
        unique.setdefault(media_key(ref), ref)
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        futures = {key: pool.submit(_resolve, ref, store, opts, root) for key, ref in unique.items()}
        return {key: future.result() for key, future in futures.items()}


@dataclass
class MediaResult:
    """Samples with resolved media, one :class:`StageFailure` per failed reference, and counts by outcome."""

    samples: list[Sample]
    failures: list[StageFailure] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)


def run_media(samples: Sequence[Sample], store: MediaStore, **fetch_options: Any) -> MediaResult:
    """Resolve every input and output image of ``samples`` (see :func:`fetch_media` for the options).

    Each ref gains ``sha256``, ``path`` (relative to the store root), ``width`` and ``height``. A failed ref is
    kept with ``sha256=None`` and ``path=None`` (its URL stays) and ``"<url, path or media id>: <reason>"`` goes
    to ``media_errors`` (errors of a previous run for refs resolved now are replaced). No sample is dropped; order
    is preserved.
    """
    refs = [ref for s in samples for ref in (*s.input_images, *s.output_images)]
    outcomes = fetch_media(refs, store, **fetch_options)
    counts = {"samples": len(samples), "refs": len(refs), "distinct": len(outcomes)}
    for outcome in outcomes.values():
        counts[outcome.source] = counts.get(outcome.source, 0) + 1
    out: list[Sample] = []
    failures: list[StageFailure] = []

    def update(ref: MediaRef, errors: list[str]) -> MediaRef:
        outcome = outcomes[media_key(ref)]
        if outcome.error is not None:
            errors.append(f"{media_key(ref)}: {outcome.error}")
            # ``path`` means "in the store" downstream: a refused local file must not be read by later stages
            # (a VLM stage would crash on it) nor embedded in the dataset; its path stays in the error text
            return ref.model_copy(update={"sha256": None, "path": None})
        fields = ("sha256", "path", "width", "height")
        return ref.model_copy(update={name: getattr(outcome, name) for name in fields})

    for sample in samples:
        errors: list[str] = []
        inputs = tuple(update(r, errors) for r in sample.input_images)
        outputs = tuple(update(r, errors) for r in sample.output_images)
        keys = {media_key(r) + ": " for r in (*sample.input_images, *sample.output_images)}
        kept = [e for e in sample.media_errors if not any(e.startswith(k) for k in keys)]
        new = list(dict.fromkeys(errors))
        failures += [StageFailure("media", sample.id, reason) for reason in new]
        out.append(
            sample.model_copy(
                update={"input_images": inputs, "output_images": outputs, "media_errors": (*kept, *new)}
            )
        )
    counts["failed_refs"] = len(failures)
    return MediaResult(out, failures, counts)


MEDIA_VERSION = "media-v1"


def media_policy(config: Any) -> MediaPolicy:
    """The media stage's :class:`MediaPolicy` from ``config.media_allow`` (and the deprecated
    ``allow_private_media``); :class:`ConfigError` for a bad entry."""
    if isinstance(config.media_allow, str):  # one entry given as a string, not a list of characters
        raise ConfigError(
            f"media_allow must be a list of HOST[:PORT] or CIDR entries, got {config.media_allow!r}"
        )
    entries = [*config.media_allow, *(LOOPBACK if config.allow_private_media else ())]
    return MediaPolicy.from_entries(entries)


def run_media_stage(context: StageContext) -> StageOutput:
    """Resolve every image of ``context.samples`` into the media store (downloads honour ``--offline`` and
    ``--media-allow``).

    The counts that depend on what an earlier (killed) run already stored, ``download`` and ``store``, go to
    ``context.run_stats`` (``run_stats.json``), not to the report, so a resumed build's report equals an
    uninterrupted one's.
    """
    config = context.config
    samples = context.samples
    media = run_media(
        samples,
        MediaStore(context.store_root),
        offline=config.offline,
        allow=context.prepared["media"],
        concurrency=config.concurrency,
    )
    context.failures.extend(media.failures)
    context.samples = media.samples
    context.run_stats["media_sources"] = {k: media.counts.get(k, 0) for k in ("download", "store")}
    return StageOutput(
        {
            "in": len(samples),
            "out": len(media.samples),
            "failures": len(media.failures),
            **{k: v for k, v in media.counts.items() if k not in ("samples", "download", "store")},
        },
        files={"media.jsonl": media.samples},
    )


STAGE = declare_stage(
    StageDefinition(
        name="media",
        version=MEDIA_VERSION,
        run=run_media_stage,
        after="extract",
        reads=("samples",),
        writes=("samples", "failures", "run_stats"),
        report_fields=("refs", "distinct", "local", "error", "failed_refs"),
        prepare=media_policy,
        description="store every referenced image once, content-addressed (safe downloads, local files)",
    )
)
