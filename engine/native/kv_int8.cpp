// The 8-bit KV cache's row operations as ops (engine/executor/kv_cache.py's Int8KVCache: int8 rows and one fp16 scale
// per layer, KV head and position), the very functions DecodeStep's step_q8 and verify_q8 call (decode_step.cpp), so
// the Python step over an int8 cache and the native step write and read the same bits:
// - kv_quantize: x (..., D) in bf16 or fp32 → (int8 (..., D), fp16 scales (...)), each vector as kv_cache.py's
//   quantize, bit for bit (row_ops.h's quantize_row says how it rounds; tests/engine/native/test_kv_int8.py checks it
//   against quantize with torch.equal, zeros, tiny and huge values included);
// - attend_one_q8: one query per head over n int8 positions, GQA (head h reads KV head h / (H / KV)): each row widened
//   to fp32 times its scale (exact: the dequantized values), then attend_one's arithmetic (decode_step.cpp's header):
//   scores by one fixed tree, Gemma 2's soft cap where given, softmax with exp8, Σ p·v in fp32 rounded once; each KV
//   byte read once per step for all the query heads of its group (row_ops.h's attend_heads).
#include <ATen/ATen.h>

#include <cstdint>
#include <tuple>
#include <vector>

#include "ops.h"
#include "row_ops.h"

namespace miaohui {

using rows::Heads;

std::tuple<at::Tensor, at::Tensor> kv_quantize(const at::Tensor& x_in) {
  TORCH_CHECK(x_in.scalar_type() == at::kBFloat16 || x_in.scalar_type() == at::kFloat, "x: bf16 or fp32");
  TORCH_CHECK(x_in.dim() >= 1 && x_in.size(-1) > 0, "x: (..., D)");
  const at::Tensor x = x_in.contiguous();
  const int64_t D = x.size(-1), n = x.numel() / D;
  at::Tensor codes = at::empty(x.sizes(), x.options().dtype(at::kChar));
  at::Tensor scales = at::empty(x.sizes().slice(0, x.dim() - 1), x.options().dtype(at::kHalf));
  int8_t* c = codes.data_ptr<int8_t>();
  at::Half* s = scales.data_ptr<at::Half>();
  if (x.scalar_type() == at::kBFloat16) {
    const at::BFloat16* p = x.data_ptr<at::BFloat16>();
    for (int64_t r = 0; r < n; ++r) rows::quantize_row(p + r * D, D, c + r * D, s + r);
  } else {
    const float* p = x.data_ptr<float>();
    for (int64_t r = 0; r < n; ++r) rows::quantize_row(p + r * D, D, c + r * D, s + r);
  }
  return {codes, scales};
}

at::Tensor attend_one_q8(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
                         const at::Tensor& k_scale_in, const at::Tensor& v_scale_in, double scaling, double softcap) {
  TORCH_CHECK(q_in.scalar_type() == at::kBFloat16 || q_in.scalar_type() == at::kFloat, "q: bf16 or fp32");
  TORCH_CHECK(k_in.scalar_type() == at::kChar && v_in.scalar_type() == at::kChar, "k, v: int8");
  TORCH_CHECK(k_scale_in.scalar_type() == at::kHalf && v_scale_in.scalar_type() == at::kHalf, "scales: fp16");
  TORCH_CHECK(q_in.dim() == 2 && k_in.dim() == 3 && v_in.sizes() == k_in.sizes() && k_in.size(2) == q_in.size(1) &&
                  q_in.size(0) % k_in.size(0) == 0, "q (H, D), k and v (KV, n, D), H a multiple of KV");
  TORCH_CHECK(k_scale_in.sizes() == k_in.sizes().slice(0, 2) && v_scale_in.sizes() == k_scale_in.sizes(),
              "k_scale, v_scale: (KV, n)");
  TORCH_CHECK(softcap >= 0.0, "softcap: 0 (none) or the cap");
  const at::Tensor q = q_in.contiguous();
  const at::Tensor k = k_in.stride(2) == 1 ? k_in : k_in.contiguous();
  const at::Tensor v = v_in.stride(2) == 1 ? v_in : v_in.contiguous();
  // one stride between heads for both scales' tensors (Heads' scale_head): positions contiguous, heads alike
  at::Tensor k_scale = k_scale_in, v_scale = v_scale_in;
  if (k_scale.stride(1) != 1 || v_scale.stride(1) != 1 || k_scale.stride(0) != v_scale.stride(0))
    k_scale = k_scale.contiguous(), v_scale = v_scale.contiguous();
  const int64_t H = q.size(0), D = q.size(1), KV = k.size(0), n = k.size(1);
  TORCH_CHECK(n > 0, "attention over no positions");
  at::Tensor out = at::empty({1, H * D}, q.options());
  const std::vector<Heads<int8_t>> spans{{k.data_ptr<int8_t>(), k.stride(0), k.stride(1), v.data_ptr<int8_t>(),
                                          v.stride(0), v.stride(1), n, k_scale.data_ptr<at::Half>(),
                                          v_scale.data_ptr<at::Half>(), k_scale.stride(0)}};
  if (q.scalar_type() == at::kBFloat16)
    rows::attend(q.data_ptr<at::BFloat16>(), H, KV, D, spans, static_cast<float>(scaling), static_cast<float>(softcap),
                 out.data_ptr<at::BFloat16>());
  else
    rows::attend(q.data_ptr<float>(), H, KV, D, spans, static_cast<float>(scaling), static_cast<float>(softcap),
                 out.data_ptr<float>());
  return out;
}

}  // namespace miaohui
