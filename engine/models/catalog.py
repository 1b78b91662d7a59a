"""Which models this machine already has: the list the GUI's model picker offers.

Owns discovery only: the default model (if fetched, and the GGUF kept beside it), other model folders in
Miaohui's models directory, and models in the local Hugging Face hub cache (``huggingface_hub.scan_cache_dir``;
a missing or unreadable cache is simply empty). Reads directory listings and file names, never
weights, and never the network. Recent files are kept by the GUI (QSettings); ``choice_for_path``
turns one into a ``ModelChoice``. Loading is ``engine.models.loader``'s job.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from huggingface_hub import scan_cache_dir

from engine import paths
from engine.fmt import format_bytes
from engine.models.fetch import default_gguf, find_default_model
from engine.models.loader import hf_cache_dir


@dataclass(frozen=True)
class ModelChoice:
    """One entry of the model picker; ``LoadSpec(model=choice.spec_model)`` loads it."""

    label: str  # what the user sees
    spec_model: str  # "default", a folder, a .gguf path or a repo id
    kind: str  # "default" | "local" (folder in the models dir) | "hf-cache" | "recent"


def _size_label(num_bytes: int) -> str:
    return format_bytes(num_bytes)  # MiB, as every size the window shows (the Models window, the panel)


def _weights_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.glob("*.safetensors") if p.is_file())


def _is_model_folder(folder: Path) -> bool:
    return (folder / "config.json").is_file() and any(folder.glob("*.safetensors"))


def _default_and_local() -> list[ModelChoice]:
    choices: list[ModelChoice] = []
    default = find_default_model()
    if default is not None:
        choices.append(ModelChoice(f"{paths.DEFAULT_MODEL_NAME} (default, {_size_label(_weights_size(default))})",
                                   "default", "default"))
        gguf = default_gguf(default)  # the same model's own 4-bit file: `auto` runs it as int4
        if gguf is not None:
            choices.append(ModelChoice(f"{gguf.name} (default, 4-bit, {_size_label(gguf.stat().st_size)})",
                                       str(gguf), "local"))
    for folder in sorted(p for p in paths.models_dir().iterdir() if p.is_dir()):
        if folder.name.startswith(".") or folder == default:
            continue  # hidden folders are fetches in progress
        if _is_model_folder(folder):
            choices.append(ModelChoice(f"{folder.name} ({_size_label(_weights_size(folder))})", str(folder), "local"))
        for gguf in sorted(folder.glob("*.gguf")):
            choices.append(ModelChoice(f"{gguf.name} ({_size_label(gguf.stat().st_size)})", str(gguf), "local"))
    return choices


def _hf_cache(cache_dir: Path | None) -> list[ModelChoice]:
    cache = cache_dir or hf_cache_dir()
    if not cache.is_dir():
        return []
    try:
        info = scan_cache_dir(cache)
    except Exception:  # noqa: BLE001  (a broken cache must not break the model picker)
        return []
    choices: list[ModelChoice] = []
    for repo in sorted(info.repos, key=lambda r: r.repo_id.lower()):
        if repo.repo_type != "model" or not repo.revisions:
            continue
        revision = max(repo.revisions, key=lambda r: r.last_modified)
        names = {f.file_name for f in revision.files}
        if "config.json" in names and any(n.endswith(".safetensors") for n in names):
            choices.append(ModelChoice(f"{repo.repo_id} (Hugging Face cache, {_size_label(revision.size_on_disk)})",
                                       repo.repo_id, "hf-cache"))
        for f in sorted(revision.files, key=lambda f: f.file_name):
            if f.file_name.endswith(".gguf"):
                choices.append(ModelChoice(f"{repo.repo_id}: {f.file_name} (Hugging Face cache)", str(f.file_path),
                                           "hf-cache"))
    return choices


def list_local_models(cache_dir: Path | None = None) -> list[ModelChoice]:
    """Default model first, then folders in the models dir, then the Hugging Face cache."""
    return _default_and_local() + _hf_cache(cache_dir)


def choice_for_path(path: str) -> ModelChoice:
    """A recently opened folder or .gguf file, labelled by its name."""
    name = Path(path).name or path
    return ModelChoice(f"{name} (recent)", path, "recent")
