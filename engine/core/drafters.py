"""The worker's drafter for speculative decoding (``engine.speculate``), kept between replies: ``DrafterCache``.

A drafter can be costly to build (a draft model's load, the loaded model's int4 copy for self-speculation), so the
worker builds the one the window asks for once per loaded model and hands it to every conversation's session
(``ChatSession.set_speculation``): a drafter re-syncs to whatever history it is given, and one reply runs at a time.
Only one is kept: another method, another model or speculation switched off drops it and the memory it holds.

Owns the keeping, not the drafting (``engine.speculate.drafters``) nor which method the user chose
(``app.window.speculation``). Used on the worker thread only.
"""

from __future__ import annotations

from typing import Any

from engine.errors import BadInputError
from engine.inputs import SpeculationConfig
from engine.remote import RemoteModel


class DrafterCache:
    """The one drafter built for (the loaded model, a ``SpeculationConfig``)."""

    def __init__(self) -> None:
        self._loaded: Any = None  # held, so that another model can never be taken for it
        self._spec: SpeculationConfig | None = None
        self._drafter: Any = None

    def get(self, loaded: Any, spec: SpeculationConfig | None) -> Any:
        """The drafter ``spec`` names for ``loaded`` (built now if it is not the kept one); None for no speculation.
        Raises ``engine.speculate.drafters.DraftModelError`` (one line) for a draft that cannot serve this model."""
        if spec is None:
            self.clear()
            return None
        if self._loaded is not loaded or self._spec != spec:
            from engine.speculate.drafters import build_drafter  # lazy: it imports torch, the window need not

            self.clear()  # the old drafter's memory goes before the new one's is taken
            self._drafter = build_drafter(loaded, spec)
            self._loaded, self._spec = loaded, spec
        return self._drafter

    def prepare(self, loaded: Any, spec: SpeculationConfig) -> SpeculationConfig:
        """Build ``spec``'s drafter for ``loaded`` now (see ``get``) and return ``spec``; a server's model is refused:
        its tokens are chosen on the server, where no drafter here can reach."""
        if isinstance(loaded, RemoteModel):
            raise BadInputError("speculative decoding needs a model loaded on this computer, not a server's")
        self.get(loaded, spec)
        return spec

    def clear(self) -> None:
        self._loaded, self._spec, self._drafter = None, None, None
