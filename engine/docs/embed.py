"""Sentence embeddings from a model folder, run with transformers: mean pooling over the real tokens, L2-normalized.

Owns: the ``Embedder`` contract (texts → (n, dim) float32 unit vectors, with a model name the store records),
``TransformersEmbedder``, the one implementation (pooling and window read from the folder's sentence-transformers
configs), and which embedder is in use: ``default_embedder`` loads the one chosen with ``use_embedder`` (a
multilingual model from the Hub, embed_hub.py), else the default one if it was fetched (embed_fetch.py). Does not own
fetching, storing or ranking.

Why not sentence-transformers: it adds a library for what is ten lines here (all-MiniLM-L6-v2's own pooling config
says mean pooling, and its training normalizes), and the engine already runs transformers. The pooling divides by the
count of real tokens per row, so padding in a batch changes no vector (the test holds it).

The default model is all-MiniLM-L6-v2 (English; 384 dimensions, 256-token window, 90 MB), the one real embedding
model found installable from the package index. It does not understand Chinese: its vocabulary holds CJK characters
one by one, so Chinese vectors are weak and Chinese questions rely on the keyword index (segmented, keywords.py).
Where the user allows downloads, a multilingual model from the Hub can be put in use instead (embed_hub.py).
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol, Sequence

import numpy as np

from engine import paths
from engine.errors import CorruptModelError, ModelNotFoundError, printable
from engine.fmt import one_line

DEFAULT_EMBEDDER_NAME = "all-MiniLM-L6-v2"
MULTILINGUAL_REPO = "sentence-transformers/paraphrase-multilingual-MiniLM-L12-v2"  # offered from the Hub: embed_hub.py
MARKER = "miaohui-embedder.json"  # written last by embed_fetch: its presence means the folder is complete
ACTIVE = "in-use.json"  # in the embedders folder: {"folder": NAME} of the embedder in use (absent: the default one)
DEFAULT_MAX_TOKENS = 256


class Embedder(Protocol):
    """Turns texts into unit vectors; ``name`` is recorded beside each vector, so vectors of two models never mix."""

    name: str
    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), dim) float32, each row of length 1."""
        ...

    def count_tokens(self, texts: Sequence[str]) -> int:
        """The tokens ``embed(texts)`` reads (special tokens and truncation included): the server's usage."""
        ...


@dataclass(frozen=True)
class EmbedConfig:
    batch_size: int = 32  # passages per forward: on CPU larger batches gain little and pad more
    # Longer text is truncated. None: the model's own window (its sentence_bert_config.json's max_seq_length: 256
    # for all-MiniLM-L6-v2, 128 for the multilingual MiniLM), else DEFAULT_MAX_TOKENS.
    max_tokens: int | None = None
    threads: int | None = None  # torch threads while embedding; None leaves torch's setting


@dataclass(frozen=True)
class Pooling:
    """How token vectors become one vector, as the folder's sentence-transformers configs say."""

    mode: str = "mean"  # "mean" over the real tokens, or "cls": the first token's vector
    max_tokens: int = DEFAULT_MAX_TOKENS

    @classmethod
    def of(cls, folder: Path) -> Pooling:
        """Read ``1_Pooling/config.json`` and ``sentence_bert_config.json`` where present; missing or unreadable
        files keep the defaults (mean pooling, 256 tokens: what a plain encoder folder gets)."""
        pooling, window = _json_object(folder / "1_Pooling" / "config.json"), _json_object(
            folder / "sentence_bert_config.json")
        mode = "cls" if pooling.get("pooling_mode_cls_token") and not pooling.get("pooling_mode_mean_tokens") else "mean"
        limit = window.get("max_seq_length")
        return cls(mode, limit if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0
                   else DEFAULT_MAX_TOKENS)


class TransformersEmbedder:
    """An encoder model folder (config.json, tokenizer, safetensors) run with ``AutoModel``."""

    def __init__(self, folder: Path, name: str | None = None, config: EmbedConfig = EmbedConfig()) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        folder = Path(folder)
        if not (folder / "config.json").is_file():
            raise ModelNotFoundError(f"no embedding model in {printable(folder)}: "
                                     "`python -m engine docs fetch-embedder` puts the default one in place")
        try:
            self._tokenizer = AutoTokenizer.from_pretrained(str(folder))
            # use_safetensors: a pickle checkpoint is never loaded (it could run code).
            self._model = AutoModel.from_pretrained(str(folder), use_safetensors=True, dtype=torch.float32).eval()
        except (OSError, ValueError, RuntimeError, KeyError) as exc:
            raise CorruptModelError(f"the embedding model in {printable(folder)} cannot be loaded: "
                                    f"{one_line(exc, max_chars=160)}") from None
        self._torch = torch
        self.pooling = Pooling.of(folder)
        # The model's own window unless the caller set one; never past its position table.
        positions = int(getattr(self._model.config, "max_position_embeddings", 0) or 0) or None
        window = config.max_tokens or self.pooling.max_tokens
        self._config = replace(config, max_tokens=min(window, positions) if positions else window)
        self._lock = threading.Lock()  # one forward at a time: the window's indexer and a search may share it
        self.name = name or folder.name
        self.dim = int(self._model.config.hidden_size)

    @property
    def weights_bytes(self) -> int:
        """Bytes of its parameters and buffers as loaded (what the engine core's model budget counts)."""
        tensors = [*self._model.parameters(), *self._model.buffers()]
        return sum(t.numel() * t.element_size() for t in tensors)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        torch = self._torch
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        with self._lock, torch.inference_mode():
            for start in range(0, len(texts), self._config.batch_size):
                batch = list(texts[start:start + self._config.batch_size])
                encoded = self._tokenizer(batch, padding=True, truncation=True, max_length=self._config.max_tokens,
                                          return_tensors="pt")
                hidden = self._model(**encoded).last_hidden_state  # (batch, seq, dim)
                if self.pooling.mode == "cls":
                    pooled = hidden[:, 0]  # (batch, dim): padding is on the right, so row 0 is the first token
                else:
                    mask = encoded["attention_mask"].unsqueeze(-1).to(hidden.dtype)  # (batch, seq, 1)
                    pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)  # (batch, dim)
                pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
                out[start:start + len(batch)] = pooled.float().numpy()
        return out


    def count_tokens(self, texts: Sequence[str]) -> int:
        encoded = self._tokenizer(list(texts), truncation=True, max_length=self._config.max_tokens)
        return sum(len(ids) for ids in encoded["input_ids"])


def default_embedder_dir() -> Path:
    return paths.embedders_dir() / DEFAULT_EMBEDDER_NAME


def is_fetched(folder: Path) -> bool:
    return (folder / MARKER).is_file() and (folder / "model.safetensors").is_file()


@dataclass(frozen=True)
class InstalledEmbedder:
    """An embedding model folder in the embedders folder, complete (its marker written)."""

    folder: str  # its name in the embedders folder
    name: str  # the name recorded beside its vectors (the marker's)
    in_use: bool


def _embedders_root() -> Path:
    return paths.data_root() / "embedders"  # data_root: looking creates no folder


def installed_embedders() -> list[InstalledEmbedder]:
    """The complete embedder folders, the one in use marked."""
    root = _embedders_root()
    if not root.is_dir():
        return []
    active = in_use_folder()
    found = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if is_fetched(folder):
            marker = _json_object(folder / MARKER)
            found.append(InstalledEmbedder(folder.name, str(marker.get("name", folder.name)), folder.name == active))
    return found


def in_use_folder() -> str:
    """The folder name of the embedder in use: the one ``use_embedder`` chose while it is still complete, else the
    default's."""
    chosen = _json_object(_embedders_root() / ACTIVE).get("folder")
    if isinstance(chosen, str) and chosen and os.sep not in chosen and chosen not in (".", "..") \
            and is_fetched(_embedders_root() / chosen):
        return chosen
    return DEFAULT_EMBEDDER_NAME


def use_embedder(folder: str) -> InstalledEmbedder:
    """Put the installed embedder ``folder`` (a name from ``installed_embedders``) in use; ``ModelNotFoundError``
    (one line, naming the installed ones) when there is none of that name. Written atomically: a crash leaves the
    earlier choice."""
    installed = {e.folder: e for e in installed_embedders()}
    if folder not in installed:
        names = ", ".join(installed) or "none (`python -m engine docs fetch-embedder`)"
        raise ModelNotFoundError(f"no embedding model {printable(folder)} is installed; installed: {names}")
    path = paths.embedders_dir() / ACTIVE
    part = path.with_suffix(".part")
    part.write_text(json.dumps({"folder": folder}), encoding="utf-8")
    os.replace(part, path)
    return replace(installed[folder], in_use=True)


def default_embedder(config: EmbedConfig = EmbedConfig()) -> TransformersEmbedder | None:
    """The embedding model in use if one was fetched, else None (retrieval then uses keywords alone)."""
    folder = _embedders_root() / in_use_folder()
    if not is_fetched(folder):
        return None
    marker = _json_object(folder / MARKER)
    return TransformersEmbedder(folder, name=str(marker.get("name", folder.name)), config=config)


def embedder_for_search() -> TransformersEmbedder | None:
    """``default_embedder`` without transformers' weights bar (noise between progress lines): the one a search, an
    attachment, the window and ``engine chat --doc`` use. Here, not in engine/cli/, so that nothing below the command
    line reaches up for it."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    return default_embedder()


def _json_object(path: Path) -> dict:
    """``path``'s JSON object, or {} when it is missing, unreadable or not an object (a config we only read hints
    from: a bad one costs the hint, never the load)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
