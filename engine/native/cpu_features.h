// The CPU features the native ops need, asked of the running CPU (not of the compiler: the library is built without
// -march, its functions name their own instruction sets, so it loads on any x86-64 CPU and each op checks here).
// The one place these checks are written: int4_sym.cpp, q8act.cpp and prefill_attention.cpp ask them (engine/native/__init__.py's table).
#pragma once

namespace miaohui::cpu {

// AVX2 with FMA and F16C: the int8-activation kernels' AVX2 path (q8act.cpp) and the decode step's row loops.
inline bool avx2() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}

// AVX-512 F, BW and VL with FMA: the symmetric int4 product (int4_sym.cpp).
inline bool avx512() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma");
}

// AVX512-VNNI on top of AVX2 and AVX-512: vpdpbusd, the int8-activation kernels' fast path (q8act.cpp).
inline bool vnni() { return avx2() && avx512() && __builtin_cpu_supports("avx512vnni"); }

// AVX-512 BF16 on top of AVX-512: vdpbf16ps, prefill's attention (prefill_attention.cpp).
inline bool avx512bf16() { return avx512() && __builtin_cpu_supports("avx512bf16"); }

}  // namespace miaohui::cpu
