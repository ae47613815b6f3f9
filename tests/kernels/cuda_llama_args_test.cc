// CPU-only checks of the Llama-family CUDA launchers' host side (rmsnorm.h, swiglu.h,
// rope.h, attention.h's KVH overloads): bad shapes, null tensors, aliasing and a KVH that
// does not divide NH throw KernelError BEFORE any CUDA call, so these pass without a GPU (a
// launcher that reached the runtime first would throw CudaError or launch instead). The
// pointers are host addresses no launcher may dereference.
#include <gtest/gtest.h>

#include <string>

#include "kernels/check.h"
#include "tests/kernels/cuda_arg_fakes.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/rmsnorm.h"
#include "kernels/cuda/rope.h"
#include "kernels/cuda/swiglu.h"

namespace strata::kernels::cuda {
namespace {

const RopeFrequencies kTheta{1e4}, kZeroTheta{0.0};

using testing::Fake;
using testing::kernel_error;

TEST(CudaLlamaArgs, RmsNormRejectsBadShapesEpsAndAliasing) {
  Fake t, u;
  EXPECT_NE(kernel_error([&] { rmsnorm_forward(t.h(), t.f(), t.h(), t.h(), 3, 0, 1e-5f, nullptr); })
                .find("C = 0"),
            std::string::npos);
  EXPECT_NE(kernel_error([&] { rmsnorm_forward(t.h(), t.f(), t.h(), t.h(), 3, 4, -1.0f, nullptr); })
                .find("eps"),
            std::string::npos);
  EXPECT_NE(kernel_error([&] {
              fused_residual_rmsnorm_forward(t.h(), t.h(), t.f(), u.h(), u.h(), u.h(), 3, 4,
                                             1e-5f, nullptr);
            }).find("aliases"),
            std::string::npos);
  EXPECT_NE(kernel_error([&] {
              rmsnorm_backward(t.h(), t.f(), t.h(), t.h(), t.h(), t.f(), 3, 4, nullptr, nullptr);
            }).find("scratch"),
            std::string::npos);
  EXPECT_EQ(rmsnorm_backward_scratch_floats(5, 7), 35);  // one partial of C per row, <= 1024
}

TEST(CudaLlamaArgs, SwiGluAndRopeRejectBadArguments) {
  Fake t;
  EXPECT_NE(kernel_error([&] { swiglu_forward(t.h(), nullptr, 2, 2, nullptr); }).find("inp"),
            std::string::npos);
  EXPECT_NE(kernel_error([&] { swiglu_backward(t.h(), t.h(), t.h(), 2, 0, nullptr); }).find("F = 0"),
            std::string::npos);
  EXPECT_NE(
      kernel_error([&] { rope_forward(t.h(), 1, 2, 1, 5, 5, 0, kTheta, nullptr); }).find("HS"),
      std::string::npos);
  EXPECT_NE(kernel_error([&] { rope_forward(t.h(), 1, 2, 2, 4, 6, 0, kTheta, nullptr); })
                .find("row_stride"),
            std::string::npos);
  EXPECT_NE(kernel_error([&] { rope_backward(t.h(), 1, 2, 1, 4, 4, 0, kZeroTheta, nullptr); })
                .find("theta"),
            std::string::npos);
  EXPECT_NE(kernel_error([&] { rope_backward(t.h(), 1, 2, 1, 4, 4, -3, kTheta, nullptr); })
                .find("pos_offset"),
            std::string::npos);
}

TEST(CudaLlamaArgs, GroupedAttentionRejectsKvHeadsThatDoNotDivideHeads) {
  Fake t;
  // NH = 4 heads of 64 over KVH = 3: not a whole group each.
  EXPECT_NE(kernel_error([&] { attention_forward(t.h(), t.f(), t.h(), 1, 8, 256, 4, 3, nullptr); })
                .find("KVH = 3"),
            std::string::npos);
  EXPECT_NE(kernel_error([&] {
              attention_backward(t.h(), t.f(), t.h(), t.h(), t.h(), t.f(), 1, 8, 256, 4, 0,
                                 nullptr);
            }).find("KVH = 0"),
            std::string::npos);
}

}  // namespace
}  // namespace strata::kernels::cuda
