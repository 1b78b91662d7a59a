"""Your own documents in the conversation (issue 43), the engine's side: read files, cut them into passages, keep them
in a store with keyword and vector indexes, and retrieve the passages a question needs.

Modules: ``text`` (bytes → text, HTML → text), ``readers`` (a file → pages; every bad input a one-line
``DocumentError``), ``chunking`` (pages → passages on structure), ``store`` (SQLite: collections, FTS5, vectors),
``embed`` and ``embed_fetch`` (the embedding model and putting the default one in place), ``index`` (walking folders
into the store), ``retrieve`` (keyword + dense, fused). The CLI is ``engine/cli/docs.py``. Imports no Qt; the window's
attach UI is not built yet (docs/DOCUMENTS.md says what is).
"""
