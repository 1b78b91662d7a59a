"""The engine's native C++ (issue 42): one library, ``miaohui_native``, whose ops live under ``torch.ops.miaohui``.

Sources: ``register.cpp`` holds the one ``TORCH_LIBRARY`` block (every op's schema and the function running it,
as ``ops.h`` declares them); ``int4_sym.cpp``, ``q8act.cpp``, ``decode_step.cpp``, ``kv_int8.cpp`` and
``prefill_attention.cpp`` define the ops and register nothing; ``cpu_features.h`` is the one place the CPU is asked
what it has, ``simd.h`` the one bf16 widening, ``by_rows.h`` the one run-time row count made a template argument.
``library`` builds them (``python -m engine.native.library``, run by ``make install``) into
``engine/native/build/`` and loads the result.

Each op, what it promises, and the test that holds it to that:

======================  =================================================  =========================================
op                      contract                                           test
======================  =================================================  =========================================
``int4_sym_mm``         bf16 rows times symmetric int4 (aten's AVX-512     tests/engine/native/test_library.py
                        packing, a bf16 scale per group, no zero): bit
                        for bit aten's kernel with every zero 0; needs
                        AVX-512
``int4_sym_available``  whether this CPU runs ``int4_sym_mm``              tests/engine/native/test_library.py
``q4_q8_mm``            int4 tiles (fp16 scale, offset) times activations  tests/engine/quant/test_tiled.py
                        quantized to int8 per block of 32, integer dot
                        products (VNNI or AVX2, same bits from both):
                        llama.cpp's contract, not aten's bits
``q8_q8_mm``            int8 tiles (bf16 row scale) times int8             tests/engine/quant/test_tiled.py
                        activations, as above
``q8_quantize``         the activations' int8 blocks alone (qa, d, sa),    tests/engine/quant/test_tiled.py
                        exactly
``q4_dense``            int4 tiles as a dense (K, N) bf16/fp32 weight for   tests/engine/quant/test_tiled.py
                        prefill's GEMM: bit for bit the torch form
``q8act_isa``           the best instruction set here: 2 VNNI, 1 AVX2, 0   tests/engine/quant/test_tiled.py
                        none
``q8act_threads``       the threads the ops' parallel loops get (torch's   tests/engine/quant/test_tiled.py
                        count)
``rms_norm_rows``       RMSNorm per row: torch's within rounding, one row  tests/engine/executor/test_native_step.py
                        alone its bits in the batch; the Python step
                        calls it too; an fp32 weight is Gemma's 1 + w
                        (``gemma_rms_norm`` within rounding)
``silu_mul``            SiLU(gate)·up: torch's within rounding; shared     tests/engine/executor/test_native_step.py
                        likewise
``gelu_tanh_mul``       Gemma's GeGLU, tanh-GELU(gate)·up: torch's within  tests/engine/executor/test_native_step.py
                        rounding; shared likewise
``attend_one``          one query per head over the cache (GQA): SDPA      tests/engine/executor/test_native_step.py
                        within rounding, Gemma 2's soft cap where given;
                        shared likewise
``kv_quantize``         an 8-bit KV cache row per head: int8 codes and     tests/engine/native/test_kv_int8.py
                        fp16 scale, kv_cache.quantize's bits exactly
``attend_one_q8``       ``attend_one`` over int8 rows with per-position    tests/engine/native/test_kv_int8.py
                        scales: its bits over the dequantized rows; the
                        Python step over an Int8KVCache calls it
``prefill_attention``   a prompt chunk's causal attention over the cache   tests/engine/native/test_prefill_attention.py
                        (GQA, online softmax over blocks of 64 keys;
                        vdpbf16ps, or AVX2's fp32 multiply-adds): an fp32
                        reference within bf16 rounding, as SDPA; exactly
                        causal; a row's bits the same in any chunk
``prefill_attention_``  the best instruction set here for it: 2 AVX-512    tests/engine/native/test_prefill_attention.py
``isa``                 BF16, 1 AVX2, 0 none
``DecodeStep``          the int8/int4 decode step in one call, and         tests/engine/executor/test_native_step.py
                        ``verify`` (n tokens, speculation's check), bit    (8-bit cache: test_native_step_int8kv.py)
                        for bit the Python step; ``step_q8`` and
                        ``verify_q8`` over an 8-bit KV cache
======================  =================================================  =========================================

Owns the C++ and its build and loading; not the modules that call the ops (``engine/quant/`` packs the weights
they read, ``engine/executor/`` runs the step). Importing this package imports no torch; ``library`` does.
"""
