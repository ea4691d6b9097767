"""Errors of OpenAI-compatible servers that do not answer in OpenAI's error shape keep the server's explanation.

The ``openai`` client quotes only ``{"error": {"message": ...}}``. FastAPI servers (``transformers serve``) answer
``{"detail": "..."}`` or a list of validation errors, TGI ``{"error": "..."}``, proxies plain text; without the
explanation a user sees only ``Error code: 400``. A 404, or a 400 naming the model asked for, also lists the
models the server serves.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from echo_builder.backends import GenerationParams, create_backend, user_message
from echo_builder.errors import PermanentBackendError, RetryableBackendError


class _Server(ThreadingHTTPServer):
    status = 400
    body = b""
    content_type = "application/json"
    models = ("served-model",)
    model_list_requests = 0


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, *args) -> None:  # quiet
        pass

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self.server.model_list_requests += 1
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "local"} for m in self.server.models]
        self._send(200, json.dumps({"object": "list", "data": data}).encode(), "application/json")

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._send(self.server.status, self.server.body, self.server.content_type)


@pytest.fixture
def server():
    srv = _Server(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def _call(server, model="served-model"):
    backend = create_backend(f"openai:{model}", base_url=f"http://127.0.0.1:{server.server_port}/v1")
    backend.generate([user_message("hi")], GenerationParams(max_tokens=2))


@pytest.mark.parametrize(
    ("body", "content_type", "quoted"),
    [
        (b'{"detail": "Unexpected fields in the request: {\'top_k\'}"}', "application/json", "top_k"),
        (
            b'{"detail": [{"loc": ["body", "messages"], "msg": "Field required", "type": "missing"}]}',
            "application/json",
            "Field required",
        ),
        (
            b'{"error": "Input validation error: inputs tokens too long", "error_type": "validation"}',
            "application/json",
            "inputs tokens too long",
        ),
        (
            b'{"object": "error", "message": "image too large", "code": 400}',
            "application/json",
            "image too large",
        ),
        (b"Bad Request: image could not be decoded", "text/plain", "image could not be decoded"),
    ],
    ids=["fastapi-detail", "fastapi-validation", "tgi", "vllm-flat", "plain-text"],
)
def test_the_servers_explanation_is_in_the_error(server, body, content_type, quoted):
    server.body, server.content_type = body, content_type
    with pytest.raises(PermanentBackendError, match="HTTP 400") as failed:
        _call(server)
    assert quoted in str(failed.value)
    assert "the server lists" not in str(failed.value)
    assert server.model_list_requests == 0  # a 400 about something else than the model name lists nothing


def test_a_plain_text_500_is_retryable_and_quoted(server):
    server.status, server.body, server.content_type = 500, b"Internal Server Error", "text/plain"
    with pytest.raises(RetryableBackendError, match=r"HTTP 500.*Internal Server Error"):
        _call(server)
    assert server.model_list_requests == 0  # only a refused model name asks for the model list


def test_a_refused_model_name_lists_the_served_models(server):
    server.body = b"{\"detail\": \"Server is pinned to 'served-model'; requested 'gpt-4o'.\"}"
    backend = create_backend("openai:gpt-4o", base_url=f"http://127.0.0.1:{server.server_port}/v1")
    for _ in range(2):
        with pytest.raises(PermanentBackendError) as failed:
            backend.generate([user_message("hi")], GenerationParams(max_tokens=2))
        assert "pinned to 'served-model'" in str(failed.value)
        assert "(the server lists: served-model; use openai:<one of them>)" in str(failed.value)
    assert server.model_list_requests == 1  # asked once per backend
    assert backend.list_models() == ["served-model"]


def test_a_404_for_an_unknown_model_lists_the_served_models_and_a_served_one_gets_no_hint(server):
    server.status, server.body = 404, b'{"error": {"message": "The model `gpt-5` does not exist."}}'
    with pytest.raises(PermanentBackendError) as failed:
        _call(server, "gpt-5")
    assert "does not exist" in str(failed.value) and "(the server lists: served-model;" in str(failed.value)
    server.models = ("models/served-model",)  # Gemini's endpoint lists "models/<name>"
    with pytest.raises(PermanentBackendError) as failed:
        _call(server, "served-model")
    assert "the server lists" not in str(failed.value)
