"""Load a local model: ``LoadSpec`` in, ``LoadedModel`` out.

Owns source resolution (the default model, a local folder, a single ``.gguf`` file, a model installed in the
models folder by its name or repo id (``engine.library.installed``), a repo id already in the local Hugging Face
cache), device resolution, the load around the precision ``engine.quant.precision.choose_precision`` picks (asked
once per load; ``auto``'s quality step runs inside it on the float weights read here), bitsandbytes configs,
accelerate CPU offload, load progress and cancel, and turning every load
failure into one ``EngineError`` with nothing half-loaded kept.

Does not own file-safety checks (``engine.models.safety`` runs them before anything is deserialised),
measuring the loaded model (``engine.models.facts``), the model-card arithmetic (``engine.models.model``) or
generation (``engine.generate.session``). Never touches the network: every Hugging Face call is
``local_files_only``.
"""

from __future__ import annotations

import gc
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import psutil
from huggingface_hub import constants

from engine import paths
from engine.shapes import config_check
from engine.shapes.shape import param_estimate
from engine.models import safety, template_meta
from engine.quant import quantize_step
from engine.quant.precision import Machine, ModelWeights, choose_precision, device_float_name
from engine.errors import (BadInputError, CancelledError, CorruptModelError, DataDirError, EngineError,
                           EngineOutOfMemoryError, ModelNotFoundError)
from engine.models.facts import build_facts, end_token_ids
from engine.models.model import AutoChoice, LoadedModel
from engine.inputs import BNB_QUANTIZED, NATIVE_QUANTIZED, LoadSpec
from engine.fmt import one_line
from engine.models.fetch import find_default_model

# torch and transformers, and engine.cpu and engine.quant.quant_cache (which import torch), are imported inside
# the functions that use them: importing the loader loads no torch (~2 s), so a damaged file or config is
# refused in about a second, before torch is imported (tests/engine/cli/test_info.py,
# tests/engine/shapes/test_config_check.py). Every real load then pays for them once.


def _drop_per_step_cast_warning(record: logging.LogRecord) -> bool:
    # bitsandbytes logs this for every int8 matmul whose input is not fp16: ~210 identical lines per
    # token for the default model on a CPU, burying every other output (CLI summary, lab, GUI log).
    # Only this message is dropped; installed once here because every int8 model comes through here.
    return not str(record.msg).startswith("MatMul8bitLt: inputs will be cast")


logging.getLogger("bitsandbytes.autograd._functions").addFilter(_drop_per_step_cast_warning)


QUANTIZED = NATIVE_QUANTIZED + BNB_QUANTIZED


@dataclass(frozen=True)
class LoadProgress:
    """One step of a load: a stage name and the fraction of the whole load done."""

    stage: str  # checking files | reading config | loading weights | quantizing | loading tokenizer | ready
    fraction: float  # 0.0 … 1.0


@dataclass(frozen=True)
class ResolvedSource:
    """Where a spec's model lives on disk."""

    folder: Path  # folder holding config/tokenizer (for .gguf: the file's folder)
    name: str  # short display name
    gguf_file: str | None = None  # file name inside ``folder`` when loading a GGUF
    origin: str = ""  # what the user gave: path or repo id


ProgressFn = Callable[[LoadProgress], None]


def _looks_like_repo_id(text: str) -> bool:
    parts = text.split("/")
    return (len(parts) == 2 and all(parts) and not text.startswith((".", "~"))
            and not any(c in text for c in "\\:") and ".." not in text)


def resolve_source(model: str) -> ResolvedSource:
    """Find ``model`` on disk without touching the network; raise ModelNotFoundError if absent."""
    if model == "default":
        folder = find_default_model()
        if folder is None:
            raise ModelNotFoundError(f"default model not found in {paths.default_model_dir()}: run "
                                     "`python -m engine fetch` once (needs network) to put it in place")
        return ResolvedSource(folder=folder, name=paths.DEFAULT_MODEL_NAME, origin=str(folder))
    path = Path(model).expanduser()
    problem = safety.not_regular_problem(path)
    if problem and not path.is_dir():  # a FIFO or device picked as the model: opening it would block
        raise safety.corrupt(path, problem)
    if path.is_dir():
        return _folder_source(path.resolve(), path.resolve().name, model)
    if path.is_file():
        if path.suffix.lower() == ".gguf":
            # absolute(), not resolve(): in the HF cache the file is a symlink to a blob whose
            # folder does not hold a file of this name.
            return ResolvedSource(folder=path.absolute().parent, name=path.stem, gguf_file=path.name, origin=model)
        if safety.is_pickle_file(path):
            raise safety.refuse_pickle(path)
        # A weights file picked directly: its folder is the model (safety then judges the folder).
        return ResolvedSource(folder=path.resolve().parent, name=path.resolve().parent.name, origin=model)
    installed = _installed_path(model)
    if installed is not None:  # a name `python -m engine models list` shows, or the repo id it came from
        return resolve_source(str(installed.absolute()))
    if _looks_like_repo_id(model):
        return _folder_source(_hf_cache_snapshot(model), model.split("/")[1], model)
    raise ModelNotFoundError(f"no model at {model}: give a model folder, a .gguf file, the name of an installed "
                             "model (`python -m engine models list`), a repo id already in the local Hugging Face "
                             "cache, or 'default' (`python -m engine fetch`)")


def _installed_path(model: str) -> Path | None:
    """The models folder's entry that ``model`` names (``engine.library.installed.resolve``), if any."""
    from engine.library import installed  # lazy: it imports the Hub client, needed only for a name

    if Path(model).expanduser().is_absolute() or model.startswith("."):
        return None  # a path, not a name: never look for it in (or create) the models folder
    try:
        path = installed.resolve(model)
    except (ModelNotFoundError, BadInputError, DataDirError):
        return None
    return path if path.exists() else None  # a dangling link: no model there


def _folder_source(folder: Path, name: str, origin: str) -> ResolvedSource:
    """A Hugging Face folder, or a folder (e.g. a GGUF repo) whose only model is one .gguf file."""
    if not (folder / "config.json").is_file():
        ggufs = sorted(folder.glob("*.gguf"))
        if len(ggufs) == 1:
            return ResolvedSource(folder=folder, name=ggufs[0].stem, gguf_file=ggufs[0].name, origin=origin)
        if len(ggufs) > 1:
            raise BadInputError(f"{origin} holds {len(ggufs)} .gguf files: open one of them "
                                f"(e.g. {folder / ggufs[0].name})")
    return ResolvedSource(folder=folder, name=name, origin=origin)


def hf_cache_dir() -> Path:
    """The local Hugging Face hub cache, read from the environment on every call.

    huggingface_hub freezes its own constant at import time; reading the variables here lets a
    user (or a test) point at another cache without restarting.
    """
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path(constants.HF_HUB_CACHE)


def _hf_cache_snapshot(repo_id: str) -> Path:
    """The snapshot folder of ``repo_id`` in the local Hugging Face cache (never downloads)."""
    # Lazy: only a repo id needs these (~165 ms more of huggingface_hub), and the window imports this module
    # while it opens (the model picker's catalog asks for hf_cache_dir).
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(repo_id, cache_dir=hf_cache_dir(), local_files_only=True))
    except (LocalEntryNotFoundError, FileNotFoundError, OSError, ValueError):
        raise ModelNotFoundError(f"model {repo_id} is not in the local Hugging Face cache and Miaohui never "
                                 "downloads: copy the model folder to this machine and open the folder") from None


# ---------------------------------------------------------------- precision and device


def resolve_device(device: str) -> str:
    import torch  # lazy: see the note after the imports

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise BadInputError("device cuda asked for but no CUDA GPU is available: use --device cpu")
    return device


def _torch_dtype(name: str) -> Any:
    import torch  # lazy: see the note after the imports

    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[name]


def bnb_config(precision: str, compute_dtype: str, double_quant: bool, offload: bool) -> Any:
    """transformers' BitsAndBytesConfig for bnb-int8 / nf4 / fp4."""
    from transformers import BitsAndBytesConfig  # lazy: see the note after the imports

    if precision == "bnb-int8":
        return BitsAndBytesConfig(load_in_8bit=True, llm_int8_enable_fp32_cpu_offload=offload)
    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=precision,
                              bnb_4bit_compute_dtype=_torch_dtype(compute_dtype),
                              bnb_4bit_use_double_quant=double_quant,
                              llm_int8_enable_fp32_cpu_offload=offload)


# ---------------------------------------------------------------- loading


def _default_model_loader(folder: str, **kwargs: Any) -> Any:
    from transformers import AutoModelForCausalLM  # lazy: see the note after the imports

    model, info = AutoModelForCausalLM.from_pretrained(folder, output_loading_info=True, **kwargs)
    # transformers fills weights absent from the checkpoint with random values and only logs it:
    # a model answering gibberish is worse than a clear refusal.
    missing = sorted(info.get("missing_keys") or []) + sorted(info.get("mismatched_keys") or [])
    if missing:
        where = Path(folder) / kwargs["gguf_file"] if kwargs.get("gguf_file") else Path(folder)
        raise CorruptModelError(f"corrupt or incomplete: {where}: {len(missing)} weights missing or of the wrong "
                                f"shape (e.g. {missing[0]})")
    return model


def _default_tokenizer_loader(folder: str, **kwargs: Any) -> Any:
    from transformers import AutoTokenizer  # lazy: see the note after the imports

    return AutoTokenizer.from_pretrained(folder, **kwargs)


def _is_oom(exc: BaseException) -> bool:
    import torch  # lazy: see the note after the imports

    if isinstance(exc, (MemoryError, torch.OutOfMemoryError)):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


def load_model(spec: LoadSpec, progress: ProgressFn | None = None, cancel: threading.Event | None = None, *,
               from_pretrained: Callable[..., Any] | None = None,
               tokenizer_from_pretrained: Callable[..., Any] | None = None, chat: bool = False) -> LoadedModel:
    """Load ``spec``'s model, reporting progress and honouring ``cancel`` between stages. ``chat``: refuse a
    model without a chat template from its files' metadata, after the file checks, before torch or a weight loads.

    ``from_pretrained`` / ``tokenizer_from_pretrained`` default to transformers' Auto classes; tests
    pass their own to inject failures. On any failure or cancel nothing half-loaded is kept.
    Raises only ``EngineError`` subclasses (one-line messages).
    """
    error: BaseException | None = None
    device = "cpu"
    weights_started = threading.Event()  # set once memory may hold part of a model
    progress = progress or (lambda _p: None)
    try:
        # The file checks first: a damaged folder is refused in about a second, before torch is imported.
        progress(LoadProgress("checking files", 0.0))
        source = resolve_source(spec.model)
        report = safety.check_source(source.folder, gguf_file=source.gguf_file,
                                     allow_remote_code=spec.allow_remote_code)
        if chat:
            template_meta.require_chat_template(source.folder, source.gguf_file)
        device = resolve_device(spec.device)
        return _load(spec, source, report, device, progress, cancel or threading.Event(),
                     from_pretrained or _default_model_loader, tokenizer_from_pretrained or _default_tokenizer_loader,
                     weights_started)
    except EngineError as exc:
        error = exc
    except Exception as exc:  # noqa: BLE001  (converted at the engine's edge into one line)
        if _is_oom(exc):
            error = EngineOutOfMemoryError(
                f"out of memory loading {spec.model} in {spec.precision}: try a smaller precision (nf4) "
                f"or {'the CPU' if device == 'cuda' else 'closing other programs'}")
        elif isinstance(exc, (OSError, ValueError)):
            error = CorruptModelError(f"could not load {spec.model}: {one_line(exc)}")
        else:
            error = EngineError(f"could not load {spec.model}: {one_line(exc, name_type=True)}")
    # Raised outside the except block with no traceback or context, so no frame holding a
    # half-built model survives in the exception chain; then reclaim its memory.
    error.__traceback__ = None
    error.__context__ = None
    error.__cause__ = None
    if weights_started.is_set():  # a full collection costs ~1 s with torch loaded: only when needed
        _release(device)
    raise error


def _release(device: str) -> None:
    gc.collect()
    if device == "cuda":
        import torch  # lazy: see the note after the imports

        torch.cuda.empty_cache()


def _check_cancel(cancel: threading.Event) -> None:
    if cancel.is_set():
        raise CancelledError("model load cancelled")


def _read_config(source: ResolvedSource, spec: LoadSpec) -> Any:
    from transformers import AutoConfig  # lazy: see the note after the imports

    kwargs: dict[str, Any] = dict(local_files_only=True, trust_remote_code=spec.allow_remote_code)
    if source.gguf_file:
        kwargs["gguf_file"] = source.gguf_file
    return AutoConfig.from_pretrained(str(source.folder), **kwargs)


def activation_dtype_name(spec: LoadSpec, device: str, precision: str) -> str:
    """dtype of unquantised parts (embeddings, norms) and activations, hence of the KV cache."""
    if precision in NATIVE_QUANTIZED:
        return "bf16" if device == "cpu" else device_float_name(device)
    if precision in BNB_QUANTIZED:
        return spec.bnb_compute_dtype or device_float_name(device)
    return precision


def model_kwargs(spec: LoadSpec, source: ResolvedSource, device: str, precision: str) -> dict[str, Any]:
    """Keyword arguments for ``from_pretrained`` (without ``config``); pure, so CUDA paths test on a CPU."""
    float_name = activation_dtype_name(spec, device, precision)
    kwargs: dict[str, Any] = dict(dtype=_torch_dtype(float_name), local_files_only=True,
                                  trust_remote_code=spec.allow_remote_code)
    if source.gguf_file:
        kwargs["gguf_file"] = source.gguf_file
    else:
        kwargs["use_safetensors"] = True  # never fall back to a pickle checkpoint
    if spec.attn_implementation:
        kwargs["attn_implementation"] = spec.attn_implementation
    if precision in BNB_QUANTIZED:
        kwargs["quantization_config"] = bnb_config(precision, float_name, spec.bnb_double_quant, spec.offload)
    if spec.offload:
        kwargs["device_map"] = "auto"
        if spec.offload_gpu_bytes is not None:
            # A cap makes accelerate spill layers to CPU memory even when the model would fit, so
            # the cost of offloading can be measured on any GPU.
            kwargs["max_memory"] = {0: spec.offload_gpu_bytes, "cpu": _host_memory_bytes()}
    elif device == "cuda" or precision in BNB_QUANTIZED:
        kwargs["device_map"] = {"": "cuda:0" if device == "cuda" else "cpu"}
    return kwargs


def _host_memory_bytes() -> int:
    return int(psutil.virtual_memory().available * 0.9)


def _load(spec: LoadSpec, source: ResolvedSource, report: safety.SafetyReport, device: str, progress: ProgressFn,
          cancel: threading.Event, from_pretrained: Callable[..., Any], tokenizer_from_pretrained: Callable[..., Any],
          weights_started: threading.Event) -> LoadedModel:
    if spec.offload and device != "cuda":
        raise BadInputError("CPU offload only applies to a CUDA device: use --device cuda or drop --offload")
    _check_cancel(cancel)

    progress(LoadProgress("reading config", 0.1))
    config = _read_config(source, spec)
    if source.gguf_file:
        # A GGUF's numbers come from its metadata, not a config.json safety could read: check them here,
        # before they size anything.
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        config_check.check_config_values(text.to_dict(), source.folder / source.gguf_file)
    estimated = report.param_count or _config_param_estimate(config)  # safety's count, else the seeds' estimate
    gguf = None
    if source.gguf_file:  # its blocks are read for int8/int4, and `auto` on a CPU may keep its Q4_*/Q8_0 bits
        from engine.quant import gguf_quant  # lazy: see the note after the imports

        gguf = gguf_quant.GGUFFile(source.folder / source.gguf_file)
    _check_cancel(cancel)
    files = sorted(source.folder.glob("*.safetensors")) if gguf is None else []
    weights = ModelWeights(estimated, "gguf" if gguf is not None else "safetensors" if files else "other",
                           gguf_quant.block_facts(gguf) if gguf is not None else None)

    def read_weights(precision: str) -> Any:
        kwargs = model_kwargs(spec, source, device, precision)
        progress(LoadProgress("loading weights", 0.2))
        if precision in BNB_QUANTIZED:
            # bitsandbytes quantises each weight as it is read: loading and quantising are one pass.
            progress(LoadProgress("quantizing", 0.3))
        weights_started.set()
        model = from_pretrained(str(source.folder), config=config, **kwargs).eval()
        _check_cancel(cancel)
        return model

    def read_tokenizer() -> Any:
        progress(LoadProgress("loading tokenizer", 0.85))
        tok_kwargs: dict[str, Any] = dict(local_files_only=True, trust_remote_code=spec.allow_remote_code)
        if source.gguf_file:
            tok_kwargs["gguf_file"] = source.gguf_file
        tokenizer = tokenizer_from_pretrained(str(source.folder), **tok_kwargs)
        _check_cancel(cancel)
        return tokenizer

    held: list[Any] = []  # the model and tokenizer ``auto``'s quality step loaded

    def quality(float_name: str) -> AutoChoice:  # the float weights, then the fastest candidate meeting its bar
        known = quantize_step.remembered(files, float_name)
        if known is not None:  # decided by earlier loads: read only the chosen precision's weights, below
            return known
        model, tokenizer = read_weights(float_name), read_tokenizer()
        kwargs = model_kwargs(spec, source, device, float_name)
        # Where quantized loads compute in another float type (bf16 on a CPU whose float type is fp32), a pick is
        # loaded again as asked (below): the candidates measured here then stay out of the quantized-weight cache,
        # which no load would read them from (each first load wrote two files).
        cache = all(activation_dtype_name(spec, device, p) == float_name for p in NATIVE_QUANTIZED)
        model, verdict = quantize_step.auto(
            model, tokenizer, files, float_name,
            lambda: from_pretrained(str(source.folder), config=config, **kwargs).eval(),
            lambda: progress(LoadProgress("checking quantized quality", 0.9)), cache)
        held[:] = [model, tokenizer]
        _check_cancel(cancel)
        return verdict

    choice = choose_precision(spec.precision, Machine.detect(device), weights, quality)  # the one decision
    precision = choice.precision
    if held and precision in NATIVE_QUANTIZED and activation_dtype_name(spec, device, precision) != choice.float_name:
        # auto compared the candidates with the float model in the CPU's float type (fp32 without native bf16), but
        # a quantized model computes in bf16 there, as an explicit int4/int8 does: measured on an AVX2-only EPYC,
        # bf16 activations decode Llama-3.2-1B-shaped int4 7-10% faster at 512 and 3,264 positions (half the KV
        # bytes) and prefill 3,264 tokens 8% sooner (docs/BENCHMARK.md). So load the chosen precision as asked.
        held.clear()
        _release(device)
    float_name = choice.float_name if held else activation_dtype_name(spec, device, precision)
    note = gguf_quant.float_note(gguf, float_name) if gguf is not None else ""
    if held:
        model, tokenizer = held
    else:
        model = read_weights(precision)
        if precision in NATIVE_QUANTIZED:
            progress(LoadProgress("quantizing", 0.6))
            from_cache, note = quantize_step.native(model, precision, device, source.folder, source.gguf_file, gguf)
            if from_cache:
                progress(LoadProgress("quantized weights from the cache", 0.8))
            _check_cancel(cancel)
        tokenizer = read_tokenizer()
    auto_choice = choice.verdict

    origin = str(source.folder / source.gguf_file) if source.gguf_file else (source.origin or str(source.folder))
    if note:
        logging.getLogger(__name__).info("%s: %s", source.name, note)
    facts = build_facts(model, source.name, origin, precision, _torch_dtype(float_name).itemsize, note, auto_choice,
                        spec.kv_precision)
    loaded = LoadedModel(model=model, tokenizer=tokenizer, facts=facts, eos_token_ids=end_token_ids(model, tokenizer))
    progress(LoadProgress("ready", 1.0))
    return loaded


def _config_param_estimate(config: Any) -> int:
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return param_estimate(text.vocab_size, text.hidden_size, text.num_hidden_layers)


__all__ = ["LoadProgress", "ResolvedSource", "load_model", "resolve_source",
           "resolve_device", "hf_cache_dir", "bnb_config", "model_kwargs",
           "activation_dtype_name", "QUANTIZED"]
