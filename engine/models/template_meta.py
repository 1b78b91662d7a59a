"""Does a model ship a chat template? Answered from its files' metadata, before any weight is read.

A model without one cannot chat (``engine.errors.NO_CHAT_TEMPLATE``). Loading a base-model GGUF took
55-78 s before the tokenizer said so; the files answer in milliseconds. The places transformers takes a template
from, and so the ones read here: for a Hugging Face folder, ``tokenizer_config.json``'s ``chat_template`` (a string,
or a list of named templates), ``chat_template.jinja`` and ``additional_chat_templates/*.jinja``; for a GGUF file,
its ``tokenizer.chat_template`` metadata key (transformers builds the tokenizer from the file alone), read with the
header reader (``engine.shapes.gguf_header``), never the tensors. Owns this question only: which source a spec
names is ``engine.models.loader``'s, file safety is ``engine.models.safety``'s.
"""

from __future__ import annotations

from pathlib import Path

from engine.errors import NO_CHAT_TEMPLATE, BadInputError
from engine.shapes.gguf_header import read_file_header
from engine.models import safety

GGUF_TEMPLATE_KEY = "tokenizer.chat_template"
TEMPLATE_FILE = "chat_template.jinja"  # transformers' CHAT_TEMPLATE_FILE and CHAT_TEMPLATE_DIR
TEMPLATE_DIR = "additional_chat_templates"


def _non_empty(value: object) -> bool:
    if isinstance(value, str):
        return bool(value.strip())
    if isinstance(value, list):  # [{"name": ..., "template": ...}, ...]
        return any(isinstance(item, dict) and _non_empty(item.get("template")) for item in value)
    return False


def has_chat_template(folder: Path, gguf_file: str | None = None) -> bool:
    """Whether the model at ``folder`` (or its ``gguf_file``) ships a chat template, from metadata alone.

    Raises ``CorruptModelError`` for a file that cannot be read (the loader would refuse it too).
    """
    folder = Path(folder)
    if gguf_file is not None:
        path = folder / gguf_file
        safety.require_regular_file(path)
        return _non_empty(read_file_header(path).fields.get(GGUF_TEMPLATE_KEY))
    safety.check_no_special_files(folder)  # nothing read below can block (a FIFO named tokenizer_config.json)
    config_path = folder / "tokenizer_config.json"
    if config_path.is_file():
        config = safety.read_json(config_path)
        if isinstance(config, dict) and _non_empty(config.get("chat_template")):
            return True
    if (folder / TEMPLATE_FILE).is_file() and (folder / TEMPLATE_FILE).stat().st_size > 0:
        return True
    extra = folder / TEMPLATE_DIR
    return extra.is_dir() and any(path.is_file() for path in extra.glob("*.jinja"))


def require_chat_template(folder: Path, gguf_file: str | None = None) -> None:
    """``BadInputError(NO_CHAT_TEMPLATE)`` unless the model ships a chat template (see ``has_chat_template``)."""
    if not has_chat_template(folder, gguf_file):
        raise BadInputError(NO_CHAT_TEMPLATE)


__all__ = ["has_chat_template", "require_chat_template"]
