"""Conversation history on disk: the SQLite store (``store``), salvage of a damaged file (``repair``) and exports
(``export``). Imports no Qt widgets and no torch.
"""
