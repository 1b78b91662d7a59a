"""Why a model runs on the plain runner rather than the fast path: ``RefusalKind`` and ``Refusal``.

Owns only these two types, in a module that imports no torch, so callers that name a refusal before any weight loads
(engine/vision/vlm.py's family table, which ``engine chat`` reads before it decides to import torch) need not import
the fast path. Which refusal a model gets is ``engine.executor.families``' decision.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class RefusalKind(enum.Enum):
    """Why a model runs on the plain runner, as a category a caller can branch on."""

    FAMILY = "family"  # a model_type the fast step does not know (yet)
    FEATURE = "feature"  # a known family with a config switch the step lacks (sliding windows, activation, RoPE)
    LAYOUT = "layout"  # modules not where or what the family puts them (custom or bitsandbytes layers)
    PLACEMENT = "placement"  # parameters split across devices, on meta, or in mixed dtypes
    DISABLED = "disabled"  # MIAOHUI_FASTPATH=0 in the environment
    FAILED = "failed"  # the model qualified but the fast runner could not be built


@dataclass(frozen=True)
class Refusal:
    """Why the fast path does not run a model: ``kind`` to branch on, ``detail`` to show (also ``str()``)."""

    kind: RefusalKind
    detail: str

    def __str__(self) -> str:
        return self.detail
