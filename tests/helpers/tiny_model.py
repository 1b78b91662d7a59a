"""A tiny random-weight Llama with grouped-query attention and its tokenizer, built locally.

Unit tests use it instead of the real default model so they run in milliseconds. The tokenizer is
a byte-level BPE trained on a few sentences (English, Chinese, emoji), so any text encodes; the
chat template is ChatML like the default model's. ``build_tiny_model(folder)`` writes an ordinary
Hugging Face folder (config.json, model.safetensors, tokenizer files) that the engine's loader
opens like any local model.
"""

from __future__ import annotations

from pathlib import Path

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

_CORPUS = [
    "What is the capital of France? The capital of France is Paris.",
    "Hello, how are you today? I am fine, thank you.",
    "The KV cache stores keys and values so decode does not recompute them.",
    "我昨天认识的那个人，他居然是我小学同学。",
    "秒回的秘密：预填充和解码，KV 缓存，流式输出。",
    "def add(a, b):\n    return a + b\n",
    "Emoji 😀 and Arabic مرحبا and numbers 12345.",
]

# Small enough to be fast, large enough to exercise GQA (4 query heads share 2 KV heads) and
# context trimming (256 positions).
TINY_CONFIG = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=256,
    tie_word_embeddings=True,
    rms_norm_eps=1e-5,
)


def build_tiny_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(_CORPUS * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|im_start|>", eos_token="<|im_end|>",
                                   unk_token="<|endoftext|>", pad_token="<|im_end|>")
    fast.chat_template = CHATML_TEMPLATE
    return fast


def build_tiny_model(folder: Path, seed: int = 0, **overrides) -> Path:
    """Write a tiny random-weight Llama + tokenizer to ``folder`` and return it."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tiny_tokenizer()
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    config = LlamaConfig(vocab_size=len(tokenizer), bos_token_id=tokenizer.convert_tokens_to_ids("<|im_start|>"),
                         eos_token_id=eos, pad_token_id=eos, **{**TINY_CONFIG, **overrides})
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    model.generation_config = GenerationConfig(bos_token_id=config.bos_token_id, eos_token_id=eos, pad_token_id=eos)
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return folder
