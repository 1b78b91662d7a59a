// miaohui::int4_sym_mm: (rows, K) bf16 activations times a symmetric int4 weight (one bf16 scale per group of
// 32 input columns, no zero point: a GGUF's Q4_0 blocks), bit for bit what aten's
// _weight_int4pack_mm_for_cpu returns for the same codes with every zero 0, on an AVX-512 CPU.
//
// Why by hand (engine/native/library.py says it at length): torch has no x86 int4 GEMV without a zero point,
// and aten's kernel reads a bf16 zero beside every bf16 scale (5 bits per weight, Q4_0 has 4.5) and spends
// two fused multiply-adds per weight (dequantize, then accumulate). Here the codes are aten's AVX-512 packed
// layout (the same buffer its kernel takes), the scales are blocked per 64 output rows, and since
// a_k * (q - 8) and then its product with the scale are exact in fp32 (8 + 4 + 8 significant bits), one fused
// multiply-add per weight, fma(a_k * (q - 8), scale, acc), rounds exactly where aten's fma(a_k, (q - 8) * scale,
// acc) does. The sum runs over k in aten's order, from zero, and is rounded to bf16 to nearest even.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>

#include <immintrin.h>

#include <cstdint>

#include "cpu_features.h"
#include "ops.h"
#include "simd.h"

namespace {

constexpr int64_t kBlock = 64;  // output rows per packed block (aten's AVX-512 layout)

using miaohui::simd::bf16x16_to_fp32;

// One block of 64 output rows for one activation row: codes (K, 32) bytes, scales (groups, 64) bf16.
__attribute__((target("avx512f,avx512bw,avx512vl,fma"))) void block_row(
    const uint16_t* a, int64_t K, int64_t group, const uint8_t* codes, const uint16_t* scales, float* out) {
  const __m512 levels = _mm512_set_ps(7, 6, 5, 4, 3, 2, 1, 0, -1, -2, -3, -4, -5, -6, -7, -8);
  __m512 c0 = _mm512_setzero_ps(), c1 = _mm512_setzero_ps(), c2 = _mm512_setzero_ps(), c3 = _mm512_setzero_ps();
  const int64_t groups = K / group;
  for (int64_t g = 0; g < groups; ++g) {
    const uint16_t* s = scales + g * kBlock;
    const __m512 s0 = bf16x16_to_fp32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s)));
    const __m512 s1 = bf16x16_to_fp32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 16)));
    const __m512 s2 = bf16x16_to_fp32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 32)));
    const __m512 s3 = bf16x16_to_fp32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 48)));
    const int64_t end = (g + 1) * group;
    for (int64_t k = g * group; k < end; ++k) {
      const float ak = miaohui::simd::bf16_to_fp32(a[k]);
      const __m512 lut = _mm512_mul_ps(_mm512_set1_ps(ak), levels);  // a_k * (q - 8), exact
      const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + k * 32));
      _mm_prefetch(reinterpret_cast<const char*>(codes + (k + 16) * 32), _MM_HINT_T0);
      const __m512i lo = _mm512_cvtepu8_epi32(_mm256_castsi256_si128(b));  // rows 0-15 | 32-47 (high nibble)
      const __m512i hi = _mm512_cvtepu8_epi32(_mm256_extracti128_si256(b, 1));  // rows 16-31 | 48-63
      // vpermps reads the low 4 bits of each index: the low nibble as it is, the high one shifted down.
      c0 = _mm512_fmadd_ps(_mm512_permutexvar_ps(lo, lut), s0, c0);
      c1 = _mm512_fmadd_ps(_mm512_permutexvar_ps(hi, lut), s1, c1);
      c2 = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(lo, 4), lut), s2, c2);
      c3 = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(hi, 4), lut), s3, c3);
    }
  }
  _mm512_storeu_ps(out, c0);
  _mm512_storeu_ps(out + 16, c1);
  _mm512_storeu_ps(out + 32, c2);
  _mm512_storeu_ps(out + 48, c3);
}

}  // namespace

namespace miaohui {

at::Tensor int4_sym_mm(const at::Tensor& rows_in, const at::Tensor& codes, const at::Tensor& scales, int64_t group) {
  TORCH_CHECK(cpu::avx512(), "miaohui::int4_sym_mm needs AVX-512 (F, BW, VL) and FMA");
  TORCH_CHECK(rows_in.dim() == 2 && rows_in.scalar_type() == at::kBFloat16, "a: (rows, K) bf16");
  const at::Tensor a = rows_in.contiguous();
  TORCH_CHECK(scales.dim() == 3 && scales.size(2) == kBlock && scales.scalar_type() == at::kBFloat16 &&
                  scales.is_contiguous(), "scales: contiguous (N/64, K/group, 64) bf16");
  const int64_t rows = a.size(0), K = a.size(1), blocks = scales.size(0), N = blocks * kBlock;
  TORCH_CHECK(group > 0 && K % group == 0 && scales.size(1) == K / group, "scales do not match K and group");
  TORCH_CHECK(codes.scalar_type() == at::kByte && codes.is_contiguous() && codes.numel() == N * K / 2,
              "codes: aten's packed int4 weight, (N, K/2) uint8");
  at::Tensor out = at::empty({rows, N}, a.options());
  const auto* a_ptr = reinterpret_cast<const uint16_t*>(a.data_ptr<at::BFloat16>());
  const auto* c_ptr = codes.data_ptr<uint8_t>();
  const auto* s_ptr = reinterpret_cast<const uint16_t*>(scales.data_ptr<at::BFloat16>());
  auto* o_ptr = out.data_ptr<at::BFloat16>();
  const int64_t groups = K / group;
  at::parallel_for(0, blocks, 1, [&](int64_t begin, int64_t end) {
    alignas(64) float acc[kBlock];
    for (int64_t nb = begin; nb < end; ++nb) {
      for (int64_t m = 0; m < rows; ++m) {
        block_row(a_ptr + m * K, K, group, c_ptr + nb * K * (kBlock / 2), s_ptr + nb * groups * kBlock, acc);
        at::BFloat16* dst = o_ptr + m * N + nb * kBlock;
        for (int64_t j = 0; j < kBlock; ++j) dst[j] = c10::BFloat16(acc[j]);  // round to nearest even
      }
    }
  });
  return out;
}

bool int4_sym_available() { return cpu::avx512(); }

}  // namespace miaohui
