"""Conversation history on disk: the SQLite store (``store``) over its schema (``schema``), rows (``rows``) and
performance records (``perf``); the startup check and salvage of a damaged file (``recovery``, with the
schema-agnostic ``repair``); and exports (``export``). Imports no Qt widgets and no torch.
"""
