"""The media stage against hostile URLs, hosts and servers: unparseable URLs, the total deadline per URL, the
``--media-allow`` address policy, and IPv6 forms that embed a non-public IPv4 address (issue 13, items 2, 13, 17,
18). Everything runs against servers on 127.0.0.1; other addresses are refused before any connection."""

from __future__ import annotations

import hashlib
import io
import ipaddress
import json
import socket
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from PIL import Image

from echo_builder.cli import cli
from echo_builder.errors import ConfigError
from echo_builder.records import MediaRef, Sample
from echo_builder.stages.media import MediaPolicy, MediaStore, embedded_ipv4, fetch_media, run_media
from tests.helpers.media_server import MediaServer, Reply

FAST = {"allow": ["127.0.0.1"], "backoff_s": 0.01, "timeout_s": 5.0}


def png(color: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (12, 8), color).save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture
def server():
    with MediaServer() as s:
        yield s


@pytest.fixture
def store(tmp_path: Path) -> MediaStore:
    return MediaStore(tmp_path / "media")


# ------------------------------------------------------------------------ item 2: URLs that cannot be parsed
UNPARSEABLE = {
    "https://pbs.twimg.com:99999/media/a.jpg": "invalid URL (Port out of range 0-65535)",
    "https://pbs.twimg.com:http/a.jpg": "invalid URL (Port could not be cast to integer value as 'http')",
    "http://[::1]:-1/a.png": "invalid URL (Port could not be cast",
    "http://pbs.twimg.com:0/a.jpg": "invalid URL (port 0)",
    "http://[::1/a.png": "invalid URL (Invalid IPv6 URL)",
    "http://[v1.fe]/a.png": "v1.fe",
    "http://[fe80::1%25eth0]/a.png": "IPv6 zone id in host [fe80::1%25eth0] is refused",
    "http://pbs.twimg.com\x00.evil.example/a.jpg": "URL contains a control character",
    "http://pbs.twim\tg.com/a.jpg": "URL contains a control character",  # urlsplit would drop the tab
    "http://pbs.twimg.com/a.jpg\r\nX-Injected: 1": "URL contains a control character",
    "http://pbs twimg.com/a.jpg": "host 'pbs twimg.com' contains a space or control character",
    "http://pbs\u3000twimg.com/a.jpg": "is not a valid host name",  # ideographic space, IDNA refuses it
    "http://ex\u2028ample.com/a.jpg": "is not a valid host name (encoding with 'idna' codec failed",
    "http://" + "a" * 64 + ".com/a.jpg": "is not a valid host name (encoding with 'idna' codec failed",
    "http://pbs..twimg.com/a.jpg": "is not a valid host name",
    "http://pbs.twimg.com/\ud83d.jpg": "URL is not valid Unicode (it holds a lone surrogate)",
    "https:///media/a.jpg": "URL has no host",
    "https://:443/media/a.jpg": "URL has no host",
    "gopher://pbs.twimg.com/a.jpg": "scheme 'gopher' is refused",
}


def test_unparseable_urls_are_errors_of_that_image_only(server, store):
    """Every malformed URL is a recorded error of its own ref; the sample beside it keeps its image, nothing is
    retried, nothing is resolved, and a second run (a resume) over the same samples does the same."""
    good = server.route("/good.png", Reply(body=png()))
    samples = [Sample(id="good", prompt="p", output_images=(MediaRef(url=good),))] + [
        Sample(id=f"s{i}", prompt="p", output_images=(MediaRef(url=url), MediaRef(url=good)))
        for i, url in enumerate(UNPARSEABLE)
    ]
    for _run in range(2):
        result = run_media(samples, MediaStore(store.root), **FAST)
        assert [s.id for s in result.samples] == [s.id for s in samples]
        for s, (url, reason) in zip(result.samples[1:], UNPARSEABLE.items(), strict=True):
            assert len(s.media_errors) == 1 and s.media_errors[0].startswith(f"{url}: "), s.media_errors
            assert reason in s.media_errors[0], (url, s.media_errors)
            bad, ok = s.output_images
            assert bad.url == url and bad.sha256 is None and ok.sha256 == hashlib.sha256(png()).hexdigest()
        assert result.counts["failed_refs"] == len(UNPARSEABLE)
    assert server.hits == {"/good.png": 1}  # stored once, reused by the rerun


@pytest.mark.parametrize(
    ("location", "reason"),
    [
        ("http://127.0.0.1:99999/a.png", "invalid URL (Port out of range 0-65535)"),
        ("http://[::1/a.png", "HTTP 302 redirect to an invalid URL 'http://[::1/a.png' (Invalid IPv6 URL)"),
        ("http://a\x00b.example/a.png", "URL contains a control character"),
        ("http://a b.example/a.png", "contains a space or control character"),
        ("//:80/a.png", "URL has no host"),
        ("http://" + "b" * 70 + ".example/a.png", "is not a valid host name"),
        ("file:///etc/passwd", "scheme 'file' is refused"),
    ],
)
def test_a_redirect_to_an_unparseable_url_is_a_recorded_error(server, store, location, reason):
    hop = server.route("/hop.png", Reply(302, content_type=None, headers={"Location": location}))
    out = fetch_media([hop], store, **FAST)
    assert reason in out[hop].error and out[hop].sha256 is None
    assert server.hits["/hop.png"] == 1  # final, not retried


def test_path_and_query_are_percent_encoded_not_refused(server, store):
    server.route("/a%20b%C3%A9.png", Reply(body=png()))
    url = server.url("/a b\u00e9.png")
    out = fetch_media([url], store, **FAST)
    assert out[url].error is None and server.hits["/a%20b%C3%A9.png"] == 1


# ------------------------------------------------------------------------------ item 13: the total deadline
class DripServer:
    """A raw loopback server that sends ``head`` then ``body`` one byte per ``every_s``, or the head itself
    that slowly when ``drip_head``."""

    def __init__(self, drip_head: bool = False, every_s: float = 0.2) -> None:
        self.drip_head, self.every_s = drip_head, every_s
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.stop = threading.Event()
        self.requests = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.requests += 1
            threading.Thread(target=self._reply, args=(conn,), daemon=True).start()

    def _reply(self, conn: socket.socket) -> None:
        head = b"HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nContent-Length: 100000\r\n\r\n"
        try:
            conn.recv(65536)
            slow = head if self.drip_head else b"\x89PNG" + b"\0" * 100_000
            if not self.drip_head:
                conn.sendall(head)
            for byte in slow:
                if self.stop.wait(self.every_s):
                    break
                conn.sendall(bytes([byte]))
        except OSError:
            pass
        finally:
            conn.close()

    def __enter__(self) -> DripServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.sock.close()


@pytest.mark.parametrize("drip_head", [False, True], ids=["body", "headers"])
def test_a_dripping_server_is_abandoned_at_the_total_deadline(store, drip_head):
    """One byte every 0.2 s keeps every read under any per-read timeout; the whole body would take hours. The
    download is abandoned at the 1 s deadline (bound: 15 s, far below the drip's time however loaded the machine)."""
    with DripServer(drip_head=drip_head) as drip:
        url = f"http://127.0.0.1:{drip.port}/slow.png"
        started = time.monotonic()
        out = fetch_media([url], store, allow=["127.0.0.1"], timeout_s=5.0, deadline_s=1.0, max_attempts=3)
        elapsed = time.monotonic() - started
    assert out[url].error == (
        "download abandoned: over the 1 s total deadline per URL (connect, redirects, headers, body and retries)"
    )
    assert elapsed < 15 and drip.requests == 1  # no retry starts after the deadline
    assert not list(store.root.glob("*/*"))


def test_retries_and_their_waits_count_against_the_deadline(server, store):
    """A Retry-After that would end past the deadline ends the URL now instead of sleeping through it."""
    down = server.route("/down.png", Reply(503, b"", "text/plain", {"Retry-After": "60"}))
    started = time.monotonic()
    out = fetch_media([down], store, allow=["127.0.0.1"], deadline_s=10.0, max_attempts=50)
    assert time.monotonic() - started < 30  # the 60 s wait was not slept
    assert out[down].error == (
        "HTTP 503 (gave up after 1 attempts: the next one would start after the 10 s total deadline per URL)"
    )
    assert server.hits["/down.png"] == 1


def test_a_name_lookup_that_hangs_is_bounded(store, monkeypatch):
    release = threading.Event()

    def hanging_lookup(host, *args, **kwargs):
        release.wait(30)
        raise socket.gaierror(socket.EAI_AGAIN, "released")

    monkeypatch.setattr(socket, "getaddrinfo", hanging_lookup)
    url = "http://slow-dns.example/a.png"
    started = time.monotonic()
    try:
        out = fetch_media([url], store, timeout_s=0.5, deadline_s=30.0, max_attempts=1)
    finally:
        release.set()
    assert time.monotonic() - started < 15
    assert out[url].error == "looking up host 'slow-dns.example' took over 0.5 s (gave up after 1 attempts)"


def test_times_must_be_positive_and_finite(store):
    for bad in (
        {"deadline_s": float("nan")},
        {"timeout_s": 0},
        {"deadline_s": float("inf")},
        {"backoff_s": -1},
    ):
        with pytest.raises(ValueError, match="finite number of seconds"):
            fetch_media([], store, **bad)


# --------------------------------------------------------------------------- item 18: embedded IPv4 addresses
@pytest.mark.parametrize(
    ("address", "embedded"),
    [
        ("::ffff:169.254.169.254", ["169.254.169.254"]),  # IPv4-mapped
        ("::ffff:0:a00:1", ["10.0.0.1"]),  # IPv4-translated
        ("::7f00:1", ["127.0.0.1"]),  # IPv4-compatible (deprecated)
        ("2002:a9fe:a9fe::", ["169.254.169.254"]),  # 6to4
        ("2002:c0a8:101:5::1", ["192.168.1.1"]),
        ("2001:0:4136:e378::f5ff:fffe", ["65.54.227.120", "10.0.0.1"]),  # Teredo: server, client
        ("64:ff9b::a9fe:a9fe", ["169.254.169.254"]),  # NAT64 well-known prefix
        ("64:ff9b:1:c0a8:1:100::", ["192.168.1.1"]),  # NAT64 local-use prefix, RFC 6052 /48 layout
        ("2606:4700::1111", []),
        ("::1", []),
        ("8.8.8.8", []),
    ],
)
def test_embedded_ipv4(address, embedded):
    assert [str(a) for a in embedded_ipv4(ipaddress.ip_address(address))] == embedded


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("http://[2002:a9fe:a9fe::]/", "2002:a9fe:a9fe:: (which embeds 169.254.169.254): link-local"),
        ("http://[2002:a00:1::]/a.png", "non-public address 2002:a00:1:: (which embeds 10.0.0.1)"),
        ("http://[2002:7f00:1::]/a.png", "(which embeds 127.0.0.1)"),
        ("http://[2001:0:4136:e378::f5ff:fffe]/a.png", "(which embeds 65.54.227.120, 10.0.0.1)"),
        ("http://[64:ff9b::a00:1]/a.png", "64:ff9b::a00:1 (which embeds 10.0.0.1)"),
        ("http://[64:ff9b::7f00:1]/a.png", "(which embeds 127.0.0.1)"),
        ("http://[64:ff9b:1:c0a8:1:100::]/a.png", "(which embeds 192.168.1.1)"),
        ("http://[::ffff:10.1.2.3]/a.png", "(which embeds 10.1.2.3)"),
        ("http://[::ffff:0:c0a8:101]/a.png", "(which embeds 192.168.1.1)"),
        ("http://[::a00:1]/a.png", "(which embeds 10.0.0.1)"),
        ("http://[fc00::1]/a.png", "non-public address fc00::1"),
    ],
)
def test_ipv6_forms_of_private_addresses_are_refused(store, url, fragment):
    out = fetch_media([url], store, max_attempts=1)
    assert fragment in out[url].error and out[url].error.startswith("host ")


# ----------------------------------------------------------------------------- item 17: the allow-list
NEVER = [
    "http://169.254.169.254/latest/meta-data/",
    "http://169.254.0.1/a.png",
    "http://[fe80::1]/a.png",
    "http://[fd00:ec2::254]/latest/meta-data/",
    "http://100.100.100.200/latest/meta-data/",
    "http://168.63.129.16/machine",
    "http://[::ffff:169.254.169.254]/",
    "http://[64:ff9b::a9fe:a9fe]/",
    "http://0.0.0.0/a.png",
    "http://224.0.0.1/a.png",
]


@pytest.mark.parametrize("url", NEVER)
def test_link_local_and_metadata_are_never_fetched_even_when_everything_is_allowed(store, url):
    out = fetch_media([url], store, allow=["0.0.0.0/0", "::/0"], max_attempts=1)
    assert "never fetched (not even with --media-allow)" in out[url].error, out[url].error


@pytest.mark.parametrize(
    "entry",
    ["169.254.169.254", "169.254.169.254:80", "169.254.0.0/16", "[fe80::1]:80", "fe80::/64", "fd00:ec2::254",
     "100.100.100.200", "::ffff:169.254.169.254", "0.0.0.0"],
)  # fmt: skip
def test_never_allowed_entries_are_refused_when_parsed(entry):
    with pytest.raises(ConfigError, match="never allowed"):
        MediaPolicy.from_entries([entry])


@pytest.mark.parametrize(
    "entry", ["127.0.0.1:http", "127.0.0.1:70000", "[::1", "[::1]x", "", "a b", "10.0.0.0/33"]
)
def test_malformed_entries_are_refused_when_parsed(entry):
    with pytest.raises(ConfigError, match="expected HOST"):
        MediaPolicy.from_entries([entry])


def test_allow_entries_match_address_network_host_and_port():
    policy = MediaPolicy.from_entries(["127.0.0.1:8000", "10.0.0.0/8", "[::1]:9000", "mirror.lan"])
    loop, lan, v6 = (ipaddress.ip_address(a) for a in ("127.0.0.1", "10.9.8.7", "::1"))
    assert policy.refusal(loop, "127.0.0.1", 8000) is None
    assert "non-public address 127.0.0.1" in policy.refusal(loop, "127.0.0.1", 8001)
    assert policy.refusal(lan, "10.9.8.7", 1234) is None
    assert policy.refusal(v6, "::1", 9000) is None and policy.refusal(v6, "::1", 80) is not None
    assert policy.refusal(ipaddress.ip_address("192.168.0.5"), "mirror.lan", 80) is None  # by name
    assert policy.refusal(ipaddress.ip_address("192.168.0.5"), "other.lan", 80) is not None
    assert policy.refusal(ipaddress.ip_address("169.254.169.254"), "mirror.lan", 80) is not None
    assert policy.refusal(ipaddress.ip_address("8.8.8.8"), "dns.google", 443) is None  # public: always


def test_every_redirect_hop_is_checked_against_the_same_policy(server, store):
    target = server.route("/img.png", Reply(body=png()))
    own = f"127.0.0.1:{server.port}"
    hops = {
        server.route("/meta", Reply(302, content_type=None, headers={"Location": "http://169.254.169.254/x"})):
            "non-public address 169.254.169.254: link-local",
        server.route("/6to4", Reply(302, content_type=None, headers={"Location": "http://[2002:a9fe:a9fe::]/"})):
            "(which embeds 169.254.169.254)",
        server.route("/port", Reply(302, content_type=None, headers={"Location": "http://127.0.0.1:9/a.png"})):
            "non-public address 127.0.0.1 (allow a local mirror",
        server.route("/ok", Reply(307, content_type=None, headers={"Location": "/img.png"})): None,
    }  # fmt: skip
    out = fetch_media(list(hops), store, allow=[own], backoff_s=0.01)
    for url, reason in hops.items():
        if reason is None:
            assert out[url].error is None and out[url].sha256 == hashlib.sha256(png()).hexdigest()
        else:
            assert reason in out[url].error, out[url].error
    assert server.hits["/img.png"] == 1 and target


def test_the_address_actually_connected_to_is_checked(server, store, monkeypatch):
    """DNS rebinding or a hijacked connect: the name resolves to a public address, but the socket ends up on
    loopback, which is not allowed; the peer address is refused before a request is sent."""
    import urllib3.util.connection

    server.route("/a.png", Reply(body=png()))
    real_connect, real_lookup = urllib3.util.connection.create_connection, socket.getaddrinfo
    public = [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.215.14", 80))]
    monkeypatch.setattr(
        socket,
        "getaddrinfo",
        lambda host, *a, **k: public if host == "images.example" else real_lookup(host, *a, **k),
    )
    monkeypatch.setattr(
        urllib3.util.connection,
        "create_connection",
        lambda address, *a, **k: real_connect(("127.0.0.1", server.port), *a, **k),
    )
    url = "http://images.example/a.png"
    out = fetch_media([url], store, max_attempts=1)
    assert out[url].error.startswith("connected to non-public address 127.0.0.1"), out[url].error
    assert server.total_hits == 0


# ------------------------------------------------------------------------------------------------ the CLI
def _posts(tmp_path: Path, *urls: str) -> Path:
    posts = tmp_path / "posts.jsonl"
    lines = []
    for n, url in enumerate(urls, start=1):
        status = f"19800000000000000{n}"
        lines.append(
            json.dumps(
                {
                    "id": f"x:{status}",
                    "platform": "x",
                    "url": f"https://x.com/someone/status/{status}",
                    "author": "someone",
                    "created_at": "2025-04-04T10:00:00Z",
                    "root_id": f"x:{status}",
                    "text": f"GPT-4o image generation. Prompt: lantern number {n} over a river",
                    "media": [{"type": "photo", "url": url}],
                }
            )
        )
    posts.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return posts


def _media_errors(out: Path) -> list[str]:
    rows = [json.loads(line) for line in (out / "stages" / "media.jsonl").read_text().split("\n") if line]
    return [e for r in rows for e in r["media_errors"]]


def test_build_media_allow_and_the_deprecated_flag(server, tmp_path):
    good = server.route("/good.png", Reply(body=png()))
    lan = server.route(
        "/lan.png", Reply(302, content_type=None, headers={"Location": "http://10.1.2.3/a.png"})
    )
    posts = _posts(tmp_path, good, lan)
    runner = CliRunner()

    refused = runner.invoke(
        cli, ["build", str(posts), "--out", str(tmp_path / "a"), "--target-model", "GPT-4o"]
    )
    assert refused.exit_code == 0, refused.output
    assert any("non-public address 127.0.0.1" in e for e in _media_errors(tmp_path / "a"))
    assert server.total_hits == 0

    allowed = runner.invoke(
        cli, ["build", str(posts), "--out", str(tmp_path / "b"), "--target-model", "GPT-4o",
              "--media-allow", f"127.0.0.1:{server.port}"],
    )  # fmt: skip
    assert allowed.exit_code == 0, allowed.output
    errors = _media_errors(tmp_path / "b")
    assert len(errors) == 1 and "non-public address 10.1.2.3" in errors[0]  # the redirect hop is checked too

    deprecated = runner.invoke(
        cli,
        [
            "build",
            str(posts),
            "--out",
            str(tmp_path / "c"),
            "--target-model",
            "GPT-4o",
            "--allow-private-media",
        ],
    )
    assert deprecated.exit_code == 0, deprecated.output
    assert "--allow-private-media is deprecated and now allows loopback only" in deprecated.output
    assert _media_errors(tmp_path / "c") == errors  # loopback only: 10.1.2.3 still refused
    assert server.hits["/good.png"] == 2


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("169.254.169.254", "error: --media-allow '169.254.169.254': 169.254.169.254/32 is link-local"),
        ("localhost:http", "error: --media-allow 'localhost:http': port 'http' is not 1-65535"),
    ],
)
def test_build_rejects_a_bad_media_allow_entry_in_one_line(tmp_path, entry, message):
    posts = _posts(tmp_path, "http://127.0.0.1/a.png")
    out = tmp_path / "out"
    result = CliRunner().invoke(
        cli, ["build", str(posts), "--out", str(out), "--target-model", "GPT-4o", "--media-allow", entry]
    )
    assert result.exit_code == 1 and result.output.startswith(message), result.output
    assert result.output.count("\n") == 1 and "Traceback" not in result.output
    assert not out.exists()
