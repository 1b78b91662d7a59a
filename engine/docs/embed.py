"""Sentence embeddings from a model folder, run with transformers: mean pooling over the real tokens, L2-normalized.

Owns: the ``Embedder`` contract (texts → (n, dim) float32 unit vectors, with a model name the store records) and
``TransformersEmbedder``, the one implementation; ``default_embedder`` finds the default one if it was fetched
(embed_fetch.py). Does not own fetching, storing or ranking.

Why not sentence-transformers: it adds a library for what is ten lines here (all-MiniLM-L6-v2's own pooling config
says mean pooling, and its training normalizes), and the engine already runs transformers. The pooling divides by the
count of real tokens per row, so padding in a batch changes no vector (the test holds it).

The default model is all-MiniLM-L6-v2 (English; 384 dimensions, 256-token window, 90 MB), the one real embedding
model found installable from the package index. It does not understand Chinese: its vocabulary holds CJK characters
one by one, so Chinese vectors are weak and Chinese questions rely on the keyword index (segmented, keywords.py).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Sequence

import numpy as np

from engine import paths
from engine.errors import CorruptModelError, ModelNotFoundError, printable
from engine.fmt import one_line

DEFAULT_EMBEDDER_NAME = "all-MiniLM-L6-v2"
MARKER = "miaohui-embedder.json"  # written last by embed_fetch: its presence means the folder is complete


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
    max_tokens: int = 256  # all-MiniLM-L6-v2's window (sentence_bert_config.json); longer text is truncated
    threads: int | None = None  # torch threads while embedding; None leaves torch's setting


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
        self._config = config
        self._lock = threading.Lock()  # one forward at a time: the window's indexer and a search may share it
        self.name = name or folder.name
        self.dim = int(self._model.config.hidden_size)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        torch = self._torch
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        with self._lock, torch.inference_mode():
            for start in range(0, len(texts), self._config.batch_size):
                batch = list(texts[start:start + self._config.batch_size])
                encoded = self._tokenizer(batch, padding=True, truncation=True, max_length=self._config.max_tokens,
                                          return_tensors="pt")
                hidden = self._model(**encoded).last_hidden_state  # (batch, seq, dim)
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


def default_embedder(config: EmbedConfig = EmbedConfig()) -> TransformersEmbedder | None:
    """The default embedding model if it was fetched, else None (retrieval then uses keywords alone)."""
    folder = paths.data_root() / "embedders" / DEFAULT_EMBEDDER_NAME  # data_root: looking creates no folder
    if not is_fetched(folder):
        return None
    marker = json.loads((folder / MARKER).read_text(encoding="utf-8"))
    return TransformersEmbedder(folder, name=str(marker.get("name", DEFAULT_EMBEDDER_NAME)), config=config)
