"""`echo-bench build` killed with SIGKILL at a random moment, then resumed: same outputs, nothing repeated.

Each trial starts the real CLI in a subprocess against the loopback VLM (40 ms per call) and the media server
(30 ms per image), kills it at a seeded random point (right after a random model call, while the images
download, or after the last call while the last stages and the dataset are written), and reruns it with
``--resume`` until it completes. The final build folder must be byte-identical to an uninterrupted build's, and
(:func:`tests.helpers.kill_resume.kill_and_resume`) no call stored in the cache and no image stored in the media
store before a kill may be requested again; what was in flight at the kill may be, at most once per call and
never more than the concurrency. Three trials run here; ``python -m bench.reliability kill --trials 10`` runs ten.
"""

from __future__ import annotations

import os
import random

import pytest

from tests.conftest import REPO_ROOT
from tests.helpers.kill_resume import build_command, draw_kills, kill_and_resume
from tests.helpers.media_server import MediaServer
from tests.helpers.openai_server import FakeOpenAIServer
from tests.helpers.reliability import build_files
from tests.helpers.scenarios import CurationScenario

N_THREADS = 12
CONCURRENCY = 4  # the default of build_command
SEED = 8


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """Servers, posts, and one uninterrupted build: its outputs, its model calls and how long it ran after them."""
    folder = tmp_path_factory.mktemp("kill-build")
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    with MediaServer() as media, FakeOpenAIServer(latency_s=0.04) as llm:
        sc = CurationScenario(N_THREADS, media, image_delay_s=0.03)
        llm.reply = sc.reply
        posts = sc.write(folder / "posts.jsonl")
        clean = folder / "clean"
        trial = kill_and_resume(
            build_command(posts, clean, llm), resume=["--resume"], cache_dir=clean / "cache", llm=llm,
            kills=[], env=env, media=media, media_root=clean / "media",
        )  # fmt: skip
        assert trial.runs == 1 and media.total_hits == sc.images  # each image downloaded once
        tail_s = trial.wall_s - trial.last_call_at_s  # after the last model call: dataset writing and exit
        before_media = sum(1 for b in llm.log.bodies if sc.stage(b) in ("relevance", "extract"))
        yield {"posts": posts, "llm": llm, "media": media, "env": env, "clean": clean, "calls": trial.calls[0],
               "tail_s": tail_s, "before_media": before_media}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("trial", range(3))
def test_build_killed_at_a_random_moment_resumes_to_identical_outputs(uninterrupted, tmp_path, trial):
    u = uninterrupted
    rng = random.Random(SEED * 1000 + trial)
    # trial 0: one kill after a random model call; 1: one while images download, one after a random call of the
    # resumed run; 2: one after the last model call (last stages, dataset writing)
    first = ("call", "media", "tail")[trial]
    kills = draw_kills(
        rng, u["calls"], u["tail_s"], kills=2 if trial == 1 else 1, first=first, media_after=u["before_media"]
    )
    out = tmp_path / "killed"
    result = kill_and_resume(
        build_command(u["posts"], out, u["llm"]), resume=["--resume"], cache_dir=out / "cache", llm=u["llm"],
        kills=kills, env=u["env"], media=u["media"], media_root=out / "media",
    )  # fmt: skip
    assert result.kills >= 1, f"the run finished before its kill point {kills}"
    assert result.repeated_calls == 0 and result.repeated_downloads == 0
    # per kill, what that kill's process had in flight (tests.helpers.kill_resume.resent_per_kill)
    assert all(n <= CONCURRENCY for n in result.in_flight_resent + result.downloads_in_flight_resent), (
        f"sent again, per kill: calls {result.in_flight_resent}, downloads {result.downloads_in_flight_resent}"
    )
    assert build_files(out) == build_files(u["clean"])


def test_a_store_image_is_prepared_once_per_process_and_again_when_it_changes(tmp_path, monkeypatch):
    """The VLM stages send each store image several times (roles, tier, applicability) and a rerun from the cache
    must rebuild every request to find its key; preparing a file (decode, resize to 512 px, JPEG) once per
    process halved the rerun of 10k posts (bench/RESULTS.md, Scale)."""
    import io

    from PIL import Image

    from echo_builder.judge import images

    path, other = tmp_path / "a.png", tmp_path / "b.png"
    Image.new("RGB", (64, 32), (200, 10, 10)).save(path)
    Image.new("RGB", (40, 40), (10, 200, 10)).save(other)
    first = images.prepare_for_judge(path)
    assert images.prepare_for_judge(str(path)) is first  # memoized, whether named by str or Path
    with Image.open(io.BytesIO(first.data)) as decoded:
        assert decoded.size == (1024, 512) and decoded.getpixel((500, 250)) == pytest.approx(
            (200, 10, 10), abs=3
        )
    Image.new("RGB", (32, 64), (10, 10, 200)).save(path)  # the file changes: prepared anew
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    again = images.prepare_for_judge(path)
    with Image.open(io.BytesIO(again.data)) as decoded:
        assert decoded.size == (512, 1024) and decoded.getpixel((250, 500)) == pytest.approx(
            (10, 10, 200), abs=3
        )
    data = path.read_bytes()  # bytes are not memoized (no file to key on)
    assert images.prepare_for_judge(data) is not images.prepare_for_judge(data)
    monkeypatch.setattr(images, "FILE_MEMO_BYTES", len(again.data))  # room for one: the oldest goes first
    images.prepare_for_judge(other)
    assert images.prepare_for_judge(path) is not again
