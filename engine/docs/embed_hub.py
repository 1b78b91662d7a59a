"""A multilingual embedding model from the Hugging Face Hub, only where the user allows downloads:
``python -m engine docs fetch-embedder --hub [REPO] --allow-downloads``.

The default embedder (all-MiniLM-L6-v2, from the package index: embed_fetch.py) reads English only, so Chinese
questions rely on keywords. The Hub holds multilingual ones; the one offered is
``sentence-transformers/paraphrase-multilingual-MiniLM-L12-v2`` (50+ languages, Chinese among them; 384 dimensions
like the default, so a store's vectors keep one width; mean pooling; a 128-token window; 118 M parameters, about
470 MB), small enough to embed a folder on a laptop CPU. Any other encoder repo in safetensors can be named instead.

The transfer is the model library's (engine/library/download.py: pinned to one commit, every file verified against
the Hub's checksums, safety checks, resumable, atomic), into the embedders folder rather than the models folder (the
chat-model picker lists that one). Then the folder must load as an encoder and embed a sentence before its marker is
written and it is put in use (embed.py's ``use_embedder``): a repo that is not an embedding model is removed again
with one line, and the embedder in use stays as it was. With downloads not allowed, nothing touches the network
(engine/library/access.py refuses before any socket opens).

Owns fetching a Hub embedder only; loading and choosing are embed.py's, the transfer engine/library's.
"""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path
from typing import Callable

from engine import paths
from engine.docs.embed import MARKER, MULTILINGUAL_REPO, InstalledEmbedder, TransformersEmbedder, is_fetched, use_embedder
from engine.errors import BadInputError, CorruptModelError, printable
from engine.fmt import format_bytes
from engine.library import download, hub
from engine.library.download import DownloadProgress

# Beside config, tokenizer and weights: the sentence-transformers configs embed.py reads its pooling and window from.
EMBEDDER_FILES = ("modules.json", "sentence_bert_config.json", "1_Pooling/config.json")
GENERATION_HEADS = ("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")
PROBE = "一句中文和 an English sentence"  # embedded once before the folder counts as an embedder


def fetch_hub_embedder(repo: str = MULTILINGUAL_REPO, *, allow_downloads: bool, endpoint: str | None = None,
                       progress: Callable[[str], None] = lambda line: None,
                       on_bytes: Callable[[DownloadProgress], None] | None = None,
                       cancel: threading.Event | None = None, use: bool = True) -> InstalledEmbedder:
    """Download ``repo`` into the embedders folder (if not there already), check it embeds, and put it in use when
    ``use``. Errors are the library's typed ones (``DownloadsDisabledError`` without ``allow_downloads``,
    ``HubError``, ``UnsafeModelError``, ``CancelledError``) or ``CorruptModelError`` for a repo that is not an
    encoder; each one line."""
    plan = hub.plan_download(repo, allow_downloads=allow_downloads, endpoint=endpoint, extra_files=EMBEDDER_FILES)
    if plan.kind != "safetensors" or not any(f.name == "model.safetensors" for f in plan.files):
        raise BadInputError(f"{repo} has no single model.safetensors: an embedding model for documents is one encoder "
                            "folder (a GGUF or sharded repo is a chat model)")
    root = paths.embedders_dir()
    target = root / plan.folder_name
    if not is_fetched(target):
        if target.exists():  # a folder left without its marker (the check below failed or was interrupted)
            shutil.rmtree(target)
        progress(f"downloading {repo} ({format_bytes(plan.total_bytes)}) into {printable(root)}")
        download.pull(plan, allow_downloads=allow_downloads, progress=on_bytes, cancel=cancel, root=root)
        try:
            _refuse_generator(target, repo)
            embedder = TransformersEmbedder(target, name=repo)
            embedder.embed([PROBE])
        except (CorruptModelError, RuntimeError, ValueError, TypeError) as exc:
            shutil.rmtree(target, ignore_errors=True)
            raise CorruptModelError(f"{repo} was downloaded but does not work as an embedding model: {exc}") from None
        (target / MARKER).write_text(json.dumps({"name": repo, "source": "hub", "revision": plan.revision,
                                                 "endpoint": plan.endpoint, "dim": embedder.dim}, indent=2),
                                     encoding="utf-8")
        progress(f"{repo}: {embedder.dim} dimensions, {embedder.pooling.mode} pooling, "
                 f"{embedder.pooling.max_tokens}-token window")
    else:
        progress(f"{repo} is already in place: {printable(target)}")
    if use:
        return use_embedder(target.name)
    return InstalledEmbedder(target.name, repo, in_use=False)


def _refuse_generator(folder: Path, repo: str) -> None:
    """A chat or vision-language model loads as an ``AutoModel`` too and would give vectors, just not ones trained to
    compare meanings: its config's architectures name a generation head, so refuse it by that."""
    try:
        architectures = json.loads((folder / "config.json").read_text(encoding="utf-8")).get("architectures") or []
    except (OSError, ValueError, AttributeError):
        architectures = []
    heads = [a for a in architectures if isinstance(a, str) and a.endswith(GENERATION_HEADS)]
    if heads:
        raise CorruptModelError(f"{repo} is a text generation model ({heads[0]}), not an embedding model")


def folder_of(repo: str) -> Path:
    """Where ``repo``'s embedder folder is (or would be)."""
    return paths.embedders_dir() / hub.folder_name(repo)
