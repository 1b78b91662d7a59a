// The native ops' C++ functions, one declaration each, for register.cpp (which defines their schemas and binds these
// to them in the one TORCH_LIBRARY block) and for sources calling another's op without the dispatcher
// (decode_step.cpp calls q8act.cpp's products). What each computes: the header of the source that defines it.
#pragma once

#include <ATen/ATen.h>
#include <torch/library.h>

#include <cstdint>
#include <tuple>

namespace miaohui {

// int4_sym.cpp
at::Tensor int4_sym_mm(const at::Tensor& a, const at::Tensor& codes, const at::Tensor& scales, int64_t group);
bool int4_sym_available();

// q8act.cpp
at::Tensor q4_q8_mm(const at::Tensor& a, const at::Tensor& codes, const at::Tensor& scales, int64_t out_features,
                    int64_t isa);
at::Tensor q8_q8_mm(const at::Tensor& a, const at::Tensor& tiles, const at::Tensor& scales, int64_t out_features,
                    int64_t isa);
std::tuple<at::Tensor, at::Tensor, at::Tensor> q8_quantize(const at::Tensor& a);
at::Tensor q4_dense(const at::Tensor& codes, const at::Tensor& scales, at::ScalarType dtype);
int64_t q8act_isa();
int64_t q8act_threads();

// decode_step.cpp
at::Tensor rms_norm_rows(const at::Tensor& x, const at::Tensor& weight, double eps);
at::Tensor silu_mul(const at::Tensor& gate_up, int64_t intermediate);
at::Tensor gelu_tanh_mul(const at::Tensor& gate_up, int64_t intermediate);
at::Tensor attend_one(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scaling, double softcap);

// kv_int8.cpp
std::tuple<at::Tensor, at::Tensor> kv_quantize(const at::Tensor& x);
at::Tensor attend_one_q8(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& k_scale,
                         const at::Tensor& v_scale, double scaling, double softcap);
// prefill_attention.cpp
at::Tensor prefill_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t start,
                             double scaling, int64_t isa);
int64_t prefill_attention_isa();

// The DecodeStep class and its methods, bound where the class is defined (its methods are its own, not free functions).
void define_decode_step(torch::Library& m);

}  // namespace miaohui
