// The int8/int4 decode step in one call: miaohui::DecodeStep, and the row operations it is made of, each also an op
// the Python step calls (miaohui::rms_norm_rows, miaohui::silu_mul, miaohui::gelu_tanh_mul, miaohui::attend_one), so
// the two compute the same bits: engine/executor/native_step.py says why this exists and when it runs;
// tests/engine/executor/test_native_step.py checks it against the Python step bit for bit, and DecodeStep.verify
// (n tokens in one call, speculation's check) against n steps. The operations' code is row_ops.h.
//
// A layer: x += [post_attn_norm](o(attend(RoPE([qk_norm](qkv(norm(x))))))), then
// x += [post_mlp_norm](down(act(gate_up(mlp_norm(x))))); the bracketed norms only where the model has them (Gemma's
// post norms, Qwen3's and Gemma 3's q/k norms), RoPE from the layer's own table (Gemma 3: local or global base), act
// SiLU or Gemma's tanh-GELU.
//
// What each operation computes, in the model's dtype T (bf16 or fp32; "round" = to T, nearest even):
// - rms_norm_rows: per row of d, ss = Σ x² (8 fp32 lanes with fused multiply-adds, the lanes summed in order, then the
//   tail), out = round((x · (1 / sqrt(ss / d + eps))) · w). Row r uses weight row r mod (weight rows). The weight is
//   in T, or in fp32: Gemma's 1 + w (engine/executor/llama_fused.py's _norm_weight), whose norm rounds once after
//   the weight, as this formula does.
// - silu_mul: (n, 2I) → (n, I), round(round(g / (1 + exp(-g))) · u), exp by row_ops.h's exp8.
// - gelu_tanh_mul: Gemma's GeGLU, round(round(gelu(g)) · u) with the tanh-approximated GELU written as
//   0.5·g·(1 + tanh(y)) = g / (1 + exp(-2y)), y = sqrt(2/π)·(g + 0.044715·g³): the same exp8 path as silu_mul.
// - attend_one: one query per head over n cached positions, GQA (head h reads KV head h / (H / KV)): scores q·k in fp32
//   (8 fp32 lanes over the dimensions, summed by one fixed tree) times the scaling, Gemma 2's soft cap where given
//   (s = cap · tanh(s / cap), row_ops.h's tanh8), softmax with exp8, Σ p·v in fp32,
//   rounded once; each KV head's rows read once for the heads of its group (attend_heads).
// - over an 8-bit KV cache (step_q8, verify_q8): each token's key and value quantized per head as kv_int8.cpp's
//   kv_quantize (kv_cache.py's quantize, bit for bit) and attended as its attend_one_q8: attend_one's arithmetic
//   over the int8 rows widened times their scales (exact), so the dense step's code runs on a different widening.
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
#include "row_ops.h"

namespace {

using namespace miaohui::rows;  // row_ops.h: the row operations below call

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
  TORCH_CHECK(weight_in.scalar_type() == x_in.scalar_type() || weight_in.scalar_type() == at::kFloat,
              "weight: x's dtype or fp32");
  const at::Tensor x = x_in.contiguous(), weight = weight_in.contiguous();
  const int64_t d = x.size(-1), rows = d ? x.numel() / d : 0;
  TORCH_CHECK(weight.size(-1) == d, "weight: (d,) or (m, d)");
  const int64_t weight_rows = weight.numel() / d;
  TORCH_CHECK(weight_rows > 0 && rows % weight_rows == 0, "x's rows must be a multiple of weight's");
  at::Tensor out = at::empty_like(x);
  by_dtype(x.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    by_dtype(weight.scalar_type(), [&](auto weight_tag) {
      using W = decltype(weight_tag);
      norm_rows(x.data_ptr<T>(), weight.data_ptr<W>(), rows, d, weight_rows, static_cast<float>(eps), out.data_ptr<T>());
    });
  });
  return out;
}

at::Tensor glu_op(const at::Tensor& gate_up_in, int64_t inter, int64_t act) {
  check_dtype(gate_up_in, "gate_up");
  const at::Tensor gate_up = gate_up_in.contiguous();
  TORCH_CHECK(gate_up.dim() == 2 && gate_up.size(1) == 2 * inter, "gate_up: (n, 2·intermediate)");
  at::Tensor out = at::empty({gate_up.size(0), inter}, gate_up.options());
  by_dtype(gate_up.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    glu_rows(gate_up.data_ptr<T>(), gate_up.size(0), inter, act, out.data_ptr<T>());
  });
  return out;
}

at::Tensor attend_one_op(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in, double scaling,
                         double softcap) {
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
    attend(q.data_ptr<T>(), H, KV, D, spans, static_cast<float>(scaling), static_cast<float>(softcap),
           out.data_ptr<T>());
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
  // Norm weights in the model's dtype, or fp32 (Gemma's 1 + w); qk_norm, post_attn_norm and post_mlp_norm undefined
  // when none (post_*: Gemma's norms of the attention and MLP outputs before each residual add).
  at::Tensor attn_norm, mlp_norm, qk_norm, post_attn_norm, post_mlp_norm;
  int64_t qkv, o, gate_up, down, window;  // window 0: global attention
  int64_t rope;  // which of the step's RoPE tables (Gemma 3: sliding layers the local base, global ones the global)
};

class DecodeStep : public torch::CustomClassHolder {
 public:
  // activation: kSilu or kGeluTanh (Gemma's GeGLU); attn_softcap: Gemma 2's cap of the attention scores, 0 for none.
  DecodeStep(int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t intermediate, double eps, double scaling,
             int64_t activation, double attn_softcap)
      : heads_(heads), kv_heads_(kv_heads), dim_(head_dim), inter_(intermediate), act_(activation),
        eps_(static_cast<float>(eps)), scaling_(static_cast<float>(scaling)), cap_(static_cast<float>(attn_softcap)) {
    TORCH_CHECK(heads > 0 && kv_heads > 0 && heads % kv_heads == 0 && head_dim > 0 && intermediate > 0, "bad shape");
    TORCH_CHECK(activation == kSilu || activation == kGeluTanh, "activation: 0 (SiLU) or 1 (tanh-GELU)");
    TORCH_CHECK(attn_softcap >= 0.0, "attn_softcap: 0 (none) or the cap");
  }

  int64_t add_projection(int64_t bits, at::Tensor weight, at::Tensor scales, int64_t out, at::Tensor bias,
                         int64_t isa) {
    TORCH_CHECK(bits == 4 || bits == 8, "bits: 4 or 8");
    projections_.push_back({bits, weight, scales, bias.numel() ? bias : at::Tensor(), out, isa});
    return static_cast<int64_t>(projections_.size()) - 1;
  }

  // An empty tensor for a norm this layer has not; rope: the index of its table in step()'s cos and sin lists.
  void add_layer(at::Tensor attn_norm, at::Tensor mlp_norm, at::Tensor qk_norm, at::Tensor post_attn_norm,
                 at::Tensor post_mlp_norm, int64_t qkv, int64_t o, int64_t gate_up, int64_t down, int64_t window,
                 int64_t rope) {
    const int64_t count = static_cast<int64_t>(projections_.size());
    for (int64_t index : {qkv, o, gate_up, down}) TORCH_CHECK(index >= 0 && index < count, "no such projection");
    TORCH_CHECK(rope >= 0, "rope: a table's index");
    auto optional = [](const at::Tensor& t) { return t.numel() ? t.contiguous() : at::Tensor(); };
    layers_.push_back({attn_norm.contiguous(), mlp_norm.contiguous(), optional(qk_norm), optional(post_attn_norm),
                       optional(post_mlp_norm), qkv, o, gate_up, down, window, rope});
  }

  void set_head(at::Tensor final_norm, int64_t head) {
    TORCH_CHECK(head >= 0 && head < static_cast<int64_t>(projections_.size()), "no such projection");
    final_norm_ = final_norm.contiguous();
    head_ = head;
  }

  // x (1, d) the token's embedding (Gemma's already scaled); pos its position; cos and sin the RoPE tables, each
  // (positions, rotary) with rotate_half's sign in sin, one per index a layer names; k and v the cache
  // (layers, KV, capacity, D), written at pos → logits (1, vocab), before any final soft cap (the caller's).
  at::Tensor step(at::Tensor x, int64_t pos, std::vector<at::Tensor> cos, std::vector<at::Tensor> sin, at::Tensor k,
                  at::Tensor v) {
    TORCH_CHECK(x.dim() == 2 && x.size(0) == 1, "x: (1, d)");
    return rows(x, pos, cos, sin, k, v);
  }

  // Speculation's verify (engine/executor/verify.py): x (n, d) the embeddings of n tokens at positions
  // pos..pos+n-1 → logits (n, vocab), every row the bits one step() at its position gives. Each product runs on the n
  // rows at once: q8act's kernels quantize each activation row alone and accumulate each row in its own lanes over the
  // blocks in order (rows only share the weight loads), so a row's result does not depend on the others (the test
  // checks it). Each token writes its key and value, then attends to exactly 0..its position, as its step would.
  at::Tensor verify(at::Tensor x, int64_t pos, std::vector<at::Tensor> cos, std::vector<at::Tensor> sin, at::Tensor k,
                    at::Tensor v) {
    TORCH_CHECK(x.dim() == 2 && x.size(0) >= 1, "x: (n, d)");
    return rows(x, pos, cos, sin, k, v);
  }

  // step and verify over an 8-bit cache (engine/executor/kv_cache.py's Int8KVCache): k and v int8 (layers, KV,
  // capacity, D), k_scale and v_scale fp16 (layers, KV, capacity). Each token's key and value are quantized as
  // kv_cache.py's quantize (row_ops.h's quantize_row) and written with their scales; attention reads the int8 rows
  // (attend_one_q8's). Separate methods so the dense ones keep their arguments (and a library built before runs them).
  at::Tensor step_q8(at::Tensor x, int64_t pos, std::vector<at::Tensor> cos, std::vector<at::Tensor> sin, at::Tensor k,
                     at::Tensor v, at::Tensor k_scale, at::Tensor v_scale) {
    TORCH_CHECK(x.dim() == 2 && x.size(0) == 1, "x: (1, d)");
    return rows(x, pos, cos, sin, k, v, k_scale, v_scale);
  }

  at::Tensor verify_q8(at::Tensor x, int64_t pos, std::vector<at::Tensor> cos, std::vector<at::Tensor> sin,
                       at::Tensor k, at::Tensor v, at::Tensor k_scale, at::Tensor v_scale) {
    TORCH_CHECK(x.dim() == 2 && x.size(0) >= 1, "x: (n, d)");
    return rows(x, pos, cos, sin, k, v, k_scale, v_scale);
  }

  // Continuous batching's step (engine/executor/batched.py): row i of x (B, d) is the next token of sequence i, at
  // positions[i] in its own cache ks[i], vs[i] → logits (B, vocab), every row the bits step() gives that sequence
  // alone (the products' rows are independent, as verify's; each row attends over its own cache only).
  // bases[i] > 0: sequence i starts with a shared prefix of that many positions, rows of pool_k, pool_v (layers, KV,
  // pool capacity, D) in runs[i] (first row, end row pairs, flattened); its own cache holds position p at p - bases[i].
  at::Tensor batch(at::Tensor x, std::vector<int64_t> positions, std::vector<at::Tensor> cos,
                   std::vector<at::Tensor> sin, std::vector<at::Tensor> ks, std::vector<at::Tensor> vs,
                   std::vector<int64_t> bases, at::Tensor pool_k, at::Tensor pool_v,
                   std::vector<std::vector<int64_t>> runs) {
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
    by_dtype(x.scalar_type(), [&](auto tag) {
      using T = decltype(tag);
      logits = run<T, T>(x.contiguous(), seqs, cos, sin);
    });
    return logits;
  }

  // batch over 8-bit caches (step_q8's, one per sequence, with their scales); an 8-bit cache has no shared prefix.
  at::Tensor batch_q8(at::Tensor x, std::vector<int64_t> positions, std::vector<at::Tensor> cos,
                      std::vector<at::Tensor> sin, std::vector<at::Tensor> ks, std::vector<at::Tensor> vs,
                      std::vector<at::Tensor> k_scales, std::vector<at::Tensor> v_scales) {
    check_dtype(x, "x");
    TORCH_CHECK(head_ >= 0, "set_head first");
    const int64_t n = x.dim() == 2 ? x.size(0) : 0;
    TORCH_CHECK(n >= 1 && static_cast<int64_t>(positions.size()) == n && static_cast<int64_t>(ks.size()) == n &&
                    static_cast<int64_t>(vs.size()) == n && static_cast<int64_t>(k_scales.size()) == n &&
                    static_cast<int64_t>(v_scales.size()) == n, "x: (B, d) with B positions and B caches");
    std::vector<Seq> seqs;
    for (int64_t i = 0; i < n; ++i) {
      check_cache_q8(ks[i], vs[i], k_scales[i], v_scales[i], positions[i]);
      seqs.push_back({ks[i].data_ptr(), vs[i].data_ptr(), ks[i].size(2), positions[i],
                      k_scales[i].data_ptr<at::Half>(), v_scales[i].data_ptr<at::Half>()});
    }
    check_rope(cos, sin, *std::max_element(positions.begin(), positions.end()), x.scalar_type());
    at::Tensor logits;
    by_dtype(x.scalar_type(), [&](auto tag) {
      using T = decltype(tag);
      logits = run<T, int8_t>(x.contiguous(), seqs, cos, sin);
    });
    return logits;
  }

 private:
  // One sequence's cache and the position a row writes and attends up to (the step's pointers, not owned).
  struct Seq {
    void* k;
    void* v;
    int64_t capacity, pos;
    at::Half* k_scale = nullptr;  // an int8 cache's scales (layers, KV, capacity)
    at::Half* v_scale = nullptr;
    // a shared prefix (engine/executor/kv_blocks.py): positions 0..base-1 are rows of the pool (layers, KV,
    // pool_capacity, D), in runs of (first row, end row); the cache's own index of position p is p - base
    int64_t base = 0;
    const void* pool_k = nullptr;
    const void* pool_v = nullptr;
    int64_t pool_capacity = 0;
    std::vector<std::pair<int64_t, int64_t>> runs;
  };

  // The spans row `seq` attends over at layer `index`, from position `first` (a sliding window's start) to its own.
  template <typename C>
  std::vector<Heads<C>> spans_of(const Seq& seq, size_t index, int64_t first) const {
    const int64_t KV = kv_heads_, D = dim_;
    std::vector<Heads<C>> spans;
    int64_t skip = first;
    for (const auto& [begin, end] : seq.runs) {
      const int64_t length = end - begin;
      if (skip >= length) {
        skip -= length;
        continue;
      }
      const int64_t layer = static_cast<int64_t>(index) * KV * seq.pool_capacity * D, row = (begin + skip) * D;
      spans.push_back({static_cast<const C*>(seq.pool_k) + layer + row, seq.pool_capacity * D, D,
                       static_cast<const C*>(seq.pool_v) + layer + row, seq.pool_capacity * D, D, length - skip});
      skip = 0;
    }
    const int64_t own = static_cast<int64_t>(index) * KV * seq.capacity * D;
    const int64_t scales = static_cast<int64_t>(index) * KV * seq.capacity + skip;  // an int8 cache's
    spans.push_back({static_cast<const C*>(seq.k) + own + skip * D, seq.capacity * D, D,
                     static_cast<const C*>(seq.v) + own + skip * D, seq.capacity * D, D, seq.pos - seq.base + 1 - skip,
                     seq.k_scale ? seq.k_scale + scales : nullptr, seq.v_scale ? seq.v_scale + scales : nullptr,
                     seq.capacity});
    return spans;
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

  void check_cache(const at::Tensor& k, const at::Tensor& v, int64_t last, at::ScalarType type) const {
    TORCH_CHECK(k.is_contiguous() && v.is_contiguous() && k.dim() == 4 && k.sizes() == v.sizes() &&
                    k.size(0) == static_cast<int64_t>(layers_.size()) && k.size(1) == kv_heads_ && k.size(3) == dim_ &&
                    last >= 0 && last < k.size(2), "k, v: contiguous (layers, KV, capacity > last position, D)");
    TORCH_CHECK(k.scalar_type() == type && v.scalar_type() == type, "one dtype throughout");
  }

  void check_cache_q8(const at::Tensor& k, const at::Tensor& v, const at::Tensor& k_scale, const at::Tensor& v_scale,
                      int64_t last) const {
    check_cache(k, v, last, at::kChar);
    TORCH_CHECK(k_scale.is_contiguous() && v_scale.is_contiguous() && k_scale.scalar_type() == at::kHalf &&
                    v_scale.scalar_type() == at::kHalf && k_scale.sizes() == k.sizes().slice(0, 3) &&
                    v_scale.sizes() == k_scale.sizes(), "k_scale, v_scale: contiguous fp16 (layers, KV, capacity)");
  }

  // one (cos, sin) pair per RoPE table a layer names, all alike in shape
  void check_rope(const std::vector<at::Tensor>& cos, const std::vector<at::Tensor>& sin, int64_t last,
                  at::ScalarType type) const {
    TORCH_CHECK(!cos.empty() && cos.size() == sin.size(), "cos, sin: one table each per RoPE kind");
    for (const Layer& layer : layers_) TORCH_CHECK(layer.rope < static_cast<int64_t>(cos.size()), "no such RoPE table");
    for (size_t i = 0; i < cos.size(); ++i) {
      TORCH_CHECK(cos[i].is_contiguous() && sin[i].is_contiguous() && cos[i].dim() == 2 &&
                      cos[i].sizes() == sin[i].sizes() && cos[i].sizes() == cos[0].sizes() && last < cos[i].size(0) &&
                      cos[i].size(1) <= dim_ && cos[i].size(1) % 2 == 0, "cos, sin: (positions, rotary), all alike");
      TORCH_CHECK(cos[i].scalar_type() == type && sin[i].scalar_type() == type, "one dtype throughout");
    }
  }

  // k_scale and v_scale given (defined): an int8 cache, k and v int8
  at::Tensor rows(at::Tensor x, int64_t pos, const std::vector<at::Tensor>& cos, const std::vector<at::Tensor>& sin,
                  at::Tensor k, at::Tensor v, at::Tensor k_scale = {}, at::Tensor v_scale = {}) {
    check_dtype(x, "x");
    TORCH_CHECK(head_ >= 0, "set_head first");
    TORCH_CHECK(pos >= 0, "pos: from 0");
    const int64_t last = pos + x.size(0) - 1;
    const bool q8 = k_scale.defined();
    if (q8) check_cache_q8(k, v, k_scale, v_scale, last);
    else check_cache(k, v, last, x.scalar_type());
    check_rope(cos, sin, last, x.scalar_type());
    std::vector<Seq> seqs;  // verify: token t of the one sequence at pos + t
    for (int64_t t = 0; t < x.size(0); ++t) {
      seqs.push_back({k.data_ptr(), v.data_ptr(), k.size(2), pos + t});
      if (q8) seqs.back().k_scale = k_scale.data_ptr<at::Half>(), seqs.back().v_scale = v_scale.data_ptr<at::Half>();
    }
    at::Tensor logits;
    by_dtype(x.scalar_type(), [&](auto tag) {
      using T = decltype(tag);
      logits = q8 ? run<T, int8_t>(x.contiguous(), seqs, cos, sin) : run<T, T>(x.contiguous(), seqs, cos, sin);
    });
    return logits;
  }

  // One token's key or value row of one KV head into the cache: copied (a cache in T), or quantized with its scale.
  template <typename T>
  static void put_row(T* dst, at::Half*, const T* src, int64_t D) { std::memcpy(dst, src, sizeof(T) * D); }
  template <typename T>
  static void put_row(int8_t* dst, at::Half* scale, const T* src, int64_t D) { quantize_row(src, D, dst, scale); }

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
    by_dtype(w.scalar_type(), [&](auto tag) {  // the weight in T, or fp32 (Gemma's 1 + w)
      norm_rows(x.data_ptr<T>(), w.data_ptr<decltype(tag)>(), rows, d, w.numel() / d, eps_, out.data_ptr<T>());
    });
    return out;
  }

  // x (rows, d) normed by w where the layer has that norm, else x itself (Gemma's post norms)
  template <typename T>
  at::Tensor maybe_norm(const at::Tensor& x, const at::Tensor& w, int64_t rows) const {
    return w.defined() ? norm<T>(x, w, rows) : x;
  }

  template <typename T>
  static void add_into(at::Tensor& x, const at::Tensor& y) {  // x = round(x + y), torch's bf16 add
    T* xp = x.data_ptr<T>();
    const T* yp = y.data_ptr<T>();
    for (int64_t i = 0; i < x.numel(); ++i) xp[i] = to<T>(get(xp, i) + get(yp, i));
  }

  // T: the model's dtype; C: the cache's elements (T, or int8 with the Seq's scales)
  template <typename T, typename C>
  at::Tensor run(at::Tensor x, const std::vector<Seq>& seqs, const std::vector<at::Tensor>& cos,
                 const std::vector<at::Tensor>& sin) {
    const int64_t H = heads_, KV = kv_heads_, D = dim_, rotary = cos[0].size(1), half = rotary / 2;
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
      // Every token writes its key and value, then all attend in one parallel region (attend_all), token t over exactly
      // 0..its position: a later token's row is past an earlier one's spans, and a batch's sequences share no row.
      std::vector<Query<T, C>> queries;
      queries.reserve(n);
      for (int64_t t = 0; t < n; ++t) {
        const int64_t pos = seqs[t].pos, capacity = seqs[t].capacity, own = pos - seqs[t].base;
        C* kl = static_cast<C*>(seqs[t].k) + static_cast<int64_t>(index) * KV * capacity * D;
        C* vl = static_cast<C*>(seqs[t].v) + static_cast<int64_t>(index) * KV * capacity * D;
        const int64_t scales = static_cast<int64_t>(index) * KV * capacity + own;  // an int8 cache's, head 0
        at::Half* ks = seqs[t].k_scale ? seqs[t].k_scale + scales : nullptr;
        at::Half* vs = seqs[t].v_scale ? seqs[t].v_scale + scales : nullptr;
        const T* c = cos[layer.rope].data_ptr<T>() + pos * rotary;
        const T* s = sin[layer.rope].data_ptr<T>() + pos * rotary;
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
          put_row(kl + (g * capacity + own) * D, ks ? ks + g * capacity : nullptr, r + (H + g) * D, D);
          put_row(vl + (g * capacity + own) * D, vs ? vs + g * capacity : nullptr, values + g * D, D);
        }
        const int64_t first = layer.window > 0 ? std::max<int64_t>(0, pos + 1 - layer.window) : 0;
        queries.push_back({r, spans_of<C>(seqs[t], index, first), attn.data_ptr<T>() + t * H * D});
      }
      attend_all(queries, H, KV, D, scaling_, cap_);
      add_into<T>(x, maybe_norm<T>(product(projections_[layer.o], attn), layer.post_attn_norm, n));
      const at::Tensor gate_up = product(projections_[layer.gate_up], norm<T>(x, layer.mlp_norm, n));
      at::Tensor act = at::empty({n, inter_}, x.options());
      glu_rows(gate_up.data_ptr<T>(), n, inter_, act_, act.data_ptr<T>());
      add_into<T>(x, maybe_norm<T>(product(projections_[layer.down], act), layer.post_mlp_norm, n));
    }
    return product(projections_[head_], norm<T>(x, final_norm_, n));
  }

  int64_t heads_, kv_heads_, dim_, inter_, act_;
  float eps_, scaling_, cap_;
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

at::Tensor silu_mul(const at::Tensor& gate_up, int64_t intermediate) { return glu_op(gate_up, intermediate, kSilu); }

at::Tensor gelu_tanh_mul(const at::Tensor& gate_up, int64_t intermediate) {
  return glu_op(gate_up, intermediate, kGeluTanh);
}

at::Tensor attend_one(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scaling, double softcap) {
  return attend_one_op(q, k, v, scaling, softcap);
}

void define_decode_step(torch::Library& m) {
  m.class_<DecodeStep>("DecodeStep")
      .def(torch::init<int64_t, int64_t, int64_t, int64_t, double, double, int64_t, double>())
      .def("add_projection", &DecodeStep::add_projection)
      .def("add_layer", &DecodeStep::add_layer)
      .def("set_head", &DecodeStep::set_head)
      .def("step", &DecodeStep::step)
      .def("verify", &DecodeStep::verify)
      .def("step_q8", &DecodeStep::step_q8)
      .def("verify_q8", &DecodeStep::verify_q8)
      .def("batch", &DecodeStep::batch)
      .def("batch_q8", &DecodeStep::batch_q8);
}

}  // namespace miaohui
