// The row operations of the native decode step (engine/native/decode_step.cpp), each computing one row alone, in the
// model's dtype T (bf16 or fp32): RMSNorm (the weight in T or fp32), the gated MLP activations (SiLU, tanh-GELU),
// one query per head's attention with an optional soft cap (over a cache in T, or in int8 with a scale per position:
// engine/executor/kv_cache.py's Int8KVCache), an int8 cache row's quantization, and the exp/tanh they are built on.
// decode_step.cpp's and kv_int8.cpp's headers say what each computes and how it rounds; here is only the code,
// included by those sources (their ops and DecodeStep call it), so nothing here is an op or registers anything.
// q8act.cpp (its activations' load8) and prefill_attention.cpp (the AVX2 path's exp8 and lanes_sum) include it too.
#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <immintrin.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "simd.h"

namespace miaohui::rows {

template <typename T> inline float get(const T* p, int64_t i) { return static_cast<float>(p[i]); }
template <typename T> inline T to(float v) { return static_cast<T>(v); }  // c10::BFloat16(float): nearest even
template <typename T> inline float rounded(float v) { return static_cast<float>(static_cast<T>(v)); }

__attribute__((target("avx2,fma"))) inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
__attribute__((target("avx2,fma"))) inline __m256 load8(const at::BFloat16* p) {
  return miaohui::simd::bf16x8_to_fp32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

__attribute__((target("avx2,fma"))) inline float lanes_sum(__m256 v) {
  alignas(32) float lane[8];
  _mm256_store_ps(lane, v);
  float s = 0.0f;
  for (int i = 0; i < 8; ++i) s += lane[i];
  return s;
}

// e^x for 8 lanes: Cephes' range reduction and degree-6 polynomial (~1-2 ulp); inputs clamped to [-87.3, 88].
__attribute__((target("avx2,fma"))) inline __m256 exp8(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3365478515625f)), _mm256_set1_ps(88.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  x = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  x = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), x);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

// tanh of 8 lanes as 1 - 2 / (1 + e^(2x)) through exp8 (its clamp makes the ends exactly ±1): within ~1e-7 of tanh
// absolutely, which is what a soft cap multiplies by the cap (the scores' own rounding is coarser).
__attribute__((target("avx2,fma"))) inline __m256 tanh8(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 e = exp8(_mm256_add_ps(x, x));
  return _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(one, e)));
}

// x[i] = cap · tanh(x[i] / cap) for n values, the tail through a padded copy (every value takes the same path).
__attribute__((target("avx2,fma"))) inline void soft_cap(float* x, int64_t n, float cap) {
  const __m256 c = _mm256_set1_ps(cap);
  for (int64_t i = 0; i < n; i += 8) {
    alignas(32) float lane[8] = {0};
    const int64_t count = std::min<int64_t>(8, n - i);
    std::memcpy(lane, x + i, sizeof(float) * count);
    _mm256_store_ps(lane, _mm256_mul_ps(tanh8(_mm256_div_ps(_mm256_load_ps(lane), c)), c));
    std::memcpy(x + i, lane, sizeof(float) * count);
  }
}

// x[i] = e^(x[i] - shift) for n values, every one through exp8 (the tail padded), returns their sum in a fixed order.
__attribute__((target("avx2,fma"))) inline float exp_shifted(float* x, int64_t n, float shift) {
  const __m256 s = _mm256_set1_ps(shift);
  __m256 total = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), s));
    _mm256_storeu_ps(x + i, e);
    total = _mm256_add_ps(total, e);
  }
  float sum = lanes_sum(total);
  if (i < n) {
    alignas(32) float tail[8] = {0};
    std::memcpy(tail, x + i, sizeof(float) * (n - i));
    _mm256_store_ps(tail, exp8(_mm256_sub_ps(_mm256_load_ps(tail), s)));
    for (int64_t j = 0; j < n - i; ++j) {
      x[i + j] = tail[j];
      sum += tail[j];
    }
  }
  return sum;
}

template <typename T>
__attribute__((target("avx2,fma"))) float sum_squares(const T* x, int64_t d) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= d; i += 8) {
    const __m256 v = load8(x + i);
    acc = _mm256_fmadd_ps(v, v, acc);
  }
  float s = lanes_sum(acc);
  for (; i < d; ++i) s += get(x, i) * get(x, i);
  return s;
}

template <typename T, typename W>
void norm_rows(const T* x, const W* w, int64_t rows, int64_t d, int64_t weight_rows, float eps, T* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * d;
    const W* wr = w + (r % weight_rows) * d;
    const float inverse = 1.0f / std::sqrt(sum_squares(xr, d) / static_cast<float>(d) + eps);
    for (int64_t i = 0; i < d; ++i) out[r * d + i] = to<T>((get(xr, i) * inverse) * get(wr, i));
  }
}

enum Activation : int64_t { kSilu = 0, kGeluTanh = 1 };  // DecodeStep's activation argument

// act(g) · u per row for act SiLU (g / (1 + e^-g)) or tanh-GELU (g / (1 + e^-2y), see decode_step.cpp's header),
// rounded as torch's act(g) * u: the activation, then the product.
template <typename T>
__attribute__((target("avx2,fma"))) void glu_span(const T* gate_up, int64_t begin, int64_t end, int64_t inter,
                                                  int64_t act, T* out) {
  std::vector<float> s(inter + 8);
  for (int64_t r = begin; r < end; ++r) {
    const T* g = gate_up + r * 2 * inter;
    const T* u = g + inter;
    int64_t i = 0;
    for (; i < inter; i += 8) {  // the tail read through a padded copy, so every value takes the same path
      alignas(32) float lane[8] = {0};
      const int64_t count = std::min<int64_t>(8, inter - i);
      for (int64_t j = 0; j < count; ++j) lane[j] = get(g, i + j);
      const __m256 v = _mm256_load_ps(lane);
      __m256 z = v;  // act(v) = v / (1 + e^-z)
      if (act == kGeluTanh) {
        const __m256 cube = _mm256_mul_ps(_mm256_mul_ps(v, v), v);
        const __m256 y = _mm256_mul_ps(_mm256_set1_ps(0.7978845608028654f),
                                       _mm256_add_ps(v, _mm256_mul_ps(_mm256_set1_ps(0.044715f), cube)));
        z = _mm256_add_ps(y, y);
      }
      const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), z));
      _mm256_storeu_ps(s.data() + i, _mm256_div_ps(v, _mm256_add_ps(_mm256_set1_ps(1.0f), e)));
    }
    for (int64_t j = 0; j < inter; ++j) out[r * inter + j] = to<T>(rounded<T>(s[j]) * get(u, j));
  }
}

// glu_span over all rows, split over torch's threads where there are ~4k values or more (a verify's or a batched
// step's rows: one thread ran them all while the other waited); each row's bits its own either way.
template <typename T>
void glu_rows(const T* gate_up, int64_t rows, int64_t inter, int64_t act, T* out) {
  at::parallel_for(0, rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, inter)),
                   [&](int64_t begin, int64_t end) { glu_span(gate_up, begin, end, inter, act, out); });
}

// Lane r of the result = the sum of v[r]'s 8 lanes, by one fixed tree ((0+1)+(2+3))+((4+5)+(6+7)).
__attribute__((target("avx2,fma"))) inline __m256 sums8(const __m256* v) {
  const __m256 low = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
  const __m256 high = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(low, high, 0x20), _mm256_permute2f128_ps(low, high, 0x31));
}

// rows (m) of D values of T at src + r·stride → fp32 rows of padded width (multiple of 8) at dst, the padding zero.
template <typename T>
__attribute__((target("avx2,fma"))) inline void widen_rows(const T* src, int64_t stride, int64_t m, int64_t D,
                                                           int64_t padded, float* dst) {
  for (int64_t r = 0; r < m; ++r) {
    const T* row = src + r * stride;
    float* out = dst + r * padded;
    int64_t d = 0;
    for (; d + 8 <= D; d += 8) _mm256_storeu_ps(out + d, load8(row + d));
    for (; d < D; ++d) out[d] = get(row, d);
    for (; d < padded; ++d) out[d] = 0.0f;
  }
}

// One int8 cache row: rows (m) of D int8 values at src + r·stride, row r times its fp16 scale[r] → fp32 as above.
// Exact: a 7-bit integer times an 11-bit significand fits fp32's 24 bits, so these are the dequantized values
// themselves and the attention over them is the dense one's arithmetic (each cache byte still read once).
__attribute__((target("avx2,fma"))) inline void widen_rows(const int8_t* src, const at::Half* scale, int64_t stride,
                                                           int64_t m, int64_t D, int64_t padded, float* dst) {
  for (int64_t r = 0; r < m; ++r) {
    const int8_t* row = src + r * stride;
    float* out = dst + r * padded;
    const float s = static_cast<float>(scale[r]);
    const __m256 sv = _mm256_set1_ps(s);
    int64_t d = 0;
    for (; d + 8 <= D; d += 8) {
      const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + d));
      _mm256_storeu_ps(out + d, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes)), sv));
    }
    for (; d < D; ++d) out[d] = static_cast<float>(row[d]) * s;
    for (; d < padded; ++d) out[d] = 0.0f;
  }
}

constexpr float kQMax = 127.0f;  // kv_cache.py's QMAX: symmetric, -127..127

// One head's vector at one position (D values of T) → its int8 codes and fp16 scale, kv_cache.py's quantize bit for
// bit: scale = fp16(min(absmax / 127 in fp32, fp16's largest)), nearest even; code = x / max(scale, FLT_MIN) in fp32,
// rounded half to even (nearbyint in the default rounding mode, as torch's round), clamped to ±127.
template <typename T>
inline void quantize_row(const T* x, int64_t D, int8_t* codes, at::Half* scale) {
  float most = 0.0f;
  for (int64_t d = 0; d < D; ++d) most = std::max(most, std::fabs(get(x, d)));
  const at::Half half(std::min(most / kQMax, 65504.0f));
  *scale = half;
  const float divisor = std::max(static_cast<float>(half), FLT_MIN);
  for (int64_t d = 0; d < D; ++d)
    codes[d] = static_cast<int8_t>(std::min(kQMax, std::max(-kQMax, std::nearbyint(get(x, d) / divisor))));
}

// acc (C·8 lanes, in registers) += Σ_j w[j] · row j of rows (m rows of `padded` fp32), j in order.
template <int C>
__attribute__((target("avx2,fma"))) inline void weighted_rows(const float* rows, int64_t padded, int64_t m,
                                                              const float* w, float* acc) {
  __m256 a[C];
  for (int c = 0; c < C; ++c) a[c] = _mm256_loadu_ps(acc + 8 * c);
  for (int64_t j = 0; j < m; ++j) {
    const __m256 wj = _mm256_set1_ps(w[j]);
    const float* row = rows + j * padded;
    for (int c = 0; c < C; ++c) a[c] = _mm256_fmadd_ps(wj, _mm256_loadu_ps(row + 8 * c), a[c]);
  }
  for (int c = 0; c < C; ++c) _mm256_storeu_ps(acc + 8 * c, a[c]);
}

__attribute__((target("avx2,fma"))) inline void weighted_slice(int64_t chunks, const float* rows, int64_t padded,
                                                               int64_t m, const float* w, float* acc) {
  switch (chunks) {
    case 1: return weighted_rows<1>(rows, padded, m, w, acc);
    case 2: return weighted_rows<2>(rows, padded, m, w, acc);
    case 3: return weighted_rows<3>(rows, padded, m, w, acc);
    case 4: return weighted_rows<4>(rows, padded, m, w, acc);
    case 5: return weighted_rows<5>(rows, padded, m, w, acc);
    case 6: return weighted_rows<6>(rows, padded, m, w, acc);
    case 7: return weighted_rows<7>(rows, padded, m, w, acc);
    default: return weighted_rows<8>(rows, padded, m, w, acc);
  }
}

constexpr int64_t kBlock = 32;  // positions widened to fp32 at a time: ≤ 32 KiB at head_dim 256, in L1/L2 for the heads

// A run of cached positions of one KV head: rows j at k + j·ks and v + j·vs, n of them (a cache's own rows, or a shared
// prefix's run of blocks in its pool, engine/executor/kv_blocks.py), in the model's dtype or int8 (C); an int8 row j's
// scales at k_scale[j] and v_scale[j] (unused for a cache in the model's dtype).
template <typename C>
struct Span {
  const C* k;
  int64_t ks;
  const C* v;
  int64_t vs;
  int64_t n;
  const at::Half* k_scale = nullptr;
  const at::Half* v_scale = nullptr;
};

// Rows j0..j0+m-1 of a span's keys or values widened to fp32 (int8 ones times their scales).
template <typename C>
inline void widen_span(const Span<C>& s, bool keys, int64_t j0, int64_t m, int64_t D, int64_t padded, float* dst) {
  if (keys) widen_rows(s.k + j0 * s.ks, s.ks, m, D, padded, dst);
  else widen_rows(s.v + j0 * s.vs, s.vs, m, D, padded, dst);
}
inline void widen_span(const Span<int8_t>& s, bool keys, int64_t j0, int64_t m, int64_t D, int64_t padded,
                       float* dst) {
  if (keys) widen_rows(s.k + j0 * s.ks, s.k_scale + j0, s.ks, m, D, padded, dst);
  else widen_rows(s.v + j0 * s.vs, s.v_scale + j0, s.vs, m, D, padded, dst);
}

// B rows' attention over one KV head's positions, the spans in order: q (B, padded) fp32 rows (zero past D), row i
// over the first lens[i] positions (a verify's tokens over one cache: each its own and those before) → out[i] (D
// values in T). Two passes over the positions, in blocks of kBlock widened to fp32 once for all B rows, so each key
// and value byte is read once per step (the decode step at a long context is bound by the cache, and GQA's heads of
// one group, and a verify's tokens, read the same rows):
// - scores: per head, 8 positions at a time, each in its own 8 fp32 lanes of q·k over the dimensions in blocks of 8 in
//   order, the lanes summed by sums8's tree, times the scaling; softmax with exp8 (exp_shifted's fixed order, over
//   all n at once);
// - scores soft-capped where cap > 0 (Gemma 2), each head's largest then found again;
// - values: per head, Σ_j p_j·v_j per dimension, positions in order, in fp32; rounded to T once.
// A row's arithmetic depends neither on B and the other rows nor on where the spans split the positions (the tests
// check a head in a group against it alone, a verify against steps, and a shared prefix's spans against the joined
// cache). An int8 cache (C) differs only in its widening (exact), so its attention is the dense one's over the
// dequantized rows.
template <typename T, typename C>
__attribute__((target("avx2,fma"))) void attend_heads(int64_t B, const float* q, int64_t padded,
                                                      const std::vector<Span<C>>& spans, const int64_t* lens,
                                                      int64_t D, float scaling, float cap, T* const* out) {
  const int64_t n = *std::max_element(lens, lens + B);
  std::vector<float> p(static_cast<size_t>(B) * n), block(static_cast<size_t>(kBlock) * padded);
  std::vector<float> most(B, -INFINITY);
  // Each head's running maximum in 8 lanes (a max is exact in any order, so the same value as one position at a time;
  // a scalar maximum through memory made each position wait on the last one: the op alone took 1.4-1.6x as long at
  // 4k-16k positions, docs/BENCHMARK.md).
  std::vector<float> lanes_most(static_cast<size_t>(B) * 8, -INFINITY);
  const __m256 scale = _mm256_set1_ps(scaling);
  int64_t offset = 0;
  for (const Span<C>& span : spans) {
    for (int64_t j0 = 0; j0 < span.n; j0 += kBlock) {
      const int64_t m = std::min(kBlock, span.n - j0), m8 = (m + 7) / 8 * 8;
      widen_span(span, true, j0, m, D, padded, block.data());
      std::fill(block.begin() + m * padded, block.begin() + m8 * padded, 0.0f);
      const float* rows = block.data();
      for (int64_t i = 0; i < B; ++i) {
        const int64_t mi = std::min(m, lens[i] - offset - j0);  // a shorter row's positions in this block
        if (mi <= 0) continue;
        const float* qi = q + i * padded;
        float* pi = p.data() + i * n + offset + j0;
        __m256 mx = _mm256_loadu_ps(lanes_most.data() + 8 * i);
        for (int64_t j = 0; j < mi; j += 8) {
          __m256 acc[8];
          for (int r = 0; r < 8; ++r) acc[r] = _mm256_setzero_ps();
          for (int64_t d = 0; d < padded; d += 8) {
            const __m256 qd = _mm256_loadu_ps(qi + d);
            for (int r = 0; r < 8; ++r)
              acc[r] = _mm256_fmadd_ps(qd, _mm256_loadu_ps(rows + (j + r) * padded + d), acc[r]);
          }
          const __m256 scores = _mm256_mul_ps(sums8(acc), scale);
          if (mi - j >= 8) {
            _mm256_storeu_ps(pi + j, scores);
            mx = _mm256_max_ps(mx, scores);
          } else {  // the row's last positions: the lanes past them are not its own, neither stored nor counted
            alignas(32) float lane[8];
            _mm256_store_ps(lane, scores);
            for (int64_t r = mi - j; r < 8; ++r) lane[r] = -INFINITY;
            for (int64_t r = 0; r < mi - j; ++r) pi[j + r] = lane[r];
            mx = _mm256_max_ps(mx, _mm256_load_ps(lane));
          }
        }
        _mm256_storeu_ps(lanes_most.data() + 8 * i, mx);
      }
    }
    offset += span.n;
  }
  for (int64_t i = 0; i < B; ++i)
    for (int r = 0; r < 8; ++r) most[i] = std::max(most[i], lanes_most[8 * i + r]);
  std::vector<float> acc(static_cast<size_t>(B) * padded, 0.0f);
  if (cap > 0.0f) {  // Gemma 2: each head's scores capped, then their largest found again
    for (int64_t i = 0; i < B; ++i) {
      soft_cap(p.data() + i * n, lens[i], cap);
      most[i] = *std::max_element(p.begin() + i * n, p.begin() + i * n + lens[i]);
    }
  }
  for (int64_t i = 0; i < B; ++i) {
    const float inverse = 1.0f / exp_shifted(p.data() + i * n, lens[i], most[i]);
    for (int64_t j = 0; j < lens[i]; ++j) p[i * n + j] *= inverse;
  }
  offset = 0;
  for (const Span<C>& span : spans) {
    for (int64_t j0 = 0; j0 < span.n; j0 += kBlock) {
      const int64_t m = std::min(kBlock, span.n - j0);
      widen_span(span, false, j0, m, D, padded, block.data());
      for (int64_t i = 0; i < B; ++i) {
        const int64_t mi = std::min(m, lens[i] - offset - j0);
        if (mi <= 0) continue;
        for (int64_t d = 0; d < padded; d += 64)
          weighted_slice(std::min<int64_t>(8, (padded - d) / 8), block.data() + d, padded, mi,
                         p.data() + i * n + offset + j0, acc.data() + i * padded + d);
      }
    }
    offset += span.n;
  }
  for (int64_t i = 0; i < B; ++i)
    for (int64_t d = 0; d < D; ++d) out[i][d] = to<T>(acc[i * padded + d]);
}

constexpr int64_t kMostHeads = 16;  // heads sharing one pass over a KV head (their scores are B × n floats)
constexpr int64_t kReadCost = 2;    // a pass's read of its KV rows, in rows' arithmetic (heads_per_pass, token_slices)

// How many of a group's heads share one pass over its KV head, given the threads that will split the passes (kv: the
// KV heads of every query attended together): a pass costs about one read of the KV rows (counted as 2 heads'
// arithmetic) plus its heads' arithmetic, and the slowest thread takes ceil(passes / threads) of them. Fewer heads
// per pass can balance the threads better (SmolLM2's 3 KV heads of 3 on 2 threads) at the cost of reading the rows
// again; the bits are the same either way.
inline int64_t heads_per_pass(int64_t group, int64_t kv, int64_t threads) {
  int64_t best = 1, best_cost = INT64_MAX;
  for (int64_t b = std::min(group, kMostHeads); b >= 1; --b) {
    const int64_t passes = kv * ((group + b - 1) / b);
    const int64_t cost = ((passes + threads - 1) / threads) * (kReadCost + b);
    if (cost < best_cost) best = b, best_cost = cost;
  }
  return best;
}

// A span of every KV head: head g's rows start at k + g·k_head (v + g·v_head); an int8 cache's scales at
// k_scale + g·scale_head (v_scale + g·scale_head), one per position.
template <typename C>
struct Heads {
  const C* k;
  int64_t k_head, ks;
  const C* v;
  int64_t v_head, vs, n;
  const at::Half* k_scale = nullptr;
  const at::Half* v_scale = nullptr;
  int64_t scale_head = 0;
};

// One query per head (q: (H, D) rows contiguous) over its spans in order, written to out (H rows of D): a token of a
// verify or one sequence of a batched step.
template <typename T, typename C>
struct Query {
  const T* q;
  std::vector<Heads<C>> spans;
  T* out;
};

// Whether query b's spans are query a's with the last one at least as long: b is a later token of a's verify (the same
// cache, more positions), so the two can share each widened block. Spans of no positions are ignored.
template <typename C>
bool extends(const std::vector<Heads<C>>& a, const std::vector<Heads<C>>& b) {
  if (a.size() != b.size() || a.empty()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const Heads<C>& x = a[i];
    const Heads<C>& y = b[i];
    if (x.k != y.k || x.v != y.v || x.k_head != y.k_head || x.v_head != y.v_head || x.ks != y.ks || x.vs != y.vs ||
        x.k_scale != y.k_scale || x.v_scale != y.v_scale || x.scale_head != y.scale_head)
      return false;
    if (i + 1 < a.size() ? x.n != y.n : x.n > y.n) return false;
  }
  return true;
}

// One unit of attend_all's work: heads first..first+heads-1 of KV head g, for tokens t0..t1-1 of one group of queries.
struct Pass {
  int64_t group, g, first, heads, t0, t1;
};

// Into how many slices each group's tokens are cut (s ≤ the group's size), given b heads a pass: a pass costs one read
// of the KV rows (kReadCost rows' arithmetic) plus its rows', and the slowest thread takes ceil(passes / threads).
// Whole groups read the rows least often; slices balance the threads (a verify of 8 tokens on SmolLM2's 3 KV heads
// and 2 threads: 2 slices). 1 where every group is one token (a step, a batch); the bits are a row's alone either way.
inline int64_t token_slices(const std::vector<int64_t>& sizes, int64_t passes_per_token, int64_t b, int64_t threads) {
  const int64_t largest = *std::max_element(sizes.begin(), sizes.end());
  int64_t best = 1, best_cost = INT64_MAX;
  for (int64_t s = 1; s <= largest; ++s) {
    int64_t passes = 0;
    for (int64_t size : sizes) passes += passes_per_token * std::min(s, size);
    const int64_t cost = ((passes + threads - 1) / threads) * (kReadCost + b * ((largest + s - 1) / s));
    if (cost < best_cost) best = s, best_cost = cost;
  }
  return best;
}

// Grouped-query attention of every query over its spans: each pass reads one KV head's rows once for up to 16 of a
// query's heads, and for the tokens of a verify (consecutive queries, each extending the one before) together, and
// the passes of all queries spread over torch's threads together once the positions are many enough to pay for it
// (one parallel region for n tokens, not n: SmolLM2's 3 passes a token on 2 threads left one thread idle a third of
// each; a verify's 8 tokens widened each KV row 8 times, a tenth of its time on 2 threads). The bits are a row's alone
// either way.
template <typename T, typename C>
void attend_all(const std::vector<Query<T, C>>& queries, int64_t H, int64_t KV, int64_t D, float scaling, float cap) {
  const int64_t count = static_cast<int64_t>(queries.size());
  std::vector<int64_t> n(count, 0), starts{0};  // starts: each group's first query, then count
  int64_t total = 0;
  for (int64_t i = 0; i < count; ++i) {
    for (const Heads<C>& span : queries[i].spans) n[i] += span.n;
    total += n[i];
    if (i > 0 && !extends(queries[i - 1].spans, queries[i].spans)) starts.push_back(i);
  }
  starts.push_back(count);
  const int64_t groups = static_cast<int64_t>(starts.size()) - 1;
  std::vector<int64_t> sizes(groups);
  for (int64_t i = 0; i < groups; ++i) sizes[i] = starts[i + 1] - starts[i];
  const int64_t group = H / KV, padded = (D + 7) / 8 * 8;
  const bool spread = total * D >= 16384;
  const int64_t threads = spread ? at::get_num_threads() : 1;
  const int64_t b = heads_per_pass(group, KV * groups, threads);
  const int64_t per_group = (group + b - 1) / b;
  const int64_t slices = token_slices(sizes, KV * per_group, b, threads);
  std::vector<Pass> work;
  for (int64_t i = 0; i < groups; ++i) {
    const int64_t s = std::min(slices, sizes[i]);
    for (int64_t slice = 0; slice < s; ++slice)
      for (int64_t g = 0; g < KV; ++g)
        for (int64_t first = g * group; first < (g + 1) * group; first += b)
          work.push_back({i, g, first, std::min(b, (g + 1) * group - first), starts[i] + sizes[i] * slice / s,
                          starts[i] + sizes[i] * (slice + 1) / s});
  }
  auto passes = [&](int64_t begin, int64_t end) {
    std::vector<float> qf;
    std::vector<int64_t> lens;
    std::vector<T*> outs;
    std::vector<Span<C>> head;
    for (int64_t item = begin; item < end; ++item) {
      const Pass& pass = work[item];
      const int64_t rows = (pass.t1 - pass.t0) * pass.heads;
      qf.assign(rows * padded, 0.0f);
      lens.resize(rows);
      outs.resize(rows);
      for (int64_t t = pass.t0; t < pass.t1; ++t)
        for (int64_t i = 0; i < pass.heads; ++i) {
          const int64_t row = (t - pass.t0) * pass.heads + i;
          for (int64_t d = 0; d < D; ++d) qf[row * padded + d] = get(queries[t].q, (pass.first + i) * D + d);
          lens[row] = n[t];
          outs[row] = queries[t].out + (pass.first + i) * D;
        }
      head.clear();  // the group's longest query's spans: its last
      for (const Heads<C>& span : queries[starts[pass.group + 1] - 1].spans)
        if (span.n > 0)
          head.push_back({span.k + pass.g * span.k_head, span.ks, span.v + pass.g * span.v_head, span.vs, span.n,
                          span.k_scale ? span.k_scale + pass.g * span.scale_head : nullptr,
                          span.v_scale ? span.v_scale + pass.g * span.scale_head : nullptr});
      attend_heads(rows, qf.data(), padded, head, lens.data(), D, scaling, cap, outs.data());
    }
  };
  const int64_t items = static_cast<int64_t>(work.size());
  if (!spread) passes(0, items);
  else at::parallel_for(0, items, 1, passes);
}

// One query per head over the spans in order: q (H, D) rows contiguous (attend_all of one).
template <typename T, typename C>
void attend(const T* q, int64_t H, int64_t KV, int64_t D, const std::vector<Heads<C>>& spans, float scaling, float cap,
            T* out) {
  attend_all<T, C>({Query<T, C>{q, spans, out}}, H, KV, D, scaling, cap);
}

}  // namespace miaohui::rows
