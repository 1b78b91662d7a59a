"""What the library asks the Hugging Face Hub: search, a model's page, which files a download needs, and the
remote ``config.json`` or GGUF header a fit estimate reads before any weights.

Every function takes ``allow_downloads`` (False unless the user turned downloads on) and ``endpoint``, and runs
its requests inside ``engine.library.access.online``: with downloads off it raises ``DownloadsDisabledError``
and opens no socket. Requests go through huggingface_hub itself: ``HfApi.list_models`` (text-generation models,
sorted by downloads, likes or recency, paged), ``HfApi.model_info(files_metadata=True)`` (every file's size, the
LFS sha256 of weights and the git blob id of small files), and ranged GETs of ``/resolve/`` URLs through
``get_session()`` for the small files (a GGUF header is read with ``Range`` requests, never the whole file).

A download takes only what the engine needs: ``config.json``, the generation config, the tokenizer files and
the safetensors weights (the shards the index names), or one GGUF file. Pickle weights (``.bin``, ``.pt``, …) are
never taken, and a repo that has only those is refused, as is one whose config asks to run its own code
(``auto_map``) or whose files come without checksums. Every file name the listing or the index gives is untrusted:
a plan holds only names that stay inside the model's folder (``engine.models.safety.member_path``), refused as
one line before any byte is written. A GGUF in a subfolder of the repo (``Q4_K_M/model-Q4_K_M.gguf``) is taken
into the top of its model folder (``gguf_local_name``). Owns the questions and the file choice; the transfer
itself is ``engine.library.download``'s.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from itertools import islice
from pathlib import Path
from typing import Any

from huggingface_hub import HfApi, get_session, hf_hub_url
from huggingface_hub.utils import build_hf_headers, hf_raise_for_status

from engine.errors import REMOTE_CODE_REFUSAL, BadInputError, HubError, ModelNotFoundError, UnsafeModelError
from engine.library import arch as arch_mod
from engine.library import access
from engine.library.access import check_repo_id, online
from engine.library.arch import Architecture
from engine.shapes.gguf_header import read_header
from engine.models import safety
from engine.models.safety import PICKLE_SUFFIXES, TOKENIZER_FILES

SORTS = {"downloads": "downloads", "likes": "likes", "recent": "last_modified", "trending": "trending_score"}
FORMATS = ("any", "safetensors", "gguf")
MAX_PAGE_SIZE = 100
SIDE_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
              "special_tokens_map.json", "tokenizer.model", "vocab.json", "merges.txt", "added_tokens.json",
              "chat_template.jinja", "chat_template.json")
INDEX = "model.safetensors.index.json"
MAX_SIDE_FILE = 64 << 20  # a config or index larger than this is not one
TIMEOUT_S = 60.0
_QUANT = re.compile(r"(?:^|[-_.])(I?Q\d+(?:_[A-Z0-9]+)*|BF16|F16|F32|FP16)(?=[-_.])", re.IGNORECASE)
_SPLIT_GGUF = re.compile(r"-\d{5}-of-\d{5}\.gguf$", re.IGNORECASE)
_EXPAND = ["downloads", "likes", "lastModified", "tags", "gated", "pipeline_tag", "library_name"]


@dataclass(frozen=True)
class SearchHit:
    repo: str
    downloads: int | None
    likes: int | None
    last_modified: str | None  # ISO 8601
    formats: tuple[str, ...]  # of "safetensors", "gguf"
    gated: bool
    license: str | None


@dataclass(frozen=True)
class SearchPage:
    query: str
    sort: str
    format: str
    page: int
    page_size: int
    hits: tuple[SearchHit, ...]
    more: bool  # the Hub has results past this page

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class RemoteFile:
    """One file of a repo as the Hub lists it, with what to verify it against."""

    name: str
    size: int
    sha256: str | None  # LFS files (weights): the content's sha256
    blob_id: str | None  # every file: its git blob id (sha1 of "blob <size>\\0" + content)


@dataclass(frozen=True)
class GgufQuant:
    file: str
    quant: str  # "Q4_K_M", "F16", … read from the file name ("?" when it does not say)
    size: int


@dataclass(frozen=True)
class ModelPage:
    repo: str
    revision: str  # the commit the listing is of: downloads pin it
    license: str | None
    gated: bool
    pipeline_tag: str | None
    downloads: int | None
    likes: int | None
    last_modified: str | None
    format: str  # "safetensors" | "gguf" | "pickle only" | "none"
    needs_remote_code: bool
    refusal: str | None  # why Miaohui will not download it, when it will not
    files: tuple[RemoteFile, ...]  # every file in the repo
    needed: tuple[str, ...]  # what a safetensors download takes (the index's shards are settled at download)
    ggufs: tuple[GgufQuant, ...]
    weights_bytes: int  # safetensors weights to download (0 for a GGUF repo: see ggufs)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class DownloadPlan:
    """Exactly what a download transfers, pinned to one commit."""

    repo: str
    revision: str
    endpoint: str
    kind: str  # "safetensors" | "gguf"
    files: tuple[RemoteFile, ...]
    folder_name: str  # the model's folder in the data dir's models/ ("owner--name")
    gguf_name: str = ""  # a GGUF plan: the file's name in that folder ("" → the last part of its Hub name)

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def local_name(self, remote: RemoteFile) -> str:
        """Where ``remote`` goes, relative to the model's folder (its Hub name, checked by ``_verifiable``)."""
        return local_name(self.kind, self.gguf_name, remote.name)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "total_bytes": self.total_bytes}


def local_name(kind: str, gguf_name: str, name: str) -> str:
    """A plan's file ``name`` (a Hub name) relative to its model folder: a GGUF at the top (``gguf_local_name``)."""
    return (gguf_name or name.rsplit("/", 1)[-1]) if kind == "gguf" else name


def folder_name(repo: str) -> str:
    return repo.replace("/", "--")


def _api(endpoint: str) -> HfApi:
    return HfApi(endpoint=endpoint, token=access.auth_token(endpoint))  # the online block's token, if any


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def _license(tags: list[str] | None, card: Any = None) -> str | None:
    for tag in tags or ():
        if tag.startswith("license:"):
            return tag.split(":", 1)[1]
    return getattr(card, "license", None) if card is not None else None


def search(query: str, *, allow_downloads: bool, endpoint: str | None = None, sort: str = "downloads",
           fmt: str = "any", page: int = 0, page_size: int = 20) -> SearchPage:
    """One page of text-generation models matching ``query``; ``fmt`` "any" keeps those with safetensors or GGUF
    weights (so such a page can be shorter than ``page_size``)."""
    if sort not in SORTS:
        raise BadInputError(f"unknown sort {sort!r}: choose one of {', '.join(SORTS)}")
    if fmt not in FORMATS:
        raise BadInputError(f"unknown format {fmt!r}: choose one of {', '.join(FORMATS)}")
    if not isinstance(page, int) or page < 0 or not isinstance(page_size, int) or not 1 <= page_size <= MAX_PAGE_SIZE:
        raise BadInputError(f"page must be ≥ 0 and page size 1 to {MAX_PAGE_SIZE}")
    with online(allow_downloads, endpoint) as url:
        start = page * page_size
        found = _api(url).list_models(search=query or None, pipeline_tag="text-generation",
                                      filter=None if fmt == "any" else fmt, sort=SORTS[sort],  # type: ignore[arg-type]
                                      limit=start + page_size + 1, expand=_EXPAND)  # type: ignore[arg-type]
        items = list(islice(found, start, start + page_size + 1))
    hits = []
    for info in items[:page_size]:
        tags = set(info.tags or ())
        formats = tuple(f for f in ("safetensors", "gguf") if f in tags or info.library_name == f)
        if fmt == "any" and not formats:
            continue
        hits.append(SearchHit(info.id, info.downloads, info.likes, _iso(info.last_modified), formats,
                              bool(info.gated), _license(info.tags)))
    return SearchPage(query, sort, fmt, page, page_size, tuple(hits), len(items) > page_size)


def gguf_local_name(page: ModelPage, file: str) -> str:
    """The name GGUF ``file`` of ``page`` gets in its model folder: the top of it, where the library lists and
    loads GGUF files, so a Hub subfolder's file keeps only its last part, unless another GGUF of the repo has that
    name too (then "Q4_K_M--model.gguf"; compared without case, as macOS and Windows folders do)."""
    base = file.rsplit("/", 1)[-1]
    clash = sum(q.file.rsplit("/", 1)[-1].lower() == base.lower() for q in page.ggufs) > 1
    return file.replace("/", "--") if clash else base


def _quant_label(name: str) -> str:
    found = _QUANT.findall(name.rsplit("/", 1)[-1])
    return found[-1].upper() if found else "?"


def _files(info: Any) -> tuple[RemoteFile, ...]:
    files = []
    for sibling in info.siblings or ():
        lfs = sibling.lfs
        size = lfs.size if lfs is not None else sibling.size
        files.append(RemoteFile(sibling.rfilename, int(size or 0), lfs.sha256 if lfs is not None else None,
                                sibling.blob_id))
    return tuple(files)


def _needed_side_files(files: tuple[RemoteFile, ...]) -> list[RemoteFile]:
    return [f for f in files if f.name in SIDE_FILES]


def _describe(repo: str, info: Any) -> ModelPage:
    files = _files(info)
    top = [f for f in files if "/" not in f.name]
    safetensors = [f for f in top if f.name.endswith(".safetensors")]
    ggufs = [f for f in files if f.name.lower().endswith(".gguf") and not _SPLIT_GGUF.search(f.name)]
    pickles = [f for f in top if f.name.lower().endswith(PICKLE_SUFFIXES)]
    config = info.config if isinstance(info.config, dict) else {}
    remote_code = bool(config.get("auto_map"))
    fmt = "safetensors" if safetensors else "gguf" if ggufs else "pickle only" if pickles else "none"
    refusal = None
    if remote_code and fmt == "safetensors":
        refusal = f"refused {repo}: it {REMOTE_CODE_REFUSAL} (auto_map); Miaohui downloads only models it can run safely"
    elif fmt == "pickle only":
        refusal = (f"refused {repo}: its weights are only pickle checkpoints ({pickles[0].name}), which can run code "
                   "when loaded; Miaohui downloads safetensors or GGUF weights only")
    elif fmt == "none":
        refusal = f"{repo} has no safetensors or GGUF weights to download"
    elif fmt == "safetensors" and not any(f.name == "config.json" for f in top):
        refusal = f"{repo} has no config.json beside its safetensors weights: not a model the engine can load"
    needed = tuple(f.name for f in _needed_side_files(tuple(top))) + tuple(f.name for f in safetensors)
    return ModelPage(
        repo=repo, revision=info.sha or "main", license=_license(info.tags, info.card_data), gated=bool(info.gated),
        pipeline_tag=info.pipeline_tag, downloads=info.downloads, likes=info.likes,
        last_modified=_iso(info.last_modified), format=fmt, needs_remote_code=remote_code, refusal=refusal,
        files=files, needed=needed if fmt == "safetensors" else (),
        ggufs=tuple(GgufQuant(f.name, _quant_label(f.name), f.size) for f in ggufs),
        weights_bytes=sum(f.size for f in safetensors))


def _info(url: str, repo: str) -> Any:
    return _api(url).model_info(check_repo_id(repo), files_metadata=True, timeout=TIMEOUT_S)


def model_page(repo: str, *, allow_downloads: bool, endpoint: str | None = None,
               token: str | None = None) -> ModelPage:
    """A model's page: files with sizes and checksums, GGUF quantizations, license, gated, remote code.
    ``token`` (here and below): a Hugging Face token sent to ``endpoint`` only (``engine.library.access``)."""
    check_repo_id(repo)
    with online(allow_downloads, endpoint, token) as url:
        return _describe(repo, _info(url, repo))


def _get(url: str, repo: str, name: str, revision: str, first_bytes: int | None = None) -> bytes:
    """A small file's bytes (or its first ``first_bytes``) through huggingface_hub's session."""
    address = hf_hub_url(repo, name, revision=revision, endpoint=url)
    headers = build_hf_headers(token=access.auth_token(address))
    if first_bytes is not None:
        headers["Range"] = f"bytes=0-{first_bytes - 1}"
    with get_session().stream("GET", address, headers=headers, timeout=TIMEOUT_S) as response:
        hf_raise_for_status(response)
        limit = first_bytes if first_bytes is not None else MAX_SIDE_FILE
        data = bytearray()
        for chunk in response.iter_bytes():
            data += chunk
            if len(data) >= limit:
                if first_bytes is None:
                    raise HubError(f"{repo}/{name} is larger than {MAX_SIDE_FILE >> 20} MiB: not a config file")
                break
        return bytes(data[:limit])


def _json(url: str, repo: str, name: str, revision: str) -> Any:
    try:
        return json.loads(_get(url, repo, name, revision).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise HubError(f"{repo}/{name} on {url} is not JSON") from None


def _check_config(repo: str, config: Any) -> None:
    if isinstance(config, dict) and config.get("auto_map"):
        raise UnsafeModelError(f"refused {repo}: it {REMOTE_CODE_REFUSAL} (auto_map); Miaohui downloads only "
                               "models it can run safely")


def _pick_gguf(page: ModelPage, file: str | None) -> GgufQuant:
    if file is not None:
        for quant in page.ggufs:
            if quant.file == file:
                return quant
        raise ModelNotFoundError(f"{page.repo} has no GGUF file {file!r}"
                                 + (f": it has {', '.join(q.file for q in page.ggufs[:6])}" if page.ggufs else ""))
    if len(page.ggufs) == 1:
        return page.ggufs[0]
    if not page.ggufs:
        raise ModelNotFoundError(f"{page.repo} has no single-file GGUF model")
    choices = ", ".join(f"{q.file} ({q.quant})" for q in page.ggufs[:6])
    raise BadInputError(f"{page.repo} holds {len(page.ggufs)} GGUF files: pick one with --file, e.g. {choices}")


def _verifiable(repo: str, files: list[RemoteFile]) -> tuple[RemoteFile, ...]:
    """The files a plan takes, once each name stays inside the model's folder and each has a checksum."""
    for f in files:
        safety.member_path(Path(), f.name, repo)
    for f in files:
        if not f.sha256 and not f.blob_id:
            raise HubError(f"the Hub lists {repo}/{f.name} without a checksum: it cannot be verified, so it is not "
                           "downloaded")
    return tuple(files)


def _plan(url: str, repo: str, page: ModelPage, file: str | None, extra_files: tuple[str, ...] = ()) -> DownloadPlan:
    """The files to take, inside an ``online`` block; ``extra_files``: more names taken where the repo has them."""
    if file is not None and not file.lower().endswith(".gguf"):
        raise BadInputError(f"--file picks one GGUF file of a repo; {file!r} is not a .gguf name")
    by_name = {f.name: f for f in page.files}
    if file is not None or page.format == "gguf":
        quant = _pick_gguf(page, file)
        # A repo with safetensors weights too gets its GGUF files a folder of their own (the loader would read
        # config.json in a shared one).
        name = folder_name(repo) + ("-gguf" if page.format == "safetensors" else "")
        return DownloadPlan(repo, page.revision, url, "gguf", _verifiable(repo, [by_name[quant.file]]), name,
                            gguf_local_name(page, quant.file))
    if page.refusal:
        unsafe = page.format == "pickle only" or page.needs_remote_code
        raise (UnsafeModelError if unsafe else ModelNotFoundError)(page.refusal)
    _check_config(repo, _json(url, repo, "config.json", page.revision))
    side = _needed_side_files(tuple(f for f in page.files if "/" not in f.name))
    side += [by_name[name] for name in extra_files if name in by_name and by_name[name] not in side]
    if not any(f.name in TOKENIZER_FILES for f in side):
        raise ModelNotFoundError(f"{repo} has no tokenizer ({', '.join(TOKENIZER_FILES)}): the engine cannot load it")
    if INDEX in by_name:
        index = _json(url, repo, INDEX, page.revision)
        weight_map = index.get("weight_map") if isinstance(index, dict) else None
        names = list(weight_map.values()) if isinstance(weight_map, dict) else []
        for name in names:  # the index is the Hub's too: a shard name is judged before it is looked up
            safety.member_path(Path(), name, f"{repo}'s {INDEX}")
        shards = sorted(set(names))
        missing = [name for name in shards if name not in by_name or not name.endswith(".safetensors")]
        if not shards or missing:
            raise HubError(f"{repo}'s {INDEX} names shards that are not safetensors files of the repo "
                           f"({', '.join(missing[:3]) or 'none'})")
        weights = [by_name[INDEX]] + [by_name[name] for name in shards]
    elif "model.safetensors" in by_name:
        weights = [by_name["model.safetensors"]]
    else:
        weights = [by_name[name] for name in page.needed if name.endswith(".safetensors")]
    return DownloadPlan(repo, page.revision, url, "safetensors", _verifiable(repo, side + weights), folder_name(repo))


def plan_download(repo: str, *, file: str | None = None, allow_downloads: bool,
                  endpoint: str | None = None, token: str | None = None, extra_files: tuple[str, ...] = ()
                  ) -> DownloadPlan:
    """Which files a download of ``repo`` (or its GGUF ``file``) takes, pinned to the current commit;
    ``extra_files`` adds names beside the usual config, tokenizer and weights (an embedding model's pooling config).

    Refuses (``UnsafeModelError``) pickle-only repos and remote code, before any weights move.
    """
    check_repo_id(repo)
    with online(allow_downloads, endpoint, token) as url:
        return _plan(url, repo, _describe(repo, _info(url, repo)), file, extra_files)


def remote_architecture(repo: str, *, file: str | None = None, allow_downloads: bool,
                        endpoint: str | None = None, token: str | None = None) -> tuple[Architecture, DownloadPlan]:
    """The architecture of a Hub model from its ``config.json`` or its GGUF file's header (ranged reads), and
    what downloading it would take. No weights are transferred."""
    check_repo_id(repo)
    with online(allow_downloads, endpoint, token) as url:
        page = _describe(repo, _info(url, repo))
        plan = _plan(url, repo, page, file)
        if plan.kind == "safetensors":
            config = _json(url, repo, "config.json", plan.revision)
            return arch_mod.from_config(config, f"{repo}/config.json"), plan
        remote = plan.files[0]
        where = f"{repo}/{remote.name}"
        header = read_header(lambda n: _get(url, repo, remote.name, plan.revision, first_bytes=n), where, remote.size)
        return arch_mod.from_gguf(header, where), plan
