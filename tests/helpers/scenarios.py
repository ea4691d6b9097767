"""The generated worlds of the reliability suite (``tests/reliability/``, ``bench/reliability.py``, ``bench/scale.py``).

- :class:`CurationScenario`: generated posts (six kinds of thread, each exercising a different build stage), their
  images served by a :class:`~tests.helpers.media_server.MediaServer`, and a scripted VLM that answers every build
  stage from the request alone. Each thread carries a token ``#k<i>`` (its replies ``#r<i>``) that the scripted
  answers copy into prompts, so every request and every failure can be traced back to its thread.
- :class:`JudgeScenario`: a small ``image_to_image`` benchmark, outputs of three models (one output missing) and a
  scripted judge whose rating depends only on the output image it is shown.

The oracle and the checks that compare runs are in :mod:`tests.helpers.reliability`.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from PIL import Image

from tests.helpers.media_server import MediaServer, Reply
from tests.helpers.openai_server import ALL_FAULT_KINDS

T0 = datetime(2025, 3, 27, tzinfo=timezone.utc)
KINDS = ("t2i", "edit", "blank", "shot", "pricing", "analysis")
#: faults that leave the client without a usable HTTP reply (retried by the caller)
TRANSPORT_FAULTS = tuple(k for k in ALL_FAULT_KINDS if k != "wrong_schema")
_TOKEN = re.compile(r"#([kr])(\d+)(?!\d)")
_SHOT_WIDTH = re.compile(r"it is (\d+) x (\d+) pixels")
_SHOT_BASE_WIDTH, _SHOT_BASE_HEIGHT = 200, 800


def shot_size(i: int) -> tuple[int, int]:
    """Pixel size of thread ``i``'s conversation screenshot: it names the thread in the screenshots request."""
    return _SHOT_BASE_WIDTH + i % 1000, _SHOT_BASE_HEIGHT + i // 1000


def canonical(body: dict[str, Any]) -> str:
    """One string per distinct request body (key order does not matter)."""
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


#: a screenshot carries its thread number in the pixels as well (the VLM is sent a resized copy and is no longer
#: told the original size): 8 blocks side by side across the full width of the top 24 px, 3 bits each (channels
#: 0 or 255), read back at the blocks' centres whatever the resize
_CODE_HEIGHT, _CODE_BLOCKS = 24, 8


def _draw_code(img: Image.Image, i: int) -> None:
    for k in range(_CODE_BLOCKS):
        bits = (i >> (3 * k)) & 7
        rgb = tuple(255 if bits >> c & 1 else 0 for c in range(3))
        left, right = k * img.width // _CODE_BLOCKS, (k + 1) * img.width // _CODE_BLOCKS
        img.paste(rgb, (left, 0, right, _CODE_HEIGHT))


def _read_code(img: Image.Image) -> int:
    """The thread number drawn by :func:`_draw_code` on a (possibly resized) screenshot."""
    i = 0
    for k in range(_CODE_BLOCKS):
        rgb = img.getpixel((int((k + 0.5) * img.width / _CODE_BLOCKS), _CODE_HEIGHT // 3))
        i |= sum(1 << c for c in range(3) if rgb[c] > 127) << (3 * k)
    return i


def _sent_images(body: dict[str, Any]) -> list[Image.Image]:
    import base64

    out = []
    for part in body["messages"][1]["content"]:
        if isinstance(part, dict) and part.get("type") == "image_url":
            data = base64.b64decode(part["image_url"]["url"].split(",", 1)[1])
            out.append(Image.open(io.BytesIO(data)).convert("RGB"))
    return out


def _png(
    rgb: tuple[int, int, int], size: tuple[int, int] = (48, 48), box: bool = False, code: int | None = None
) -> bytes:
    img = Image.new("RGB", size, rgb)
    if box:  # a conversation screenshot: an output image drawn at [20, 400, 180, 700]
        img.paste((200, 0, 0), (20, 400, 180, 700))
    if code is not None:
        _draw_code(img, code)
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def _color(i: int, salt: int) -> tuple[int, int, int]:
    digest = hashlib.sha256(f"{i}:{salt}".encode()).digest()
    return digest[0], digest[1], digest[2]


def _user_text(body: dict[str, Any]) -> str:
    content = body["messages"][1]["content"]
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content if p.get("type") == "text")


def root_id(i: int) -> str:
    return f"x:{10_000_000 + i}"


def reply_id(i: int) -> str:
    return f"x:{20_000_000 + i}"


def root_url(i: int) -> str:
    return f"https://x.com/u{i}/status/{10_000_000 + i}"


def reply_url(i: int) -> str:
    return f"https://x.com/v{i}/status/{20_000_000 + i}"


# -- curation ------------------------------------------------------------------------------------------------------
@dataclass
class CurationScenario:
    """``n`` threads cycling through :data:`KINDS`; images are routed on ``media`` when it is given.

    Kinds: ``t2i`` (prompt and one output, plus a reply from someone else that joins the tree as feedback),
    ``edit`` (input and output image), ``blank`` (fill-in-the-blank prompt, two outputs), ``shot`` (a ChatGPT
    conversation screenshot), ``pricing`` (off-topic, relevance 1) and ``analysis`` (relevance 4, quality
    Analysis). The scripted VLM of :meth:`reply` answers every stage deterministically from the request.
    """

    n: int
    media: MediaServer | None = None
    image_delay_s: float = 0.0
    posts: list[Any] = field(default_factory=list)
    texts: dict[str, str] = field(default_factory=dict)  # thread token -> post text

    def __post_init__(self) -> None:
        for i in range(self.n):
            self.posts.extend(self.thread(i))

    def image(self, i: int, name: str, data: bytes) -> Any:
        """A media reference to ``data``, served by ``media`` when there is one."""
        from echo_builder.records import MediaRef

        path = f"/img/{i}-{name}.png"
        if self.media is None:
            return MediaRef(url=f"https://media.example{path}")
        return MediaRef(url=self.media.route(path, Reply(body=data, delay_s=self.image_delay_s)))

    def thread(self, i: int) -> list[Any]:
        """Thread ``i``: its root post (kind ``KINDS[i % 6]``) and, for ``t2i``, a reply from someone else."""
        from echo_builder.records import Post

        kind = KINDS[i % len(KINDS)]
        when = T0 + timedelta(minutes=10 * i)
        media: tuple[Any, ...] = ()
        if kind == "t2i":
            text = f"GPT-4o made this. prompt: a yellow square number {i} #k{i}"
            media = (self.image(i, "out", _png(_color(i, 0))),)
        elif kind == "edit":
            text = f"GPT-4o edit! prompt: put my photo number {i} in a green field #k{i}"
            media = (self.image(i, "in", _png(_color(i, 1))), self.image(i, "out", _png(_color(i, 2))))
        elif kind == "blank":
            text = f"GPT-4o template, prompt: a figure of [character] on desk {i} #k{i}"
            media = (self.image(i, "a", _png(_color(i, 3))), self.image(i, "b", _png(_color(i, 4))))
        elif kind == "shot":
            text = f"my GPT-4o chat, prompt in the screenshot #k{i}"
            media = (self.image(i, "shot", _png(_color(i, 5), size=shot_size(i), box=True, code=i)),)
        elif kind == "pricing":
            text = f"GPT-4o api pricing changed again #k{i}"
        else:
            text = f"GPT-4o still cannot draw hands, see #k{i}"
            media = (self.image(i, "hands", _png(_color(i, 6))),)
        self.texts[f"k{i}"] = text
        posts = [
            Post(id=root_id(i), platform="x", url=root_url(i), author_id=f"u{i}", created_at=when, text=text,
                 media=media)
        ]  # fmt: skip
        if kind == "t2i":
            posts.append(
                Post(
                    id=reply_id(i),
                    platform="x",
                    url=reply_url(i),
                    author_id=f"v{i}",
                    created_at=when + timedelta(minutes=1),
                    text=f"wow, GPT-4o nailed it #r{i}",
                    reply_to_id=root_id(i),
                )
            )
        return posts

    def write(self, path: Path) -> Path:
        """The posts as JSON Lines at ``path``."""
        path.write_text("\n".join(p.model_dump_json() for p in self.posts) + "\n", encoding="utf-8")
        return path

    @property
    def images(self) -> int:
        """Distinct image URLs referenced by the posts."""
        return len({m.url for p in self.posts for m in p.media})

    @staticmethod
    def token(body: dict[str, Any]) -> str | None:
        """``k<i>`` / ``r<i>`` of the thread a build request is about (screenshot requests: from the size)."""
        text = _user_text(body)
        found = _TOKEN.findall(text)
        if found:
            kinds = [k for k, _ in found]
            k, i = found[kinds.index("k")] if "k" in kinds else found[0]
            return f"{k}{i}"
        shot = _SHOT_WIDTH.search(text)
        if shot:
            width, height = int(shot.group(1)), int(shot.group(2))
            return f"k{width - _SHOT_BASE_WIDTH + 1000 * (height - _SHOT_BASE_HEIGHT)}"
        if "conversation screenshots" in body["messages"][0]["content"]:
            images = _sent_images(body)
            return f"k{_read_code(images[0])}" if images else None
        return None

    @staticmethod
    def stage(body: dict[str, Any]) -> str:
        """The build stage a request belongs to, from its system prompt."""
        system = body["messages"][0]["content"]
        for marker, stage in (
            ("You filter social-media posts", "relevance"),
            ("You turn social-media threads", "extract"),
            ("You sort the images", "roles"),
            ("You fill in fill-in-the-blank", "templates"),
            ("You read ChatGPT conversation screenshots", "screenshots"),
            ("You are the last quality check", "tier"),
            ("You decide which automatic metrics", "applicability"),
        ):
            if marker in system:
                return stage
        raise AssertionError(f"not a build request: {system[:80]!r}")

    def reply(self, body: dict[str, Any]) -> str:
        """The scripted VLM: the right answer for every stage, from the original request (re-asks included)."""
        stage, token = self.stage(body), self.token(body)
        assert token is not None, f"no thread token in a {stage} request"
        i = int(token[1:])
        kind = KINDS[i % len(KINDS)]
        if stage == "relevance":
            score = 3 if token.startswith("r") else {"pricing": 1, "analysis": 4}.get(kind, 5)
            return json.dumps({"score": score, "note": f"scripted {kind}"})
        if stage == "extract":
            sample: dict[str, Any] = {"post_urls": [root_url(i)], "quality": "Benchmark"}
            if kind == "shot":
                sample["prompt"] = f"see the screenshot #k{i}"
            elif kind == "analysis":
                sample.update(prompt=f"hands discussion #k{i}", quality="Analysis")
            else:
                sample["prompt"] = self.texts[token].split("prompt: ", 1)[1]
            if kind == "t2i":
                sample["community_feedback"] = [{"post_url": reply_url(i), "feedback": "nailed it"}]
            return json.dumps({"samples": [sample]})
        if stage == "roles":
            answer = {
                "t2i": {"outputs": [0]},
                "edit": {"inputs": [0], "outputs": [1]},
                "blank": {"outputs": [0, 1], "fill_in_the_blank": True},
                "shot": {"outputs": [0], "conversation_screenshot": True},
                "analysis": {"outputs": [0]},
            }[kind]
            return json.dumps(answer)
        if stage == "templates":  # one fill per output image, so the two filled samples differ
            image = hashlib.sha256(json.dumps(body["messages"][1]["content"][0]).encode()).hexdigest()[:6]
            return json.dumps(
                {"filled_prompt": f"a figure of robot {image} on desk {i} #k{i}", "confident": True}
            )
        if stage == "screenshots":  # the box in pixels of the image it was sent ("openai:vlm" reads pixels)
            [sent] = _sent_images(body)
            width, height = shot_size(i)
            sx, sy = sent.width / width, sent.height / height
            return json.dumps(
                {
                    "prompt": f"make the square red {i} #k{i}",
                    "boxes": [{"role": "output", "bbox": [20 * sx, 400 * sy, 180 * sx, 700 * sy]}],
                }
            )
        if stage == "tier":
            return json.dumps({"tier": "Benchmark", "review": None})
        flags = {"face_identity": False, "structure": kind == "edit", "no_color_shift": False}
        return json.dumps({**flags, "text_rendering": kind == "shot"})


# -- judging -------------------------------------------------------------------------------------------------------
MODELS = ("alpha", "beta", "gamma")


@dataclass
class JudgeScenario:
    """``n`` image-to-image samples (``s<i>``, prompt ending in ``#s<i>``) and outputs of :data:`MODELS`.

    Model ``gamma`` has no output for sample ``s1`` (a ``missing_output`` verdict, no call). The scripted judge
    rates an output by a hash of the image it is shown, so the verdict depends only on the request.
    """

    n: int
    folder: Path

    def __post_init__(self) -> None:
        from tests.helpers.benchmark import make_benchmark, make_outputs

        samples = [
            {"id": f"s{i}", "prompt": f"make item {i} blue #s{i}", "inputs": [_png(_color(i, 10), (40, 56))]}
            for i in range(self.n)
        ]
        self.benchmark = make_benchmark(self.folder / "bench", "image_to_image", samples)
        images = {
            model: {
                f"s{i}": _png(_color(i, 20 + m), (48 + 8 * m, 48))
                for i in range(self.n)
                if not (model == "gamma" and i == 1)
            }
            for m, model in enumerate(MODELS)
        }
        self.outputs = make_outputs(self.folder / "outputs", images)

    def output_keys(self) -> dict[str, tuple[str, str]]:
        """Data URL of each output as the judge sees it (prepared JPEG) -> ``(model, sample_id)``."""
        from echo_builder.judge.images import prepare_for_judge

        keys = {}
        for model_dir in sorted(self.outputs.iterdir()):
            for f in sorted(model_dir.iterdir()):
                data = prepare_for_judge(f).data
                keys[base64.b64encode(data).decode("ascii")] = (model_dir.name, f.stem)
        return keys

    @staticmethod
    def images(body: dict[str, Any]) -> list[str]:
        """Base64 payloads of the images of the request's user message, in order."""
        content = body["messages"][1]["content"]
        return [
            p["image_url"]["url"].split(",", 1)[1]
            for p in content
            if isinstance(p, dict) and p.get("type") == "image_url"
        ]

    @classmethod
    def reply(cls, body: dict[str, Any]) -> str:
        """A rating 1-10 (single) or a preference (pairwise) from hashes of the images shown."""
        images = cls.images(body)
        score = [int(hashlib.sha256(im.encode()).hexdigest()[:8], 16) for im in images]
        if "comparing two" in body["messages"][0]["content"]:  # pairwise: input, output A, output B
            return "Output A is sharper. [[A]]" if score[-2] > score[-1] else "Output B fits better. [[B]]"
        return f"A good output keeps the input's layout. Rating: [[{1 + score[-1] % 10}]]"
