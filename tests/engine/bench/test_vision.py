"""engine/bench/vision.py (``python -m engine bench --vision``) on a tiny shape of the same Idefics3 recipe: the folder
is built once and reused, both variants are measured, and the table names every figure with int4 ÷ bf16. Speeds are
never asserted, only that each figure exists."""

from __future__ import annotations

from engine.bench import vision

TINY = dict(vision=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                        image_size=64, patch_size=16),
            text=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=16, max_position_embeddings=1024, rms_norm_eps=1e-5,
                      tie_word_embeddings=True),
            scale_factor=2, image_seq_len=4, longest_edge=128, tile=64)


def test_the_vision_bench_measures_both_variants(home, default_model_dir):
    result = vision.measure(tokens=3, reps=1, shape=TINY, name="tiny", tokenizer_folder=default_model_dir)
    assert (vision.bench_folder("tiny") / "config.json").is_file()
    # 1024x768 scaled to 128x96: 2x2 tiles of 64 pixels and the whole image, 4 tokens each
    assert result["image_tokens"] == 20 and result["prompt_tokens"] > 20
    figures = result["figures"]
    assert set(figures) == set(vision.FIGURES)
    for figure in figures.values():
        assert all(figure["median"][variant] > 0 for variant in ("bf16", "int4")) and figure["ratio"]["int4"] > 0
    table = vision.table(result)
    assert "| decode_tok_s |" in table and "int4 ÷ bf16" in table and "20 image tokens" in table
