"""A conversation with images: ``VisionChat(vision_model).generate(messages, images, config, cancel)`` streams the
same events as ``engine.generate.session.ChatSession.generate``, with ``ImagesEncoded`` after ``Started`` (issue 44).

The engine API a window or server calls::

    vision = load_vision_model(LoadSpec(model=folder, precision="int4"))      # engine.vision.vlm
    chat = VisionChat(vision)
    for event in chat.generate(messages, {0: [read_image_file(path)]}, SamplingConfig(), cancel):
        ...  # Started, ImagesEncoded(image_tokens per image, encoder_s), PrefillProgress*, Token*, Finished

``messages`` are ``engine.events.Message``; ``images`` maps a message's index to its images
(``engine.vision.image_input.ImageInput``), placed before that message's text, as the families were trained.
``Finished.metrics`` carries ``image_tokens`` (per image, in order) and ``vision_encoder_s`` beside the usual figures
(``prefill_s`` is then the language part's prefill alone, image tokens included).

Owns one turn: the processor's chat template with image placeholders and its ids and pixels, the vision tower and
projector run once through the family's own forward up to the language model (a hook on the language model takes its
``inputs_embeds`` there, so each family merges its features its own way: LLaVA's, LLaVA-OneVision's anyres tiles and
newlines, Idefics3's ``inputs_merger``), then the language part on ``engine.executor.fastpath.FastRunner``: prefill
from those embeddings, with the family's layout where its prefill is not plain causal 1-D (``engine.vision.layouts``:
Gemma 3's image blocks, Qwen2.5-VL / Qwen3-VL's 3-D positions, the latter's deepstack features), decode from token ids
(at position + the layout's RoPE offset). A follow-up turn reuses the cached prefix, images included, while the
same images (by content hash) sit at the same places; image tokens share one placeholder id, so the ids alone cannot
say that (and a Gemma 3 image is kept whole or not at all). A family with a ``VisionFamily.refusal``, or a language
model the fast step refuses (``facts.runner_reason``), runs each turn through transformers' own forward over a
``DynamicCache`` (``engine.vision.plain_turn``), with no reuse across turns.

Does not own loading (``engine.vision.vlm``), reading images (``engine.vision.image_input``), sampling
(``engine.generate.sampling``) or the fast step (``engine.executor.fastpath``).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Sequence

import psutil
import torch

from engine.errors import BadInputError
from engine.events import Event, Finished, ImagesEncoded, Message, Metrics, PrefillProgress, Started
from engine.fmt import one_line
from engine.generate.context import IncrementalDecoder, check_messages, common_prefix
from engine.executor.fastpath import FastRunner
from engine.generate.sampling import Sampler
from engine.inputs import SamplingConfig
from engine.vision.layouts import layout_for
from engine.vision.plain_turn import decode_tokens, plain_turn
from engine.vision.vlm import VisionModel


@dataclass(frozen=True)
class VisionPrompt:
    """A rendered turn: ``inputs`` (the processor's tensors), ``ids`` (the prompt's token ids), ``image_tokens`` per
    image, ``image_starts`` / ``image_ends`` (where each image's first token sits, one past its last: a tiled image's
    tokens come in several runs) and ``image_keys`` (content hashes, in order)."""

    inputs: Mapping[str, Any]
    ids: tuple[int, ...]
    image_tokens: tuple[int, ...]
    image_starts: tuple[int, ...]
    image_ends: tuple[int, ...]
    image_keys: tuple[str, ...]


def image_token_id(vision: VisionModel) -> int:
    """The placeholder id the family's processor expands each image into."""
    config = vision.model.config
    found = getattr(config, "image_token_id", None)
    found = getattr(config, "image_token_index", None) if found is None else found
    if found is None:
        raise BadInputError(f"{vision.family.model_type}: no image token id in the config")
    return int(found)


def build_prompt(vision: VisionModel, messages: Sequence[Message], images: Mapping[int, Sequence[Any]]) -> VisionPrompt:
    """The processor's ids and pixels for ``messages`` with ``images`` (message index -> ``ImageInput``s)."""
    messages = check_messages(messages)
    parts, pictures, keys = [], [], []
    for index, message in enumerate(messages):
        given = list(images.get(index, ()))
        if given and message.role != "user":
            raise BadInputError(f"images go with the user's messages, not a {message.role} message")
        pictures += [image.rgb for image in given]
        keys += [image.sha256 for image in given]
        parts.append({"role": message.role, "content": [{"type": "image"} for _ in given]
                      + [{"type": "text", "text": message.content}]})
    processor = vision.processor
    text = processor.apply_chat_template(parts, add_generation_prompt=True, tokenize=False)
    inputs = processor(images=pictures or None, text=text, return_tensors="pt")
    ids = tuple(inputs["input_ids"][0].tolist())
    token = image_token_id(vision)
    places = [i for i, value in enumerate(ids) if value == token]
    counts = _per_image(vision, pictures, len(places))
    starts, ends, seen = [], [], 0
    for count in counts:
        starts.append(places[seen])
        ends.append(places[seen + count - 1] + 1)
        seen += count
    return VisionPrompt(inputs, ids, tuple(counts), tuple(starts), tuple(ends), tuple(keys))


def _per_image(vision: VisionModel, pictures: Sequence[Any], total: int) -> list[int]:
    """Tokens per image: with one image, all of them; with several, each counted alone through the processor (the
    tiling of one image does not depend on another's)."""
    if len(pictures) <= 1:
        return [total] if pictures else []
    counts = tokens_per_image(vision, pictures)
    if sum(counts) != total:
        raise BadInputError(f"the processor gave {total} image tokens for {len(pictures)} images, {sum(counts)} one "
                            f"by one")
    return counts


def tokens_per_image(vision: VisionModel, pictures: Sequence[Any]) -> list[int]:
    """The tokens each picture (RGB, as ``ImageInput.rgb``) becomes, asked of the processor one by one: its resizing
    and tiling alone, no model forward (what the composer's forecast shows before a Send)."""
    token = image_token_id(vision)
    processor = vision.processor
    one = processor.apply_chat_template([{"role": "user", "content": [{"type": "image"}]}], tokenize=False)
    return [int((processor(images=[p], text=one, return_tensors="pt")["input_ids"] == token).sum()) for p in pictures]


class _Captured(Exception):
    """Raised by the hook on the language model once it has its inputs: the rest of the forward is not wanted."""


def encode(vision: VisionModel, prompt: VisionPrompt) -> torch.Tensor:
    """The prompt's input embeddings (n, d) with the image features merged, by the family's own forward up to its
    language model: the vision tower and projector run here."""
    return encode_all(vision, prompt)["embeds"][0]


def encode_all(vision: VisionModel, prompt: VisionPrompt) -> dict[str, Any]:
    """Every keyword the family's forward gives its language model (``inputs_embeds`` also as ``embeds``; Qwen3-VL's
    deepstack features beside them)."""
    taken: dict[str, Any] = {}

    def hook(_module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        taken.update(kwargs, embeds=kwargs.get("inputs_embeds"))
        raise _Captured

    handle = vision.language.model.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        with torch.inference_mode():
            vision.model.model(**{name: value.to(vision.language.device) if torch.is_tensor(value) else value
                                  for name, value in prompt.inputs.items()}, use_cache=False)
    except _Captured:
        pass
    finally:
        handle.remove()
    if taken.get("embeds") is None:
        raise BadInputError(f"{vision.family.model_type}: the language model was not given input embeddings")
    return taken


@dataclass
class _Clock:
    t_submit: float
    prompt_tokens: int = 0
    reused: int = 0
    encoder_s: float | None = None
    image_tokens: tuple[int, ...] = ()
    t_prefill: float | None = None
    t_prefilled: float | None = None
    tokens: list[float] = field(default_factory=list)
    kv_bytes: int | None = None  # plain_turn's DynamicCache (the fast runner measures its own)



class VisionChat:
    """One conversation with a vision-language model (see the module docstring). Used by one thread at a time;
    ``cancel`` is the only thing another thread touches."""

    def __init__(self, vision: VisionModel) -> None:
        self.vision = vision
        self._eos = set(vision.loaded.eos_token_ids)
        self._runner: FastRunner | None = None
        self._keys: tuple[str, ...] = ()  # content hashes of the images the cache holds, in order
        self._starts: tuple[int, ...] = ()

    def reset(self) -> None:
        """Forget the cached conversation."""
        if self._runner is not None:
            self._runner.reset()
        self._keys, self._starts = (), ()

    def generate(self, messages: Sequence[Message], images: Mapping[int, Sequence[Any]] | None = None,
                 config: SamplingConfig | None = None, cancel: threading.Event | None = None) -> Iterator[Event]:
        """Stream one reply's events; the last is always ``Finished`` (errors too, as one line)."""
        config = config or SamplingConfig()
        cancel = cancel or threading.Event()
        clock = _Clock(time.perf_counter())
        decoder = IncrementalDecoder(self.vision.tokenizer)
        text: list[str] = []

        def finished(reason: str, error: str | None = None) -> Finished:
            text.append(decoder.flush())
            return Finished(reason, "".join(text), self._metrics(clock), error)  # type: ignore[arg-type]

        try:
            prompt = build_prompt(self.vision, messages, images or {})
            if self.vision.loaded.facts.runner != "fast":  # the family's refusal, or its language model's
                yield from plain_turn(self.vision, prompt, config, cancel, clock, decoder, text, finished)
                return
            yield from self._fast_turn(prompt, config, cancel, clock, decoder, text, finished)
        except Exception as exc:  # noqa: BLE001  (as ChatSession: a failure ends the stream, never raises)
            if self._runner is not None:
                self.reset()
            yield finished("error", str(exc) if isinstance(exc, BadInputError) else
                           f"generation failed: {one_line(exc, name_type=True)}")

    def _fast_turn(self, prompt: VisionPrompt, config: SamplingConfig, cancel: threading.Event, clock: _Clock,
                   decoder: IncrementalDecoder, text: list[str], finished: Any) -> Iterator[Event]:
        if self._runner is None:
            self._runner = FastRunner(self.vision.language, kv_precision=self.vision.loaded.facts.kv_precision)
        runner = self._runner
        ids = list(prompt.ids)
        context_max = self.vision.loaded.facts.context_length
        if context_max and len(ids) + config.max_new_tokens > context_max:
            raise BadInputError(f"the prompt's {len(ids)} tokens (images included) and {config.max_new_tokens} new "
                                f"ones exceed the model's context of {context_max}")
        reused = self._reusable(runner, prompt)
        runner.crop(reused)
        reused = runner.cached_len
        clock.prompt_tokens, clock.reused = len(ids), reused
        yield Started(len(ids), reused, 0, context_max, clock.t_submit)
        # an image counts as reused only when all its tokens are cached (a cut prefill may end inside one)
        reused_images = sum(1 for end in prompt.image_ends if end <= reused)
        clock.image_tokens = prompt.image_tokens
        embeds, taken = None, None
        if reused_images < len(prompt.image_keys):
            t0 = time.perf_counter()
            taken = encode_all(self.vision, prompt)
            embeds = taken["embeds"][0]
            clock.encoder_s = time.perf_counter() - t0
        yield ImagesEncoded(prompt.image_tokens, clock.encoder_s or 0.0, reused_images)
        if embeds is None:  # no image to encode: the rest of the prompt is text, its own rows
            embeds = self.vision.language.get_input_embeddings()(torch.tensor(ids[reused:])[None])[0]
        else:
            embeds = embeds[reused:]
        self._keys, self._starts = prompt.image_keys, prompt.image_starts
        layout = layout_for(self.vision, prompt.inputs, taken)  # Gemma 3's image blocks, Qwen-VL's 3-D positions
        runner.rope_offset = 0 if layout is None else layout.delta
        clock.t_prefill = time.perf_counter()
        logits = None
        todo = ids[reused:]
        for done, logits in runner.prefill(todo, cancel, config.prefill_chunk, embeds=embeds, layout=layout):
            yield PrefillProgress(done, len(todo))
        if logits is None or cancel.is_set():
            yield finished("cancelled")
            return
        clock.t_prefilled = time.perf_counter()
        sampler = Sampler(config, runner.device, ids)
        reason = yield from decode_tokens(sampler, logits, runner.decode, self._eos, config.max_new_tokens, cancel,
                                          clock.tokens, decoder, text)
        yield finished(reason)

    def _reusable(self, runner: FastRunner, prompt: VisionPrompt) -> int:
        """How much of the cache this prompt may keep: the common prefix of ids, cut back to the first image that is
        not the same picture at the same place, and at least the last prompt token left to compute."""
        reused = min(common_prefix(runner.cached_ids, prompt.ids), len(prompt.ids) - 1)
        for index, start in enumerate(prompt.image_starts):
            if start >= reused:
                break
            same = index < len(self._keys) and self._keys[index] == prompt.image_keys[index] \
                and self._starts[index] == start
            # an image whose tokens see each other both ways (Gemma 3) is computed whole or not kept
            if not same or (self.vision.family.layout == "blocks" and reused < prompt.image_ends[index]):
                return start
        return reused

    def _metrics(self, clock: _Clock) -> Metrics:
        facts = self.vision.loaded.facts
        n = len(clock.tokens)
        prefill_s = None if clock.t_prefilled is None or clock.t_prefill is None else clock.t_prefilled - clock.t_prefill
        computed = clock.prompt_tokens - clock.reused
        gaps = tuple(b - a for a, b in zip(clock.tokens, clock.tokens[1:]))
        filled, allocated = self._runner.kv_bytes() if self._runner is not None else (0, 0)
        if clock.kv_bytes is not None:
            filled = allocated = clock.kv_bytes
        # positions cached: the fast runner's count; transformers' cache holds the prompt and every token fed back
        cached = self._runner.cached_len if self._runner is not None else clock.prompt_tokens + max(0, n - 1)
        peak = int(torch.cuda.max_memory_allocated()) if facts.device.startswith("cuda") else \
            psutil.Process().memory_info().rss
        return Metrics(
            prompt_tokens=clock.prompt_tokens, prefill_tokens=computed, reused_tokens=clock.reused, generated_tokens=n,
            ttft_s=clock.tokens[0] - clock.t_submit if n else None, prefill_s=prefill_s,
            prefill_tok_s=computed / prefill_s if prefill_s else None,
            decode_tok_s=(n - 1) / (clock.tokens[-1] - clock.tokens[0]) if n > 1 and clock.tokens[-1] > clock.tokens[0]
            else None,
            itl_s=gaps, tpot_s=sum(gaps) / len(gaps) if gaps else None,
            e2e_s=clock.tokens[-1] - clock.t_submit if n else None,
            kv_cache_bytes=filled, kv_cache_bytes_allocated=allocated, weights_bytes=facts.weights_bytes,
            kv_cache_bytes_formula=facts.kv_bytes_per_token * cached,
            kv_cache_bytes_formula_no_gqa=facts.kv_bytes_per_token_no_gqa * cached, peak_memory_bytes=peak,
            context_tokens=clock.prompt_tokens + n, context_max=facts.context_length, device=facts.device,
            precision=facts.precision, image_tokens=clock.image_tokens, vision_encoder_s=clock.encoder_s)


__all__ = ["VisionChat", "VisionPrompt", "build_prompt", "encode", "encode_all", "image_token_id", "tokens_per_image"]
