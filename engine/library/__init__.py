"""The model library: find models on the Hugging Face Hub, say before a download whether one fits, download
it resumably and verified, and list or delete the models this machine has.

- ``access``: the downloads switch (off by default) and the Hub endpoint; nothing here touches the network
  unless the caller passed ``allow_downloads=True``.
- ``fit``: parameters, weights bytes per precision, KV-cache bytes and a fits / tight / will-not-fit verdict,
  from ``config.json`` or a GGUF header alone (``engine.shapes.gguf_header`` parses the latter from its first bytes).
- ``hub``: search, a model's page, which files a download needs, the remote config or GGUF header for ``fit``.
- ``download``: the download itself into the data dir's ``models/`` folder.
- ``installed``: the models in that folder, paused downloads, and deleting either.

Plain Python over huggingface_hub's client: no torch, no Qt. Loading a model stays ``engine.models.loader``'s job,
the model picker's list stays ``engine.models.catalog``'s; the command line is ``engine/cli/models.py``.
"""
