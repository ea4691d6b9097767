"""Structure distance: did the output keep the input's layout? (ECHO Flow 3, Splice's structure loss).

Definition (ECHO, Ge et al. 2025, arXiv 2510.15021, community-driven metrics, "structure distance", following
Splice: Tumanyan et al., "Splicing ViT Features for Semantic Appearance Transfer", CVPR 2022):

1. decode to 8-bit RGB (:func:`echo_builder.imaging.load_rgb`), resize to 224 x 224 (bicubic, antialiased, aspect
   ratio not kept), scale to [0, 1] and apply the ImageNet normalisation;
2. DINO ViT-S/16 (timm ``vit_small_patch16_224.dino``): the keys of the last block's self-attention, all 6 heads
   concatenated in head order, CLS token included: K of shape (197, 384);
3. cosine self-similarity S = K_hat K_hat^T with K_hat the rows of K scaled to unit length: (197, 197);
4. distance = mean((S_out - S_in)^2) over the 197^2 entries (the squared Frobenius norm / 197^2); 0 for the same
   structure, at most 4.

Key extraction: a forward hook on the last block's ``attn.qkv`` linear catches its output (B, 197, 1152); timm
lays it out as [q | k | v], each (heads x head_dim) in head order, so the keys with heads concatenated are columns
384..767. (This model has no key normalisation: ``attn.k_norm`` is the identity, checked at load time.)

With several input images (a sample that combines references) each input gets a distance to the output and
``reduction`` picks one: ``"max"`` (default, the worst as the paper kept), ``"min"`` (the best-preserved input) or
``"first"`` (the first input only). All per-input distances are in ``extras["per_input"]``.

Weights: ``weights=None`` loads the pretrained DINO weights from the Hugging Face Hub through timm (it fails
offline with a :class:`ConfigError` saying how to supply a file); a path to a local ``.safetensors``/``.pth``/
``.bin`` file loads that file through timm (``timm/vit_small_patch16_224.dino``'s ``model.safetensors``, or the
original ``dino_deitsmall16_pretrain.pth``, which uses the same parameter names and is timm's own fallback URL
for this model); ``"random:<seed>"`` builds seeded random weights, for tests and benchmarks only.

Decoding (``decode``): ``"pillow"`` decodes and resizes with Pillow on the CPU (step 1 as written);
``"torchvision"`` decodes plain RGB/grey JPEGs with ``torchvision.io.decode_jpeg`` on the scorer's device (nvJPEG on
CUDA, libjpeg-turbo on the CPU) and resizes there with torch's antialiased bicubic interpolation, which follows
Pillow's filter to within a few 8-bit levels (distances agree to about 1e-3, tests/test_scoring_structure.py);
every other image (PNG, WebP, CMYK JPEG, an EXIF rotation, unreadable data) takes the Pillow path, so the rules
and errors of :mod:`echo_builder.imaging` hold for all. ``"auto"`` (default) is torchvision on CUDA, else Pillow.

timm and torch are imported when a scorer is built, never on ``import echo_builder.scoring``.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from echo_builder.errors import ConfigError, ImageError, MissingDependencyError
from echo_builder.imaging import load_rgb
from echo_builder.scoring.base import (
    NO_INPUT_IMAGES,
    OUTPUT_MISSING,
    MetricResult,
    MetricSpec,
    as_image_list,
    check_on_image_error,
    register_metric_spec,
)
from echo_builder.scoring.registry import MetricDefinition, MetricOption, declare_metric

__all__ = ["MODEL_NAME", "REDUCTIONS", "STRUCTURE_DISTANCE", "DinoStructure", "structure_distance"]

MODEL_NAME = "vit_small_patch16_224.dino"
REDUCTIONS = ("max", "min", "first")
IMAGE_SIZE = 224
_MEAN = (0.485, 0.456, 0.406)  # ImageNet, as DINO was trained
_STD = (0.229, 0.224, 0.225)

STRUCTURE_DISTANCE = register_metric_spec(
    MetricSpec(
        name="structure_distance",
        higher_is_better=False,
        low=0.0,
        high=4.0,  # cosine similarities lie in [-1, 1], so each squared difference is at most 4
        unit="mean squared difference of DINO ViT-S/16 last-layer key self-similarities (197 x 197)",
        source="ECHO (arXiv 2510.15021), community-driven metrics: structure distance; "
        "Splice structure loss (Tumanyan et al., CVPR 2022)",
    )
)


def _require() -> tuple[Any, Any]:
    try:
        import timm
        import torch
    except ImportError as exc:
        raise MissingDependencyError(exc.name or "timm", "dino", "structure_distance (DINO ViT)") from None
    return torch, timm


def _default_device() -> Any:
    """accelerate's device for this process (CUDA, MPS, XPU or CPU); plain torch when accelerate is absent."""
    torch, _ = _require()
    try:
        from accelerate import PartialState
    except ImportError:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return PartialState().device


def _resized(image: Any, name: str | None = None) -> np.ndarray:
    """(224, 224, 3) uint8 RGB: decoded, then resized with Pillow's antialiased bicubic filter."""
    from PIL import Image

    rgb = load_rgb(image, name=name)
    return np.asarray(rgb.resize((IMAGE_SIZE, IMAGE_SIZE), Image.Resampling.BICUBIC))


def _resized_or_error(job: tuple[Any, str]) -> np.ndarray | ImageError:
    try:
        return _resized(*job)
    except ImageError as exc:
        return exc


DECODERS = ("auto", "pillow", "torchvision")


def _has_decode_jpeg() -> bool:
    """Whether ``torchvision.io.decode_jpeg`` can be imported (torchvision installed, codecs not yet removed)."""
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            from torchvision.io import decode_jpeg  # noqa: F401
    except Exception:
        return False
    return True


_JPEG_MAGIC = b"\xff\xd8\xff"


def _plain_jpeg(image: Any) -> bytes | None:
    """The encoded bytes of ``image`` when torchvision may decode it exactly as :func:`load_rgb` would: a JPEG of
    mode RGB or L within the pixel limit and without an EXIF rotation. ``None`` sends it down the Pillow path (which
    also gives every error its usual reason)."""
    from PIL import Image

    from echo_builder.imaging import MAX_PIXELS

    if isinstance(image, dict):
        image = image.get("bytes") if image.get("bytes") is not None else image.get("path")
    try:
        if isinstance(image, (str, os.PathLike)):
            path = Path(image)
            if not path.is_file():
                return None
            with path.open("rb") as handle:
                if handle.read(3) != _JPEG_MAGIC:
                    return None
            data = path.read_bytes()
        elif isinstance(image, (bytes, bytearray, memoryview)):
            data = bytes(image)
            if not data.startswith(_JPEG_MAGIC):
                return None
        else:
            return None
        import io

        with Image.open(io.BytesIO(data)) as probe:  # the header only: no pixels decoded here
            if probe.format != "JPEG" or probe.mode not in ("RGB", "L"):
                return None
            if not 0 < probe.width * probe.height <= MAX_PIXELS:
                return None
            if probe.getexif().get(0x0112, 1) not in (0, 1):
                return None
        return data
    except Exception:  # anything odd: let the Pillow path decode it and name the problem
        return None


def _jpeg_or_resized(job: tuple[Any, str]) -> bytes | np.ndarray | ImageError:
    """A worker's share of the torchvision path: the JPEG bytes to decode on the device, else the Pillow result."""
    data = _plain_jpeg(job[0])
    return data if data is not None else _resized_or_error(job)


def _create_model(weights: str | None) -> Any:
    """The ViT-S/16 with the requested weights, on CPU, in eval mode."""
    torch, timm = _require()
    if weights is None:
        try:
            return timm.create_model(MODEL_NAME, pretrained=True)
        except Exception as exc:  # offline, no cache, blocked socket, hub error: all end here
            raise ConfigError(
                f"cannot load the pretrained DINO weights for {MODEL_NAME!r} from the Hugging Face Hub "
                f"({type(exc).__name__}: {exc}). Download them once where the Hub is reachable "
                "(hf download timm/vit_small_patch16_224.dino model.safetensors), then pass the file: "
                "--dino-weights /path/to/model.safetensors on the command line, weights='/path/to/...' in "
                "Python; "
                "timm also reads the original dino_deitsmall16_pretrain.pth."
            ) from exc
    if weights.startswith("random:"):
        try:
            seed = int(weights.removeprefix("random:"))
        except ValueError:
            raise ConfigError(f"weights {weights!r}: expected 'random:<integer seed>'") from None
        if not 0 <= seed < 2**63:  # torch.manual_seed takes a signed 64-bit integer
            raise ConfigError(f"weights {weights!r}: the seed must be in [0, 2**63 - 1]")
        # fork_rng: seeding must not disturb the caller's global torch RNG
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return timm.create_model(MODEL_NAME, pretrained=False)
    path = Path(weights).expanduser()
    if not path.is_file():
        raise ConfigError(
            f"weights {weights!r}: no such file. Expected None (pretrained from the Hub), a path to a local "
            ".safetensors/.pth/.bin file of vit_small_patch16_224.dino, or 'random:<seed>'"
        )
    try:
        return timm.create_model(
            MODEL_NAME, pretrained=True, pretrained_cfg_overlay={"file": str(path.resolve())}
        )
    except Exception as exc:  # corrupt file, wrong architecture, unknown format: timm and safetensors vary
        detail = str(exc) if len(str(exc)) <= 400 else str(exc)[:400] + "..."
        raise ConfigError(
            f"weights {str(path)!r} do not load into {MODEL_NAME} ({type(exc).__name__}: {detail})"
        ) from exc


class DinoStructure:
    """A loaded DINO ViT-S/16 that computes structure self-similarities and distances (model kept in memory).

    Args:
        weights: ``None`` (pretrained from the Hub), a local weights file path, or ``"random:<seed>"``.
        device: torch device or its name; ``None`` takes accelerate's ``PartialState().device``.
        batch_size: images per forward pass (>= 1).
        num_workers: threads that decode and resize a batch's images in parallel (Pillow releases the GIL);
            0 decodes in the calling thread; ``None`` (default) takes up to 8 threads on a GPU and 0 on CPU. On a
            GPU decoding 1024 px images costs more than the forward pass: on an H200, batch 16 went from 26 to
            178 images/s with 8 threads (bench/RESULTS.md, "GPU paths").
        decode: ``"auto"`` (default: torchvision's nvJPEG decoder on a CUDA device, Pillow elsewhere),
            ``"pillow"`` or ``"torchvision"`` (decode_jpeg on the scorer's device, CPU included); see the module
            docstring for what each path decodes and how closely they agree.

    Raises:
        MissingDependencyError: timm or torch is not installed (``pip install 'echo-bench[dino]'``).
        ConfigError: the weights cannot be found or loaded (the message says how to supply them), or a bad
            ``batch_size``, ``num_workers`` or ``decode``.
    """

    def __init__(
        self,
        weights: str | None = None,
        *,
        device: Any = None,
        batch_size: int = 16,
        num_workers: int | None = None,
        decode: str = "auto",
    ) -> None:
        torch, _ = _require()
        if batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
        if decode not in DECODERS:
            raise ConfigError(f"decode must be one of {', '.join(DECODERS)}, got {decode!r}")
        if num_workers is not None and num_workers < 0:
            raise ConfigError(f"num_workers must be >= 0, got {num_workers}")
        self.weights = weights
        self.batch_size = batch_size
        self.device = torch.device(device) if device is not None else _default_device()
        if num_workers is None:
            num_workers = min(8, os.cpu_count() or 1) if self.device.type != "cpu" else 0
        self.num_workers = num_workers
        if decode == "auto":
            decode = "torchvision" if self.device.type == "cuda" and _has_decode_jpeg() else "pillow"
        elif decode == "torchvision" and not _has_decode_jpeg():
            raise MissingDependencyError("torchvision", "dino", "structure_distance decode='torchvision'")
        self.decode = decode
        self._pool = (
            ThreadPoolExecutor(num_workers, thread_name_prefix="dino-decode") if num_workers else None
        )
        model = _create_model(weights).eval().to(self.device)
        attn = model.blocks[-1].attn
        if not isinstance(getattr(attn, "k_norm", torch.nn.Identity()), torch.nn.Identity):
            raise ConfigError(f"{MODEL_NAME}: expected no key normalisation in the last block")
        self._model = model
        self._dim = attn.qkv.in_features
        self._captured: list[Any] = []
        # the hook keeps only the keys: columns [dim, 2 dim) of the fused [q | k | v] projection
        attn.qkv.register_forward_hook(
            lambda _module, _args, out: self._captured.append(out[..., self._dim : 2 * self._dim])
        )
        self._mean = torch.tensor(_MEAN, device=self.device).view(1, 3, 1, 1)
        self._std = torch.tensor(_STD, device=self.device).view(1, 3, 1, 1)

    def _decode(self, images: Sequence[Any], names: Sequence[str]) -> list[Any]:
        """Each image resized to (224, 224, 3) uint8 (a numpy array, or a tensor on the device from the
        torchvision path), or the ImageError that stopped it; files are read and Pillow decodes in worker
        threads."""
        jobs = list(zip(images, names, strict=True))
        work = _jpeg_or_resized if self.decode == "torchvision" else _resized_or_error
        done: list[Any] = list(self._pool.map(work, jobs) if self._pool else map(work, jobs))
        jpegs = [k for k, item in enumerate(done) if isinstance(item, bytes)]
        if jpegs:
            try:
                decoded = self._decode_jpegs([done[k] for k in jpegs])
            except (
                Exception
            ):  # a JPEG the device decoder refuses: Pillow decodes (or names the problem) instead
                decoded = [None] * len(jpegs)
            for k, pixels in zip(jpegs, decoded, strict=True):
                done[k] = pixels if pixels is not None else _resized_or_error(jobs[k])
        return done

    def _decode_jpegs(self, data: Sequence[bytes]) -> list[Any]:
        """(224, 224, 3) uint8 tensors on the device: one batched ``decode_jpeg`` call, then each image resized
        with antialiased bicubic interpolation (float, rounded and clipped to 8 bits as Pillow stores it)."""
        torch, _ = _require()
        import warnings

        with warnings.catch_warnings():
            # torchvision 0.29 deprecates its image codecs in favour of TorchCodec; until that lands everywhere
            # this stays the nvJPEG route (and a torchvision without it sends everything to Pillow)
            warnings.simplefilter("ignore", DeprecationWarning)
            from torchvision.io import ImageReadMode, decode_jpeg

        encoded = [torch.frombuffer(bytearray(item), dtype=torch.uint8) for item in data]
        device = self.device if self.device.type in ("cuda", "cpu") else torch.device("cpu")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            pictures = decode_jpeg(encoded, mode=ImageReadMode.RGB, device=device)
        out = []
        for picture in pictures:
            resized = torch.nn.functional.interpolate(
                picture.unsqueeze(0).float(),
                size=(IMAGE_SIZE, IMAGE_SIZE),
                mode="bicubic",
                antialias=True,
                align_corners=False,
            )
            out.append(resized.round_().clamp_(0, 255).to(torch.uint8)[0].permute(1, 2, 0))
        return out

    def _pixels(self, images: Sequence[Any]) -> Any:
        """(B, 3, 224, 224) float32 normalised batch on the device; raises the first ImageError."""
        arrays = self._decode(images, [f"image {k}" for k in range(len(images))])
        for array in arrays:
            if isinstance(array, ImageError):
                raise array
        return self._normalised(arrays)

    def _normalised(self, arrays: Sequence[Any]) -> Any:
        torch, _ = _require()
        if all(isinstance(array, np.ndarray) for array in arrays):
            batch = torch.from_numpy(np.stack(arrays)).to(self.device)
        else:  # some came decoded on the device (torchvision path)
            batch = torch.stack(
                [torch.from_numpy(np.array(a)) if isinstance(a, np.ndarray) else a for a in arrays]
            )
            batch = batch.to(self.device)
        batch = batch.permute(0, 3, 1, 2).float().div_(255.0)
        return (batch - self._mean) / self._std

    def keys(self, images: Sequence[Any]) -> np.ndarray:
        """Last-block attention keys, heads concatenated, CLS first: float32 array (m, 197, 384).

        Raises:
            ImageError: an image cannot be decoded.
        """
        torch, _ = _require()
        out = []
        with torch.inference_mode():
            for start in range(0, len(images), self.batch_size):
                out.append(self._keys(images[start : start + self.batch_size]).float().cpu().numpy())
        return np.concatenate(out) if out else np.zeros((0, 197, self._dim), np.float32)

    def _keys(self, images: Sequence[Any]) -> Any:
        return self._keys_of(self._pixels(images))

    def _keys_of(self, pixels: Any) -> Any:
        """(B, 197, 384) keys of a normalised batch, caught by the hook on the last block's qkv."""
        self._captured.clear()
        try:
            self._model.forward_features(pixels)
            return self._captured[-1]
        finally:
            self._captured.clear()

    def self_similarity(self, images: Sequence[Any]) -> np.ndarray:
        """Cosine self-similarity of the keys of each image: float32 array (m, 197, 197), values in [-1, 1].

        Raises:
            ImageError: an image cannot be decoded.
        """
        torch, _ = _require()
        out = []
        with torch.inference_mode():
            for start in range(0, len(images), self.batch_size):
                out.append(self._self_similarity(images[start : start + self.batch_size]))
        return np.concatenate(out) if out else np.zeros((0, 197, 197), np.float32)

    def _self_similarity(self, images: Sequence[Any]) -> np.ndarray:
        return self._similarity_of(self._pixels(images))

    def _similarity_of(self, pixels: Any) -> np.ndarray:
        torch, _ = _require()
        keys = torch.nn.functional.normalize(self._keys_of(pixels).float(), dim=-1, eps=1e-8)
        return (keys @ keys.transpose(1, 2)).cpu().numpy()

    def distance(
        self,
        inputs: Sequence[Any],
        outputs: Sequence[Any],
        *,
        reduction: str = "max",
        batch_size: int | None = None,
        on_image_error: str = "raise",
        progress: bool = False,
    ) -> MetricResult:
        """Per-sample structure distance between input image(s) and output (lower is better, 0 = same).

        Args:
            inputs: n entries, each one image, a list/tuple of images, or ``None``/``[]`` for none. Images are
                anything :func:`echo_builder.imaging.load_rgb` accepts, of any size and mode.
            outputs: n images; ``None`` for a missing output.
            reduction: how several inputs reduce to one value: ``"max"`` (default, as the paper), ``"min"`` or
                ``"first"`` (only the first input is scored).
            batch_size: images per forward pass; ``None`` keeps the scorer's.
            on_image_error: ``"raise"`` (default) re-raises :class:`ImageError` for an unreadable image;
                ``"nan"`` makes that sample NaN with the error as its reason.
            progress: show a tqdm progress bar (in images).

        Returns:
            :class:`MetricResult`, ``values`` float64 (n,) in [0, 4] (typically 0-0.3); NaN with a reason for a
            sample without input images (not applicable), a missing output, or an unreadable image
            (``on_image_error="nan"``). ``extras``: ``per_input`` (n lists of float, one distance per input
            image), ``reduction``, ``model``, ``weights``, ``device``, and ``backend``: one id naming every
            setting that changes a value, ``"dino:<model>+weights=<weights>+resize=bicubic<size>+reduction=<r>"``.

        Raises:
            ConfigError: unknown ``reduction`` or ``on_image_error``, ``batch_size`` < 1, or ``inputs``/
                ``outputs`` of different lengths.
            ImageError: an image given cannot be decoded (with ``on_image_error="raise"``).
        """
        if reduction not in REDUCTIONS:
            raise ConfigError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
        if len(inputs) != len(outputs):
            raise ConfigError(
                f"inputs and outputs must pair up one to one: got {len(inputs)} inputs and {len(outputs)} outputs"
            )
        check_on_image_error(on_image_error)
        batch_size = self.batch_size if batch_size is None else batch_size
        if batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
        torch, _ = _require()
        n = len(outputs)
        values = np.full(n, np.nan)
        reasons: list[str | None] = [None] * n
        per_input: list[list[float]] = [[] for _ in range(n)]
        # one flat queue of (sample, name, image) so every forward pass is a full batch, whatever the sample
        # sizes; a sample's matrices wait in `pending` until all of its images have been through
        queue: list[tuple[int, str, Any]] = []
        expected = [0] * n
        for i, (item, output) in enumerate(zip(inputs, outputs, strict=True)):
            images = as_image_list(item)
            if not images:
                reasons[i] = NO_INPUT_IMAGES
            elif output is None:
                reasons[i] = OUTPUT_MISSING
            else:
                if reduction == "first":
                    images = images[:1]
                queue.append((i, f"sample {i} output", output))
                queue += [(i, f"sample {i} input {j}", image) for j, image in enumerate(images)]
                expected[i] = 1 + len(images)
        pending: dict[int, list[np.ndarray | None]] = {}
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(queue), desc="structure_distance", unit="image")
        try:
            with torch.inference_mode():
                for start in range(0, len(queue), batch_size):
                    chunk = queue[start : start + batch_size]
                    arrays = self._decode([image for _, _, image in chunk], [name for _, name, _ in chunk])
                    readable = [k for k, array in enumerate(arrays) if not isinstance(array, ImageError)]
                    sims: dict[int, np.ndarray] = {}
                    if readable:
                        batch = self._normalised([arrays[k] for k in readable])
                        sims = dict(zip(readable, self._similarity_of(batch), strict=True))
                    for k, (i, _, _) in enumerate(chunk):
                        error = arrays[k]
                        if isinstance(error, ImageError):
                            if on_image_error == "raise":
                                raise error
                            reasons[i] = reasons[i] or f"unreadable image: {error}"
                        pending.setdefault(i, []).append(sims.get(k))
                        if len(pending[i]) < expected[i]:
                            continue
                        s_out, *s_ins = pending.pop(i)
                        if reasons[i] is not None:  # an image of this sample was unreadable
                            continue
                        s_out64 = s_out.astype(np.float64)
                        per_input[i] = [float(np.mean((s_out64 - s_in) ** 2)) for s_in in s_ins]
                        values[i] = max(per_input[i]) if reduction == "max" else min(per_input[i])
                    if bar is not None:
                        bar.update(len(chunk))
        finally:
            if bar is not None:
                bar.close()
        return MetricResult(
            values=values,
            nan_reasons=reasons,
            extras={
                "per_input": per_input,
                "reduction": reduction,
                "model": MODEL_NAME,
                "weights": self.weights or f"hf-hub:timm/{MODEL_NAME}",
                "device": str(self.device),
                "backend": (
                    f"dino:{MODEL_NAME}+weights={self.weights or f'hf-hub:timm/{MODEL_NAME}'}"
                    f"+resize=bicubic{IMAGE_SIZE}+reduction={reduction}"
                    + ("+decode=torchvision" if self.decode == "torchvision" else "")
                ),
            },
        )

    __call__ = distance


@functools.lru_cache(maxsize=4)
def _cached(weights: str | None, device: str | None, decode: str = "auto") -> DinoStructure:
    return DinoStructure(weights, device=device, decode=decode)


def structure_distance(
    inputs: Sequence[Any],
    outputs: Sequence[Any],
    *,
    weights: str | None = None,
    batch_size: int = 16,
    reduction: str = "max",
    device: Any = None,
    on_image_error: str = "raise",
    progress: bool = False,
    decode: str = "auto",
) -> MetricResult:
    """Per-sample structure distance with a cached :class:`DinoStructure` per (weights, device, decode).

    See :meth:`DinoStructure.distance` for the arguments, return value and errors, and the module docstring for
    the definition (ECHO Flow 3; Splice's structure loss). Raises :class:`MissingDependencyError` without timm.
    """
    if weights is not None and not weights.startswith("random:"):
        weights = str(Path(weights).expanduser().resolve())
    scorer = _cached(weights, None if device is None else str(device), decode)
    return scorer.distance(
        inputs,
        outputs,
        reduction=reduction,
        batch_size=batch_size,
        on_image_error=on_image_error,
        progress=progress,
    )


def _score_for_run(
    inputs: list[list[Any]], outputs: list[Any], prompts: list[str], options: Any
) -> MetricResult:
    """The registry's factory: :func:`structure_distance` with the run's weights and reduction."""
    return structure_distance(
        inputs,
        outputs,
        weights=options.get("dino_weights"),
        reduction=options.get("structure_reduction") or "max",
        decode=options.get("structure_decode") or "auto",
        on_image_error="nan",
    )


STRUCTURE_DISTANCE_METRIC = declare_metric(
    MetricDefinition(
        name="structure_distance",
        spec=STRUCTURE_DISTANCE,
        factory=_score_for_run,
        applicability_flag="structure",
        needs_inputs=True,
        extra="dino",
        options=(
            MetricOption(
                "dino_weights",
                "str",
                None,
                "structure_distance weights: a local file, or random:<seed> for a smoke test "
                "(default: timm's vit_small_patch16_224.dino from the Hub).",
            ),
            MetricOption(
                "structure_reduction",
                "choice",
                "max",
                "structure_distance of a sample with several input images: the output's distance to each input, "
                "reduced to one value: max (the least preserved input, as the paper), min (the best preserved) or "
                "first (the first input only).",
                REDUCTIONS,
            ),
            MetricOption(
                "structure_decode",
                "choice",
                "auto",
                "structure_distance image decoding: auto (torchvision's nvJPEG decoder on a CUDA GPU, Pillow "
                "elsewhere), pillow, or torchvision (decode_jpeg on the scorer's device; other formats use Pillow).",
                DECODERS,
            ),
        ),
        description="mean squared difference of DINO ViT-S/16 key self-similarity matrices (Splice's structure loss)",
    ),
    target="echo_builder.scoring.structure:STRUCTURE_DISTANCE_METRIC",
    order=20,  # position among the built-in metrics (default metric order, rows and columns)
)
