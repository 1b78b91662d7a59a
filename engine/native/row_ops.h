// The row operations of the native decode step (engine/native/decode_step.cpp), each computing one row alone, in the
// model's dtype T (bf16 or fp32): RMSNorm (the weight in T or fp32), the gated MLP activations (SiLU, tanh-GELU),
// one query's attention with an optional soft cap, and the exp/tanh they are built on. decode_step.cpp's header says
// what each computes and how it rounds; here is only the code, included by that one source (its ops and DecodeStep
// both call it), so nothing here is an op or registers anything.
#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <immintrin.h>

#include <algorithm>
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

// act(g) · u per row for act SiLU (g / (1 + e^-g)) or tanh-GELU (g / (1 + e^-2y), see the header), rounded as torch's
// act(g) * u: the activation, then the product.
template <typename T>
__attribute__((target("avx2,fma"))) void glu_rows(const T* gate_up, int64_t rows, int64_t inter, int64_t act, T* out) {
  std::vector<float> s(inter + 8);
  for (int64_t r = 0; r < rows; ++r) {
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

// One head's attention: q (D) in fp32, k and v rows j at k + j·ks, v + j·vs, n positions → out (D) in T.
template <typename T>
__attribute__((target("avx2,fma"))) void attend_head(const float* q, const T* k, int64_t ks, const T* v, int64_t vs,
                                                     int64_t n, int64_t D, float scaling, float cap, T* out) {
  std::vector<float> p(n);
  float most = -INFINITY;
  for (int64_t j = 0; j < n; ++j) {
    const T* kr = k + j * ks;
    __m256 acc = _mm256_setzero_ps();
    int64_t d = 0;
    for (; d + 8 <= D; d += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), load8(kr + d), acc);
    float s = lanes_sum(acc);
    for (; d < D; ++d) s += q[d] * get(kr, d);
    p[j] = s * scaling;
  }
  if (cap > 0.0f) soft_cap(p.data(), n, cap);
  for (int64_t j = 0; j < n; ++j) most = std::max(most, p[j]);
  const float inverse = 1.0f / exp_shifted(p.data(), n, most);
  std::vector<float> acc(D + 8, 0.0f);
  for (int64_t j = 0; j < n; ++j) {
    const T* vr = v + j * vs;
    const float w = p[j] * inverse;
    const __m256 wv = _mm256_set1_ps(w);
    int64_t d = 0;
    for (; d + 8 <= D; d += 8) _mm256_storeu_ps(acc.data() + d, _mm256_fmadd_ps(wv, load8(vr + d), _mm256_loadu_ps(acc.data() + d)));
    for (; d < D; ++d) acc[d] += w * get(vr, d);
  }
  for (int64_t d = 0; d < D; ++d) out[d] = to<T>(acc[d]);
}

// Grouped-query attention of one query per head: q (H, D) rows contiguous, KV heads at k + g·ks0 (+ j·ks1 per
// position); heads spread over torch's threads once the span is long enough to pay for it.
template <typename T>
void attend(const T* q, int64_t H, int64_t KV, int64_t D, const T* k, int64_t ks0, int64_t ks1, const T* v,
            int64_t vs0, int64_t vs1, int64_t n, float scaling, float cap, T* out) {
  const int64_t group = H / KV;
  auto heads = [&](int64_t begin, int64_t end) {
    std::vector<float> qf(D);
    for (int64_t h = begin; h < end; ++h) {
      for (int64_t d = 0; d < D; ++d) qf[d] = get(q, h * D + d);
      const int64_t g = h / group;
      attend_head(qf.data(), k + g * ks0, ks1, v + g * vs0, vs1, n, D, scaling, cap, out + h * D);
    }
  };
  if (n * D < 16384) heads(0, H);
  else at::parallel_for(0, H, 1, heads);
}

}  // namespace miaohui::rows
