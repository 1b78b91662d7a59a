"""A small OpenAI-compatible server that misbehaves on cue, for what a real one will not do on demand: cut a
stream mid-reply, send no ``usage``, have no ``/metrics`` (as Ollama and LM Studio have none).

It is a real HTTP/1.1 server (``http.server`` on an ephemeral port of 127.0.0.1, a thread per connection) that
writes the exact bytes such servers write: ``GET /v1/models``, ``POST /v1/chat/completions`` streamed as
server-sent events in chunked transfer encoding, ``GET /metrics`` 404. ``WireServer(mode)``: ``"ok"`` streams
``WORDS`` and finishes (usage included), ``"no-usage"`` the same without usage, ``"cut"`` sends two chunks then
closes the connection without finishing the chunked body.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "wire-model"
WORDS = ("Hello", " from", " the", " wire", ".")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Any

    def log_message(self, *_args: Any) -> None:  # quiet
        pass

    def _json(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _chunk(self, payload: dict[str, Any] | str) -> None:
        text = payload if isinstance(payload, str) else json.dumps(payload)
        data = f"data: {text}\n\n".encode()
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        if self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "wire"}]})
        else:
            self._json(404, {"error": {"message": "not found", "type": "not_found"}})

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        self.server.requests.append(body)
        mode = self.server.mode
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        base = {"id": "chatcmpl-wire", "object": "chat.completion.chunk", "created": 0, "model": MODEL}
        self._chunk({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                          "finish_reason": None}]})
        words = WORDS[:2] if mode == "cut" else WORDS
        for word in words:
            self._chunk({**base, "choices": [{"index": 0, "delta": {"content": word}, "finish_reason": None}]})
        if mode == "cut":
            self.close_connection = True
            self.wfile.flush()
            self.connection.shutdown(2)  # gone mid-body: no last chunk, no [DONE]
            return
        self._chunk({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        if mode != "no-usage":
            self._chunk({**base, "choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": len(WORDS) + 1,
                                                          "total_tokens": 7 + len(WORDS) + 1}})
        self._chunk("[DONE]")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


class WireServer:
    """``with WireServer(mode) as wire:`` -> ``wire.url`` (``http://127.0.0.1:PORT/v1``), ``wire.requests``."""

    def __init__(self, mode: str = "ok") -> None:
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._httpd.daemon_threads = True
        self._httpd.mode = mode  # type: ignore[attr-defined]
        self._httpd.requests = []  # type: ignore[attr-defined]
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="wire-server", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    @property
    def requests(self) -> list[dict[str, Any]]:
        return self._httpd.requests  # type: ignore[attr-defined,no-any-return]

    def __enter__(self) -> WireServer:
        self._thread.start()
        return self

    def __exit__(self, *_exc: Any) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
