"""CLI sub-command ``python -m engine chat`` (dispatched by ``engine/__main__.py``): one prompt, one reply.

Streams the reply to stdout as it is produced and prints a one-line summary (TTFT, tok/s, KV bytes) to
stderr; with ``--json`` prints one JSON object at the end instead (the benchmark, the lab and outside
checks parse it, so its keys are fixed). With ``--base-url`` the reply comes from an OpenAI-compatible server
(``engine.remote``: vLLM, llama-server, Ollama, ``engine serve``) instead of a model loaded here: the same output
and keys, a figure the server cannot give (KV bytes, prefill time) null, never invented. Sampling uses the
window's defaults with a fixed seed unless ``--seed`` is given (``engine.cli.replies``), so two runs print the same
text; ``--temperature 0`` is greedy. Exit status: 0 done, 2 bad input or a model
that cannot be loaded (one line, no traceback; for a server: a bad URL, one that cannot be reached, a refused
key, an unknown model), 1 when generation itself failed (the error line is printed), 130 on Ctrl-C after printing
what was generated. What a server chose (its model's name, its error texts) is printed through
``engine.fmt.outside_text``: no terminal escape reaches the terminal. A local model without a chat template is
refused from its files' metadata before the weights load (``python -m engine complete`` continues text).
``--speculative prompt-lookup|draft:MODEL|self`` decodes speculatively (``engine.speculate``; the JSON then has
``speculation``, ``acceptance_rate``, ``tokens_per_step`` and the counts). ``--kv int8`` keeps the KV cache in 8
bits (``engine.executor.kv_cache``; the JSON's ``kv_cache_bytes`` are its real bytes, ``model.kv_precision`` says so).
``--doc PATH`` / ``--collection NAME`` / ``--docs-mode`` answer from documents with numbered sources
(``engine.cli.doc_chat``; the JSON then has ``sources``, ``docs_mode``, ``retrieval`` and ``docs_tokens``).
``--image PATH`` (repeatable) asks a vision-language model about images (``engine.cli.image_chat``; the JSON then has
``image_tokens`` per image, ``vision_encoder_s`` and ``images``; a bad image or a text model: one line, status 2).
Owns its own arguments; the flags and output it shares with ``complete`` are ``engine.cli.replies``'.
``engine/__main__.py`` imports every sub-command to build its parser, so the session (which loads torch, ~1.5 s)
is imported in ``_run``: ``--help`` stays instant.
"""

from __future__ import annotations

import argparse
from typing import Any

from engine.cli import MODEL_HELP, SERVED_MODEL_HELP, doc_chat, image_chat, remote_args, replies, tool_chat
from engine.events import Message
from engine.generate.context import check_messages
from engine.errors import BadInputError
from engine.inputs import LoadSpec, SpeculationConfig
from engine.models.loader import load_model


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prompt", required=True, help="the user message")
    parser.add_argument("--system", default=None, help="system prompt")
    parser.add_argument("--model", default="default",
                        help=MODEL_HELP + SERVED_MODEL_HELP)
    remote_args.add_arguments(parser, "answer with")
    replies.add_generation_arguments(parser)
    tool_chat.add_arguments(parser)
    doc_chat.add_arguments(parser)
    image_chat.add_arguments(parser)
    parser.add_argument("--speculative", default=None, metavar="prompt-lookup|draft:MODEL|self",
                        help="speculative decoding: drafts from the conversation's n-grams, a smaller model of the "
                             "same tokenizer, or this model's int4 copy, checked in one forward (greedy: same text)")


def run(args: argparse.Namespace) -> int:
    return replies.run_guarded(_run, args)


def _run(args: argparse.Namespace) -> int:
    config = replies.sampling_config(args)
    messages = ([Message("system", args.system)] if args.system else []) + [Message("user", args.prompt)]
    check_messages(messages)  # bad input fails before the model loads
    tool_chat.check(args)
    doc_chat.check(args)
    images = image_chat.read(args)  # a bad image is one line before any model loads
    if images or image_chat.is_vision_model(args):  # a vision-language model answers (engine.cli.image_chat)
        return image_chat.run(args, messages, images, config)
    speculation = SpeculationConfig.parse(args.speculative) if args.speculative is not None else None
    shown: dict[str, Any] = {}  # the documents' sources for print_reply (engine.cli.doc_chat), when there are any

    if args.base_url is not None:
        from engine.remote import RemoteSession, RemoteSpec, connect  # (the openai client loads on connect)

        if speculation is not None:
            raise BadInputError("--speculative applies to a model loaded here, not to a server (--base-url)")
        if args.kv != "auto":
            raise BadInputError("--kv applies to a model loaded here, not to a server (--base-url)")
        remote = connect(RemoteSpec(args.base_url, args.model, remote_args.key_of(args)))
        session: Any = RemoteSession(remote)
        facts: Any = remote.facts
    else:
        loaded = load_model(LoadSpec(model=args.model, precision=args.precision, device=args.device,
                                     allow_remote_code=args.allow_remote_code, kv_precision=args.kv), chat=True)
        # Torch loads here, after the load: a model refused from its files is refused before torch is imported.
        from engine.generate.session import ChatSession
        session, facts = ChatSession(loaded, speculation=speculation), replies.reply_facts(loaded, config)
        if doc_chat.wanted(args):  # the question with numbered sources from the documents (engine.cli.doc_chat)
            grounded = doc_chat.ground_prompt(args, loaded, config.max_new_tokens)
            messages = grounded.messages
            shown = {"extra": grounded.json_fields()} if args.json else {"after": grounded.text_after()}
        if args.mcp:  # the model may call the tools of the MCP servers the user named (engine.cli.tool_chat)
            return tool_chat.run(session, messages, config, args,
                                 lambda start: replies.print_reply(start, facts, args.json, **shown))
        if args.json:  # the decode's roofline beside the metrics
            return replies.print_reply(lambda cancel: session.generate(messages, config, cancel), facts, True,
                                       replies.local_roofline(loaded), **shown)
    return replies.print_reply(lambda cancel: session.generate(messages, config, cancel), facts, args.json,
                               **shown)
