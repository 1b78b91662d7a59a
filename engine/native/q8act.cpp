// miaohui::q4_q8_mm and miaohui::q8_q8_mm: int4 and int8 weights times activations quantized to int8 per block
// of 32, with integer dot products (AVX512-VNNI vpdpbusd, or AVX2 vpmaddubsw + vpmaddwd), as llama.cpp computes
// its Q4_0/Q4_1/Q8_0 products. Not exact against a bf16-activation product: engine/native/library.py says why
// and what the contract is; tests/engine/quant/test_tiled.py checks the integer sums exactly.
//
// Activations: each row, per block b of 32, d[b] = max|x| / 127, qa = nearest-even(x · (1/d[b])) in -127..127
// (all 0 where the block is 0), and sa[b] = Σ qa over the block.
//
// int4 (q4_q8_mm): out[r] = Σ_b d[b] · (s[r,b] · Σ_j q[r,b,j]·qa[b,j] + m[r,b] · sa[b]), q the 0..15 codes, s the
// per-(row, block) scale and m its offset (w = q·s + m); symmetric weights (Q4_0) store no m: m = -8·s.
// Layout, written once at pack time (engine/quant/tiled.py): tiles of 16 output rows; per tile and block of 32
// input columns 256 bytes, four chunks of 64: byte 4·r + j of chunk i holds row r's column 8i + j in its low
// nibble and column 8i + 4 + j in its high one. So one 64-byte load, masked and shifted, feeds two vpdpbusd
// whose 16 int32 lanes are the tile's 16 rows, each against 4 activation bytes broadcast: no horizontal sums.
// Scales: per tile and block, 16 fp16 scales, then (asymmetric) 16 fp16 offsets.
//
// int8 (q8_q8_mm): out[r] = s[r] · Σ_b d[b] · Σ_j q[r,b,j]·qa[b,j], q in -127..127, s one scale per row (bf16).
// Layout: tiles of 16 rows; per tile 64 bytes per 4 input columns, byte 4·r + j = row r's column 4i + j.
// vpdpbusd multiplies unsigned by signed bytes: the weights are read as q + 128 (one xor) and 128 · sa[b] taken
// off. AVX2 uses the sign trick (|q| times qa with q's sign), whose pair sums stay under 32767.
//
// The fp32 combination runs over blocks in order, each row's the same whatever rows share its weight loads (≤ 12 on
// AVX-512, ≤ 4 on AVX2), so a row's bits do not depend on how many rows a call has: a symmetric int4 block adds
// (s · d) · dot in one fused multiply-add for dot = Σ q·qa - 8·sa (exact), an asymmetric one d · (s · dot + m · sa),
// an int8 one d · dot. Activations are quantized on torch's threads, straight from bf16 (no fp32 copy).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <immintrin.h>

#include "by_rows.h"
#include "cpu_features.h"
#include "ops.h"
#include "row_ops.h"
#include "simd.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

constexpr int64_t kTile = 16;   // output rows per tile
constexpr int64_t kBlock = 32;  // activations per int8 block
// Activation rows sharing a weight load: AVX-512 has 32 registers, room for 12 rows' sums beside a block's 8 weight
// registers (12 rows: 678 GOP/s on a Llama-3.2-1B gate|up of 512 rows against 650 at 8 and 670 at 16, 2-core EPYC);
// AVX2's 16 hold 4 (2 registers a row).
constexpr int kMaxRows = 12;
constexpr int kAvx2Rows = 4;

enum Isa : int64_t { kAuto = 0, kAvx2 = 1, kVnni = 2 };

using miaohui::cpu::avx2;
using miaohui::cpu::vnni;

Isa resolve(int64_t isa) {
  if (isa == kAuto) return vnni() ? kVnni : kAvx2;
  TORCH_CHECK(isa == kAvx2 || isa == kVnni, "isa: 0 (auto), 1 (AVX2) or 2 (AVX512-VNNI)");
  TORCH_CHECK(isa == kAvx2 ? avx2() : vnni(), "this CPU lacks the instructions of isa ", isa);
  return static_cast<Isa>(isa);
}

// Activations of one call, quantized: qa (rows, K) int8; d, sa and sa as fp32 (the asymmetric offset's factor),
// (rows, K/32) each.
struct Quantized {
  std::vector<int8_t> qa;
  std::vector<float> d;
  std::vector<int32_t> sa;
  std::vector<float> saf;
  std::vector<int32_t> bias;  // -8·sa: a symmetric int4 weight's offset, taken off in the integer sum
};

template <typename T>
__attribute__((target("avx2,fma"))) void quantize_block(const T* x, int8_t* q, float* d, int32_t* sa, float* saf,
                                                        int32_t* bias) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 v[4];
  __m256 amax = _mm256_setzero_ps();
  for (int i = 0; i < 4; ++i) {
    v[i] = miaohui::rows::load8(x + 8 * i);  // fp32 as it is, bf16 widened exactly
    amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[i]));
  }
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  const float scale = _mm_cvtss_f32(m4) / 127.0f;
  const float inverse = scale != 0.0f ? 1.0f / scale : 0.0f;
  const __m256 id = _mm256_set1_ps(inverse);
  __m256i n[4];
  for (int i = 0; i < 4; ++i) n[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], id));  // nearest even (MXCSR default)
  const __m256i total = _mm256_add_epi32(_mm256_add_epi32(n[0], n[1]), _mm256_add_epi32(n[2], n[3]));
  __m128i t4 = _mm_add_epi32(_mm256_castsi256_si128(total), _mm256_extracti128_si256(total, 1));
  t4 = _mm_add_epi32(t4, _mm_shuffle_epi32(t4, 0x4E));
  t4 = _mm_add_epi32(t4, _mm_shuffle_epi32(t4, 0xB1));
  // packs interleave 128-bit lanes; the permutation puts the 32 bytes back in column order.
  const __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(n[0], n[1]), _mm256_packs_epi32(n[2], n[3]));
  const __m256i ordered = _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), ordered);
  *d = scale;
  *sa = _mm_cvtsi128_si32(t4);
  *saf = static_cast<float>(*sa);
  *bias = -8 * *sa;
}

// Rows of bf16 or fp32 activations, quantized on torch's threads (each block alone, so the same bits on any count).
template <typename T>
Quantized quantize(const T* x, int64_t rows, int64_t K) {
  const int64_t blocks = K / kBlock, count = rows * blocks;
  Quantized out{std::vector<int8_t>(rows * K), std::vector<float>(count), std::vector<int32_t>(count),
                std::vector<float>(count), std::vector<int32_t>(count)};
  at::parallel_for(0, count, 2048, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      quantize_block(x + i * kBlock, out.qa.data() + i * kBlock, out.d.data() + i, out.sa.data() + i,
                     out.saf.data() + i, out.bias.data() + i);
  });
  return out;
}

// The activations of a (rows, K) bf16 or fp32 tensor, quantized.
Quantized quantize(const at::Tensor& a) {
  const at::Tensor rows = a.contiguous();
  if (rows.scalar_type() == at::kBFloat16) return quantize(rows.data_ptr<at::BFloat16>(), rows.size(0), rows.size(1));
  return quantize(rows.data_ptr<float>(), rows.size(0), rows.size(1));
}

// The next blocks of this tile, 1,024 bytes ahead (``lines`` of 64 bytes: 4 for int4's 256-byte blocks, 8 for int8's
// 512), asked for before they are read; one home for all four tile loops.
inline void prefetch_ahead(const void* block, int lines) {
  const char* p = static_cast<const char*>(block) + 1024;
  for (int i = 0; i < lines; ++i) _mm_prefetch(p + 64 * i, _MM_HINT_T0);
}

// 4 activation bytes as one int32, read in place: an aliasing-safe lvalue (not a copy through memcpy) lets the
// compiler fold the broadcast into vpdpbusd's memory operand ({1to16}), one instruction instead of two.
typedef int32_t __attribute__((may_alias, aligned(4))) word_t;
inline int32_t word(const int8_t* p) { return *reinterpret_cast<const word_t*>(p); }

// acc + w (unsigned bytes) · the 4 signed activation bytes at p broadcast to every lane, the broadcast as the
// instruction's memory operand: GCC does not fold _mm512_set1_epi32 of a load into vpdpbusd, and the separate
// vpbroadcastd per product was a third of the int4 tile's instructions.
__attribute__((target("avx512f,avx512vnni"))) inline __m512i dpbusd_word(__m512i acc, __m512i w, const int8_t* p) {
  asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*reinterpret_cast<const word_t*>(p)));
  return acc;
}

// ---- int4, AVX512-VNNI: one tile, R activation rows, every block. A symmetric weight's offset (m = -8·s) is taken
// off in the integer sum (Σ q·qa - 8·sa, exact), so each row and block costs one conversion, one multiply and one
// fused multiply-add beside its 8 dot products; an asymmetric one computes d · (s · dot + m · sa).
template <int R>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,fma,f16c"))) void q4_tile_vnni(
    const uint8_t* codes, const uint16_t* scales, int S, int64_t blocks, const Quantized& a, int64_t row0,
    int64_t K, float* out) {
  const __m512i low = _mm512_set1_epi8(0x0F);
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* c = codes + b * 256;
    prefetch_ahead(c, 4);
    __m512i w[8];
    for (int i = 0; i < 4; ++i) {
      const __m512i v = _mm512_loadu_si512(c + 64 * i);
      w[2 * i] = _mm512_and_si512(v, low);
      w[2 * i + 1] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
    }
    const uint16_t* sb = scales + b * S * kTile;
    const __m512 s = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb)));
    const __m512 m = S == 2 ? _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb + kTile)))
                            : _mm512_setzero_ps();
    for (int r = 0; r < R; ++r) {
      const int64_t ix = (row0 + r) * (K / kBlock) + b;
      const int8_t* q = a.qa.data() + ix * kBlock;
      // One chain of 8 per row: R rows keep R chains in flight.
      __m512i sum = S == 2 ? _mm512_setzero_si512() : _mm512_set1_epi32(a.bias[ix]), other = _mm512_setzero_si512();
      for (int i = 0; i < 4; ++i) {
        sum = dpbusd_word(sum, w[2 * i], q + 8 * i);
        other = dpbusd_word(other, w[2 * i + 1], q + 8 * i + 4);
      }
      const __m512 dot = _mm512_cvtepi32_ps(_mm512_add_epi32(sum, other));
      const __m512 d = _mm512_set1_ps(a.d[ix]);
      if (S == 2)  // d · (s · dot + m · sa): the offset joins before d, as the reference's one term per block
        acc[r] = _mm512_fmadd_ps(_mm512_fmadd_ps(s, dot, _mm512_mul_ps(m, _mm512_set1_ps(a.saf[ix]))), d, acc[r]);
      else
        acc[r] = _mm512_fmadd_ps(dot, _mm512_mul_ps(s, d), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) _mm512_storeu_ps(out + r * kTile, acc[r]);
}

// A block's scales s and offsets m of rows 8h..8h+7 (h: the half tile), fp32: the stored fp16 offsets, or -8·s for a
// symmetric weight (S == 1). The AVX2 product and the dense weight (q4_dense) read them alike.
__attribute__((target("avx2,fma,f16c"))) inline void half_scales(const uint16_t* sb, int S, int h, __m256& s,
                                                                 __m256& m) {
  s = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sb + 8 * h)));
  m = S == 2 ? _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sb + kTile + 8 * h)))
             : _mm256_mul_ps(s, _mm256_set1_ps(-8.0f));
}

// ---- int4, AVX2: the same tiles as two halves of 8 rows. 16 products per int16 lane stay under 32767. The same
// arithmetic as the VNNI tile per output (exact integer sums, then the same fp32 operations in the same block order),
// so the same bits. One half's block: R int16 sums beside one chunk's two unpacked registers.
template <int R>
__attribute__((target("avx2,fma,f16c"))) inline void q4_half_avx2(const uint8_t* c, const uint16_t* sb, int S, int h,
                                                                  const Quantized& a, int64_t ix0, int64_t K,
                                                                  __m256 (&acc)[R]) {
  const __m256i low = _mm256_set1_epi8(0x0F);
  const int64_t per_row = K / kBlock;
  const int8_t* q0 = a.qa.data() + ix0 * kBlock;  // row r's block: q0 + r · K
  __m256i sum16[R];
  for (int r = 0; r < R; ++r) sum16[r] = _mm256_setzero_si256();
  for (int i = 0; i < 4; ++i) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + 64 * i + 32 * h));
    const __m256i lo = _mm256_and_si256(v, low), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
    for (int r = 0; r < R; ++r) {
      const int8_t* q = q0 + r * K + 8 * i;
      sum16[r] = _mm256_add_epi16(sum16[r], _mm256_maddubs_epi16(lo, _mm256_set1_epi32(word(q))));
      sum16[r] = _mm256_add_epi16(sum16[r], _mm256_maddubs_epi16(hi, _mm256_set1_epi32(word(q + 4))));
      // Keeps the sum a chain: GCC otherwise reassociates the integer adds into a tree, computes all 8·R products
      // first and spills them (measured: most of the tile's loads and stores were such spills).
      asm("" : "+x"(sum16[r]));
    }
  }
  __m256 s, m;  // m only for an asymmetric block: a symmetric one's offset is in the integer sum
  half_scales(sb, S, h, s, m);
  for (int r = 0; r < R; ++r) {
    const int64_t ix = ix0 + r * per_row;
    __m256i sum = _mm256_madd_epi16(sum16[r], _mm256_set1_epi16(1));
    const __m256 d = _mm256_broadcast_ss(&a.d[ix]);
    if (S == 2) {
      const __m256 dot = _mm256_cvtepi32_ps(sum);
      acc[r] = _mm256_fmadd_ps(_mm256_fmadd_ps(s, dot, _mm256_mul_ps(m, _mm256_broadcast_ss(&a.saf[ix]))), d, acc[r]);
    } else {
      sum = _mm256_add_epi32(sum, _mm256_set1_epi32(a.bias[ix]));
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(s, d), acc[r]);
    }
  }
}

// One tile, R activation rows, every block. A decode row (R ≤ 2) takes both halves of a block at once, so each code
// byte is read from memory once in order; a prompt's rows take one half over every block, then the other (the tile's
// codes stay in cache), so their 2·R sums fit AVX2's 16 registers without spills.
template <int R>
__attribute__((target("avx2,fma,f16c"))) void q4_tile_avx2(
    const uint8_t* codes, const uint16_t* scales, int S, int64_t blocks, const Quantized& a, int64_t row0,
    int64_t K, float* out) {
  const int64_t ix0 = row0 * (K / kBlock);
  // Each half's sums are declared where they live, so that they stay in registers; no lambda for the calls: a lambda
  // does not take this function's target, so it would not inline them.
  if constexpr (R <= 2) {
    __m256 acc0[R], acc1[R];
    for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < blocks; ++b) {
      prefetch_ahead(codes + b * 256, 4);
      q4_half_avx2<R>(codes + b * 256, scales + b * S * kTile, S, 0, a, ix0 + b, K, acc0);
      q4_half_avx2<R>(codes + b * 256, scales + b * S * kTile, S, 1, a, ix0 + b, K, acc1);
    }
    for (int r = 0; r < R; ++r) {
      _mm256_storeu_ps(out + r * kTile, acc0[r]);
      _mm256_storeu_ps(out + r * kTile + 8, acc1[r]);
    }
  } else {
    for (int h = 0; h < 2; ++h) {
      __m256 acc[R];
      for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
      for (int64_t b = 0; b < blocks; ++b) {
        if (h == 0) prefetch_ahead(codes + b * 256, 4);
        q4_half_avx2<R>(codes + b * 256, scales + b * S * kTile, S, h, a, ix0 + b, K, acc);
      }
      for (int r = 0; r < R; ++r) _mm256_storeu_ps(out + r * kTile + 8 * h, acc[r]);
    }
  }
}

// ---- int8, AVX512-VNNI: weights read as q + 128 (xor 0x80), 128·sa taken off each block's sum.
template <int R>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,fma"))) void q8_tile_vnni(
    const int8_t* tiles, int64_t blocks, const Quantized& a, int64_t row0, int64_t K, float* out) {
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const int8_t* t = tiles + b * 512;
    prefetch_ahead(t, 8);
    __m512i w[8];
    for (int i = 0; i < 8; ++i) w[i] = _mm512_xor_si512(_mm512_loadu_si512(t + 64 * i), bias);
    for (int r = 0; r < R; ++r) {
      const int64_t ix = (row0 + r) * (K / kBlock) + b;
      const int8_t* q = a.qa.data() + ix * kBlock;
      __m512i i0 = _mm512_set1_epi32(-128 * a.sa[ix]), i1 = _mm512_setzero_si512();
      for (int i = 0; i < 8; i += 2) {
        i0 = dpbusd_word(i0, w[i], q + 4 * i);
        i1 = dpbusd_word(i1, w[i + 1], q + 4 * i + 4);
      }
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(i0, i1)), _mm512_set1_ps(a.d[ix]), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) _mm512_storeu_ps(out + r * kTile, acc[r]);
}

// ---- int8, AVX2: |q| times qa carrying q's sign (vpsignb); a pair sum is at most 2·127·127 < 32767. One half's
// block, R rows, a column quad at a time (its weights and their absolute values shared by the rows).
template <int R>
__attribute__((target("avx2,fma"))) inline void q8_half_avx2(const int8_t* t, int h, const Quantized& a, int64_t ix0,
                                                             int64_t K, __m256 (&acc)[R]) {
  const __m256i ones = _mm256_set1_epi16(1);
  const int8_t* q0 = a.qa.data() + ix0 * kBlock;  // row r's block: q0 + r · K
  __m256i sum[R];
  for (int r = 0; r < R; ++r) sum[r] = _mm256_setzero_si256();
  for (int i = 0; i < 8; ++i) {
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(t + 64 * i + 32 * h));
    const __m256i magnitude = _mm256_abs_epi8(w);
    for (int r = 0; r < R; ++r) {
      const __m256i signed_a = _mm256_sign_epi8(_mm256_set1_epi32(word(q0 + r * K + 4 * i)), w);
      sum[r] = _mm256_add_epi32(sum[r], _mm256_madd_epi16(_mm256_maddubs_epi16(magnitude, signed_a), ones));
      asm("" : "+x"(sum[r]));  // a chain, not a tree of spilled products (see q4_half_avx2)
    }
  }
  for (int r = 0; r < R; ++r)
    acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[r]), _mm256_broadcast_ss(&a.d[ix0 + r * (K / kBlock)]), acc[r]);
}

// One tile, R rows: as q4_tile_avx2, both halves of a block at once for decode rows, one half at a time for more.
template <int R>
__attribute__((target("avx2,fma"))) void q8_tile_avx2(
    const int8_t* tiles, int64_t blocks, const Quantized& a, int64_t row0, int64_t K, float* out) {
  const int64_t ix0 = row0 * (K / kBlock);
  if constexpr (R <= 2) {
    __m256 acc0[R], acc1[R];
    for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < blocks; ++b) {
      prefetch_ahead(tiles + b * 512, 8);
      q8_half_avx2<R>(tiles + b * 512, 0, a, ix0 + b, K, acc0);
      q8_half_avx2<R>(tiles + b * 512, 1, a, ix0 + b, K, acc1);
    }
    for (int r = 0; r < R; ++r) {
      _mm256_storeu_ps(out + r * kTile, acc0[r]);
      _mm256_storeu_ps(out + r * kTile + 8, acc1[r]);
    }
  } else {
    for (int h = 0; h < 2; ++h) {
      __m256 acc[R];
      for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
      for (int64_t b = 0; b < blocks; ++b) {
        if (h == 0) prefetch_ahead(tiles + b * 512, 8);
        q8_half_avx2<R>(tiles + b * 512, h, a, ix0 + b, K, acc);
      }
      for (int r = 0; r < R; ++r) _mm256_storeu_ps(out + r * kTile + 8 * h, acc[r]);
    }
  }
}

// 8 fp32 results stored as fp32, or as bf16 rounded to nearest even (finite values: the kernels' outputs).
__attribute__((target("avx2,fma,f16c"))) inline void store8(float* out, __m256 v) { _mm256_storeu_ps(out, v); }
__attribute__((target("avx2,fma,f16c"))) inline void store8(at::BFloat16* out, __m256 v) {  // nearest even, finite v
  const __m256i bits = _mm256_castps_si256(v);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  const __m256i top = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x7FFF)), odd), 16);
  const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(top), _mm256_extracti128_si256(top, 1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), packed);
}

// One row's 16 results of tile columns n0.. (``width`` of them real) into ``out``, times the int8 per-row scales where
// given (bf16, widened exactly); 8 at a time where the tile is whole.
template <typename T>
__attribute__((target("avx2,fma,f16c"))) void write_row(const float* acc, int64_t width, const uint16_t* row_scale,
                                                        T* out) {
  if (width == kTile) {
    for (int h = 0; h < 2; ++h) {
      __m256 v = _mm256_loadu_ps(acc + 8 * h);
      if (row_scale)
        v = _mm256_mul_ps(v, miaohui::simd::bf16x8_to_fp32(
                                 _mm_loadu_si128(reinterpret_cast<const __m128i*>(row_scale + 8 * h))));
      store8(out + 8 * h, v);
    }
    return;
  }
  for (int64_t j = 0; j < width; ++j) {
    const float v = row_scale ? acc[j] * miaohui::simd::bf16_to_fp32(row_scale[j]) : acc[j];
    if constexpr (std::is_same_v<T, float>) out[j] = v;
    else out[j] = c10::BFloat16(v);  // rounded to nearest even
  }
}

// Runs ``tile(t, row0, R, out16)`` over every tile (parallel) and every chunk of ≤ ``per`` (≤ kMaxRows) rows, then
// scales each output (``row_scale``: the int8 per-row scales, or none) and writes it in the output's dtype.
template <typename Tile>
at::Tensor run(const at::Tensor& a, int64_t tiles, int64_t out_features, Tile tile, const uint16_t* row_scale,
               int per) {
  const bool bf16 = a.scalar_type() == at::kBFloat16;
  TORCH_CHECK(a.dim() == 2 && (bf16 || a.scalar_type() == at::kFloat), "a: (rows, K) bf16 or fp32");
  const int64_t rows = a.size(0), K = a.size(1);
  TORCH_CHECK(K % kBlock == 0, "K must be a multiple of 32");
  const Quantized q = quantize(a);
  at::Tensor out = at::empty({rows, out_features}, a.options().memory_format(at::MemoryFormat::Contiguous));
  auto fill = [&](auto* o) {
    at::parallel_for(0, tiles, 1, [&](int64_t begin, int64_t end) {
      alignas(64) float acc[kMaxRows * kTile];
      for (int64_t t = begin; t < end; ++t) {
        const int64_t n0 = t * kTile, width = std::min(kTile, out_features - n0);
        for (int64_t row0 = 0; row0 < rows; row0 += per) {
          const int count = static_cast<int>(std::min<int64_t>(per, rows - row0));
          tile(t, row0, count, q, K, acc);
          for (int r = 0; r < count; ++r)
            write_row(acc + r * kTile, width, row_scale ? row_scale + n0 : nullptr, o + (row0 + r) * out_features + n0);
        }
      }
    });
  };
  if (bf16) fill(out.data_ptr<at::BFloat16>());
  else fill(out.data_ptr<float>());
  return out;
}

using miaohui::by_rows;

template <int R> struct Q4Vnni { template <typename... A> static void call(A&&... a) { q4_tile_vnni<R>(std::forward<A>(a)...); } };
template <int R> struct Q4Avx2 { template <typename... A> static void call(A&&... a) { q4_tile_avx2<R>(std::forward<A>(a)...); } };
template <int R> struct Q8Vnni { template <typename... A> static void call(A&&... a) { q8_tile_vnni<R>(std::forward<A>(a)...); } };
template <int R> struct Q8Avx2 { template <typename... A> static void call(A&&... a) { q8_tile_avx2<R>(std::forward<A>(a)...); } };

// The int4 tiles' codes and scales as pack_int4 (engine/quant/tiled.py) lays them out, or one line saying what is off.
void check_int4(const at::Tensor& codes, const at::Tensor& scales) {
  TORCH_CHECK(codes.dim() == 3 && codes.size(2) == 256 && codes.scalar_type() == at::kByte && codes.is_contiguous(),
              "codes: contiguous (tiles, K/32, 256) uint8");
  const int64_t tiles = codes.size(0), blocks = codes.size(1);
  TORCH_CHECK(scales.dim() == 4 && scales.size(0) == tiles && scales.size(1) == blocks && scales.size(3) == kTile &&
                  (scales.size(2) == 1 || scales.size(2) == 2) && scales.scalar_type() == at::kHalf &&
                  scales.is_contiguous(), "scales: contiguous (tiles, K/32, 1 or 2, 16) fp16");
}

at::Tensor q4_q8_mm_op(const at::Tensor& a, const at::Tensor& codes, const at::Tensor& scales, int64_t out_features,
                       int64_t isa_in) {
  const Isa isa = resolve(isa_in);
  check_int4(codes, scales);
  const int64_t tiles = codes.size(0), blocks = codes.size(1);
  TORCH_CHECK(a.dim() == 2 && a.size(1) == blocks * kBlock, "a: (rows, K) with K = 32 · codes.size(1)");
  TORCH_CHECK(out_features > (tiles - 1) * kTile && out_features <= tiles * kTile, "out_features does not fit tiles");
  const auto* c = codes.data_ptr<uint8_t>();
  const auto* s = reinterpret_cast<const uint16_t*>(scales.data_ptr<at::Half>());
  const int S = static_cast<int>(scales.size(2));
  return run(a, tiles, out_features, [&](int64_t t, int64_t row0, int count, const Quantized& q, int64_t K,
                                         float* acc) {
    const uint8_t* tc = c + t * blocks * 256;
    const uint16_t* ts = s + t * blocks * S * kTile;
    if (isa == kVnni) by_rows<Q4Vnni, kMaxRows>(count, tc, ts, S, blocks, q, row0, K, acc);
    else by_rows<Q4Avx2, kAvx2Rows>(count, tc, ts, S, blocks, q, row0, K, acc);
  }, nullptr, isa == kVnni ? kMaxRows : kAvx2Rows);
}

at::Tensor q8_q8_mm_op(const at::Tensor& a, const at::Tensor& tiles_in, const at::Tensor& scales, int64_t out_features,
                       int64_t isa_in) {
  const Isa isa = resolve(isa_in);
  TORCH_CHECK(tiles_in.dim() == 3 && tiles_in.size(2) == 64 && tiles_in.scalar_type() == at::kChar &&
                  tiles_in.is_contiguous(), "tiles: contiguous (tiles, K/4, 64) int8");
  const int64_t tiles = tiles_in.size(0), K = tiles_in.size(1) * 4, blocks = K / kBlock;
  TORCH_CHECK(K % kBlock == 0 && a.dim() == 2 && a.size(1) == K, "a: (rows, K), K a multiple of 32");
  TORCH_CHECK(scales.dim() == 1 && scales.numel() >= out_features && scales.scalar_type() == at::kBFloat16 &&
                  scales.is_contiguous(), "scales: (≥ out_features,) bf16");
  TORCH_CHECK(out_features > (tiles - 1) * kTile && out_features <= tiles * kTile, "out_features does not fit tiles");
  const auto* w = tiles_in.data_ptr<int8_t>();
  return run(a, tiles, out_features, [&](int64_t t, int64_t row0, int count, const Quantized& q, int64_t Kq,
                                         float* acc) {
    const int8_t* tw = w + t * K * kTile;
    if (isa == kVnni) by_rows<Q8Vnni, kMaxRows>(count, tw, blocks, q, row0, Kq, acc);
    else by_rows<Q8Avx2, kAvx2Rows>(count, tw, blocks, q, row0, Kq, acc);
  }, reinterpret_cast<const uint16_t*>(scales.data_ptr<at::BFloat16>()), isa == kVnni ? kMaxRows : kAvx2Rows);
}

// The dense weight of int4 tiles for prefill's GEMM: out (K, tiles·16) contiguous in bf16 or fp32, out[k, n] =
// round(m + q·s) with q·s exact in fp32 (a 4-bit code times an fp16 scale), so one rounding to fp32 then one to the
// dtype (nearest even): the bits of engine/quant/tiled.py's torch form (Int4Q8Linear.dequantize's reference), which
// the test checks. Why by hand: the torch form spends ~20 ns a weight in permutes and casts, more than the bf16 GEMM it
// feeds (measured on the Llama-3.2-1B-shaped gate_up, 1024 rows, AMX: 370 ms against the GEMM's 135 ms).
// Per (tile, block) and chunk i, the 16 rows' bytes j are one 32-bit word per row: shifted right by 8j (+4 for the high
// nibble, column 8i+4+j) and masked, 8 rows per AVX2 register.
template <typename T>
__attribute__((target("avx2,fma,f16c"))) void dense_tile_block(const uint8_t* codes, const uint16_t* scales, int S,
                                                               int64_t width, T* out) {
  for (int half = 0; half < 2; ++half) {  // rows 0..7, then 8..15
    __m256 s, m;
    half_scales(scales, S, half, s, m);
    for (int i = 0; i < 4; ++i) {
      const __m256i words = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + 64 * i + 32 * half));
      for (int j = 0; j < 4; ++j)
        for (int high = 0; high < 2; ++high) {
          const __m256i q = _mm256_and_si256(_mm256_srli_epi32(words, 8 * j + 4 * high), _mm256_set1_epi32(0xF));
          const int64_t column = 8 * i + 4 * high + j;
          store8(out + column * width + 8 * half, _mm256_add_ps(m, _mm256_mul_ps(_mm256_cvtepi32_ps(q), s)));
        }
    }
  }
}

at::Tensor q4_dense_op(const at::Tensor& codes, const at::Tensor& scales, at::ScalarType dtype) {
  TORCH_CHECK(avx2(), "q4_dense needs AVX2");
  check_int4(codes, scales);
  const int64_t tiles = codes.size(0), blocks = codes.size(1), width = tiles * kTile;
  TORCH_CHECK(dtype == at::kBFloat16 || dtype == at::kFloat, "dtype: bf16 or fp32");
  at::Tensor out = at::empty({blocks * kBlock, width}, codes.options().dtype(dtype));
  const auto* c = codes.data_ptr<uint8_t>();
  const auto* sc = reinterpret_cast<const uint16_t*>(scales.data_ptr<at::Half>());
  const int S = static_cast<int>(scales.size(2));
  auto fill = [&](auto* o) {
    at::parallel_for(0, blocks, 1, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b)
        for (int64_t t = 0; t < tiles; ++t)
          dense_tile_block(c + (t * blocks + b) * 256, sc + (t * blocks + b) * S * kTile, S, width,
                           o + b * kBlock * width + t * kTile);
    });
  };
  if (dtype == at::kBFloat16) fill(out.data_ptr<at::BFloat16>());
  else fill(out.data_ptr<float>());
  return out;
}

// The activation quantization alone, for tests: (qa (rows, K) int8, d (rows, K/32) fp32, sa (rows, K/32) int32).
std::tuple<at::Tensor, at::Tensor, at::Tensor> quantize_op(const at::Tensor& a_in) {
  TORCH_CHECK(avx2(), "q8_quantize needs AVX2");
  TORCH_CHECK(a_in.dim() == 2 && a_in.size(1) % kBlock == 0, "a: (rows, K), K a multiple of 32");
  const at::Tensor a = a_in.scalar_type() == at::kBFloat16 ? a_in : a_in.to(at::kFloat);
  const int64_t rows = a.size(0), K = a.size(1);
  Quantized q = quantize(a);
  at::Tensor qa = at::empty({rows, K}, a.options().dtype(at::kChar));
  at::Tensor d = at::empty({rows, K / kBlock}, a.options().dtype(at::kFloat));
  at::Tensor sa = at::empty({rows, K / kBlock}, a.options().dtype(at::kInt));
  std::memcpy(qa.data_ptr<int8_t>(), q.qa.data(), q.qa.size());
  std::memcpy(d.data_ptr<float>(), q.d.data(), q.d.size() * sizeof(float));
  std::memcpy(sa.data_ptr<int32_t>(), q.sa.data(), q.sa.size() * sizeof(int32_t));
  return {qa, d, sa};
}

}  // namespace

namespace miaohui {

at::Tensor q4_q8_mm(const at::Tensor& a, const at::Tensor& codes, const at::Tensor& scales, int64_t out_features,
                    int64_t isa) {
  return q4_q8_mm_op(a, codes, scales, out_features, isa);
}

at::Tensor q8_q8_mm(const at::Tensor& a, const at::Tensor& tiles, const at::Tensor& scales, int64_t out_features,
                    int64_t isa) {
  return q8_q8_mm_op(a, tiles, scales, out_features, isa);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> q8_quantize(const at::Tensor& a) { return quantize_op(a); }

at::Tensor q4_dense(const at::Tensor& codes, const at::Tensor& scales, at::ScalarType dtype) {
  return q4_dense_op(codes, scales, dtype);
}

// The best instruction set this CPU offers the ops: 2 (AVX512-VNNI), 1 (AVX2 with FMA and F16C) or 0 (none).
int64_t q8act_isa() { return vnni() ? kVnni : avx2() ? kAvx2 : 0; }

// How many threads the ops' at::parallel_for runs on: torch's thread count where the library was compiled with
// OpenMP (engine/native/library.py's -fopenmp), 1 where it was not. Without it at::parallel_for runs serially, and the
// decode step's products used one core of two while llama.cpp used both (found 2026-12-03).
int64_t q8act_threads() {
  std::atomic<int64_t> most{1};
  at::parallel_for(0, 1024, 1, [&](int64_t, int64_t) {
    const int64_t seen = at::get_thread_num() + 1;
    int64_t was = most.load();
    while (seen > was && !most.compare_exchange_weak(was, seen)) {
    }
  });
  return most.load();
}

}  // namespace miaohui
