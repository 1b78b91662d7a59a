"""A small OpenAI-compatible server that misbehaves on cue, for what a real one will not do on demand: cut a
stream mid-reply, send no ``usage``, have no ``/metrics`` (as Ollama and LM Studio have none), and the hostile
servers a client must survive.

It is a real HTTP/1.1 server (``http.server`` on an ephemeral port of 127.0.0.1, a thread per connection) that
writes the exact bytes such servers write: ``GET /v1/models``, ``POST /v1/chat/completions`` streamed as
server-sent events in chunked transfer encoding, ``GET /metrics`` 404. ``WireServer(mode, model=MODEL)``:

- ``"ok"`` streams ``WORDS`` and finishes (usage included), ``"no-usage"`` the same without usage, ``"cut"`` sends
  two chunks then closes the connection without finishing the chunked body;
- ``"nan-metrics"``: as ``"ok"``, with a ``/metrics`` whose every value is NaN or +Inf;
- ``"forever"``: streams words and never finishes (until the client leaves);
- ``"giant"``: one ``data:`` line of ``GIANT_BYTES`` without a newline (written lazily: it stops when the client
  leaves);
- ``"bad-utf8"`` / ``"bad-json"``: a word, then a chunk that is not UTF-8 / not JSON;
- ``"error"``: the chat request answered HTTP 500 with the model's name as the error message.

``model`` is the name ``/v1/models`` lists (``<b>SESSION EXPIRED</b>``, a terminal escape...).
``SilentServer``: a socket that accepts connections and never answers a byte.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "wire-model"
WORDS = ("Hello", " from", " the", " wire", ".")
GIANT_BYTES = 256 << 20
# Every value a hostile /metrics can hold that is not a number a panel can show.
NAN_METRICS = """# TYPE miaohui:kv_cache_usage_perc gauge
miaohui:kv_cache_usage_perc NaN
# TYPE miaohui:num_requests_running gauge
miaohui:num_requests_running +Inf
# TYPE miaohui:time_to_first_token_seconds histogram
miaohui:time_to_first_token_seconds_bucket{le="+Inf"} +Inf
miaohui:time_to_first_token_seconds_count +Inf
miaohui:time_to_first_token_seconds_sum NaN
# TYPE miaohui:inter_token_latency_seconds histogram
miaohui:inter_token_latency_seconds_bucket{le="+Inf"} NaN
miaohui:inter_token_latency_seconds_count NaN
miaohui:inter_token_latency_seconds_sum +Inf
"""


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

    def _chunk(self, payload: dict[str, Any] | str | bytes) -> None:
        if isinstance(payload, bytes):
            data = b"data: " + payload + b"\n\n"
        else:
            text = payload if isinstance(payload, str) else json.dumps(payload)
            data = f"data: {text}\n\n".encode()
        self._raw(data)

    def _raw(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        if self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": self.server.model, "object": "model",
                                                         "owned_by": "wire"}]})
        elif self.path == "/metrics" and self.server.mode == "nan-metrics":
            data = NAN_METRICS.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        else:
            self._json(404, {"error": {"message": "not found", "type": "not_found"}})

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        self.server.requests.append(body)
        mode = self.server.mode
        if mode == "error":
            self._json(500, {"error": {"message": self.server.model, "type": "server_error"}})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        base = {"id": "chatcmpl-wire", "object": "chat.completion.chunk", "created": 0, "model": self.server.model}
        self._chunk({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                          "finish_reason": None}]})
        try:
            if self._hostile(mode, base):
                return
        except OSError:  # the client left: what these modes wait for
            return
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

    def _hostile(self, mode: str, base: dict[str, Any]) -> bool:
        """The hostile modes' streams (True: the reply was one of them and is over)."""
        word = {**base, "choices": [{"index": 0, "delta": {"content": WORDS[0]}, "finish_reason": None}]}
        if mode == "forever":
            while True:
                self._chunk(word)
                time.sleep(0.001)  # a token a millisecond: fast, without spinning a core
        if mode == "giant":
            piece = b"x" * (64 << 10)
            self._raw(b'data: {"choices": [{"index": 0, "delta": {"content": "')
            for _ in range(GIANT_BYTES // len(piece)):
                self._raw(piece)
            self._raw(b'"}}]}\n\n')
            self.close_connection = True
            return True
        if mode == "escape-reply":  # a reply carrying a terminal escape, split across two chunks
            for piece in ("Hi \x1b]0;pw", "ned\x07 there\r\n"):
                self._chunk({**base, "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]})
            self._chunk({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
            self._chunk("[DONE]")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
            return True
        if mode in ("bad-utf8", "bad-json"):
            self._chunk(word)
            self._chunk(b'{"choices": [{"index": 0, "delta": {"content": "\xff\xfe"}}]}' if mode == "bad-utf8"
                        else b'{"choices": [{"index": 0, "delta": {"content": ')
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
            return True
        return False


class WireServer:
    """``with WireServer(mode) as wire:`` -> ``wire.url`` (``http://127.0.0.1:PORT/v1``), ``wire.requests``."""

    def __init__(self, mode: str = "ok", model: str = MODEL) -> None:
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._httpd.daemon_threads = True
        self._httpd.mode = mode  # type: ignore[attr-defined]
        self._httpd.model = model  # type: ignore[attr-defined]
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


class SilentServer:
    """``with SilentServer() as silent:`` -> ``silent.url``: a server that accepts every connection (the kernel's
    backlog and this thread's ``accept``) and never sends a byte, as a hung or hostile one does."""

    def __init__(self) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0), backlog=64)
        self._held: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="silent-server", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}/v1"

    @property
    def accepted(self) -> int:
        """Connections accepted so far (a client is waiting on one of them)."""
        return len(self._held)

    def _accept(self) -> None:
        self._sock.settimeout(0.2)
        while not self._stop.is_set():
            try:
                self._held.append(self._sock.accept()[0])
            except OSError:
                continue

    def __enter__(self) -> SilentServer:
        self._thread.start()
        return self

    def __exit__(self, *_exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for conn in self._held:
            conn.close()
        self._sock.close()
