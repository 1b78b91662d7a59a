// The one TORCH_LIBRARY block of the miaohui_native library: every op's schema under torch.ops.miaohui, and which C++
// function (ops.h) runs it. The sources define the functions and register nothing themselves, so no source silently
// needs another's registration; engine/native/__init__.py's table says what each op promises and which test checks it.
// Ops taking tensors run on the CPU dispatch key (they read CPU memory); the ones without tensors (the CPU checks,
// the thread count) are plain functions, which is how torch registers an op no tensor can dispatch.
#include <torch/library.h>

#include "ops.h"

TORCH_LIBRARY(miaohui, m) {
  // int4_sym.cpp
  m.def("int4_sym_mm(Tensor a, Tensor codes, Tensor scales, int group) -> Tensor");
  m.def("int4_sym_available() -> bool", &miaohui::int4_sym_available);
  // q8act.cpp
  m.def("q4_q8_mm(Tensor a, Tensor codes, Tensor scales, int out_features, int isa) -> Tensor");
  m.def("q8_q8_mm(Tensor a, Tensor tiles, Tensor scales, int out_features, int isa) -> Tensor");
  m.def("q8_quantize(Tensor a) -> (Tensor, Tensor, Tensor)");
  m.def("q4_dense(Tensor codes, Tensor scales, ScalarType dtype) -> Tensor");
  m.def("q8act_isa() -> int", &miaohui::q8act_isa);
  m.def("q8act_threads() -> int", &miaohui::q8act_threads);
  // decode_step.cpp
  m.def("rms_norm_rows(Tensor x, Tensor weight, float eps) -> Tensor");
  m.def("silu_mul(Tensor gate_up, int intermediate) -> Tensor");
  m.def("gelu_tanh_mul(Tensor gate_up, int intermediate) -> Tensor");
  m.def("attend_one(Tensor q, Tensor k, Tensor v, float scaling, float softcap=0.0) -> Tensor");
  miaohui::define_decode_step(m);
  // kv_int8.cpp
  m.def("kv_quantize(Tensor x) -> (Tensor, Tensor)");
  m.def("attend_one_q8(Tensor q, Tensor k, Tensor v, Tensor k_scale, Tensor v_scale, float scaling, "
        "float softcap=0.0) -> Tensor");
  // prefill_attention.cpp
  m.def("prefill_attention(Tensor q, Tensor k, Tensor v, int start, float scaling, int isa=0) -> Tensor");
  m.def("prefill_attention_isa() -> int", &miaohui::prefill_attention_isa);
}

TORCH_LIBRARY_IMPL(miaohui, CPU, m) {
  m.impl("int4_sym_mm", &miaohui::int4_sym_mm);
  m.impl("q4_q8_mm", &miaohui::q4_q8_mm);
  m.impl("q8_q8_mm", &miaohui::q8_q8_mm);
  m.impl("q8_quantize", &miaohui::q8_quantize);
  m.impl("q4_dense", &miaohui::q4_dense);
  m.impl("rms_norm_rows", &miaohui::rms_norm_rows);
  m.impl("silu_mul", &miaohui::silu_mul);
  m.impl("gelu_tanh_mul", &miaohui::gelu_tanh_mul);
  m.impl("attend_one", &miaohui::attend_one);
  m.impl("kv_quantize", &miaohui::kv_quantize);
  m.impl("attend_one_q8", &miaohui::attend_one_q8);
  m.impl("prefill_attention", &miaohui::prefill_attention);
}
