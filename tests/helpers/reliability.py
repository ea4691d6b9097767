"""Scenarios and bookkeeping shared by ``tests/reliability/`` and ``bench/reliability.py``.

- :class:`CurationScenario`: generated posts (six kinds of thread, each exercising a different build stage), their
  images served by a :class:`~tests.helpers.media_server.MediaServer`, and a scripted VLM that answers every build
  stage from the request alone. Each thread carries a token ``#k<i>`` (its replies ``#r<i>``) that the scripted
  answers copy into prompts, so every request and every failure can be traced back to its thread.
- :class:`JudgeScenario`: a small ``image_to_image`` benchmark, outputs of three models (one output missing) and a
  scripted judge whose rating depends only on the output image it is shown.
- :func:`item_outcomes`: from the fake server's log alone, what became of each logical model call (first ask plus
  its one re-ask): the oracle the fault-injection tests compare a run's reported failures with.
- :func:`check_build_faults` / :func:`check_judge_faults`: a faulted run against the oracle and the clean run.
- :func:`run_build` / :func:`run_judge`: the two commands in this process, as the fault-injection cases run them.
  Kill and resume (subprocesses, SIGKILL) is :mod:`tests.helpers.kill_resume`.
- :func:`build_files` / :func:`stage_rows`: a build folder's outputs, for comparing runs.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import json
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from PIL import Image

from tests.helpers.media_server import MediaServer, Reply
from tests.helpers.openai_server import ALL_FAULT_KINDS

__all__ = [
    "JUDGE",
    "LLM_STAGES",
    "TIMEOUT_S",
    "TRANSPORT_FAULTS",
    "CurationScenario",
    "ItemOutcome",
    "JudgeScenario",
    "build_files",
    "canonical",
    "check_build_faults",
    "check_judge_faults",
    "fast_retries",
    "fault_plan",
    "item_outcomes",
    "run_build",
    "run_judge",
    "stage_rows",
    "tokens_of",
]

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


def _png(rgb: tuple[int, int, int], size: tuple[int, int] = (48, 48), box: bool = False) -> bytes:
    img = Image.new("RGB", size, rgb)
    if box:  # a conversation screenshot: an output image drawn at [20, 400, 180, 700]
        img.paste((200, 0, 0), (20, 400, 180, 700))
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
            media = (self.image(i, "shot", _png(_color(i, 5), size=shot_size(i), box=True)),)
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
        if stage == "screenshots":
            return json.dumps(
                {
                    "prompt": f"make the square red {i} #k{i}",
                    "boxes": [{"role": "output", "bbox": [20, 400, 180, 700]}],
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


# -- retry waits ----------------------------------------------------------------------------------------------------
@contextlib.contextmanager
def fast_retries(initial_backoff_s: float = 0.002, max_backoff_s: float = 0.02) -> Iterator[type]:
    """Within the block, ``build`` and ``judge`` (in this process) retry after milliseconds instead of seconds.

    Only the backoff changes (the policy's defaults, which both commands use): the number of attempts, the
    per-attempt timeout and ``Retry-After`` handling stay the production code's, a server's ``Retry-After`` being
    honoured up to ``max_backoff_s``.
    """
    from pydantic import Field

    from echo_builder.backends import caller
    from echo_builder.judge import run

    initial, cap = initial_backoff_s, max_backoff_s  # a class body cannot see same-named enclosing locals

    class FastRetry(caller.RetryPolicy):  # type: ignore[misc, valid-type]
        initial_backoff_s: float = Field(default=initial, ge=0.0)
        max_backoff_s: float = Field(default=cap, ge=0.0)

    saved = caller.RetryPolicy, run.RetryPolicy
    caller.RetryPolicy = run.RetryPolicy = FastRetry  # type: ignore[misc]
    try:
        yield FastRetry
    finally:
        caller.RetryPolicy, run.RetryPolicy = saved  # type: ignore[misc]


# -- the oracle ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ItemOutcome:
    """What the server did to one logical call: ``ok``, ``error`` (transport faults to the end) or
    ``parse_failure`` (wrong fields twice, or a re-ask that never got through), with the attempt counts."""

    first: dict[str, Any]
    status: str
    attempts: int
    reask_attempts: int
    reasked: bool


def item_outcomes(
    bodies: Sequence[dict[str, Any]], faults: Sequence[str], *, reask_failure: str = "error"
) -> dict[str, ItemOutcome]:
    """Outcome of every logical call in a server log, keyed by :func:`canonical` of its first request.

    A re-ask is recognised as the first request's two messages followed by an assistant turn and a user turn. The
    last attempt the server logged decides (a reply that landed after the client's timeout is followed by another
    attempt, so it never counts as the last one). ``reask_failure`` is the status when a re-ask never got through:
    the build's structured stages record ``error``; the judge keeps the unparseable first answer
    (``parse_failure``).
    """
    attempts: dict[str, list[str]] = defaultdict(list)
    reasks: dict[str, list[str]] = defaultdict(list)
    firsts: dict[str, dict[str, Any]] = {}
    for body, fault in zip(bodies, faults, strict=True):
        first = dict(body, messages=body["messages"][:2])
        key = canonical(first)
        firsts.setdefault(key, first)
        (reasks if len(body["messages"]) > 2 else attempts)[key].append(fault)
    out = {}
    for key, first in firsts.items():
        tries, again = attempts[key], reasks.get(key, [])
        last = tries[-1] if tries else ""
        if last in TRANSPORT_FAULTS:
            status = "error"
        elif last == "wrong_schema":
            if not again or again[-1] in TRANSPORT_FAULTS:
                status = reask_failure
            else:
                status = "parse_failure" if again[-1] == "wrong_schema" else "ok"
        else:
            status = "ok"
        out[key] = ItemOutcome(first, status, len(tries), len(again), bool(again))
    return out


# -- outputs -------------------------------------------------------------------------------------------------------
def build_files(out: Path) -> dict[str, bytes]:
    """Every output of a build folder that must not depend on how the run went: stage files, report, card,
    dataset Parquet. Excludes the cache, the media store, ``run_stats.json`` (wall times, cache hits) and
    ``build.json`` (settings, compared by the resume check itself)."""
    names: list[Path] = [out / "report.json", out / "README.md"]
    names += sorted((out / "stages").glob("*.jsonl"))
    names += sorted(out.glob("*/test-*.parquet"))
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in names if p.is_file()}


def stage_rows(out: Path, stage: str) -> list[dict[str, Any]]:
    """The rows of ``OUT/stages/<stage>.jsonl``."""
    path = out / "stages" / f"{stage}.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def tokens_of(rows: Iterable[dict[str, Any]]) -> dict[str, str]:
    """Sample or post id -> thread token, from any rows with a ``prompt`` or ``text`` holding one."""
    found = {}
    for row in rows:
        text = row.get("prompt") or row.get("text") or ""
        match = _TOKEN.search(text)
        if match:
            found[row["id"]] = f"{match.group(1)}{match.group(2)}"
    return found


# -- checks shared by the fault-injection tests and bench/reliability.py ------------------------------------------
LLM_STAGES = ("relevance", "extract", "roles", "templates", "screenshots", "tier", "applicability")


def check_build_faults(
    sc: CurationScenario,
    out: Path,
    clean: Path,
    bodies: Sequence[dict[str, Any]],
    faults: Sequence[str],
    *,
    max_attempts: int,
) -> dict[str, Any]:
    """Assert that a build under faults reported exactly the calls the server log says were lost, and equals the
    fault-free build ``clean`` everywhere else (byte for byte when nothing was lost). Returns counts."""
    import pyarrow.parquet as pq

    outcomes = item_outcomes(bodies, faults).values()
    assert all(o.attempts <= max_attempts and o.reask_attempts <= max_attempts for o in outcomes)
    lost = sorted((sc.stage(o.first), sc.token(o.first)) for o in outcomes if o.status != "ok")
    ids = {root_id(i): f"k{i}" for i in range(sc.n)} | {reply_id(i): f"r{i}" for i in range(sc.n)}
    for stage in ("extract", "media", "roles", "templates", "screenshots", "tier", "samples"):
        ids |= tokens_of(stage_rows(out, stage))
    ids |= tokens_of(stage_rows(clean, "samples"))
    reported = sorted((f["stage"], ids[f["record_id"]]) for f in stage_rows(out, "failures"))
    assert reported == lost, (
        f"reported failures {reported} != calls the server failed beyond the budget {lost}"
    )
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    counts = {s["name"]: s["failures"] for s in report["stages"]}
    assert {s: counts[s] for s in LLM_STAGES} == {s: sum(1 for x, _ in lost if x == s) for s in LLM_STAGES}
    summary = {
        "requests": len(bodies),
        "faults": sum(1 for f in faults if f),
        "calls": len(outcomes),
        "reasked": sum(o.reasked for o in outcomes),
        "lost": len(lost),
        "identical": False,
    }
    if not lost:  # the retry budget sufficed everywhere: byte-identical outputs
        assert build_files(out) == build_files(clean)
        summary["identical"] = True
        summary["compared_samples"] = len(stage_rows(clean, "samples"))
        return summary
    # otherwise identical wherever no call of that thread was lost
    touched = {token for _, token in lost}
    lost_relevance = {t for s, t in lost if s == "relevance"}
    faulted = {r["post_id"]: r for r in stage_rows(out, "relevance")}
    for row in stage_rows(clean, "relevance"):
        if ids[row["post_id"]] not in lost_relevance:
            assert faulted[row["post_id"]] == row
    kept = {row["id"]: row for row in stage_rows(clean, "samples") if ids[row["id"]] not in touched}
    assert {row["id"]: row for row in stage_rows(out, "samples") if ids[row["id"]] not in touched} == kept
    for path in sorted(clean.glob("*/test-*.parquet")):
        a = {row["id"]: row for row in pq.read_table(path).to_pylist() if row["id"] in kept}
        b = {
            row["id"]: row
            for row in pq.read_table(out / path.relative_to(clean)).to_pylist()
            if row["id"] in kept
        }
        assert a == b, path.parent.name
    summary["compared_samples"] = len(kept)
    return summary


def check_judge_faults(
    sc: JudgeScenario,
    output_keys: dict[str, tuple[str, str]],
    run: Path,
    clean_verdicts: Sequence[Any],
    bodies: Sequence[dict[str, Any]],
    faults: Sequence[str],
    *,
    mode: str,
    max_attempts: int,
) -> dict[str, Any]:
    """Assert that every verdict the server log says was lost has the oracle's failure status (and run.json
    counts it), and that every other verdict equals the fault-free run's. Returns counts."""
    from collections import Counter

    from echo_builder.judge.run import read_verdicts

    def key(v: Any) -> tuple:
        return (v.sample_id, v.model, v.model_a, v.model_b, v.order)

    measured, cost = {"latency_s"}, {"input_tokens", "output_tokens"}  # a re-ask sends a longer conversation
    expected: dict[tuple, ItemOutcome] = {}
    for o in item_outcomes(bodies, faults, reask_failure="parse_failure").values():
        assert o.attempts <= max_attempts and o.reask_attempts <= max_attempts
        (first_model, sample), *rest = [output_keys[im] for im in sc.images(o.first)[1:]]  # after the input
        if mode == "single":
            k: tuple = (sample, first_model, None, None, None)
        else:
            a, b = sorted((first_model, rest[0][0]))
            k = (sample, None, a, b, "AB" if first_model == a else "BA")
        assert k not in expected  # one logical call per verdict
        expected[k] = o
    verdicts = read_verdicts(run)
    reference = {key(v): v for v in clean_verdicts}
    assert sorted(map(key, verdicts)) == sorted(reference)  # nothing dropped, nothing added
    for v in verdicts:
        ref = reference[key(v)]
        if ref.status == "missing_output":  # no call, in both runs
            assert key(v) not in expected and v.model_dump(exclude=measured) == ref.model_dump(
                exclude=measured
            )
            continue
        outcome = expected[key(v)]
        if outcome.status == "ok":
            ignored = measured | (cost if outcome.reasked else set())
            assert v.model_dump(exclude=ignored) == ref.model_dump(exclude=ignored)
            if outcome.reasked:  # the re-ask cost more input tokens than the first ask alone
                assert v.input_tokens > ref.input_tokens
        else:
            assert v.status == outcome.status and v.rating is None and v.winner is None and v.error
    lost = Counter(o.status for o in expected.values() if o.status != "ok")
    summary = json.loads((run / "run.json").read_text(encoding="utf-8"))
    statuses = Counter(v.status for v in clean_verdicts)
    assert summary["statuses"] == dict(
        Counter({"ok": statuses["ok"] - sum(lost.values()), "missing_output": statuses["missing_output"]})
        + lost
    )
    return {
        "requests": len(bodies),
        "faults": sum(1 for f in faults if f),
        "calls": len(expected),
        "reasked": sum(o.reasked for o in expected.values()),
        "lost": sum(lost.values()),
        "lost_by_status": dict(lost),
        "identical": not lost
        and [v.model_dump(exclude=measured | cost) for v in verdicts]
        == [v.model_dump(exclude=measured | cost) for v in clean_verdicts],
    }


# -- how the suite runs the two commands ---------------------------------------------------------------------------
TIMEOUT_S = 1.0  # per attempt, for the in-process runs under faults
JUDGE = "openai:judge"


def fault_plan(rate: float, seed: int) -> Any:
    """Every fault kind at ``rate``; 429s carry ``retry-after-ms`` and ``Retry-After``; a slow reply outlasts
    the per-attempt timeout."""
    from tests.helpers.openai_server import FaultPlan

    return FaultPlan(
        rate=rate, kinds=ALL_FAULT_KINDS, seed=seed, retry_after_ms=5, retry_after_s=1, slow_s=TIMEOUT_S + 0.2
    )


def run_build(posts: Path, out: Path, server: Any, *, max_attempts: int, concurrency: int = 8) -> Any:
    """``build`` in this process with a :data:`TIMEOUT_S` per attempt (fast waits: :func:`fast_retries`)."""
    from echo_builder.pipeline import BuildConfig, build

    return build(
        BuildConfig(
            sources=[posts],
            out_dir=out,
            backend="openai:vlm",
            backend_options={"base_url": server.base_url, "timeout_s": TIMEOUT_S},
            target_model="GPT-4o",
            allow_private_media=True,
            progress=False,
            concurrency=concurrency,
            timeout_s=TIMEOUT_S,
            max_attempts=max_attempts,
        )
    )


def run_judge(
    sc: JudgeScenario, out: Path, server: Any, *, mode: str, max_attempts: int, concurrency: int = 8
) -> Any:
    """``judge`` in this process with a :data:`TIMEOUT_S` per attempt (fast waits: :func:`fast_retries`)."""
    from echo_builder.judge.run import run_judging

    return run_judging(
        sc.benchmark,
        "image_to_image",
        sc.outputs,
        [JUDGE],
        out,
        mode=mode,  # type: ignore[arg-type]
        judge_options={JUDGE: {"base_url": server.base_url, "timeout_s": TIMEOUT_S}},
        concurrency=concurrency,
        timeout_s=TIMEOUT_S,
        max_attempts=max_attempts,
        progress=False,
    )
