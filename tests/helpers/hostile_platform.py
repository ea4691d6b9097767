"""A loopback server that speaks X API v2, Bluesky XRPC and Reddit's API from the real recordings
(``../shared/data/api_recordings``) and misbehaves on purpose, for the hostile collection corpus
(``tests/data/hostile/cases.d/collection.yaml``).

Sign-in answers are the recorded (Reddit ``access_token``) or lexicon-shaped (Bluesky ``createSession``: none was
recorded) ones; search answers start from recorded pages. A *behaviour* (:data:`BEHAVIOURS`) replaces the search
answer, or the sign-in answer for the ``session_*`` ones: a redirect to the cloud-metadata address, an echoed token,
an endless cursor, a slow drip, a dropped connection, absurd rate-limit headers, JSON nested 200,000 deep.
:class:`Decoy` is a second loopback server that a redirect may point at: it must never be reached.
"""

from __future__ import annotations

import base64
import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

TOKENS = {
    "x": {"X_BEARER_TOKEN": "hostile-bearer-AAAA1234567890zz"},
    "bluesky": {"BLUESKY_HANDLE": "collector.example.com", "BLUESKY_APP_PASSWORD": "hostile-app-pass-9876"},
    "reddit": {
        "REDDIT_CLIENT_ID": "hostile-client-id-42",
        "REDDIT_CLIENT_SECRET": "hostile-client-secret-77",
        "REDDIT_USER_AGENT": "script:echo-bench-hostile:v1 (by u/nobody)",
    },
}
#: The secret each platform's echo behaviours send back (the one a leak would expose).
SECRET = {
    "x": TOKENS["x"]["X_BEARER_TOKEN"],
    "bluesky": TOKENS["bluesky"]["BLUESKY_APP_PASSWORD"],
    "reddit": TOKENS["reddit"]["REDDIT_CLIENT_SECRET"],
}
SEARCH_PATHS = {
    "x": ("/2/tweets/search/recent", "/2/tweets/search/all", "/2/tweets"),
    "bluesky": ("/xrpc/app.bsky.feed.searchPosts", "/xrpc/app.bsky.feed.getPostThread"),
    "reddit": ("/r/all/search", "/comments/"),
}
METADATA = "http://169.254.169.254/latest/meta-data/iam/security-credentials/"


def _jwt(payload: dict[str, Any]) -> str:
    def part(obj: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'ES256K', 'typ': 'at+jwt'})}.{part(payload)}.c2lnbmF0dXJl"


ACCESS_JWT = _jwt({"scope": "com.atproto.appPass", "sub": "did:plc:collector", "exp": 4102444800})


def session_body(pds: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "did": "did:plc:collector",
        "handle": TOKENS["bluesky"]["BLUESKY_HANDLE"],
        "accessJwt": ACCESS_JWT,
        "refreshJwt": _jwt({"scope": "com.atproto.refresh", "sub": "did:plc:collector", "exp": 4102444800}),
        "active": True,
    }
    if pds is not None:  # the account's PDS, as a session's DID document names it
        body["didDoc"] = {
            "@context": ["https://www.w3.org/ns/did/v1"],
            "id": "did:plc:collector",
            "service": [{"id": "#atproto_pds", "type": "AtprotoPersonalDataServer", "serviceEndpoint": pds}],
        }
    return body


@dataclass
class Answer:
    """What the server does with one request: reply, drip the reply slowly, or drop the connection."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    drip_s: float = 0.0  # seconds between bytes of the whole reply (status line included)
    drop: bool = False

    @classmethod
    def json(cls, body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Answer:
        return cls(
            status,
            {"content-type": "application/json; charset=utf-8", **(headers or {})},
            json.dumps(body).encode(),
        )


class Recorded:
    """The recorded answers a platform's normal pages start from."""

    def __init__(self, recordings: Path) -> None:
        self.root = recordings

    def load(self, relative: str) -> Any:
        return json.loads((self.root / f"{relative}.response.json").read_text(encoding="utf-8"))

    def page(self, platform: str, path: str = "") -> Any:
        """A search page with no next cursor; for the thread endpoints expansion calls (Bluesky ``getPostThread``,
        Reddit ``/comments/``), a recorded thread instead (X pages conversations through search)."""
        if platform == "bluesky" and path.endswith("getPostThread"):
            return self.load("bluesky/recorded/07_getPostThread")
        if platform == "reddit" and "/comments/" in path:
            return self.load("reddit/extracted/04_comments_3hahrw")
        if platform == "x":
            body = self.load("x_api_v2/academictwitteR/extracted/03_tweets_search_all")
            body.setdefault("meta", {}).pop("next_token", None)
        elif platform == "bluesky":
            body = self.load("bluesky/recorded/06_searchPosts")
            body.pop("cursor", None)
        else:
            body = self.load("reddit/extracted/02_search")
            body["data"]["after"] = None
        return body


def _thread_posts(platform: str, body: Any) -> list[dict[str, Any]] | None:
    """The reply list of a thread answer (Bluesky ``thread.replies``, Reddit's comment listing), None for a search
    page. Threads have no cursor: the cursor behaviours leave them as they are."""
    if platform == "bluesky" and isinstance(body, dict) and "thread" in body:
        return body["thread"].setdefault("replies", [])
    if platform == "reddit" and isinstance(body, list):
        return body[1]["data"]["children"]
    return None


def with_cursor(platform: str, body: Any, cursor: str | None) -> Any:
    if _thread_posts(platform, body) is not None:
        return body
    if platform == "x":
        body.setdefault("meta", {})["next_token"] = cursor
    elif platform == "bluesky":
        body["cursor"] = cursor
    else:
        body["data"]["after"] = cursor
    return body


def renumbered(platform: str, body: dict[str, Any], n: int) -> dict[str, Any]:
    """``body`` with every post id made new for page ``n`` (a server that keeps inventing posts)."""
    replies = _thread_posts(platform, body)
    if replies is not None:
        for reply in replies:
            if platform == "bluesky":
                reply["post"]["uri"] = f"{reply['post']['uri']}-{n}"
            else:
                reply["data"]["id"] = f"{reply['data']['id']}{n}"
                reply["data"]["name"] = f"t1_{reply['data']['id']}"
        return body
    if platform == "x":
        for tweet in body.get("data", []):
            tweet["id"] = f"{n:06d}{tweet['id'][6:]}"
    elif platform == "bluesky":
        for post in body.get("posts", []):
            post["uri"] = f"{post['uri']}-{n}"
    else:
        for child in body["data"]["children"]:
            child["data"]["id"] = f"{child['data']['id']}{n}"
            child["data"]["name"] = f"t3_{child['data']['id']}"
    return body


def emptied(platform: str, body: Any) -> Any:
    replies = _thread_posts(platform, body)
    if replies is not None:
        replies.clear()
        return body
    if platform == "x":
        body.pop("data", None)
        body.pop("includes", None)
        body["meta"] = {"result_count": 0}
    elif platform == "bluesky":
        body["posts"] = []
    else:
        body["data"]["children"] = []
    return body


def _rate_headers(platform: str, value: str) -> dict[str, str]:
    if platform == "x":
        return {"x-rate-limit-limit": "450", "x-rate-limit-remaining": "0", "x-rate-limit-reset": value}
    if platform == "bluesky":
        return {"ratelimit-limit": "3000", "ratelimit-remaining": "0", "ratelimit-reset": value}
    return {"x-ratelimit-remaining": value, "x-ratelimit-used": value, "x-ratelimit-reset": value}


def _echo_body(platform: str, secret: str) -> dict[str, Any]:
    if platform == "x":
        return {"title": "Unauthorized", "detail": f"Invalid token Bearer {secret}", "status": 401}
    if platform == "bluesky":
        return {"error": "AuthenticationRequired", "message": f"Invalid identifier or password {secret}"}
    return {"message": f"Unauthorized: client secret {secret} rejected", "error": 401}


Behaviour = Callable[["HostileServer", str, dict[str, str], int], Answer]


def _behaviours() -> dict[str, Behaviour]:
    def page(server: HostileServer, path: str = "") -> Any:
        return server.recorded.page(server.platform, path)

    found: dict[str, Behaviour] = {
        "normal": lambda s, path, q, n: Answer.json(page(s, path)),
        "redirect_metadata": lambda s, path, q, n: Answer(302, {"location": METADATA}),
        "redirect_metadata_mapped": lambda s, path, q, n: Answer(
            302, {"location": "http://[::ffff:169.254.169.254]/latest/meta-data/"}
        ),
        "redirect_metadata_decimal": lambda s, path, q, n: Answer(
            302, {"location": "http://2852039166/latest/"}
        ),
        "redirect_other_port": lambda s, path, q, n: Answer(302, {"location": f"{s.decoy_url}/steal"}),
        "redirect_loop": lambda s, path, q, n: Answer(302, {"location": path}),
        "echo_token_401": lambda s, path, q, n: Answer.json(_echo_body(s.platform, SECRET[s.platform]), 401),
        "echo_token_500": lambda s, path, q, n: Answer.json(_echo_body(s.platform, SECRET[s.platform]), 500),
        "echo_token_page": lambda s, path, q, n: Answer.json(
            _planted(s.platform, page(s, path), SECRET[s.platform]), headers={"x-echo": SECRET[s.platform]}
        ),
        "echo_token_cursor": lambda s, path, q, n: Answer.json(
            with_cursor(s.platform, page(s, path), f"c{n}-{SECRET[s.platform]}") if n < 2 else page(s, path)
        ),
        "new_cursor_same_posts": lambda s, path, q, n: Answer.json(
            with_cursor(s.platform, page(s, path), f"c{n}")
        ),
        "new_cursor_new_posts": lambda s, path, q, n: Answer.json(
            with_cursor(s.platform, renumbered(s.platform, page(s, path), n), f"c{n}")
        ),
        "empty_pages_new_cursors": lambda s, path, q, n: Answer.json(
            with_cursor(s.platform, emptied(s.platform, page(s, path)), f"c{n}")
        ),
        "huge_cursor": lambda s, path, q, n: Answer.json(
            with_cursor(s.platform, page(s, path), "c" * 5_000_000)
        ),
        "deep_json": lambda s, path, q, n: Answer(
            200, {"content-type": "application/json"}, b"[" * 200_000 + b"]" * 200_000
        ),
        "deep_json_error": lambda s, path, q, n: Answer(
            500, {"content-type": "application/json"}, b'{"a":' * 200_000 + b"1" + b"}" * 200_000
        ),
        "list_error_body": lambda s, path, q, n: Answer.json([1, 2, 3], 403),
        "not_utf8_error_body": lambda s, path, q, n: Answer(
            400, {"content-type": "application/json"}, b'{"detail": "\xff\xfe\xfa"}'
        ),
        "drip_body": lambda s, path, q, n: Answer(
            200, {"content-type": "application/json", "content-length": "100000"}, b"{" + b" " * 99_999, 0.5
        ),
        "drip_headers": lambda s, path, q, n: Answer(
            200, {"content-type": "application/json", "x-padding": "p" * 2000}, b"{}", 0.5
        ),
        "drop": lambda s, path, q, n: Answer(drop=True),
        "odd_records": lambda s, path, q, n: Answer.json(_odd(s.platform, page(s, path))),
    }
    for label, value in {
        "1e18": "1e18",
        "nan": "nan",
        "inf": "inf",
        "tomorrow": "tomorrow",
        "negative": "-5",
        "huge_digits": "999999999999999999999",
    }.items():
        found[f"reset_429_{label}"] = lambda s, path, q, n, v=value: Answer.json(
            {"title": "Too Many Requests"}, 429, {**_rate_headers(s.platform, v), "retry-after": v}
        )
        found[f"reset_200_{label}"] = lambda s, path, q, n, v=value: Answer.json(
            page(s, path), headers=_rate_headers(s.platform, v)
        )
    found["reset_429_missing"] = lambda s, path, q, n: Answer.json({"title": "Too Many Requests"}, 429)
    found["reset_200_partial"] = lambda s, path, q, n: Answer.json(
        page(s, path),
        headers={"x-ratelimit-remaining": "0", "x-rate-limit-remaining": "0", "ratelimit-remaining": "0"},
    )
    return found


def _planted(platform: str, body: dict[str, Any], secret: str) -> dict[str, Any]:
    """``body`` with the secret echoed inside a post's text and a user's name (a server that reflects it)."""
    replies = _thread_posts(platform, body)
    if replies is not None and platform == "bluesky":
        body["thread"]["post"]["record"]["text"] += f" {secret}"
        body["thread"]["post"]["author"]["displayName"] = secret
    elif replies is not None:
        replies[0]["data"]["body"] += f" {secret}"
        replies[0]["data"]["author"] = secret
    elif platform == "x":
        body["data"][0]["text"] += f" {secret}"
        body["includes"]["users"][0]["name"] = secret
    elif platform == "bluesky":
        body["posts"][0]["record"]["text"] += f" {secret}"
    else:
        body["data"]["children"][0]["data"]["selftext"] = f"leaked {secret}"
    return body


def _odd(platform: str, body: dict[str, Any]) -> dict[str, Any]:
    """Records of the wrong shape beside the good ones."""
    replies = _thread_posts(platform, body)
    if replies is not None:
        odd: list[Any] = [
            "a string",
            7,
            None,
            {"post": "text"},
            {"kind": "t1", "data": ["a", "list"]},
            {"kind": "t1"},
        ]
        replies += odd
    elif platform == "x":
        body["data"] = [*body["data"], "a string", 7, None, {"id": None}, {"text": ["x"]}]
    elif platform == "bluesky":
        body["posts"] = [*body["posts"], "a string", 7, None, {"record": "text"}, {"uri": ["x"]}]
    else:
        children = body["data"]["children"]
        children += [
            {"kind": "t3", "data": ["a", "list"]},
            {"kind": "t3"},
            "a string",
            None,
            {"kind": "t3", "data": {}},
        ]
    return body


BEHAVIOURS = _behaviours()


class HostileServer:
    """A loopback API server for ``platform`` with ``behaviour`` on its search endpoint (``session_behaviour``
    on Bluesky's createSession, ``token_behaviour`` on Reddit's access_token)."""

    def __init__(
        self,
        platform: str,
        behaviour: str,
        recordings: Path,
        *,
        decoy_url: str = "",
        session_pds: str | None = None,
    ) -> None:
        self.platform = platform
        self.behaviour = BEHAVIOURS[behaviour]
        self.recorded = Recorded(recordings)
        self.decoy_url = decoy_url
        self.session_pds = session_pds
        self.searches = 0
        self.requests: list[str] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self) -> None:
                parts = urlsplit(self.path)
                length = int(self.headers.get("content-length") or 0)
                if length:
                    self.rfile.read(length)
                with server._lock:
                    server.requests.append(parts.path)
                answer = server.answer(parts.path, dict(parse_qsl(parts.query)))
                with contextlib.suppress(OSError):  # the client gave up (a deadline): nothing more to send
                    server.send(self, answer)

            do_GET = do_POST = _serve

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def answer(self, path: str, query: dict[str, str]) -> Answer:
        if self.platform == "bluesky" and path == "/xrpc/com.atproto.server.createSession":
            return Answer.json(session_body(self.session_pds))
        if self.platform == "reddit" and path == "/api/v1/access_token":
            return Answer.json(self.recorded.load("reddit/extracted/01_access_token"))
        if self.platform == "reddit" and path.startswith(
            "/api/morechildren"
        ):  # a thread's "more" stubs, as recorded
            return Answer.json(self.recorded.load("reddit/extracted/05_morechildren"))
        if any(path.startswith(p) for p in SEARCH_PATHS[self.platform]):
            with self._lock:
                self.searches += 1
                n = self.searches
            return self.behaviour(self, path, query, n)
        return Answer.json({"error": "not here"}, 404)

    def send(self, handler: BaseHTTPRequestHandler, answer: Answer) -> None:
        if answer.drop:
            handler.close_connection = True
            handler.connection.shutdown(socket.SHUT_RDWR)
            return
        head = f"HTTP/1.1 {answer.status} Hostile\r\n"
        headers = {
            **answer.headers,
            "content-length": answer.headers.get("content-length", str(len(answer.body))),
        }
        headers["connection"] = "close"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        data = head.encode("latin-1") + answer.body
        handler.close_connection = True
        if not answer.drip_s:
            handler.wfile.write(data)
            return
        for i in range(len(data)):
            if self._stop.wait(answer.drip_s):
                return
            handler.wfile.write(data[i : i + 1])
            handler.wfile.flush()

    def __enter__(self) -> HostileServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


class Decoy:
    """A loopback server that counts the requests it gets (a redirect target that must stay unreached)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.hits = 0
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.hits += 1
            conn.close()

    def close(self) -> None:
        self.sock.close()


class ConnectLog:
    """Every address a socket of this process tried to connect to while active (the socket guard's record).

    Wraps ``socket.socket.connect`` and ``connect_ex``; an address outside ``allowed`` is refused here too (with
    ``ConnectionRefusedError``), so even a failing guard in the code under test never reaches it.
    """

    def __init__(self, allowed: set[tuple[str, int]]) -> None:
        self.allowed = allowed
        self.seen: list[tuple[str, int]] = []
        self.refused: list[tuple[str, int]] = []

    def __enter__(self) -> ConnectLog:
        self._connect, self._connect_ex = socket.socket.connect, socket.socket.connect_ex
        log = self

        def check(sock: socket.socket, address: Any) -> None:
            if sock.family in (socket.AF_INET, socket.AF_INET6) and isinstance(address, tuple):
                target = (str(address[0]), int(address[1]))
                log.seen.append(target)
                if target not in log.allowed:
                    log.refused.append(target)
                    raise ConnectionRefusedError(f"socket guard: {target} is not this test's server")

        def connect(sock: socket.socket, address: Any) -> None:
            check(sock, address)
            return log._connect(sock, address)

        def connect_ex(sock: socket.socket, address: Any) -> int:
            check(sock, address)
            return log._connect_ex(sock, address)

        socket.socket.connect = connect  # type: ignore[method-assign]
        socket.socket.connect_ex = connect_ex  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        socket.socket.connect = self._connect  # type: ignore[method-assign]
        socket.socket.connect_ex = self._connect_ex  # type: ignore[method-assign]


def elapsed(start: float) -> float:
    return time.monotonic() - start
