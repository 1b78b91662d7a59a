// miaohui::prefill_attention: causal attention of a prompt chunk over the KV cache, in one pass per block of keys
// (flash attention's online softmax), on AVX-512 BF16 dot products, or where the CPU has none (isa 1) on AVX2's fp32
// multiply-adds. Called by the fast runner's prefill (engine/executor/prompt_attention.py) in place of torch's
// scaled_dot_product_attention for a quantized model in bf16, a layer without sliding window, soft cap or extra mask.
//
// Why by hand: torch's CPU SDPA kernel, given a chunk after the first (a boolean mask, since the chunk starts past
// position 0), computes every query against every key and masks afterwards, and runs at ~140 GFLOP/s of ~460 that
// AVX-512 BF16 gives two cores (measured on a 2-core EPYC, Llama-3.2-1B shapes: 34% of a 3,264-token prompt's TTFT).
// Here a block of keys wholly past a query's position is never read, and both products are vdpbf16ps.
//
// What it computes, for query i of the chunk (position start + i) and head h (KV head h / (H / KV)):
// - scores s_j = (q · k_j) in fp32 for keys j = 0..start + i: bf16 products exact, summed by vdpbf16ps in pairs;
// - softmax in base 2 over s_j · scaling · log2(e), online per block of 64 keys (running max and sum, the partial
//   output rescaled when the max grows), 2^x by a degree-6 polynomial on the nearest-integer split (~1e-7 relative);
//   the AVX2 path in base e with the decode step's exp8 (row_ops.h);
// - the probabilities rounded to bf16 (nearest even) and multiplied into the values by vdpbf16ps in fp32 (AVX2: kept
//   in fp32, fused multiply-adds); the output divided by the sum and rounded to bf16 once.
// So it is SDPA within bf16 rounding of the probabilities, not its bits: tests/engine/native/test_prefill_attention.py
// holds it to an fp32 reference, and the runner's tests compare whole prompts with transformers' forward.
//
// Layout, per call: K packed per KV head as [key / 16][D / 2][16 keys][2] (one zmm: 16 keys' dims 2p, 2p+1) and V as
// [key / 2][D][2] (one zmm: 16 dims of two keys), keys padded to a multiple of 64 with zeros (masked, never
// weighed).
// Work: rows are (position, head of the group) pairs of one KV head, 4 at a time sharing every K and V load; groups of
// rows are taken from one shared counter, one KV head after another (latest positions first within each), so both
// threads read the same K and V and finish together.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "by_rows.h"
#include "cpu_features.h"
#include "ops.h"
#include "row_ops.h"
#include "simd.h"

namespace {

constexpr int64_t kBlockKeys = 64;  // keys per online-softmax step: four zmm of scores
constexpr int kRows = 4;            // query rows sharing each K and V load
constexpr int64_t kRowsPerItem = 16;  // rows per unit of work taken from the counter

struct Shape {
  int64_t heads, kv_heads, group, n, start, dim, keys_padded;
};

// K of one KV head for keys 0..keys-1 into [key / 16][D / 2][16][2], zeros past ``keys``.
void pack_keys(const uint16_t* k, int64_t key_stride, int64_t keys, int64_t dim, int64_t padded, uint32_t* out) {
  const int64_t pairs = dim / 2;
  for (int64_t block = 0; block < padded / 16; ++block)
    for (int64_t p = 0; p < pairs; ++p) {
      uint32_t* dst = out + (block * pairs + p) * 16;
      for (int64_t j = 0; j < 16; ++j) {
        const int64_t key = block * 16 + j;
        uint32_t word = 0;
        if (key < keys) std::memcpy(&word, k + key * key_stride + 2 * p, sizeof word);
        dst[j] = word;
      }
    }
}

// V of one KV head into [key / 2][D][2], zeros past ``keys``.
void pack_values(const uint16_t* v, int64_t key_stride, int64_t keys, int64_t dim, int64_t padded, uint16_t* out) {
  for (int64_t pair = 0; pair < padded / 2; ++pair) {
    uint16_t* dst = out + pair * dim * 2;
    const int64_t k0 = 2 * pair, k1 = k0 + 1;
    for (int64_t d = 0; d < dim; ++d) {
      dst[2 * d] = k0 < keys ? v[k0 * key_stride + d] : 0;
      dst[2 * d + 1] = k1 < keys ? v[k1 * key_stride + d] : 0;
    }
  }
}

// 2^x for x ≤ 0 (clamped below at -150, where it is 0 in fp32): x = n + f, |f| ≤ 1/2, 2^f by its Taylor polynomial.
__attribute__((target("avx512f"))) inline __m512 exp2_16(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-150.0f));
  const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(x, n);
  __m512 p = _mm512_set1_ps(1.5403530393381606e-4f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.3333558146428443e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.6181291076284770e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5504108664821580e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022650695910071e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314718055994531e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

inline uint32_t word_at(const uint16_t* p) {
  uint32_t w;
  std::memcpy(&w, p, sizeof w);
  return w;
}

// 2^x of one value, by exp2_16 (a libm call per row and block cost more than the block's softmax).
__attribute__((target("avx512f"))) inline float exp2_one(float x) {
  return _mm512_cvtss_f32(exp2_16(_mm512_set1_ps(x)));
}

// One group of R ≤ 4 rows of KV head g (query row r: q_rows[r], its last visible key limits[r]); writes their outputs.
template <int R>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,fma"))) void attend_rows(
    const Shape& s, const uint16_t* const* q_rows, const int64_t* limits, const uint32_t* kp, const uint16_t* vp,
    float scale2, uint16_t* const* out_rows) {
  const int64_t pairs = s.dim / 2, chunks = s.dim / 16;
  alignas(64) float o[R][256];
  alignas(64) uint16_t p_bf16[R][kBlockKeys];
  float m[R], corr[R];
  __m512 l[R];
  for (int r = 0; r < R; ++r) {
    m[r] = -std::numeric_limits<float>::infinity();
    l[r] = _mm512_setzero_ps();
    std::memset(o[r], 0, sizeof(float) * s.dim);
  }
  int64_t last = 0;
  for (int r = 0; r < R; ++r) last = std::max(last, limits[r]);
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (int64_t k0 = 0; k0 <= last; k0 += kBlockKeys) {
    // Scores of the block: sc[r][b] keys k0 + 16b .. k0 + 16b + 15.
    constexpr int NB = kBlockKeys / 16;
    __m512 sc[R][NB];
    for (int r = 0; r < R; ++r)
      for (int b = 0; b < NB; ++b) sc[r][b] = _mm512_setzero_ps();
    const uint32_t* kb = kp + (k0 / 16) * pairs * 16;
    for (int64_t p = 0; p < pairs; ++p) {
      __m512bh kz[NB];
      for (int b = 0; b < NB; ++b) kz[b] = (__m512bh)_mm512_loadu_si512(kb + (b * pairs + p) * 16);
      for (int r = 0; r < R; ++r) {
        const __m512bh qb = (__m512bh)_mm512_set1_epi32(static_cast<int>(word_at(q_rows[r] + 2 * p)));
        for (int b = 0; b < NB; ++b) sc[r][b] = _mm512_dpbf16_ps(sc[r][b], qb, kz[b]);
      }
    }
    // Online softmax per row: masked keys (past the row's position, or padding) weigh exactly 0.
    for (int r = 0; r < R; ++r) {
      __mmask16 valid[NB];
      __m512 most = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
      const bool crossing = k0 + kBlockKeys - 1 > limits[r];
      const __m512i top_key = _mm512_set1_epi32(static_cast<int>(limits[r] - k0));
      for (int b = 0; b < NB; ++b) {
        sc[r][b] = _mm512_mul_ps(sc[r][b], _mm512_set1_ps(scale2));
        valid[b] = crossing ? _mm512_cmple_epi32_mask(_mm512_add_epi32(lane, _mm512_set1_epi32(16 * b)), top_key)
                            : static_cast<__mmask16>(0xFFFF);
        most = _mm512_mask_max_ps(most, valid[b], most, sc[r][b]);
      }
      const float next = std::max(m[r], _mm512_reduce_max_ps(most));
      // The running max grew: the sums so far shrink by 2^(old - new) (0 before the first block, where m = -inf).
      corr[r] = m[r] == next ? 1.0f : m[r] == -std::numeric_limits<float>::infinity() ? 0.0f : exp2_one(m[r] - next);
      m[r] = next;
      const __m512 top = _mm512_set1_ps(next);
      __m512 sum = _mm512_setzero_ps();
      for (int b = 0; b < NB; b += 2) {
        const __m512 p0 = _mm512_maskz_mov_ps(valid[b], exp2_16(_mm512_sub_ps(sc[r][b], top)));
        const __m512 p1 = _mm512_maskz_mov_ps(valid[b + 1], exp2_16(_mm512_sub_ps(sc[r][b + 1], top)));
        sum = _mm512_add_ps(sum, _mm512_add_ps(p0, p1));
        _mm512_storeu_si512(p_bf16[r] + 16 * b, (__m512i)_mm512_cvtne2ps_pbh(p1, p0));  // keys in order, nearest even
      }
      l[r] = _mm512_fmadd_ps(l[r], _mm512_set1_ps(corr[r]), sum);
    }
    // o = o · corr + P · V over the block's 16 key pairs, 32 dims at a time (2·R independent sums in flight).
    const uint16_t* vb = vp + (k0 / 2) * s.dim * 2;
    for (int64_t c = 0; c < chunks; c += 2) {
      __m512 acc[R][2];
      for (int r = 0; r < R; ++r) {
        const __m512 f = _mm512_set1_ps(corr[r]);
        acc[r][0] = _mm512_mul_ps(_mm512_load_ps(o[r] + 16 * c), f);
        acc[r][1] = _mm512_mul_ps(_mm512_load_ps(o[r] + 16 * c + 16), f);
      }
      for (int64_t j = 0; j < kBlockKeys / 2; ++j) {
        const __m512bh v0 = (__m512bh)_mm512_loadu_si512(vb + (j * s.dim + 16 * c) * 2);
        const __m512bh v1 = (__m512bh)_mm512_loadu_si512(vb + (j * s.dim + 16 * c + 16) * 2);
        for (int r = 0; r < R; ++r) {
          const __m512bh pb = (__m512bh)_mm512_set1_epi32(static_cast<int>(word_at(p_bf16[r] + 2 * j)));
          acc[r][0] = _mm512_dpbf16_ps(acc[r][0], pb, v0);
          acc[r][1] = _mm512_dpbf16_ps(acc[r][1], pb, v1);
        }
      }
      for (int r = 0; r < R; ++r) {
        _mm512_store_ps(o[r] + 16 * c, acc[r][0]);
        _mm512_store_ps(o[r] + 16 * c + 16, acc[r][1]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(l[r]));
    for (int64_t c = 0; c < chunks; ++c) {
      const __m256bh v = _mm512_cvtneps_pbh(_mm512_mul_ps(_mm512_load_ps(o[r] + 16 * c), inv));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out_rows[r] + 16 * c), (__m256i)v);
    }
  }
}

// ---- AVX2 (no bf16 dot products): the same blocks in fp32 with fused multiply-adds, 8 lanes. K packed per KV head
// as [key / 8][D][8] fp32 (one ymm: 8 keys' dimension d), V as [key][D] fp32; both widened exactly from bf16.
inline float widen(uint16_t bf16) { return miaohui::simd::bf16_to_fp32(bf16); }
inline float widen(float value) { return value; }

template <typename T>
void pack_keys_f32(const T* k, int64_t key_stride, int64_t keys, int64_t dim, int64_t padded, float* out) {
  for (int64_t block = 0; block < padded / 8; ++block)
    for (int64_t d = 0; d < dim; ++d) {
      float* dst = out + (block * dim + d) * 8;
      for (int64_t j = 0; j < 8; ++j) {
        const int64_t key = block * 8 + j;
        dst[j] = key < keys ? widen(k[key * key_stride + d]) : 0.0f;
      }
    }
}

template <typename T>
void pack_values_f32(const T* v, int64_t key_stride, int64_t keys, int64_t dim, int64_t padded, float* out) {
  for (int64_t key = 0; key < padded; ++key)
    for (int64_t d = 0; d < dim; ++d)
      out[key * dim + d] = key < keys ? widen(v[key * key_stride + d]) : 0.0f;
}

__attribute__((target("avx2,fma"))) inline float hmax8(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}

__attribute__((target("avx2,fma"))) inline float exp_one8(float x) {
  return _mm_cvtss_f32(_mm256_castps256_ps128(miaohui::rows::exp8(_mm256_set1_ps(x))));
}

// acc[r][h] += x[r][at] · w[h] for R rows' scalars (broadcast) and two 8-lane vectors: both AVX2 products' step.
template <int R, int N>
__attribute__((target("avx2,fma"))) inline void fma_rows(__m256 (&acc)[R][2], const float (&x)[R][N], int64_t at,
                                                         __m256 w0, __m256 w1) {
  for (int r = 0; r < R; ++r) {
    const __m256 xr = _mm256_broadcast_ss(&x[r][at]);
    acc[r][0] = _mm256_fmadd_ps(xr, w0, acc[r][0]);
    acc[r][1] = _mm256_fmadd_ps(xr, w1, acc[r][1]);
  }
}

// dst[r][at..at+15] = acc[r], for R rows.
template <int R, int N>
__attribute__((target("avx2,fma"))) inline void store_rows(__m256 (&acc)[R][2], float (&dst)[R][N], int64_t at) {
  for (int r = 0; r < R; ++r) {
    _mm256_store_ps(dst[r] + at, acc[r][0]);
    _mm256_store_ps(dst[r] + at + 8, acc[r][1]);
  }
}

// attend_rows on AVX2: scores by 16 keys (2 ymm per row), softmax in base e (row_ops.h's exp8, the decode step's),
// probabilities kept in fp32; ``scale`` is the plain scaling.
template <int R, typename T>
__attribute__((target("avx2,fma"))) void attend_rows_avx2(const Shape& s, const T* const* q_rows,
                                                          const int64_t* limits, const float* kp, const float* vp,
                                                          float scale, T* const* out_rows) {
  const int64_t dim = s.dim, chunks = s.dim / 8;
  alignas(32) float q[R][256];
  alignas(32) float o[R][256];
  alignas(32) float prob[R][kBlockKeys];
  float m[R], corr[R];
  __m256 l[R];
  for (int r = 0; r < R; ++r) {
    for (int64_t d = 0; d < dim; ++d) q[r][d] = widen(q_rows[r][d]);
    m[r] = -std::numeric_limits<float>::infinity();
    l[r] = _mm256_setzero_ps();
    std::memset(o[r], 0, sizeof(float) * dim);
  }
  int64_t last = 0;
  for (int r = 0; r < R; ++r) last = std::max(last, limits[r]);
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  constexpr int NB = kBlockKeys / 8;
  for (int64_t k0 = 0; k0 <= last; k0 += kBlockKeys) {
    alignas(32) float sc[R][kBlockKeys];
    for (int b = 0; b < NB; b += 2) {  // 16 keys at a time: 2·R sums in flight
      __m256 acc[R][2];
      for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
      const float* k8 = kp + ((k0 / 8 + b) * dim) * 8;
      for (int64_t d = 0; d < dim; ++d) {
        fma_rows(acc, q, d, _mm256_loadu_ps(k8 + d * 8), _mm256_loadu_ps(k8 + (dim + d) * 8));
      }
      store_rows(acc, sc, 8 * b);
    }
    for (int r = 0; r < R; ++r) {
      const bool crossing = k0 + kBlockKeys - 1 > limits[r];
      const __m256i top_key = _mm256_set1_epi32(static_cast<int>(limits[r] - k0));
      __m256 valid[NB];
      __m256 most = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
      for (int b = 0; b < NB; ++b) {
        const __m256 x = _mm256_mul_ps(_mm256_load_ps(sc[r] + 8 * b), _mm256_set1_ps(scale));
        _mm256_store_ps(sc[r] + 8 * b, x);
        valid[b] = crossing ? _mm256_castsi256_ps(_mm256_cmpgt_epi32(
                                  _mm256_add_epi32(top_key, _mm256_set1_epi32(1)),
                                  _mm256_add_epi32(lane, _mm256_set1_epi32(8 * b))))
                            : _mm256_castsi256_ps(_mm256_set1_epi32(-1));
        most = _mm256_max_ps(most, _mm256_blendv_ps(_mm256_set1_ps(-std::numeric_limits<float>::infinity()), x,
                                                    valid[b]));
      }
      const float next = std::max(m[r], hmax8(most));
      corr[r] = m[r] == next ? 1.0f : m[r] == -std::numeric_limits<float>::infinity() ? 0.0f : exp_one8(m[r] - next);
      m[r] = next;
      const __m256 top = _mm256_set1_ps(next);
      __m256 sum = _mm256_setzero_ps();
      for (int b = 0; b < NB; ++b) {
        const __m256 shifted = _mm256_sub_ps(_mm256_load_ps(sc[r] + 8 * b), top);
        const __m256 p = _mm256_and_ps(valid[b], miaohui::rows::exp8(shifted));
        sum = _mm256_add_ps(sum, p);
        _mm256_store_ps(prob[r] + 8 * b, p);
      }
      l[r] = _mm256_fmadd_ps(l[r], _mm256_set1_ps(corr[r]), sum);
    }
    const float* vb = vp + k0 * dim;
    for (int64_t c = 0; c < chunks; c += 2) {
      __m256 acc[R][2];
      for (int r = 0; r < R; ++r) {
        const __m256 f = _mm256_set1_ps(corr[r]);
        acc[r][0] = _mm256_mul_ps(_mm256_load_ps(o[r] + 8 * c), f);
        acc[r][1] = _mm256_mul_ps(_mm256_load_ps(o[r] + 8 * c + 8), f);
      }
      for (int64_t j = 0; j < kBlockKeys; ++j) {
        fma_rows(acc, prob, j, _mm256_loadu_ps(vb + j * dim + 8 * c), _mm256_loadu_ps(vb + j * dim + 8 * c + 8));
      }
      store_rows(acc, o, 8 * c);
    }
  }
  for (int r = 0; r < R; ++r) {
    const float inv = 1.0f / miaohui::rows::lanes_sum(l[r]);
    for (int64_t d = 0; d < dim; ++d) {
      const float value = o[r][d] * inv;
      if constexpr (std::is_same_v<T, float>) out_rows[r][d] = value;
      else out_rows[r][d] = c10::BFloat16(value).x;  // nearest even
    }
  }
}

enum Isa : int64_t { kAuto = 0, kAvx2 = 1, kAvx512Bf16 = 2 };

Isa resolve(int64_t isa) {
  if (isa == kAuto) {
    TORCH_CHECK(miaohui::cpu::avx2(), "prefill_attention needs AVX2 (with FMA and F16C) or AVX-512 BF16");
    return miaohui::cpu::avx512bf16() ? kAvx512Bf16 : kAvx2;
  }
  TORCH_CHECK(isa == kAvx2 || isa == kAvx512Bf16, "isa: 0 (auto), 1 (AVX2) or 2 (AVX-512 BF16)");
  TORCH_CHECK(isa == kAvx2 ? miaohui::cpu::avx2() : miaohui::cpu::avx512bf16(),
              "this CPU lacks the instructions of isa ", isa);
  return static_cast<Isa>(isa);
}

using miaohui::by_rows;

template <int R> struct Bf16Rows { template <typename... A> static void call(A&&... a) { attend_rows<R>(a...); } };
template <int R> struct Avx2Rows {
  template <typename... A> static void call(A&&... a) { attend_rows_avx2<R>(a...); }
};

// The op's work for element type T: uint16_t (bf16 bits) or float (a model computing in fp32, on a CPU without native
// bf16; AVX2's path only).
template <typename T>
void attend_all(const Shape& s, bool bf16_dots, const T* qd, int64_t q_head, int64_t q_row, const T* kd,
                int64_t k_head, int64_t k_row, const T* vd, int64_t v_head, int64_t v_row, float scale, T* od) {
  const int64_t keys = s.start + s.n;
  const int64_t per_head = s.keys_padded * s.dim;  // K's or V's values of one KV head
  // K and V of every KV head packed once per call (bf16 pairs for vdpbf16ps, fp32 for AVX2's multiply-adds).
  std::vector<uint16_t> kp16(bf16_dots ? s.kv_heads * per_head : 0), vp16(bf16_dots ? s.kv_heads * per_head : 0);
  std::vector<float> kp32(bf16_dots ? 0 : s.kv_heads * per_head), vp32(bf16_dots ? 0 : s.kv_heads * per_head);
  at::parallel_for(0, 2 * s.kv_heads, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t g = t / 2, at_head = g * per_head;
      const bool key = t % 2 == 0;
      const T* src = key ? kd + g * k_head : vd + g * v_head;
      const int64_t stride = key ? k_row : v_row;
      if constexpr (std::is_same_v<T, uint16_t>) {
        if (bf16_dots) {
          auto* words = reinterpret_cast<uint32_t*>(kp16.data() + at_head);
          if (key) pack_keys(src, stride, keys, s.dim, s.keys_padded, words);
          else pack_values(src, stride, keys, s.dim, s.keys_padded, vp16.data() + at_head);
          continue;
        }
      }
      if (key) pack_keys_f32(src, stride, keys, s.dim, s.keys_padded, kp32.data() + at_head);
      else pack_values_f32(src, stride, keys, s.dim, s.keys_padded, vp32.data() + at_head);
    }
  });

  const int64_t rows = s.n * s.group, items_per_head = (rows + kRowsPerItem - 1) / kRowsPerItem;
  const int64_t items = s.kv_heads * items_per_head;
  std::atomic<int64_t> next{0};
  at::parallel_for(0, at::get_num_threads(), 1, [&](int64_t, int64_t) {
    for (int64_t item; (item = next.fetch_add(1)) < items;) {
      // One KV head after another, so both threads stream the same packed K and V (fp32 at 16k keys: 8 MiB a head,
      // 64 MiB for all eight, past a 32 MiB L3: taking the heads in turn made every item read its head from memory,
      // 26 against 43 GFLOP/s on one AVX2 core at 16k); within a head the latest rows first, as they see the most
      // keys, and the last items are the cheap early rows, so both threads finish together.
      const int64_t g = item / items_per_head, chunk = items_per_head - 1 - item % items_per_head;
      const int64_t row_end = std::min(rows, (chunk + 1) * kRowsPerItem);
      for (int64_t r0 = chunk * kRowsPerItem; r0 < row_end; r0 += kRows) {
        const int count = static_cast<int>(std::min<int64_t>(kRows, row_end - r0));
        const T* q_rows[kRows];
        T* out_rows[kRows];
        int64_t limits[kRows];
        for (int r = 0; r < count; ++r) {
          const int64_t i = (r0 + r) / s.group, h = g * s.group + (r0 + r) % s.group;
          q_rows[r] = qd + h * q_head + i * q_row;
          out_rows[r] = od + i * s.heads * s.dim + h * s.dim;
          limits[r] = s.start + i;
        }
        if constexpr (std::is_same_v<T, uint16_t>) {
          if (bf16_dots) {
            by_rows<Bf16Rows, kRows>(count, s, q_rows, limits,
                                     reinterpret_cast<const uint32_t*>(kp16.data() + g * per_head),
                                     vp16.data() + g * per_head, scale, out_rows);
            continue;
          }
        }
        by_rows<Avx2Rows, kRows>(count, s, q_rows, limits, kp32.data() + g * per_head,
                                 vp32.data() + g * per_head, scale, out_rows);
      }
    }
  });
}

void check(const at::Tensor& t, at::ScalarType dtype, const char* what) {
  TORCH_CHECK(t.dim() == 3 && t.scalar_type() == dtype && t.stride(2) == 1 && t.device().is_cpu(), what,
              ": a CPU tensor of 3 dimensions, its last contiguous, in q's dtype (bf16, or fp32 on the AVX2 path)");
}

at::Tensor prefill_attention_op(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t start,
                                double scaling, int64_t isa_in) {
  Isa isa = resolve(isa_in);
  const at::ScalarType dtype = q.scalar_type();
  TORCH_CHECK(dtype == at::kBFloat16 || dtype == at::kFloat, "q: bf16 or fp32");
  if (dtype == at::kFloat) isa = kAvx2;  // fp32 has no bf16 dot products to use (a CPU without native bf16)
  check(q, dtype, "q (heads, n, D)");
  check(k, dtype, "k (KV heads, keys, D)");
  check(v, dtype, "v (KV heads, keys, D)");
  Shape s{q.size(0), k.size(0), 0, q.size(1), start, q.size(2), 0};
  TORCH_CHECK(s.kv_heads > 0 && s.heads % s.kv_heads == 0, "heads must be a multiple of the KV heads");
  TORCH_CHECK(s.dim % 32 == 0 && s.dim <= 256, "head dim: a multiple of 32, at most 256");
  TORCH_CHECK(k.size(2) == s.dim && v.size(2) == s.dim && v.size(0) == s.kv_heads, "k, v: (KV heads, keys, D)");
  TORCH_CHECK(start >= 0 && k.size(1) >= start + s.n && v.size(1) >= start + s.n, "k, v must hold start + n keys");
  s.group = s.heads / s.kv_heads;
  s.keys_padded = (start + s.n + kBlockKeys - 1) / kBlockKeys * kBlockKeys;
  at::Tensor out = at::empty({s.n, s.heads * s.dim}, q.options().memory_format(at::MemoryFormat::Contiguous));
  if (s.n == 0) return out;
  // AVX-512's softmax is in base 2 (its exp2_16), AVX2's in base e (row_ops.h's exp8): the scores' factor for each.
  const bool bf16_dots = dtype == at::kBFloat16 && isa == kAvx512Bf16;
  const float scale = static_cast<float>(bf16_dots ? scaling * 1.4426950408889634 : scaling);
  if (dtype == at::kFloat) {
    attend_all<float>(s, false, q.data_ptr<float>(), q.stride(0), q.stride(1), k.data_ptr<float>(), k.stride(0),
                      k.stride(1), v.data_ptr<float>(), v.stride(0), v.stride(1), scale, out.data_ptr<float>());
  } else {
    auto bits = [](const at::Tensor& t) { return reinterpret_cast<const uint16_t*>(t.data_ptr<at::BFloat16>()); };
    attend_all<uint16_t>(s, bf16_dots, bits(q), q.stride(0), q.stride(1), bits(k), k.stride(0), k.stride(1),
                         bits(v), v.stride(0), v.stride(1), scale,
                         reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>()));
  }
  return out;
}

}  // namespace

namespace miaohui {

at::Tensor prefill_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t start,
                             double scaling, int64_t isa) {
  return prefill_attention_op(q, k, v, start, scaling, isa);
}

// The best instruction set this CPU offers the op: 2 (AVX-512 BF16), 1 (AVX2 with FMA and F16C) or 0 (none).
int64_t prefill_attention_isa() { return cpu::avx512bf16() ? kAvx512Bf16 : cpu::avx2() ? kAvx2 : 0; }

}  // namespace miaohui
