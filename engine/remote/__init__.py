"""Remote engines: a model served by any OpenAI-compatible server (vLLM, llama.cpp's ``llama-server``, Ollama's
``/v1``, LM Studio, ``python -m engine serve``) behind the same interface as a local model.

- ``spec``: ``RemoteSpec`` (base URL, model name, optional API key, kept out of every repr and message) and
  ``RemoteError``;
- ``client``: ``list_models``, ``connect(spec)`` -> ``RemoteModel`` (the remote counterpart of ``load_model``,
  with ``RemoteFacts``), and every failure as one line (``describe``); the ``openai`` package, imported lazily;
- ``session``: ``RemoteSession.generate(messages, config, cancel)``, the events of ``ChatSession.generate``
  measured on this client from the stream;
- ``server_metrics``: the server's own ``/metrics`` (KV-cache usage, its TTFT and inter-token histograms).

Nothing here imports torch or Qt, and importing this package costs no network and no ``openai`` import: the
window builds a ``RemoteSpec`` on its GUI thread and its worker connects. docs/SCALE-OUT.md is the user's guide.
"""

from engine.remote.client import RemoteFacts, RemoteModel, ServedModel, connect, list_models
from engine.remote.server_metrics import ServerFigures, parse_metrics, read_server_metrics
from engine.remote.session import RemoteSession
from engine.remote.spec import RemoteError, RemoteSpec

__all__ = ["RemoteError", "RemoteFacts", "RemoteModel", "RemoteSession", "RemoteSpec", "ServedModel", "ServerFigures",
           "connect", "list_models", "parse_metrics", "read_server_metrics"]
