"""The media stage against a real HTTP server on 127.0.0.1: store, resume, limits, security and odd images."""

from __future__ import annotations

import hashlib
import io
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from echo_builder.records import MediaRef, Sample
from echo_builder.stages.media import OFFLINE_MISS, MediaStore, fetch_media, run_media
from tests.helpers.media_server import MediaServer, Reply

FAST = {"allow": ["127.0.0.1"], "backoff_s": 0.01, "timeout_s": 5.0}


def encode(img: Image.Image, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format=fmt, **kw)
    return buf.getvalue()


def rgb(w: int = 24, h: int = 16, seed: int = 0) -> Image.Image:
    return Image.fromarray(np.random.default_rng(seed).integers(0, 255, (h, w, 3), dtype=np.uint8))


def bomb_png(width: int = 100_000, height: int = 100_000) -> bytes:
    """A tiny PNG whose IHDR declares ``width x height`` 1-bit pixels."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(b"\0" * 64))
        + chunk(b"IEND", b"")
    )


def sample(sid: str, *outputs: MediaRef, inputs: tuple[MediaRef, ...] = ()) -> Sample:
    return Sample(id=sid, prompt="make it blue", input_images=inputs, output_images=outputs)


@pytest.fixture
def server():
    with MediaServer() as s:
        yield s


@pytest.fixture
def store(tmp_path: Path) -> MediaStore:
    return MediaStore(tmp_path / "media")


def test_good_images_stored_once_and_rerun_makes_no_request(server, store, tmp_path):
    png, jpg, webp = (
        encode(rgb(24, 16), "PNG"),
        encode(rgb(30, 20, 1), "JPEG"),
        encode(rgb(10, 12, 2), "WEBP"),
    )
    u_png = server.route("/a.png", Reply(body=png))
    u_jpg = server.route("/b.jpg", Reply(body=jpg, content_type="image/jpeg"))
    u_webp = server.route("/c.webp", Reply(body=webp, content_type="image/webp"))
    samples = [
        sample("s1", MediaRef(url=u_png), inputs=(MediaRef(url=u_jpg),)),
        sample("s2", MediaRef(url=u_webp), MediaRef(url=u_png)),  # shares a.png with s1
    ]
    result = run_media(samples, store, **FAST)
    assert server.hits == {"/a.png": 1, "/b.jpg": 1, "/c.webp": 1}
    assert [s.id for s in result.samples] == ["s1", "s2"] and not result.failures
    ref = result.samples[0].output_images[0]
    assert ref.sha256 == hashlib.sha256(png).hexdigest() and (ref.width, ref.height) == (24, 16)
    assert ref.path == f"{ref.sha256[:2]}/{ref.sha256}.png"
    assert (store.root / ref.path).read_bytes() == png
    assert result.samples[0].input_images[0].path.endswith(".jpg")
    assert result.samples[1].output_images[0].path.endswith(".webp")
    assert result.samples[1].output_images[1] == ref
    assert result.counts["download"] == 3 and result.counts["refs"] == 4

    # a new process on the same store: nothing is fetched, the output is identical
    again = run_media(samples, MediaStore(store.root), **FAST)
    assert server.total_hits == 3 and again.samples == result.samples and again.counts["store"] == 3
    # rerunning on already-resolved samples is a no-op too
    assert run_media(result.samples, MediaStore(store.root), **FAST).samples == result.samples
    assert server.total_hits == 3


def test_awkward_but_valid_images_succeed(server, store):
    cmyk = encode(rgb().convert("CMYK"), "JPEG")
    palette = rgb().convert("P", palette=Image.Palette.ADAPTIVE, colors=8)
    pal_png = encode(palette, "PNG", transparency=0)
    deep = encode(Image.fromarray(np.arange(24 * 16, dtype=np.uint16).reshape(16, 24) * 100), "PNG")
    frames = [rgb(seed=i).convert("P") for i in range(3)]
    gif = io.BytesIO()
    frames[0].save(gif, format="GIF", save_all=True, append_images=frames[1:], duration=50, loop=0)
    urls = [
        server.route("/cmyk.jpg", Reply(body=cmyk, content_type="image/jpeg")),
        server.route("/pal.png", Reply(body=pal_png)),
        server.route("/deep.png", Reply(body=deep)),
        server.route("/anim.gif", Reply(body=gif.getvalue(), content_type="image/gif")),
    ]
    outcomes = fetch_media(urls, store, **FAST)
    assert all(o.error is None for o in outcomes.values()), outcomes
    assert Image.open(io.BytesIO(deep)).mode.startswith("I")
    assert [o.n_frames for o in outcomes.values()] == [1, 1, 1, 3]
    assert all((o.width, o.height) == (24, 16) for o in outcomes.values())
    assert outcomes[urls[3]].path.endswith(".gif")


def test_every_failure_is_recorded_and_the_run_continues(server, store, monkeypatch):
    html = b"<!doctype html><html><body>login</body></html>"
    ok = server.route("/ok.png", Reply(body=encode(rgb(), "PNG")))
    big = encode(rgb(64, 64), "PNG")
    cases = {
        server.route("/corrupt.png", Reply(body=b"\x89PNG\r\n\x1a\n garbage")): "cannot decode",
        server.route("/empty.png", Reply(body=b"")): "empty body",
        server.route("/html-as-png", Reply(body=html)): "cannot decode",
        server.route("/page", Reply(body=html, content_type="text/html; charset=utf-8")): "'text/html'",
        server.route("/none", Reply(body=html, content_type=None)): "not an image",
        server.route("/bomb.png", Reply(body=bomb_png())): "decompression-bomb",
        server.route("/big.png", Reply(body=big)): "Content-Length",
        server.route("/big-nolen.png", Reply(body=big, content_length=False)): "byte limit",
        server.route("/gone.png", Reply(404)): "HTTP 404",
        "file:///etc/passwd": "scheme 'file' is refused",
        "ftp://example.com/a.png": "scheme 'ftp' is refused",
        "http://user:pw@127.0.0.1/a.png": "credentials",
    }
    samples = [sample("good", MediaRef(url=ok))] + [
        sample(f"s{i}", MediaRef(url=u)) for i, u in enumerate(cases)
    ]
    result = run_media(samples, store, max_bytes=len(big) - 1, **FAST)
    assert [s.id for s in result.samples] == [s.id for s in samples]
    assert result.samples[0].output_images[0].sha256 and not result.samples[0].media_errors
    for s, (url, reason) in zip(result.samples[1:], cases.items(), strict=True):
        assert len(s.media_errors) == 1 and s.media_errors[0].startswith(f"{url}: "), s.media_errors
        assert reason in s.media_errors[0], s.media_errors
        assert s.output_images[0].url == url and s.output_images[0].sha256 is None  # the ref is kept
    assert server.hits["/gone.png"] == 1  # 404 is not retried
    assert len(result.failures) == len(cases) and result.counts["failed_refs"] == len(cases)
    assert not list(store.root.glob("*/.tmp-*"))

    # a moderate image over a lowered pixel limit is refused by the package's own guard
    monkeypatch.setattr("echo_builder.imaging.MAX_PIXELS", 32 * 32)
    out = fetch_media([server.route("/wide.png", Reply(body=big))], store, **FAST)
    assert "64x64 pixels is over the 1,024 pixel limit" in next(iter(out.values())).error


def test_retries_on_5xx_and_429_but_not_endlessly(server, store):
    png = encode(rgb(), "PNG")
    flaky = server.route("/flaky.png", Reply(500, b"oops", "text/plain"), Reply(body=png))
    limited = server.route(
        "/limited.png", Reply(429, b"", "text/plain", {"Retry-After": "0"}), Reply(body=png)
    )
    down = server.route("/down.png", Reply(503, b"", "text/plain"))
    outcomes = fetch_media([flaky, limited, down], store, max_attempts=3, **FAST)
    assert outcomes[flaky].error is None and server.hits["/flaky.png"] == 2
    assert outcomes[limited].error is None and server.hits["/limited.png"] == 2
    assert "HTTP 503" in outcomes[down].error and "3 attempts" in outcomes[down].error
    assert server.hits["/down.png"] == 3


def test_timeout_is_retried_then_reported(server, store):
    slow = server.route("/slow.png", Reply(body=encode(rgb(), "PNG"), delay_s=1.0))
    out = fetch_media([slow], store, **{**FAST, "timeout_s": 0.2, "max_attempts": 2})
    assert "timed out" in out[slow].error and server.hits["/slow.png"] == 2


def test_private_addresses_are_refused_even_after_redirects(server, store):
    png = encode(rgb(), "PNG")
    target = server.route("/img.png", Reply(body=png))
    direct = fetch_media([target], store)  # nothing is allowed by default
    assert "non-public address 127.0.0.1" in direct[target].error and server.total_hits == 0

    loopback = ["127.0.0.0/8"]  # the test server is allowed, nothing else private is
    to_meta = server.route(
        "/r1", Reply(302, content_type=None, headers={"Location": "http://169.254.169.254/x"})
    )
    to_lan = server.route("/r2", Reply(301, content_type=None, headers={"Location": "http://10.1.2.3/a.png"}))
    hop = server.route("/r3", Reply(307, content_type=None, headers={"Location": "/img.png"}))
    loop = server.route("/loop", Reply(302, content_type=None, headers={"Location": "/loop"}))
    out = fetch_media([to_meta, to_lan, hop, loop], store, allow=loopback, backoff_s=0.01)
    assert "169.254.169.254" in out[to_meta].error and "10.1.2.3" in out[to_lan].error
    assert out[hop].error is None and out[hop].sha256 == hashlib.sha256(png).hexdigest()
    assert "more than 5 redirects" in out[loop].error and server.hits["/loop"] == 6


def test_offline_uses_only_the_store(server, store):
    known = server.route("/known.png", Reply(body=encode(rgb(), "PNG")))
    fetch_media([known], store, **FAST)
    unknown = server.route("/unknown.png", Reply(body=encode(rgb(seed=3), "PNG")))
    out = fetch_media([known, unknown], MediaStore(store.root), offline=True, **FAST)
    assert out[known].source == "store" and out[unknown].error == OFFLINE_MISS
    assert server.hits["/unknown.png"] == 0 and server.hits["/known.png"] == 1


def test_local_paths_are_imported_and_media_ids_reported(tmp_path, store):
    folder = tmp_path / "collection"
    folder.mkdir()
    (folder / "example.jpg").write_bytes(encode(rgb(20, 10), "JPEG"))
    refs = (
        MediaRef(path="example.jpg"),
        MediaRef(media_id="3_190412345"),
        MediaRef(path="missing.png"),
        MediaRef(path="../outside.png"),
    )
    result = run_media([sample("s", *refs)], store, local_root=folder, offline=True)
    imported = result.samples[0].output_images[0]
    assert (
        imported.sha256
        and (store.root / imported.path).is_file()
        and (imported.width, imported.height)
        == (
            20,
            10,
        )
    )
    errors = result.samples[0].media_errors
    assert errors[0].startswith("media_id:3_190412345: ") and "X API" in errors[0]
    assert errors[1] == "missing.png: local file not found"
    assert "escapes" in errors[2] and len(result.samples[0].output_images) == 4


def test_rerun_clears_fixed_errors_and_ignores_a_torn_index_line(server, store):
    url = server.route("/later.png", Reply(404), Reply(body=encode(rgb(), "PNG")))
    first = run_media([sample("s", MediaRef(url=url))], store, **FAST)
    assert first.samples[0].media_errors == (f"{url}: HTTP 404",)
    with open(store.index_path, "a", encoding="utf-8") as f:
        f.write('{"source": "http://x/torn", "sha2')  # a run killed mid-write
    second = run_media(first.samples, MediaStore(store.root), **FAST)
    assert second.samples[0].media_errors == () and second.samples[0].output_images[0].sha256


@pytest.mark.parametrize(
    "url",
    [
        "http://localhost/a.png",
        "http://[::1]/a.png",
        "http://[::ffff:127.0.0.1]/a.png",
        "http://0.0.0.0/a.png",
        "http://169.254.169.254/latest/meta-data",
        "http://10.0.0.1/a.png",
        "http://192.168.1.1/a.png",
        "http://224.0.0.1/a.png",
        "http://240.0.0.1/a.png",
    ],
)
def test_non_public_addresses_are_refused_before_connecting(url, store):
    out = fetch_media([url], store, max_attempts=1)
    assert "non-public address" in out[url].error
