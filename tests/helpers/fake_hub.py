"""A small local stand-in for the Hugging Face Hub, for tests that run the real ``huggingface_hub`` client.

It speaks the part of the Hub's HTTP protocol that ``engine.library`` uses, as huggingface_hub 2.x reads it:

- ``GET /api/models?search=&pipeline_tag=&filter=&sort=&limit=`` : a JSON list, paged with a GitHub-style
  ``Link: <…>; rel="next"`` header (``paginate`` follows it), at most ``page_size`` models a page;
- ``GET /api/models/{owner}/{name}[/revision/{rev}]`` : the model's info; with ``blobs=True`` every sibling has
  ``size`` and ``blobId`` (the git blob id) and LFS files an ``lfs`` object with ``sha256``, ``size`` and
  ``pointerSize``; unknown repos answer 404 with ``X-Error-Code: RepoNotFound`` (huggingface_hub maps that);
- ``HEAD``/``GET /{owner}/{name}/resolve/{rev}/{file}`` : small files directly (``ETag`` = blob id,
  ``X-Repo-Commit``, ``Content-Length``, ranges); LFS files (weights) as the Hub does, a 302 to a CDN address
  (``/cdn/{sha256}``) with ``X-Linked-Size`` and ``X-Linked-Etag``; the CDN serves the bytes with ``Range`` → 206.

Every request is logged (method, path, Range header) so tests can see a resume ask for a range, and how many
bytes of each file went out. ``corrupt(repo, file)`` makes it serve one wrong byte while still advertising the
right sha256. A hostile Hub lists whatever names it likes (``../x``, ``/abs/x``, backslashes, NUL): file names
are percent-decoded from the URL, and with ``any_path=True`` a request the client's URL normalisation has bent
(``resolve/rev/../../x`` arrives as ``/owner/x``) is still answered with the file its last segment names.
A gated repo (``gated="manual"``) answers its files as the Hub does: 401 with ``X-Error-Code: GatedRepo`` to a
request without ``Authorization``, 403 to a token whose account was not granted access, the file to a token in
``grant(repo, token)``; its listing and model info stay public. Each logged request keeps its ``Authorization``.
``make_gguf`` writes a small valid GGUF with the tiny test model's architecture.
Runs ``http.server`` in a thread on an ephemeral 127.0.0.1 port.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlencode, urlsplit

import numpy as np

LFS_SUFFIXES = (".safetensors", ".gguf", ".bin", ".pt", ".onnx")


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class FakeRepo:
    repo_id: str
    files: dict[str, bytes]
    tags: list[str]
    downloads: int = 0
    likes: int = 0
    last_modified: str = "2025-01-01T00:00:00.000Z"
    gated: Any = False
    config: dict[str, Any] | None = None
    pipeline_tag: str = "text-generation"
    sha: str = ""

    def __post_init__(self) -> None:
        if not self.sha:
            digest = hashlib.sha1(self.repo_id.encode() + b"".join(sorted(self.files.values())))
            self.sha = digest.hexdigest()


@dataclass
class Logged:
    method: str
    path: str
    range: str | None
    auth: str | None = None  # the Authorization header it carried
    status: int = 0
    sent: int = 0  # body bytes written


@dataclass
class FakeHub:
    page_size: int = 2
    repos: dict[str, FakeRepo] = field(default_factory=dict)
    log: list[Logged] = field(default_factory=list)
    corrupted: dict[tuple[str, str], int] = field(default_factory=dict)
    ignore_ranges: bool = False  # answer every GET whole (200), as a server without range support does
    cut_after: dict[str, int] = field(default_factory=dict)  # file → hang up after this many bytes (once)
    any_path: bool = False  # answer an unrouted GET with the listed file its last path segment names
    granted: dict[str, set[str]] = field(default_factory=dict)  # gated repo → tokens whose account has access
    url: str = ""

    # -- set-up --------------------------------------------------------------------------------
    def add_repo(self, repo_id: str, files: dict[str, bytes], **meta: Any) -> FakeRepo:
        if "config" not in meta and "config.json" in files:
            meta["config"] = json.loads(files["config.json"])
        repo = self.repos[repo_id] = FakeRepo(repo_id, dict(files), **meta)
        return repo

    def add_folder(self, repo_id: str, folder: Path, extra: dict[str, bytes] | None = None, **meta: Any) -> FakeRepo:
        files = {p.name: p.read_bytes() for p in sorted(Path(folder).iterdir()) if p.is_file()}
        files.update(extra or {})
        return self.add_repo(repo_id, files, **meta)

    def corrupt(self, repo_id: str, name: str, offset: int | None = None) -> None:
        """Serve ``name`` with the byte at ``offset`` (default: the middle) flipped; its listed sha256 stays."""
        data = self.repos[repo_id].files[name]
        self.corrupted[(repo_id, name)] = len(data) // 2 if offset is None else offset

    def grant(self, repo_id: str, token: str) -> None:
        """The account of ``token`` accepted gated ``repo_id``'s licence: its files are served to that token."""
        self.granted.setdefault(repo_id, set()).add(token)

    def sha256(self, repo_id: str, name: str) -> str:
        return hashlib.sha256(self.repos[repo_id].files[name]).hexdigest()

    # -- what the tests look at ----------------------------------------------------------------
    def requests_for(self, name: str) -> list[Logged]:
        """Requests that carried file ``name``'s bytes (its resolve URL or its CDN address)."""
        shas = {hashlib.sha256(data).hexdigest() for repo in self.repos.values()
                for fname, data in repo.files.items() if fname == name}
        return [e for e in self.log if e.path.endswith("/" + name) or any(e.path == f"/cdn/{s}" for s in shas)]

    def bytes_sent(self, name: str) -> int:
        return sum(e.sent for e in self.requests_for(name))

    # -- serving -------------------------------------------------------------------------------
    def start(self) -> "FakeHub":
        hub = self

        class Handler(_Handler):
            owner = hub

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-hub", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def served(self, repo_id: str, name: str) -> bytes:
        data = self.repos[repo_id].files[name]
        offset = self.corrupted.get((repo_id, name))
        if offset is None:
            return data
        return data[:offset] + bytes([data[offset] ^ 0xFF]) + data[offset + 1:]


_RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")


class _Handler(BaseHTTPRequestHandler):
    owner: FakeHub
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def handle(self) -> None:
        try:
            super().handle()
        except (ConnectionResetError, BrokenPipeError):  # a client that hung up (a paused download)
            pass

    def do_HEAD(self) -> None:  # noqa: N802
        self._route(head=True)

    def do_GET(self) -> None:  # noqa: N802
        self._route(head=False)

    # -- replies -------------------------------------------------------------------------------
    def _entry(self) -> Logged:
        entry = Logged(self.command, urlsplit(self.path).path, self.headers.get("Range"),
                       self.headers.get("Authorization"))
        self.owner.log.append(entry)
        return entry

    def _send(self, entry: Logged, status: int, body: bytes = b"", headers: dict[str, str] | None = None,
              head: bool = False, cut: int | None = None) -> None:
        entry.status = status
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if head:
            return
        for start in range(0, len(body), 64 * 1024):
            chunk = body[start:start + 64 * 1024]
            if cut is not None and start + len(chunk) > cut:  # the connection drops mid-body
                chunk = chunk[:max(0, cut - start)]
                entry.sent += len(chunk)
                self.wfile.write(chunk)
                self.wfile.flush()
                self.close_connection = True
                return
            entry.sent += len(chunk)  # counted first: the client may have read it before write() returns
            try:
                self.wfile.write(chunk)
            except (BrokenPipeError, ConnectionResetError):
                entry.sent -= len(chunk)
                self.close_connection = True
                return

    def _error(self, entry: Logged, status: int, code: str, message: str, head: bool = False) -> None:
        body = json.dumps({"error": message}).encode()
        self._send(entry, status, body, {"Content-Type": "application/json", "X-Error-Code": code,
                                         "X-Error-Message": message}, head)

    def _json(self, entry: Logged, data: Any, headers: dict[str, str] | None = None) -> None:
        self._send(entry, 200, json.dumps(data).encode(), {"Content-Type": "application/json", **(headers or {})})

    def _content(self, entry: Logged, data: bytes, headers: dict[str, str], head: bool, cut: int | None = None) -> None:
        """``data`` whole, or the part a ``Range`` header asks for (206); ``cut``: hang up after that many bytes."""
        headers = {**headers, "Accept-Ranges": "bytes", "Content-Type": "application/octet-stream"}
        match = _RANGE.match(self.headers.get("Range") or "")
        if match and not self.owner.ignore_ranges:
            start = int(match.group(1))
            end = min(int(match.group(2)) if match.group(2) else len(data) - 1, len(data) - 1)
            if start >= len(data):
                return self._send(entry, 416, b"", {"Content-Range": f"bytes */{len(data)}"}, head)
            headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
            return self._send(entry, 206, data[start:end + 1], headers, head, cut)
        self._send(entry, 200, data, headers, head, cut)

    # -- routes --------------------------------------------------------------------------------
    def _route(self, head: bool) -> None:
        entry = self._entry()
        parts = urlsplit(self.path)
        query = parse_qs(parts.query)
        path = parts.path
        if path == "/api/models":
            return self._list(entry, query)
        match = re.match(r"^/api/models/([^/]+/[^/]+?)(?:/revision/([^/]+))?$", path)
        if match:
            return self._info(entry, match.group(1), match.group(2), query)
        match = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path)
        if match:
            return self._resolve(entry, match.group(1), match.group(2), unquote(match.group(3)), head)
        match = re.match(r"^/cdn/([0-9a-f]{64})$", path)
        if match:
            for repo in self.owner.repos.values():
                for name, data in repo.files.items():
                    if hashlib.sha256(data).hexdigest() == match.group(1):
                        cut = None if head else self.owner.cut_after.pop(name, None)
                        return self._content(entry, self.owner.served(repo.repo_id, name),
                                             {"ETag": f'"{match.group(1)}"'}, head, cut)
        if self.owner.any_path:
            last = unquote(path.rsplit("/", 1)[-1])
            for repo in self.owner.repos.values():
                for name in repo.files:
                    if re.split(r"[/\\]", name)[-1] == last:
                        return self._resolve(entry, repo.repo_id, repo.sha, name, head)
        self._error(entry, 404, "NotFound", f"no route {path}", head)

    def _summary(self, repo: FakeRepo) -> dict[str, Any]:
        return {"_id": repo.sha[:24], "id": repo.repo_id, "modelId": repo.repo_id, "downloads": repo.downloads,
                "likes": repo.likes, "lastModified": repo.last_modified, "createdAt": repo.last_modified,
                "tags": repo.tags, "pipeline_tag": repo.pipeline_tag, "gated": repo.gated, "private": False,
                "library_name": "gguf" if "gguf" in repo.tags else "transformers"}

    def _list(self, entry: Logged, query: dict[str, list[str]]) -> None:
        repos = list(self.owner.repos.values())
        text = (query.get("search") or [""])[0].lower()
        repos = [r for r in repos if text in r.repo_id.lower()]
        if query.get("pipeline_tag"):
            repos = [r for r in repos if r.pipeline_tag == query["pipeline_tag"][0]]
        for tag in query.get("filter", []):
            repos = [r for r in repos if tag in r.tags]
        key = (query.get("sort") or ["downloads"])[0]
        field_of = {"downloads": "downloads", "likes": "likes", "lastModified": "last_modified",
                    "createdAt": "last_modified", "trendingScore": "downloads"}.get(key, "downloads")
        repos.sort(key=lambda r: getattr(r, field_of), reverse=True)
        cursor = int((query.get("cursor") or ["0"])[0])
        size = min(int((query.get("limit") or ["1000"])[0]), self.owner.page_size)
        page = repos[cursor:cursor + size]
        headers = {}
        if cursor + size < len(repos):
            rest = {k: v for k, v in query.items() if k != "cursor"}
            link = f"{self.owner.url}/api/models?{urlencode(rest, doseq=True)}&cursor={cursor + size}"
            headers["Link"] = f'<{link}>; rel="next"'
        self._json(entry, [self._summary(r) for r in page], headers)

    def _info(self, entry: Logged, repo_id: str, revision: str | None, query: dict[str, list[str]]) -> None:
        repo = self.owner.repos.get(repo_id)
        if repo is None:
            return self._error(entry, 404, "RepoNotFound", "Repository not found")
        if revision not in (None, "main", repo.sha):
            return self._error(entry, 404, "RevisionNotFound", "Invalid rev id")
        blobs = (query.get("blobs") or ["false"])[0].lower() == "true"
        siblings = []
        for name, data in sorted(repo.files.items()):
            sibling: dict[str, Any] = {"rfilename": name}
            if blobs:
                sibling.update(size=len(data), blobId=git_blob_id(data))
                if name.endswith(LFS_SUFFIXES):
                    sibling["lfs"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
            siblings.append(sibling)
        info = {**self._summary(repo), "sha": repo.sha, "siblings": siblings, "config": repo.config,
                "cardData": {"license": next((t.split(":", 1)[1] for t in repo.tags if t.startswith("license:")), None)}}
        self._json(entry, info)

    def _resolve(self, entry: Logged, repo_id: str, revision: str, name: str, head: bool) -> None:
        repo = self.owner.repos.get(repo_id)
        if repo is None:
            return self._error(entry, 404, "RepoNotFound", "Repository not found", head)
        if revision not in ("main", repo.sha):
            return self._error(entry, 404, "RevisionNotFound", "Invalid rev id", head)
        if name not in repo.files:
            return self._error(entry, 404, "EntryNotFound", f"{name} does not exist", head)
        if repo.gated:
            auth = self.headers.get("Authorization") or ""
            if not auth:
                return self._error(entry, 401, "GatedRepo", f"Access to model {repo_id} is restricted. You must "
                                   "have access to it and be authenticated to access it. Please log in.", head)
            if auth.removeprefix("Bearer ") not in self.owner.granted.get(repo_id, set()):
                return self._error(entry, 403, "GatedRepo", f"Access to model {repo_id} is restricted and you are "
                                   "not in the authorized list.", head)
        data = repo.files[name]
        headers = {"X-Repo-Commit": repo.sha}
        if name.endswith(LFS_SUFFIXES):
            sha = hashlib.sha256(data).hexdigest()
            headers.update({"Location": f"/cdn/{sha}", "X-Linked-Size": str(len(data)), "X-Linked-Etag": f'"{sha}"',
                            "ETag": f'"{git_blob_id(data)}"'})
            return self._send(entry, 302, b"", headers, head)
        headers["ETag"] = f'"{git_blob_id(data)}"'
        self._content(entry, self.owner.served(repo_id, name), headers, head)


def make_gguf(path: Path, quant: str = "F16", vocab: int = 400) -> Path:
    """A valid GGUF with the tiny test model's architecture (2 layers, d 64, GQA 4/2, head dim 16, MLP 128)."""
    import gguf
    from gguf.quants import quantize

    qtype = gguf.GGMLQuantizationType[quant]
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(2)
    writer.add_context_length(256)
    writer.add_embedding_length(64)
    writer.add_feed_forward_length(128)
    writer.add_head_count(4)
    writer.add_head_count_kv(2)
    writer.add_key_length(16)
    writer.add_value_length(16)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list([f"t{i}" for i in range(vocab)])
    rng = np.random.default_rng(0)

    def add(name: str, rows: int, cols: int) -> None:
        data = rng.standard_normal((rows, cols)).astype(np.float32)
        if qtype in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
            writer.add_tensor(name, data.astype(np.float16 if qtype == gguf.GGMLQuantizationType.F16 else np.float32))
        else:  # quantized blocks, passed as their bytes (rows × bytes per row)
            writer.add_tensor(name, quantize(data, qtype), raw_dtype=qtype)

    add("token_embd.weight", vocab, 64)
    for layer in range(2):
        writer.add_tensor(f"blk.{layer}.attn_norm.weight", np.ones(64, dtype=np.float32))
        add(f"blk.{layer}.attn_q.weight", 64, 64)
        add(f"blk.{layer}.attn_k.weight", 32, 64)
        add(f"blk.{layer}.attn_v.weight", 32, 64)
        add(f"blk.{layer}.attn_output.weight", 64, 64)
        writer.add_tensor(f"blk.{layer}.ffn_norm.weight", np.ones(64, dtype=np.float32))
        add(f"blk.{layer}.ffn_gate.weight", 128, 64)
        add(f"blk.{layer}.ffn_up.weight", 128, 64)
        add(f"blk.{layer}.ffn_down.weight", 64, 128)
    writer.add_tensor("output_norm.weight", np.ones(64, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


__all__ = ["FakeHub", "FakeRepo", "git_blob_id", "make_gguf"]
