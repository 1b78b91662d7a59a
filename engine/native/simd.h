// SIMD helpers the native sources share, so each widening is written once: bf16 to fp32 is its 16 bits moved to the
// top of an fp32 word (exact, no rounding), one value, 8 lanes (AVX2) or 16 lanes (AVX-512).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace miaohui::simd {

// One bf16, given as its bits, as fp32.
inline float bf16_to_fp32(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float out;
  std::memcpy(&out, &wide, sizeof out);
  return out;
}

// 8 bf16 (raw bits, 16 bytes) as 8 fp32 lanes.
__attribute__((target("avx2,fma"))) inline __m256 bf16x8_to_fp32(__m128i raw) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
}

// 16 bf16 (raw bits, 32 bytes) as 16 fp32 lanes.
__attribute__((target("avx512f,avx512bw,avx512vl,fma"))) inline __m512 bf16x16_to_fp32(__m256i raw) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
}

}  // namespace miaohui::simd
