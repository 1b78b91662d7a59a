"""How the main window's helpers are built and connected: each gets the typed parts it uses, never the window.

``MainWindow`` lays out its widgets, gathers them in a ``Parts`` record and calls ``menu_helpers`` (the helpers with an
entry in the Chat menu, built in the menu's order), ``model_helpers`` (servers, each conversation's model, attached
files, the Thinking switch: built before the window connects its own slots, so that they hear a load first, as
before) and ``chat_helpers`` (those that follow the chat; built after the window has connected its own slots, so
that e.g. the pagers and the draft tint find the bubbles the window just built). A helper reports by its signals;
what it asks of the window (list a conversation, load a model) the window connects to its own slots where it calls
these. Owns the order of construction and the connections between helpers; no layout (the window's,
``app.window.layout``), no slot of the window's own.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtWidgets import QLabel, QMainWindow, QMenu, QProgressBar, QStatusBar

from app.history.store import HistoryStore
from app.runtime import api_serving
from app.runtime.bridge import Bridge
from app.state.settings import Settings
from app.widgets.chat_view import ChatView
from app.widgets.completion_view import CompletionView
from app.widgets.conversation_list import ConversationList
from app.widgets.message_area import MessageArea
from app.widgets.model_bar import ModelBar
from app.widgets.models_label import ModelsLabel
from app.widgets.perf_panel import PerfPanel
from app.widgets.prompt_box import Composer
from app.widgets.thinking_section import ThinkingSwitch
from app.window.attachments import Attachments
from app.window.chatgpt_import import ChatGptImport
from app.window.context_meter import ContextMeter
from app.window.controller import ChatController
from app.window.conversation_model import ModelRestorer
from app.window.docs_choice import CollectionsUi
from app.window.documents_keeping import DocumentsKeeping
from app.window.fork import Forker
from app.window.image_costs import ImageCosts
from app.window.image_turns import ImageTurns
from app.window.kv_keeping import KVKeeping
from app.window.prompt_meter import PromptMeter
from app.window.remote_source import RemoteSource
from app.window.speculation import Speculation
from app.window.tool_turns import ToolTurns
from app.window.versions import Versions


@dataclass(frozen=True)
class Parts:
    """What the window built and hands to its helpers, each with its own type (the window itself only as the
    ``QMainWindow`` that parents dialogs and holds toolbars and actions)."""

    window: QMainWindow
    settings: Settings
    store: HistoryStore
    bridge: Bridge
    controller: ChatController
    chat: ChatView
    composer: Composer
    messages: MessageArea
    perf_panel: PerfPanel
    conversations: ConversationList
    model_bar: ModelBar
    status_bar: QStatusBar
    status_state: QLabel
    load_progress: QProgressBar


@dataclass(frozen=True)
class MenuHelpers:
    """The helpers with an entry in the Chat menu, in the menu's order."""

    collections: CollectionsUi
    api_serving: api_serving.ApiServing
    completion: CompletionView
    chatgpt_import: ChatGptImport
    tool_turns: ToolTurns


@dataclass(frozen=True)
class ModelHelpers:
    """The helpers that hear a load before the window does."""

    remote_source: RemoteSource
    model_restorer: ModelRestorer
    attachments: Attachments
    documents_keeping: DocumentsKeeping
    thinking_switch: ThinkingSwitch


@dataclass(frozen=True)
class ChatHelpers:
    """The helpers that follow the chat once the window's own slots are connected."""

    forker: Forker
    prompt_meter: PromptMeter
    context_meter: ContextMeter
    speculation: Speculation
    versions: Versions
    kv_keeping: KVKeeping
    images: ImageTurns


def menu_helpers(p: Parts, menu: QMenu) -> MenuHelpers:
    """Build the Chat menu's helpers and put their entries in ``menu``, in this order."""
    c, b = p.controller, p.bridge
    # Collections…, the composer's 📚 choice (the forecast is fed it in chat_helpers, once the meter exists)
    collections = CollectionsUi.attach(c, b, p.store, p.composer, menu, p.window)
    # "Serve this model", its port, its status-bar label
    serving = api_serving.ApiServing(p.window, p.settings, b, p.status_bar, p.messages.show_message, menu)
    completion = CompletionView(b, p.store, c.chat_settings, p.perf_panel, p.messages, p.window)  # Complete text…
    completion.add_to(menu)
    p.model_bar.load_requested.connect(completion.on_model_load_requested)  # a base model: offered before it loads
    c.model_ready.connect(completion.on_controller_model_ready)
    completion.saved.connect(lambda: c.conversation_listed.emit(None))  # the list shows the run's conversation
    importer = ChatGptImport(c, p.messages, p.status_bar, p.window)  # Import ChatGPT export…
    importer.add_to(menu)
    tools = ToolTurns(c, b, p.settings, p.chat, p.perf_panel, p.messages, p.status_bar, p.status_state, p.window)
    tools.add_to(menu)  # Tools… (MCP servers, JSON answers); a separator
    return MenuHelpers(collections, serving, completion, importer, tools)


def model_helpers(p: Parts) -> ModelHelpers:
    """Build the helpers that hear a load (and a shown conversation) before the window's own slots."""
    c, b = p.controller, p.bridge
    # servers' models: "Connect to server…", their figures
    remote = RemoteSource(p.settings, b, p.messages, p.perf_panel, p.load_progress, p.status_state, p.window)
    remote.load_requested.connect(c.load)  # a server's model, connected to
    p.model_bar.connect_requested.connect(remote.open_dialog)
    restorer = ModelRestorer(c, p.messages, remote, p.window)  # each conversation's model, recorded and restored
    attachments = Attachments(b, p.composer.chips, p.window)
    p.composer.files_offered.connect(attachments.on_composer_files_offered)
    p.composer.image_pasted.connect(attachments.on_composer_image_pasted)  # a screenshot from the clipboard
    keeping = DocumentsKeeping(c, p.window)  # attached files and sources, saved
    switch = ThinkingSwitch(b, c.chat_settings, p.window)  # for a template taking enable_thinking
    p.status_bar.addPermanentWidget(switch)
    c.model_ready.connect(switch.on_controller_model_ready)
    c.conversation_shown.connect(switch.on_controller_conversation_shown)
    switch.thinking_chosen.connect(lambda on: c.apply_settings(c.chat_settings(), thinking=on))
    # "In memory: …": what the engine core holds, its budget in the tooltip
    ModelsLabel.attach(p.status_bar, b.models_changed, b.model_budget_bytes)
    return ModelHelpers(remote, restorer, attachments, keeping, switch)


def chat_helpers(p: Parts, attachments: Attachments, collections: CollectionsUi) -> ChatHelpers:
    """Build the helpers that follow the chat, and tell the composer's forecast what a send grounds in."""
    c, b = p.controller, p.bridge
    forker = Forker(c, p.chat, p.messages, p.status_bar, p.composer.prompt, p.window)  # "Fork from here"
    image_costs = ImageCosts(c, b, p.window)  # the pictures' image tokens, counted by the vision model's processor
    meter = PromptMeter(c, b, p.composer, p.perf_panel.ttft_view, attachments, image_costs, p.window)  # when typing
    collections.feed(meter, attachments)  # the forecast counts the chosen collections
    context = ContextMeter(c, b, p.perf_panel, image_costs, p.window)  # the bar counts the open conversation's tokens
    # its choice under the model bar, its rows, the tint of drafts
    speculation = Speculation(p.window, c, b, p.settings, p.chat, p.perf_panel, p.messages, p.status_bar)
    versions = Versions(c, p.chat, p.messages, p.perf_panel, p.window)  # Regenerate keeps the replaced reply; pagers
    kv_keeping = KVKeeping(c, b, p.window)  # a conversation switched away from: its KV cache to disk
    p.conversations.conversation_deleted.connect(kv_keeping.on_conversation_deleted)
    # pictures: each reply's by message, the composer's line for a model without vision, the TTFT rows
    images = ImageTurns(c, b, p.composer, attachments, p.perf_panel.ttft_view, p.window)
    return ChatHelpers(forker, meter, context, speculation, versions, kv_keeping, images)
