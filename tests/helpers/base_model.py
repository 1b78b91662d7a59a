"""The tiny model as a base model ships: the same weights and tokenizer with no chat template anywhere.

``without_chat_template(source, dest)`` copies a Hugging Face folder and removes every place transformers takes a
template from (``chat_template.jinja``, ``additional_chat_templates/``, ``tokenizer_config.json``'s
``chat_template``), as a base model's folder is (tests of text completion and of the early chat refusal).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path


def without_chat_template(source: Path, dest: Path) -> Path:
    shutil.copytree(source, dest)
    (dest / "chat_template.jinja").unlink(missing_ok=True)
    shutil.rmtree(dest / "additional_chat_templates", ignore_errors=True)
    config_path = dest / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config.pop("chat_template", None)
    config_path.write_text(json.dumps(config), encoding="utf-8")
    return dest
