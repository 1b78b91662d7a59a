"""A tiny reasoning model: the tiny model's tokenizer with ``<think>``/``</think>`` as tokens, a Qwen3-style template
and weights set so that it always thinks, then answers.

``build_reasoning_model(folder, opens=False)``: with ``opens`` the template writes ``<think>`` into the generation
prompt itself (as the DeepSeek-R1 distills do), so the output starts inside the thought; otherwise the model
writes ``<think>`` (Qwen3), and ``enable_thinking=false`` makes the template close an empty thought instead.

The weights are a lookup table, not trained: every layer's output projections are zero, so each position's
hidden state is its token's embedding; the chain's tokens get orthogonal embeddings and the lm_head maps each one
to the next with a margin no sampling setting overcomes. The chain: the generation prompt's last token →
``<think>`` → THOUGHT → ``</think>`` → ANSWER → ``<|im_end|>``. ``THOUGHT`` and ``ANSWER`` are the texts it gives.
"""

from __future__ import annotations

from pathlib import Path

from tests.helpers.tiny_model import build_tiny_tokenizer

QWEN3_STYLE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' and message.get('reasoning_content') and loop.last %}"
    "{{ '<|im_start|>assistant\n<think>\n' + message['reasoning_content'] + '\n</think>\n\n' + message['content']"
    " + '<|im_end|>\n' }}"
    "{% else %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{% if enable_thinking is defined and enable_thinking is false %}{{ '<think>\n\n</think>' }}{% endif %}"
    "{% endif %}"
)
R1_STYLE = (  # as the R1 distills do, an earlier reply's thought is cut off at its end marker
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'].split('</think>')[-1] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n<think>' }}{% endif %}"
)
THOUGHT_WORDS = "The capital of France"
ANSWER_WORDS = "Paris, thank you"


def _chain(tokenizer) -> tuple[list[int], str, str]:
    """The token chain and the thought's and the answer's texts."""
    start = tokenizer.encode("<|im_start|>assistant\n", add_special_tokens=False)[-1]
    think, end = tokenizer.convert_tokens_to_ids(["<think>", "</think>"])
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    seen = {start, think, end, eos}

    def unique(text: str) -> list[int]:
        ids = []
        for i in tokenizer.encode(text, add_special_tokens=False):
            if i not in seen:
                seen.add(i)
                ids.append(i)
        return ids

    thought, answer = unique(THOUGHT_WORDS), unique(ANSWER_WORDS)
    decode = lambda ids: tokenizer.decode(ids, clean_up_tokenization_spaces=False)  # noqa: E731
    return [start, think, *thought, end, *answer, eos], decode(thought), decode(answer)


def build_reasoning_model(folder: Path, opens: bool = False) -> Path:
    """Write the reasoning model to ``folder`` and return it (``opens``: the R1-style template)."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    from tests.helpers.tiny_model import TINY_CONFIG

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tiny_tokenizer()
    tokenizer.add_tokens(["<think>", "</think>"])
    tokenizer.chat_template = R1_STYLE if opens else QWEN3_STYLE
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    config = LlamaConfig(vocab_size=len(tokenizer), bos_token_id=tokenizer.convert_tokens_to_ids("<|im_start|>"),
                         eos_token_id=eos, pad_token_id=eos, **{**TINY_CONFIG, "tie_word_embeddings": False})
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    chain, _, _ = _chain(tokenizer)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        embed, head = model.model.embed_tokens.weight, model.lm_head.weight
        head.normal_(0.0, 0.02)
        for k, (source, target) in enumerate(zip(chain, chain[1:])):
            basis = torch.zeros(config.hidden_size)
            basis[k] = 1.0
            embed[source] = basis
            head[target] = 20.0 * basis
    model.generation_config = GenerationConfig(bos_token_id=config.bos_token_id, eos_token_id=eos, pad_token_id=eos)
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return folder


def expected_texts(folder: Path) -> tuple[str, str]:
    """The thought and the answer the model in ``folder`` writes."""
    from transformers import AutoTokenizer

    _, thought, answer = _chain(AutoTokenizer.from_pretrained(folder))
    return thought, answer
