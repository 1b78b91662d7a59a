"""User settings remembered between runs, backed by QSettings (organisation "Miaohui", app "miaohui").

Owns the generation settings a user edits in the settings dialog (``ChatSettings``), the interface language and
appearance (light / dark / the system's), whether the note on the tiny default model was closed, the model selection
(model, precision, device; or the server last connected to; its API key only when there is no system keyring and the
user ticked "Remember the key (stored unencrypted…)", ``app.state.api_keys``), the recently opened models, whether, on
which port and how many requests at once the window serves its model, speculative decoding's drafter and draft tint
(``app.window.speculation``), and the window layout. It does not own history (``app.history.store``) or any widget.

Every value read back is checked (type, range, finite) before anyone sees it: a settings file is user
data that an older build, a hand edit or a crash mid-write can leave in any state (``@Invalid()``, a
list where a string belongs, NaN, a seed past 2^31), and one bad value must not stop the app from
starting or make every reply fail. An unusable value reads as its default, with one logged warning.

Scripted runs and tests use ``Settings.in_file`` (an INI file of their own), never the user's store.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from PySide6.QtCore import QByteArray, QSettings

from app.ui.i18n import LANGUAGES
from app.ui.theme import APPEARANCES
from engine.errors import BadInputError
from engine.inputs import (DEVICES, KV_PRECISIONS, PRECISIONS, SAMPLING_RANGES, LoadSpec, SamplingConfig,
                           SpeculationConfig)
from engine.remote.spec import RemoteSpec

log = logging.getLogger(__name__)

ORGANISATION = "Miaohui"
APPLICATION = "miaohui"
MAX_RECENT_MODELS = 8
TOP_CANDIDATES = 5  # per token, for the token inspector; one topk per step, negligible cost
SERVE_PORT = 8000  # the window's API server: engine serve's default port, so clients' settings carry over
SERVE_PARALLEL = 4  # requests it decodes together: engine serve's --parallel default (engine.serve.batching)
MAX_SERVE_PARALLEL = 16
# Inclusive bounds of each numeric ChatSettings field: engine.inputs' (the settings dialog's spin boxes use the
# same ones, since a stored value outside them could not be shown), each inside what SamplingConfig accepts.
RANGES = SAMPLING_RANGES
_DEFAULTS = SamplingConfig()  # THE sampling defaults (engine/inputs.py says why they are low)
_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no")
PER_CONVERSATION = ("tools", "tool_choice", "json_schema")
TOOL_CHOICES = ("auto", "required")
MAX_MCP_SERVERS = 16


@dataclass(frozen=True)
class ChatSettings:
    """What the settings dialog edits: a conversation's system prompt and its ``sampling_config()``."""

    system_prompt: str = "You are a helpful assistant."
    temperature: float = _DEFAULTS.temperature
    top_p: float = _DEFAULTS.top_p
    top_k: int = _DEFAULTS.top_k
    repetition_penalty: float = _DEFAULTS.repetition_penalty
    max_new_tokens: int = _DEFAULTS.max_new_tokens
    seed: int = -1  # -1: a fresh random seed per reply; otherwise replies are reproducible
    use_kv_cache: bool = _DEFAULTS.use_kv_cache  # off recomputes the whole prefix every step: slow, the lesson
    thinking: bool = True  # a reasoning model whose template takes enable_thinking thinks first (its default)
    # This conversation's own (``PER_CONVERSATION``: never a default for new ones, never in QSettings): the MCP tools
    # the user enabled for it (by name), whether its first reply must call one, and "answer as JSON matching this
    # schema" (the schema's text; "" off).
    tools: tuple[str, ...] = ()
    tool_choice: str = "auto"  # auto | required
    json_schema: str = ""

    def stored(self) -> dict[str, Any]:
        """These settings as a conversation's history row keeps them (the system prompt has its own column);
        ``chat_from_stored`` reads them back."""
        stored = asdict(self)
        del stored["system_prompt"]
        stored["tools"] = list(self.tools)  # the row is JSON: what it holds reads back as a list, so store one
        return stored

    def sampling_config(self) -> SamplingConfig:
        """The engine's sampling settings for a reply; raises ``BadInputError`` (one line) on a value it refuses."""
        return SamplingConfig(temperature=self.temperature, top_p=self.top_p, top_k=self.top_k,
                              repetition_penalty=self.repetition_penalty, max_new_tokens=self.max_new_tokens,
                              seed=None if self.seed < 0 else self.seed, use_kv_cache=self.use_kv_cache,
                              top_logprobs=TOP_CANDIDATES)


def use_ini_folder(folder: Path) -> None:
    """Store settings made by ``QSettings()`` (no names given) as INI files under ``folder`` (tests).

    It does not move ``Settings()``'s store: ``QSettings(organisation, application)`` always uses the
    native format (on Linux ``~/.config/Miaohui/miaohui.conf``). Use ``Settings.in_file`` for that.
    """
    QSettings.setDefaultFormat(QSettings.Format.IniFormat)
    for scope in (QSettings.Scope.UserScope, QSettings.Scope.SystemScope):
        QSettings.setPath(QSettings.Format.IniFormat, scope, str(folder))


class _Unusable(Exception):
    """A stored value that cannot be read as its setting; the caller falls back to the default."""


def _parse(value: Any, default: Any, bounds: tuple[float, float] | None = None) -> Any:
    """``value`` as read from QSettings (INI files give strings), as ``default``'s type; else ``_Unusable``."""
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        word = value.strip().lower() if isinstance(value, str) else None
        if word in _TRUE or word in _FALSE:
            return word in _TRUE
        raise _Unusable
    if isinstance(default, (int, float)):
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise _Unusable
        if isinstance(default, int) and isinstance(value, float) and not value.is_integer():
            raise _Unusable
        try:  # int("1.5") fails on purpose: a whole-number setting holding a fraction was not written by us
            number = int(value) if isinstance(default, int) else float(value)
        except (ValueError, OverflowError):  # also NaN, inf and int() of a 5000-digit string
            raise _Unusable from None
        if not math.isfinite(number) or (bounds is not None and not bounds[0] <= number <= bounds[1]):
            raise _Unusable
        return number
    if isinstance(value, str):
        return value
    raise _Unusable


def chat_from_stored(system_prompt: Any, stored: Any, defaults: ChatSettings) -> ChatSettings:
    """A conversation's own settings as saved in its history row, each value checked like a QSettings
    value; a missing or unusable one (an older row, a damaged file) takes its value from ``defaults``."""
    values: dict[str, Any] = {}
    stored = stored if isinstance(stored, dict) else {}
    tools = stored.get("tools")
    if isinstance(tools, list) and all(isinstance(name, str) for name in tools):
        values["tools"] = tuple(dict.fromkeys(tools))
    for f in fields(ChatSettings):
        default = getattr(defaults, f.name)
        raw = system_prompt if f.name == "system_prompt" else stored.get(f.name)
        if raw is None or f.name == "tools":
            continue
        try:
            values[f.name] = _parse(raw, default, RANGES.get(f.name))
        except _Unusable:
            log.warning("conversation setting %s=%r is unusable; using %r", f.name, raw, default)
    if values.get("tool_choice", "auto") not in TOOL_CHOICES:
        values["tool_choice"] = "auto"
    return replace(defaults, **values)


def with_conversation_fields(chosen: ChatSettings, current: ChatSettings) -> ChatSettings:
    """``chosen`` (the settings dialog's values, or the defaults) keeping ``current``'s ``PER_CONVERSATION`` fields:
    the dialog edits what new conversations start from, never the open one's tools or schema."""
    return replace(chosen, **{name: getattr(current, name) for name in PER_CONVERSATION})


class Settings:
    """Typed access to the application's QSettings; every getter returns a valid value."""

    def __init__(self, qsettings: QSettings | None = None) -> None:
        self._q = qsettings or QSettings(ORGANISATION, APPLICATION)
        self._warned: set[str] = set()  # keys already reported: chat() runs on every send

    @classmethod
    def in_file(cls, path: Path) -> Settings:
        """Settings kept in the INI file ``path`` (created on the first write), apart from the user's."""
        return cls(QSettings(str(path), QSettings.Format.IniFormat))

    def _read(self, key: str, default: Any, bounds: tuple[float, float] | None = None) -> Any:
        value = self._q.value(key)
        if value is None:  # never written, or written as @Invalid()
            return default
        try:
            return _parse(value, default, bounds)
        except _Unusable:
            self._warn(key, value, default)
            return default

    def _warn(self, key: str, value: Any, default: Any) -> None:
        if key not in self._warned:
            self._warned.add(key)
            shown = repr(value)
            log.warning("setting %s in %s is unusable (%s); using %r", key, self._q.fileName(),
                        shown if len(shown) <= 80 else shown[:77] + "...", default)

    # -- generation -----------------------------------------------------------------------------
    def chat(self) -> ChatSettings:
        defaults = ChatSettings()
        values = {f.name: self._read(f"chat/{f.name}", getattr(defaults, f.name), RANGES.get(f.name))
                  for f in fields(ChatSettings) if f.name not in PER_CONVERSATION}
        return replace(defaults, **values)

    def set_chat(self, chat: ChatSettings) -> None:
        for key, value in asdict(chat).items():
            if key not in PER_CONVERSATION:
                self._q.setValue(f"chat/{key}", value)
        self._q.sync()

    # -- MCP servers (app.widgets.tools_dialog): nothing is started until one is added and a tool enabled ---------
    def mcp_servers(self) -> list[str]:
        """The MCP servers the user added ("stdio:COMMAND ARGS" or a loopback http URL), in order, each once."""
        try:
            value = json.loads(str(self._q.value("tools/mcp_servers", "[]")))
        except ValueError:
            value = None
        if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() and "\0" not in v for v in value):
            if value is not None and value != []:
                self._warn("tools/mcp_servers", value, [])
            return []
        return list(dict.fromkeys(value))[:MAX_MCP_SERVERS]

    def set_mcp_servers(self, servers: list[str]) -> None:
        self._q.setValue("tools/mcp_servers", json.dumps(list(dict.fromkeys(servers))[:MAX_MCP_SERVERS]))
        self._q.sync()

    # -- model selection ------------------------------------------------------------------------
    def model_choice(self) -> tuple[str, str, str]:
        """(model, precision, device) last loaded; "default"/"auto"/"auto" at first run."""
        model = self._read("model/model", "default")
        if not model.strip() or "\0" in model:
            self._warn("model/model", model, "default")
            model = "default"
        precision = self._read("model/precision", "auto")
        if precision not in PRECISIONS:
            self._warn("model/precision", precision, "auto")
            precision = "auto"
        device = self._read("model/device", "auto")
        if device not in DEVICES:
            self._warn("model/device", device, "auto")
            device = "auto"
        return model, precision, device

    def set_model_choice(self, model: str, precision: str, device: str) -> None:
        self._q.setValue("model/model", model)
        self._q.setValue("model/precision", precision)
        self._q.setValue("model/device", device)
        self._q.sync()

    def kv_precision(self) -> str:
        """The KV cache's precision the next load asks for (``engine.inputs.KV_PRECISIONS``); "auto" at first run."""
        value = self._read("model/kv_precision", "auto")
        if value not in KV_PRECISIONS:
            self._warn("model/kv_precision", value, "auto")
            return "auto"
        return value

    def set_kv_precision(self, value: str) -> None:
        self._q.setValue("model/kv_precision", value if value in KV_PRECISIONS else "auto")
        self._q.sync()

    def remember_load(self, spec: LoadSpec | RemoteSpec) -> None:
        """Remember what the user loads: a local model's choice, or a server's base URL and model name — never
        its API key here (``app.state.api_keys`` keeps it in the system keyring, or where the user asked)."""
        if isinstance(spec, RemoteSpec):
            self._q.setValue("remote/base_url", spec.base_url)
            self._q.setValue("remote/model", spec.model)
            self._q.sync()
        else:
            self.set_model_choice(spec.model, spec.precision, spec.device)

    def remote_choice(self) -> tuple[str, str]:
        """(base URL, model name) of the server last connected to; ("", "") before the first."""
        url, model = (self._read(key, "") for key in ("remote/base_url", "remote/model"))
        return (url, model) if "\0" not in url + model else ("", "")

    def remembered_api_key(self, base_url: str) -> str | None:
        """The API key the user asked to keep in this file, unencrypted, for ``base_url`` (``app.state.api_keys``:
        only when there is no system keyring); None when there is none."""
        key = self._remembered_api_keys().get(base_url)
        return key if isinstance(key, str) and key and "\0" not in key else None

    def set_remembered_api_key(self, base_url: str, key: str | None) -> None:
        """Keep ``key`` for ``base_url`` in this file (None: remove it)."""
        keys = self._remembered_api_keys()
        if key is None and base_url not in keys:
            return
        if key is None:
            del keys[base_url]
        else:
            keys[base_url] = key
        if keys:
            self._q.setValue("remote/api_keys", json.dumps(keys))
        else:
            self._q.remove("remote/api_keys")
        self._q.sync()

    def _remembered_api_keys(self) -> dict[str, Any]:
        try:
            keys = json.loads(str(self._q.value("remote/api_keys", "{}")))
        except ValueError:
            return {}
        return keys if isinstance(keys, dict) else {}

    def recent_models(self) -> list[str]:
        """Model paths opened lately, newest first: strings only, each once, at most MAX_RECENT_MODELS."""
        value = self._q.value("model/recent")
        if value is None:
            return []
        if isinstance(value, str):  # INI files store a one-element list as a plain string
            value = [value] if value else []
        if not isinstance(value, (list, tuple)):
            self._warn("model/recent", value, [])
            return []
        kept = [v for v in value if isinstance(v, str) and v.strip() and "\0" not in v]
        if len(kept) != len(value):
            self._warn("model/recent", value, kept)
        return list(dict.fromkeys(kept))[:MAX_RECENT_MODELS]

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
        if value is None:
            return None
        try:
            return _parse(value, 0, (1, 2**63 - 1))  # a SQLite rowid
        except _Unusable:
            self._warn("history/last_conversation", value, None)
            return None

    def set_last_conversation(self, cid: int | None) -> None:
        if cid is None:
            self._q.remove("history/last_conversation")
        else:
            self._q.setValue("history/last_conversation", cid)
        self._q.sync()

    def start_with_switches_off(self) -> None:
        """A window starts: serving the model and downloads go off, whatever the last run left them at. A server and
        network access are turned on by the user in this run, never by themselves at a start (issue 41)."""
        self.set_serve_enabled(False)
        self.set_allow_downloads(False)

    # -- model library ----------------------------------------------------------------------------
    def allow_downloads(self) -> bool:
        """Whether the Models window may reach Hugging Face; off unless the user turned it on in this run."""
        return self._read("library/allow_downloads", False)

    def set_allow_downloads(self, allowed: bool) -> None:
        self._q.setValue("library/allow_downloads", bool(allowed))
        self._q.sync()

    # -- speculative decoding (app.window.speculation) ---------------------------------------------------
    def speculation(self) -> str:
        """Who drafts for replies: "off", or ``SpeculationConfig.parse``'s text (prompt-lookup, self, draft:MODEL)."""
        value = self._read("speculation/method", "off")
        if value != "off":
            try:
                SpeculationConfig.parse(value)
            except BadInputError:
                self._warn("speculation/method", value, "off")
                return "off"
        return value

    def set_speculation(self, value: str) -> None:
        if value != "off":
            SpeculationConfig.parse(value)  # BadInputError (one line) for a value no reply could use
        self._q.setValue("speculation/method", value)
        self._q.sync()

    def tint_drafts(self) -> bool:
        """Whether a streaming reply tints the tokens that were accepted drafts (on unless turned off)."""
        return self._read("speculation/tint", True)

    def set_tint_drafts(self, on: bool) -> None:
        self._q.setValue("speculation/tint", bool(on))
        self._q.sync()

    # -- serving the window's model (app.runtime.api_serving) ---------------------------------------------
    def serve_enabled(self) -> bool:
        """Whether the window serves its model over the OpenAI API; off unless the user turned it on in this run
        (``start_with_switches_off``)."""
        return self._read("serve/enabled", False)

    def set_serve_enabled(self, enabled: bool) -> None:
        self._q.setValue("serve/enabled", bool(enabled))
        self._q.sync()

    def serve_port(self) -> int:
        """The TCP port of the window's API server on 127.0.0.1 (8000, as ``engine serve``; 0: any free one)."""
        return self._read("serve/port", SERVE_PORT, (0, 65535))

    def set_serve_port(self, port: int) -> None:
        if not 0 <= port <= 65535:
            raise ValueError(f"the port must be between 0 and 65535, not {port}")
        self._q.setValue("serve/port", int(port))
        self._q.sync()

    def serve_parallel(self) -> int:
        """How many API requests the window decodes together (4, as ``engine serve``; 1: one at a time)."""
        return self._read("serve/parallel", SERVE_PARALLEL, (1, MAX_SERVE_PARALLEL))

    def set_serve_parallel(self, n: int) -> None:
        if not 1 <= n <= MAX_SERVE_PARALLEL:
            raise ValueError(f"parallel requests must be between 1 and {MAX_SERVE_PARALLEL}, not {n}")
        self._q.setValue("serve/parallel", int(n))
        self._q.sync()

    # -- interface (the note on the tiny default model, app.window.first_run: shown until the user closes it) ---
    def default_model_note_dismissed(self) -> bool:
        return self._read("ui/default_model_note_dismissed", False)

    def set_default_model_note_dismissed(self, dismissed: bool) -> None:
        self._q.setValue("ui/default_model_note_dismissed", bool(dismissed))
        self._q.sync()

    def language(self) -> str:
        """The interface language: "system" (follow the system's; the default), "en" or "zh_CN" (``app.ui.i18n``)."""
        language = self._read("ui/language", "system")
        if language not in LANGUAGES:
            self._warn("ui/language", language, "system")
            return "system"
        return language

    def appearance(self) -> str:
        """Light or dark: "system" (follow the system's colour scheme, live; the default), "light" or "dark"."""
        appearance = self._read("ui/appearance", "system")
        if appearance not in APPEARANCES:
            self._warn("ui/appearance", appearance, "system")
            return "system"
        return appearance

    def set_appearance(self, appearance: str) -> None:
        if appearance not in APPEARANCES:
            raise ValueError(f"appearance must be one of {', '.join(APPEARANCES)}, not {appearance!r}")
        self._q.setValue("ui/appearance", appearance)

    def set_language(self, language: str) -> None:
        if language not in LANGUAGES:
            raise ValueError(f"language must be one of {', '.join(LANGUAGES)}, not {language!r}")
        self._q.setValue("ui/language", language)
        self._q.sync()
