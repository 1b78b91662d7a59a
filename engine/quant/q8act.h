// The int8-activation products of q8act.cpp, for other sources of the same library (decode_step.cpp) to call
// directly: the ops' own functions, without the dispatcher. Same arguments and checks as miaohui::q4_q8_mm and
// miaohui::q8_q8_mm (q8act.cpp's header says what they compute).
#pragma once

#include <ATen/ATen.h>

namespace miaohui {
at::Tensor q4_q8_mm(const at::Tensor& a, const at::Tensor& codes, const at::Tensor& scales, int64_t out_features,
                    int64_t isa);
at::Tensor q8_q8_mm(const at::Tensor& a, const at::Tensor& tiles, const at::Tensor& scales, int64_t out_features,
                    int64_t isa);
}  // namespace miaohui
