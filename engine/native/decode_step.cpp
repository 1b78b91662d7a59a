// The int8/int4 decode step in one call: miaohui::DecodeStep, and the row operations it is made of, each also an op
// the Python step calls (miaohui::rms_norm_rows, miaohui::silu_mul, miaohui::attend_one), so the two compute the same
// bits: engine/executor/native_step.py says why this exists and when it runs; tests/engine/executor/test_native_step.py
// checks it against the Python step bit for bit, and DecodeStep.verify (n tokens in one call, speculation's check) against
// n steps.
//
// What each operation computes, in the model's dtype T (bf16 or fp32; "round" = to T, nearest even):
// - rms_norm_rows: per row of d, ss = Σ x² (8 fp32 lanes with fused multiply-adds, the lanes summed in order, then the
//   tail), out = round((x · (1 / sqrt(ss / d + eps))) · w). Row r uses weight row r mod (weight rows).
// - silu_mul: (n, 2I) → (n, I), round(round(g / (1 + exp(-g))) · u), exp by exp8 below.
// - attend_one: one query per head over n cached positions, GQA (head h reads KV head h / (H / KV)): scores q·k in fp32
//   (8 fp32 lanes over the dimensions, summed by one fixed tree) times the scaling, softmax with exp8, Σ p·v in fp32,
//   rounded once; each KV head's rows read once for the heads of its group (attend_heads).
// - RoPE and the residual adds inside the step repeat torch's own elementwise rounding (engine/executor/llama_fused.py's
//   rotate, x + out): each product or sum computed in fp32 and rounded to T, so they need no op of their own.
// - products: q8act.cpp's int8-activation kernels (ops.h), a bias added after the product's rounding, as the
//   Python step's kernel(x).add_(bias).
// Compiled with -ffp-contract=off (engine/native/library.py): a multiply and an add fused by the compiler would round
// once where torch rounds twice.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/custom_class.h>
#include <torch/library.h>

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "ops.h"
#include "simd.h"

namespace {

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

// x[i] = e^(x[i] - shift) for n values, every one through exp8 (the tail padded), returns their sum in a fixed order.
__attribute__((target("avx2,fma"))) float exp_shifted(float* x, int64_t n, float shift) {
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

template <typename T>
void norm_rows(const T* x, const T* w, int64_t rows, int64_t d, int64_t weight_rows, float eps, T* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * d;
    const T* wr = w + (r % weight_rows) * d;
    const float inverse = 1.0f / std::sqrt(sum_squares(xr, d) / static_cast<float>(d) + eps);
    for (int64_t i = 0; i < d; ++i) out[r * d + i] = to<T>((get(xr, i) * inverse) * get(wr, i));
  }
}

template <typename T>
__attribute__((target("avx2,fma"))) void silu_rows(const T* gate_up, int64_t rows, int64_t inter, T* out) {
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
      const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), v));
      _mm256_storeu_ps(s.data() + i, _mm256_div_ps(v, _mm256_add_ps(_mm256_set1_ps(1.0f), e)));
    }
    for (int64_t j = 0; j < inter; ++j) out[r * inter + j] = to<T>(rounded<T>(s[j]) * get(u, j));
  }
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
// prefix's run of blocks in its pool, engine/executor/kv_blocks.py).
template <typename T>
struct Span {
  const T* k;
  int64_t ks;
  const T* v;
  int64_t vs;
  int64_t n;
};

// B heads' attention over one KV head's positions, the spans in order (n in all): q (B, padded) fp32 rows (zero past
// D) → out (B rows of D, stride D) in T. Two passes over the positions, in blocks of kBlock widened to fp32 once for
// all B heads, so each key and value byte is read once per step (the decode step at a long context is bound by the
// cache, and GQA's heads of one group read the same rows):
// - scores: per head, 8 positions at a time, each in its own 8 fp32 lanes of q·k over the dimensions in blocks of 8 in
//   order, the lanes summed by sums8's tree, times the scaling; softmax with exp8 (exp_shifted's fixed order, over
//   all n at once);
// - values: per head, Σ_j p_j·v_j per dimension, positions in order, in fp32; rounded to T once.
// A head's arithmetic depends neither on B and the other heads nor on where the spans split the positions (the tests
// check a head in a group against it alone, and a prefix's spans against the joined cache).
template <typename T>
__attribute__((target("avx2,fma"))) void attend_heads(int64_t B, const float* q, int64_t padded,
                                                      const std::vector<Span<T>>& spans, int64_t n, int64_t D,
                                                      float scaling, T* out) {
  std::vector<float> p(static_cast<size_t>(B) * n), block(static_cast<size_t>(kBlock) * padded);
  std::vector<float> most(B, -INFINITY);
  const __m256 scale = _mm256_set1_ps(scaling);
  int64_t offset = 0;
  for (const Span<T>& span : spans) {
    for (int64_t j0 = 0; j0 < span.n; j0 += kBlock) {
      const int64_t m = std::min(kBlock, span.n - j0), m8 = (m + 7) / 8 * 8;
      widen_rows(span.k + j0 * span.ks, span.ks, m, D, padded, block.data());
      std::fill(block.begin() + m * padded, block.begin() + m8 * padded, 0.0f);
      for (int64_t i = 0; i < B; ++i) {
        const float* qi = q + i * padded;
        float* pi = p.data() + i * n + offset + j0;
        for (int64_t j = 0; j < m; j += 8) {
          __m256 acc[8];
          for (int r = 0; r < 8; ++r) acc[r] = _mm256_setzero_ps();
          for (int64_t d = 0; d < padded; d += 8) {
            const __m256 qd = _mm256_loadu_ps(qi + d);
            for (int r = 0; r < 8; ++r)
              acc[r] = _mm256_fmadd_ps(qd, _mm256_loadu_ps(block.data() + (j + r) * padded + d), acc[r]);
          }
          alignas(32) float lane[8];
          _mm256_store_ps(lane, _mm256_mul_ps(sums8(acc), scale));
          for (int64_t r = 0; r < std::min<int64_t>(8, m - j); ++r) {
            pi[j + r] = lane[r];
            most[i] = std::max(most[i], lane[r]);
          }
        }
      }
    }
    offset += span.n;
  }
  std::vector<float> acc(static_cast<size_t>(B) * padded, 0.0f);
  for (int64_t i = 0; i < B; ++i) {
    const float inverse = 1.0f / exp_shifted(p.data() + i * n, n, most[i]);
    for (int64_t j = 0; j < n; ++j) p[i * n + j] *= inverse;
  }
  offset = 0;
  for (const Span<T>& span : spans) {
    for (int64_t j0 = 0; j0 < span.n; j0 += kBlock) {
      const int64_t m = std::min(kBlock, span.n - j0);
      widen_rows(span.v + j0 * span.vs, span.vs, m, D, padded, block.data());
      for (int64_t i = 0; i < B; ++i)
        for (int64_t d = 0; d < padded; d += 64)
          weighted_slice(std::min<int64_t>(8, (padded - d) / 8), block.data() + d, padded, m,
                         p.data() + i * n + offset + j0, acc.data() + i * padded + d);
    }
    offset += span.n;
  }
  for (int64_t i = 0; i < B; ++i)
    for (int64_t d = 0; d < D; ++d) out[i * D + d] = to<T>(acc[i * padded + d]);
}

constexpr int64_t kMostHeads = 16;  // heads sharing one pass over a KV head (their scores are B × n floats)

// How many of a group's heads share one pass over its KV head, given the threads that will split the passes: a pass
// costs about one read of the KV rows (counted as 2 heads' arithmetic) plus its heads' arithmetic, and the slowest
// thread takes ceil(passes / threads) of them. Fewer heads per pass can balance the threads better (SmolLM2's 3 KV
// heads of 3 on 2 threads) at the cost of reading the rows again; the bits are the same either way.
inline int64_t heads_per_pass(int64_t group, int64_t kv, int64_t threads) {
  int64_t best = 1, best_cost = INT64_MAX;
  for (int64_t b = std::min(group, kMostHeads); b >= 1; --b) {
    const int64_t passes = kv * ((group + b - 1) / b);
    const int64_t cost = ((passes + threads - 1) / threads) * (2 + b);
    if (cost < best_cost) best = b, best_cost = cost;
  }
  return best;
}

// A span of every KV head: head g's rows start at k + g·k_head (v + g·v_head).
template <typename T>
struct Heads {
  const T* k;
  int64_t k_head, ks;
  const T* v;
  int64_t v_head, vs, n;
};

// Grouped-query attention of one query per head over the spans in order: q (H, D) rows contiguous; each pass reads
// one KV head's rows once for up to 16 of its heads, and the passes spread over torch's threads once the span is long
// enough to pay for it.
template <typename T>
void attend(const T* q, int64_t H, int64_t KV, int64_t D, const std::vector<Heads<T>>& spans, float scaling, T* out) {
  int64_t n = 0;
  for (const Heads<T>& span : spans) n += span.n;
  const int64_t group = H / KV, padded = (D + 7) / 8 * 8;
  const bool spread = n * D >= 16384;
  const int64_t b = heads_per_pass(group, KV, spread ? at::get_num_threads() : 1);
  const int64_t per_group = (group + b - 1) / b;
  auto passes = [&](int64_t begin, int64_t end) {
    std::vector<float> qf(b * padded, 0.0f);
    std::vector<Span<T>> head;
    for (int64_t pass = begin; pass < end; ++pass) {
      const int64_t g = pass / per_group, first = g * group + (pass % per_group) * b;
      const int64_t count = std::min(b, (g + 1) * group - first);
      for (int64_t i = 0; i < count; ++i)
        for (int64_t d = 0; d < D; ++d) qf[i * padded + d] = get(q, (first + i) * D + d);
      head.clear();
      for (const Heads<T>& span : spans)
        if (span.n > 0) head.push_back({span.k + g * span.k_head, span.ks, span.v + g * span.v_head, span.vs, span.n});
      attend_heads(count, qf.data(), padded, head, n, D, scaling, out + first * D);
    }
  };
  if (!spread) passes(0, KV * per_group);
  else at::parallel_for(0, KV * per_group, 1, passes);
}

// f(T{}) with T the tensor's element type: the two the step computes in.
template <typename F>
void by_dtype(at::ScalarType type, F f) {
  if (type == at::kBFloat16) f(at::BFloat16{});
  else f(float{});
}

void check_dtype(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.scalar_type() == at::kBFloat16 || t.scalar_type() == at::kFloat, what, ": bf16 or fp32");
}

at::Tensor rms_norm_rows_op(const at::Tensor& x_in, const at::Tensor& weight_in, double eps) {
  check_dtype(x_in, "x");
  TORCH_CHECK(weight_in.scalar_type() == x_in.scalar_type(), "weight: x's dtype");
  const at::Tensor x = x_in.contiguous(), weight = weight_in.contiguous();
  const int64_t d = x.size(-1), rows = d ? x.numel() / d : 0;
  TORCH_CHECK(weight.size(-1) == d, "weight: (d,) or (m, d)");
  const int64_t weight_rows = weight.numel() / d;
  TORCH_CHECK(weight_rows > 0 && rows % weight_rows == 0, "x's rows must be a multiple of weight's");
  at::Tensor out = at::empty_like(x);
  by_dtype(x.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    norm_rows(x.data_ptr<T>(), weight.data_ptr<T>(), rows, d, weight_rows, static_cast<float>(eps), out.data_ptr<T>());
  });
  return out;
}

at::Tensor silu_mul_op(const at::Tensor& gate_up_in, int64_t inter) {
  check_dtype(gate_up_in, "gate_up");
  const at::Tensor gate_up = gate_up_in.contiguous();
  TORCH_CHECK(gate_up.dim() == 2 && gate_up.size(1) == 2 * inter, "gate_up: (n, 2·intermediate)");
  at::Tensor out = at::empty({gate_up.size(0), inter}, gate_up.options());
  by_dtype(gate_up.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    silu_rows(gate_up.data_ptr<T>(), gate_up.size(0), inter, out.data_ptr<T>());
  });
  return out;
}

at::Tensor attend_one_op(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in, double scaling) {
  check_dtype(q_in, "q");
  TORCH_CHECK(k_in.scalar_type() == q_in.scalar_type() && v_in.scalar_type() == q_in.scalar_type(), "k, v: q's dtype");
  TORCH_CHECK(q_in.dim() == 2 && k_in.dim() == 3 && v_in.sizes() == k_in.sizes() && k_in.size(2) == q_in.size(1) &&
                  q_in.size(0) % k_in.size(0) == 0, "q (H, D), k and v (KV, n, D), H a multiple of KV");
  const at::Tensor q = q_in.contiguous();
  const at::Tensor k = k_in.stride(2) == 1 ? k_in : k_in.contiguous();
  const at::Tensor v = v_in.stride(2) == 1 ? v_in : v_in.contiguous();
  const int64_t H = q.size(0), D = q.size(1), KV = k.size(0), n = k.size(1);
  TORCH_CHECK(n > 0, "attention over no positions");
  at::Tensor out = at::empty({1, H * D}, q.options());
  by_dtype(q.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    const std::vector<Heads<T>> spans{{k.data_ptr<T>(), k.stride(0), k.stride(1), v.data_ptr<T>(), v.stride(0),
                                       v.stride(1), n}};
    attend(q.data_ptr<T>(), H, KV, D, spans, static_cast<float>(scaling), out.data_ptr<T>());
  });
  return out;
}

// ---- the whole step

struct Projection {
  int64_t bits = 4;  // 4: q4_q8_mm (codes, scales); 8: q8_q8_mm (tiles, per-row scales)
  at::Tensor weight, scales, bias;  // bias undefined when none
  int64_t out = 0, isa = 0;
};

struct Layer {
  at::Tensor attn_norm, mlp_norm, qk_norm;  // qk_norm undefined when none
  int64_t qkv, o, gate_up, down, window;  // window 0: global attention
};

class DecodeStep : public torch::CustomClassHolder {
 public:
  DecodeStep(int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t intermediate, double eps, double scaling)
      : heads_(heads), kv_heads_(kv_heads), dim_(head_dim), inter_(intermediate), eps_(static_cast<float>(eps)),
        scaling_(static_cast<float>(scaling)) {
    TORCH_CHECK(heads > 0 && kv_heads > 0 && heads % kv_heads == 0 && head_dim > 0 && intermediate > 0, "bad shape");
  }

  int64_t add_projection(int64_t bits, at::Tensor weight, at::Tensor scales, int64_t out, at::Tensor bias,
                         int64_t isa) {
    TORCH_CHECK(bits == 4 || bits == 8, "bits: 4 or 8");
    projections_.push_back({bits, weight, scales, bias.numel() ? bias : at::Tensor(), out, isa});
    return static_cast<int64_t>(projections_.size()) - 1;
  }

  void add_layer(at::Tensor attn_norm, at::Tensor mlp_norm, at::Tensor qk_norm, int64_t qkv, int64_t o,
                 int64_t gate_up, int64_t down, int64_t window) {
    const int64_t count = static_cast<int64_t>(projections_.size());
    for (int64_t index : {qkv, o, gate_up, down}) TORCH_CHECK(index >= 0 && index < count, "no such projection");
    layers_.push_back({attn_norm.contiguous(), mlp_norm.contiguous(),
                       qk_norm.numel() ? qk_norm.contiguous() : at::Tensor(), qkv, o, gate_up, down, window});
  }

  void set_head(at::Tensor final_norm, int64_t head) {
    TORCH_CHECK(head >= 0 && head < static_cast<int64_t>(projections_.size()), "no such projection");
    final_norm_ = final_norm.contiguous();
    head_ = head;
  }

  // x (1, d) the token's embedding; pos its position; cos and sin the RoPE tables (positions, rotary) with rotate_half's
  // sign in sin; k and v the cache (layers, KV, capacity, D), written at pos → logits (1, vocab).
  at::Tensor step(at::Tensor x, int64_t pos, at::Tensor cos, at::Tensor sin, at::Tensor k, at::Tensor v) {
    TORCH_CHECK(x.dim() == 2 && x.size(0) == 1, "x: (1, d)");
    return rows(x, pos, cos, sin, k, v);
  }

  // Speculation's verify (engine/executor/verify.py): x (n, d) the embeddings of n tokens at positions
  // pos..pos+n-1 → logits (n, vocab), every row the bits one step() at its position gives. Each product runs on the n
  // rows at once: q8act's kernels quantize each activation row alone and accumulate each row in its own lanes over the
  // blocks in order (rows only share the weight loads), so a row's result does not depend on the others (the test
  // checks it). Each token writes its key and value, then attends to exactly 0..its position, as its step would.
  at::Tensor verify(at::Tensor x, int64_t pos, at::Tensor cos, at::Tensor sin, at::Tensor k, at::Tensor v) {
    TORCH_CHECK(x.dim() == 2 && x.size(0) >= 1, "x: (n, d)");
    return rows(x, pos, cos, sin, k, v);
  }

  // Continuous batching's step (engine/executor/batched.py): row i of x (B, d) is the next token of sequence i, at
  // positions[i] in its own cache ks[i], vs[i] → logits (B, vocab), every row the bits step() gives that sequence
  // alone (the products' rows are independent, as verify's; each row attends over its own cache only).
  // bases[i] > 0: sequence i starts with a shared prefix of that many positions, rows of pool_k, pool_v (layers, KV,
  // pool capacity, D) in runs[i] (first row, end row pairs, flattened); its own cache holds position p at p - bases[i].
  at::Tensor batch(at::Tensor x, std::vector<int64_t> positions, at::Tensor cos, at::Tensor sin,
                   std::vector<at::Tensor> ks, std::vector<at::Tensor> vs, std::vector<int64_t> bases,
                   at::Tensor pool_k, at::Tensor pool_v, std::vector<std::vector<int64_t>> runs) {
    check_dtype(x, "x");
    TORCH_CHECK(head_ >= 0, "set_head first");
    const int64_t n = x.dim() == 2 ? x.size(0) : 0;
    TORCH_CHECK(n >= 1 && static_cast<int64_t>(positions.size()) == n && static_cast<int64_t>(ks.size()) == n &&
                    static_cast<int64_t>(vs.size()) == n, "x: (B, d) with B positions and B caches");
    TORCH_CHECK(static_cast<int64_t>(bases.size()) == n && static_cast<int64_t>(runs.size()) == n,
                "one base and one list of runs per sequence");
    std::vector<Seq> seqs;
    for (int64_t i = 0; i < n; ++i) {
      check_cache(ks[i], vs[i], positions[i] - bases[i], x.scalar_type());
      Seq seq{ks[i].data_ptr(), vs[i].data_ptr(), ks[i].size(2), positions[i]};
      if (bases[i] > 0) add_prefix(seq, bases[i], pool_k, pool_v, runs[i], x.scalar_type());
      seqs.push_back(std::move(seq));
    }
    check_rope(cos, sin, *std::max_element(positions.begin(), positions.end()), x.scalar_type());
    at::Tensor logits;
    by_dtype(x.scalar_type(), [&](auto tag) { logits = run<decltype(tag)>(x.contiguous(), seqs, cos, sin); });
    return logits;
  }

 private:
  // One sequence's cache and the position a row writes and attends up to (the step's pointers, not owned).
  struct Seq {
    void* k;
    void* v;
    int64_t capacity, pos;
    // a shared prefix (engine/executor/kv_blocks.py): positions 0..base-1 are rows of the pool (layers, KV,
    // pool_capacity, D), in runs of (first row, end row); the cache's own index of position p is p - base
    int64_t base = 0;
    const void* pool_k = nullptr;
    const void* pool_v = nullptr;
    int64_t pool_capacity = 0;
    std::vector<std::pair<int64_t, int64_t>> runs;
  };

  // The spans row `seq` attends over at layer `index`, from position `first` (a sliding window's start) to its own.
  template <typename T>
  std::vector<Heads<T>> spans_of(const Seq& seq, size_t index, int64_t first) const {
    const int64_t KV = kv_heads_, D = dim_;
    std::vector<Heads<T>> spans;
    int64_t skip = first;
    for (const auto& [begin, end] : seq.runs) {
      const int64_t length = end - begin;
      if (skip >= length) {
        skip -= length;
        continue;
      }
      const int64_t layer = static_cast<int64_t>(index) * KV * seq.pool_capacity * D, row = (begin + skip) * D;
      spans.push_back({static_cast<const T*>(seq.pool_k) + layer + row, seq.pool_capacity * D, D,
                       static_cast<const T*>(seq.pool_v) + layer + row, seq.pool_capacity * D, D, length - skip});
      skip = 0;
    }
    const int64_t own = static_cast<int64_t>(index) * KV * seq.capacity * D;
    spans.push_back({static_cast<const T*>(seq.k) + own + skip * D, seq.capacity * D, D,
                     static_cast<const T*>(seq.v) + own + skip * D, seq.capacity * D, D, seq.pos - seq.base + 1 - skip});
    return spans;
  }

  void check_cache(const at::Tensor& k, const at::Tensor& v, int64_t last, at::ScalarType type) const {
    TORCH_CHECK(k.is_contiguous() && v.is_contiguous() && k.dim() == 4 && k.sizes() == v.sizes() &&
                    k.size(0) == static_cast<int64_t>(layers_.size()) && k.size(1) == kv_heads_ && k.size(3) == dim_ &&
                    last >= 0 && last < k.size(2), "k, v: contiguous (layers, KV, capacity > last position, D)");
    TORCH_CHECK(k.scalar_type() == type && v.scalar_type() == type, "one dtype throughout");
  }

  void add_prefix(Seq& seq, int64_t base, const at::Tensor& pool_k, const at::Tensor& pool_v,
                  const std::vector<int64_t>& runs, at::ScalarType type) const {
    TORCH_CHECK(pool_k.is_contiguous() && pool_v.is_contiguous() && pool_k.dim() == 4 &&
                    pool_k.sizes() == pool_v.sizes() && pool_k.size(0) == static_cast<int64_t>(layers_.size()) &&
                    pool_k.size(1) == kv_heads_ && pool_k.size(3) == dim_ && pool_k.scalar_type() == type &&
                    pool_v.scalar_type() == type, "pool: contiguous (layers, KV, capacity, D) in the step's dtype");
    TORCH_CHECK(runs.size() % 2 == 0, "runs: (first row, end row) pairs");
    int64_t total = 0;
    for (size_t i = 0; i < runs.size(); i += 2) {
      TORCH_CHECK(0 <= runs[i] && runs[i] < runs[i + 1] && runs[i + 1] <= pool_k.size(2), "a run outside the pool");
      seq.runs.emplace_back(runs[i], runs[i + 1]);
      total += runs[i + 1] - runs[i];
    }
    TORCH_CHECK(total == base && seq.pos >= base, "the runs must hold the prefix's positions, before the row's own");
    seq.base = base;
    seq.pool_k = pool_k.data_ptr();
    seq.pool_v = pool_v.data_ptr();
    seq.pool_capacity = pool_k.size(2);
  }

  void check_rope(const at::Tensor& cos, const at::Tensor& sin, int64_t last, at::ScalarType type) const {
    TORCH_CHECK(cos.is_contiguous() && sin.is_contiguous() && cos.dim() == 2 && cos.sizes() == sin.sizes() &&
                    last < cos.size(0) && cos.size(1) <= dim_ && cos.size(1) % 2 == 0, "cos, sin: (positions, rotary)");
    TORCH_CHECK(cos.scalar_type() == type && sin.scalar_type() == type, "one dtype throughout");
  }

  at::Tensor rows(at::Tensor x, int64_t pos, at::Tensor cos, at::Tensor sin, at::Tensor k, at::Tensor v) {
    check_dtype(x, "x");
    TORCH_CHECK(head_ >= 0, "set_head first");
    TORCH_CHECK(pos >= 0, "pos: from 0");
    const int64_t last = pos + x.size(0) - 1;
    check_cache(k, v, last, x.scalar_type());
    check_rope(cos, sin, last, x.scalar_type());
    std::vector<Seq> seqs;  // verify: token t of the one sequence at pos + t
    for (int64_t t = 0; t < x.size(0); ++t) seqs.push_back({k.data_ptr(), v.data_ptr(), k.size(2), pos + t});
    at::Tensor logits;
    by_dtype(x.scalar_type(), [&](auto tag) { logits = run<decltype(tag)>(x.contiguous(), seqs, cos, sin); });
    return logits;
  }

  at::Tensor product(const Projection& p, const at::Tensor& x) const {
    at::Tensor y = p.bits == 4 ? miaohui::q4_q8_mm(x, p.weight, p.scales, p.out, p.isa)
                               : miaohui::q8_q8_mm(x, p.weight, p.scales, p.out, p.isa);
    if (p.bias.defined()) y.add_(p.bias);  // the Python step's kernel(x).add_(bias): rounded after the product's rounding
    return y;
  }

  template <typename T>
  at::Tensor norm(const at::Tensor& x, const at::Tensor& w, int64_t rows) const {
    at::Tensor out = at::empty_like(x);
    const int64_t d = x.numel() / rows;
    norm_rows(x.data_ptr<T>(), w.data_ptr<T>(), rows, d, w.numel() / d, eps_, out.data_ptr<T>());
    return out;
  }

  template <typename T>
  static void add_into(at::Tensor& x, const at::Tensor& y) {  // x = round(x + y), torch's bf16 add
    T* xp = x.data_ptr<T>();
    const T* yp = y.data_ptr<T>();
    for (int64_t i = 0; i < x.numel(); ++i) xp[i] = to<T>(get(xp, i) + get(yp, i));
  }

  template <typename T>
  at::Tensor run(at::Tensor x, const std::vector<Seq>& seqs, const at::Tensor& cos, const at::Tensor& sin) {
    const int64_t H = heads_, KV = kv_heads_, D = dim_, rotary = cos.size(1), half = rotary / 2;
    const int64_t n = x.size(0);
    x = x.clone();  // the residual stream (n, d), updated in place
    at::Tensor rotated = at::empty({n, H + KV, D}, x.options());
    at::Tensor attn = at::empty({n, H * D}, x.options());
    for (size_t index = 0; index < layers_.size(); ++index) {
      const Layer& layer = layers_[index];
      const at::Tensor qkv = product(projections_[layer.qkv], norm<T>(x, layer.attn_norm, n));  // (n, (H+2KV)·D)
      const int64_t width = (H + 2 * KV) * D;
      const T* qk = qkv.data_ptr<T>();
      int64_t qk_stride = width;  // between one token's q|k and the next's
      at::Tensor normed;
      if (layer.qk_norm.defined()) {
        normed = norm<T>(qkv.narrow(1, 0, (H + KV) * D).contiguous(), layer.qk_norm, n * (H + KV));
        qk = normed.data_ptr<T>();
        qk_stride = (H + KV) * D;
      }
      for (int64_t t = 0; t < n; ++t) {  // token t writes its key and value, then sees exactly 0..its position
        const int64_t pos = seqs[t].pos, capacity = seqs[t].capacity, own = pos - seqs[t].base;
        T* kl = static_cast<T*>(seqs[t].k) + static_cast<int64_t>(index) * KV * capacity * D;
        T* vl = static_cast<T*>(seqs[t].v) + static_cast<int64_t>(index) * KV * capacity * D;
        const T* c = cos.data_ptr<T>() + pos * rotary;
        const T* s = sin.data_ptr<T>() + pos * rotary;
        // RoPE as rotate(): x·cos + roll(x, half)·sin, each product and the sum rounded; the rest of the head passes
        T* r = rotated.data_ptr<T>() + t * (H + KV) * D;
        for (int64_t row = 0; row < H + KV; ++row) {
          const T* in = qk + t * qk_stride + row * D;
          T* o = r + row * D;
          for (int64_t i = 0; i < rotary; ++i) {
            const float a = rounded<T>(get(in, i) * get(c, i));
            const float b = rounded<T>(get(in, i < half ? i + half : i - half) * get(s, i));
            o[i] = to<T>(a + b);
          }
          for (int64_t i = rotary; i < D; ++i) o[i] = in[i];
        }
        const T* values = qkv.data_ptr<T>() + t * width + (H + KV) * D;
        for (int64_t g = 0; g < KV; ++g) {
          std::memcpy(kl + (g * capacity + own) * D, r + (H + g) * D, sizeof(T) * D);
          std::memcpy(vl + (g * capacity + own) * D, values + g * D, sizeof(T) * D);
        }
        const int64_t first = layer.window > 0 ? std::max<int64_t>(0, pos + 1 - layer.window) : 0;
        attend(r, H, KV, D, spans_of<T>(seqs[t], index, first), scaling_, attn.data_ptr<T>() + t * H * D);
      }
      add_into<T>(x, product(projections_[layer.o], attn));
      const at::Tensor gate_up = product(projections_[layer.gate_up], norm<T>(x, layer.mlp_norm, n));
      at::Tensor act = at::empty({n, inter_}, x.options());
      silu_rows(gate_up.data_ptr<T>(), n, inter_, act.data_ptr<T>());
      add_into<T>(x, product(projections_[layer.down], act));
    }
    return product(projections_[head_], norm<T>(x, final_norm_, n));
  }

  int64_t heads_, kv_heads_, dim_, inter_;
  float eps_, scaling_;
  std::vector<Projection> projections_;
  std::vector<Layer> layers_;
  at::Tensor final_norm_;
  int64_t head_ = -1;
};

}  // namespace

namespace miaohui {

at::Tensor rms_norm_rows(const at::Tensor& x, const at::Tensor& weight, double eps) {
  return rms_norm_rows_op(x, weight, eps);
}

at::Tensor silu_mul(const at::Tensor& gate_up, int64_t intermediate) { return silu_mul_op(gate_up, intermediate); }

at::Tensor attend_one(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scaling) {
  return attend_one_op(q, k, v, scaling);
}

void define_decode_step(torch::Library& m) {
  m.class_<DecodeStep>("DecodeStep")
      .def(torch::init<int64_t, int64_t, int64_t, int64_t, double, double>())
      .def("add_projection", &DecodeStep::add_projection)
      .def("add_layer", &DecodeStep::add_layer)
      .def("set_head", &DecodeStep::set_head)
      .def("step", &DecodeStep::step)
      .def("verify", &DecodeStep::verify)
      .def("batch", &DecodeStep::batch);
}

}  // namespace miaohui
