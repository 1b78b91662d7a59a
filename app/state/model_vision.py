"""Whether the loaded model sees pictures (issue 44): ``sees_images``, asked of its ``ModelFacts`` by the composer's
note (``app.window.image_turns``), the image-token counts (``app.window.image_costs``) and the Lab tab (which runs
"What an image costs" on such a model only). One answer in one place; reads config.json, never loads a model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.vision.vlm import vision_family


def sees_images(facts: Any) -> bool:
    """Whether the loaded model (its ``ModelFacts``) is a vision-language one: its folder's config names a vision
    family, or (a model fetched by name) its class is one of theirs. A server's model: False (its pictures are not
    counted nor timed here)."""
    if facts is None or getattr(facts, "remote", False):
        return False
    source = getattr(facts, "source", "")
    if source and Path(source).is_dir():
        return vision_family(Path(source)) is not None
    return str(getattr(facts, "architecture", "")).endswith("ForConditionalGeneration")
