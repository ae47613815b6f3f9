// The shape of a grouped-query attention test case, for the hand-written kernels' and
// cuDNN's attention tests (cuda_gqa_attention_test.cc, cuda_cudnn_attention_test.cc).
#pragma once

#include <cstddef>

namespace strata::kernels::testing {

struct GqaShape {
  int HS, B, T, NH, KVH;
  int C() const { return NH * HS; }
  std::size_t qkv_size() const { return std::size_t(B) * T * (NH + 2 * KVH) * HS; }
  std::size_t out_size() const { return std::size_t(B) * T * C(); }
  std::size_t lse_size() const { return std::size_t(B) * NH * T; }
};

}  // namespace strata::kernels::testing
