"""User settings remembered between runs, backed by QSettings (organisation "Miaohui", app "miaohui").

Owns the generation settings a user edits in the settings dialog (``ChatSettings``), the model
selection (model, precision, device), the recently opened models and the window layout. It does
not own history (``app.store``) or any widget. Tests point QSettings at a temporary folder with
``use_ini_folder`` so they never touch the user's real settings.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from PySide6.QtCore import QByteArray, QSettings

ORGANISATION = "Miaohui"
APPLICATION = "miaohui"
MAX_RECENT_MODELS = 8
TOP_CANDIDATES = 5  # per token, for the token inspector; one topk per step, negligible cost


@dataclass(frozen=True)
class ChatSettings:
    """What the settings dialog edits; turned into ``engine.sampling.SamplingConfig`` keyword arguments."""

    system_prompt: str = "You are a helpful assistant."
    # SmolLM2's model card recommends a low temperature; small models ramble when sampled hot.
    temperature: float = 0.2
    top_p: float = 0.9
    top_k: int = 50
    # A mild penalty stops a 135M model from looping on one phrase without bending its wording much.
    repetition_penalty: float = 1.1
    max_new_tokens: int = 512
    seed: int = -1  # -1: a fresh random seed per reply; otherwise replies are reproducible
    use_kv_cache: bool = True  # off recomputes the whole prefix every step: slow, and that is the lesson

    def sampling_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for SamplingConfig (the bridge drops keys the engine does not know)."""
        return {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,
            "repetition_penalty": self.repetition_penalty,
            "max_new_tokens": self.max_new_tokens,
            "seed": None if self.seed < 0 else self.seed,
            "use_kv_cache": self.use_kv_cache,
            "top_logprobs": TOP_CANDIDATES,
        }


def use_ini_folder(folder: Path) -> None:
    """Store settings as INI files under ``folder`` (tests, the self-test, portable runs)."""
    QSettings.setDefaultFormat(QSettings.Format.IniFormat)
    for scope in (QSettings.Scope.UserScope, QSettings.Scope.SystemScope):
        QSettings.setPath(QSettings.Format.IniFormat, scope, str(folder))


def _coerce(value: Any, default: Any) -> Any:
    """QSettings returns strings from INI files; bring each value back to its default's type."""
    if value is None:
        return default
    try:
        if isinstance(default, bool):
            return value if isinstance(value, bool) else str(value).lower() in ("1", "true", "yes")
        if isinstance(default, int):
            return int(value)
        if isinstance(default, float):
            return float(value)
        return str(value)
    except (TypeError, ValueError):
        return default


class Settings:
    """Typed access to the application's QSettings."""

    def __init__(self, qsettings: QSettings | None = None) -> None:
        self._q = qsettings or QSettings(ORGANISATION, APPLICATION)

    # -- generation -----------------------------------------------------------------------------
    def chat(self) -> ChatSettings:
        defaults = ChatSettings()
        values = {f.name: _coerce(self._q.value(f"chat/{f.name}"), getattr(defaults, f.name))
                  for f in fields(ChatSettings)}
        return replace(defaults, **values)

    def set_chat(self, chat: ChatSettings) -> None:
        for key, value in asdict(chat).items():
            self._q.setValue(f"chat/{key}", value)
        self._q.sync()

    # -- model selection ------------------------------------------------------------------------
    def model_choice(self) -> tuple[str, str, str]:
        """(model, precision, device) last loaded; "default"/"auto"/"auto" at first run."""
        return (str(self._q.value("model/model", "default")), str(self._q.value("model/precision", "auto")),
                str(self._q.value("model/device", "auto")))

    def set_model_choice(self, model: str, precision: str, device: str) -> None:
        self._q.setValue("model/model", model)
        self._q.setValue("model/precision", precision)
        self._q.setValue("model/device", device)
        self._q.sync()

    def recent_models(self) -> list[str]:
        value = self._q.value("model/recent", [])
        if isinstance(value, str):  # INI files store a one-element list as a plain string
            value = [value] if value else []
        return [str(v) for v in value]

    def add_recent_model(self, path: str) -> None:
        recent = [path] + [p for p in self.recent_models() if p != path]
        self._q.setValue("model/recent", recent[:MAX_RECENT_MODELS])
        self._q.sync()

    # -- window ---------------------------------------------------------------------------------
    def window_state(self) -> tuple[QByteArray | None, QByteArray | None]:
        geometry = self._q.value("window/geometry")
        state = self._q.value("window/state")
        return (geometry if isinstance(geometry, QByteArray) else None,
                state if isinstance(state, QByteArray) else None)

    def set_window_state(self, geometry: QByteArray, state: QByteArray) -> None:
        self._q.setValue("window/geometry", geometry)
        self._q.setValue("window/state", state)
        self._q.sync()

    def last_conversation(self) -> int | None:
        value = self._q.value("history/last_conversation")
        try:
            return int(value) if value is not None else None
        except (TypeError, ValueError):
            return None

    def set_last_conversation(self, cid: int | None) -> None:
        if cid is None:
            self._q.remove("history/last_conversation")
        else:
            self._q.setValue("history/last_conversation", cid)
        self._q.sync()
