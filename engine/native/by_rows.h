// One home for turning a run-time row count into a template argument: the tile and attention kernels keep one
// accumulator per row in registers, so their row count must be known at compile time (q8act.cpp and
// prefill_attention.cpp call it).
#pragma once

#include <utility>

namespace miaohui {

// F<count>::call(args...) for count in 1..Max (a count above Max calls F<Max>).
template <template <int> class F, int Max, int R = 1, typename... Args>
void by_rows(int count, Args&&... args) {
  if constexpr (R < Max) {
    if (count > R) return by_rows<F, Max, R + 1>(count, std::forward<Args>(args)...);
  }
  F<R>::call(std::forward<Args>(args)...);
}

}  // namespace miaohui
