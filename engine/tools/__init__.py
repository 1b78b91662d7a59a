"""Tools a model may call: the call format (``engine.tools.calls``), MCP servers the user configures
(``engine.tools.mcp``: stdio and streamable HTTP on loopback, with the official ``mcp`` SDK) and the loop that lets
a local model call them and read the results (``engine.tools.loop``). Nothing is started or contacted unless the
user named it. Imports nothing heavy here: the SDK loads when a server is connected.
"""
