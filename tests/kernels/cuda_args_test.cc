// CPU-only tests of the CUDA backend's host side: every launcher rejects bad shapes and null
// tensors with KernelError BEFORE any CUDA call (so these pass on a machine without a GPU;
// had a launcher reached the runtime first, it would throw CudaError or launch instead), the
// *_CHECK macros name the call, file and line, and the device probe answers without throwing.
// The pointers below are host addresses that no launcher may ever dereference.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/check.h"
#include "tests/kernels/cuda_arg_fakes.h"
#include "kernels/cuda/cublaslt_library.h"
#include "kernels/cuda/adamw.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_resources.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/gelu.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/layernorm.h"

namespace strata::kernels::cuda {
namespace {

using testing::Fake;
using testing::kernel_error;

TEST(CudaArgs, GemmRejectsBadShapesNullsAndAnEmptyHandle) {
  Fake t;
  const CublasLtHandle empty;  // default-constructed: no CUDA call made
  EXPECT_NE(kernel_error([&] {
              matmul_forward(t.h(), t.h(), t.h(), nullptr, 0, 4, 8, empty, nullptr);
            }).find("BT = 0"),
            std::string::npos);
  EXPECT_NE(kernel_error([&] {
              matmul_forward(t.h(), nullptr, t.h(), nullptr, 4, 4, 8, empty, nullptr);
            }).find("'inp' is null"),
            std::string::npos);
  EXPECT_NE(kernel_error([&] {
              matmul_forward(t.h(), t.h(), t.h(), nullptr, 4, 4, 8, empty, nullptr);
            }).find("handle is empty"),
            std::string::npos);
  // pre_gelu needs OC % 8 == 0 (cuBLASLt's aux stride) and the GeLU activation.
  EXPECT_NE(kernel_error([&] {
              matmul_forward(t.h(), t.h(), t.h(), t.h(), 4, 4, 12, empty, nullptr,
                             GemmActivation::kGelu, t.h());
            }).find("multiple of 8"),
            std::string::npos);
  EXPECT_NE(kernel_error([&] {
              matmul_forward(t.h(), t.h(), t.h(), t.h(), 4, 4, 16, empty, nullptr,
                             GemmActivation::kNone, t.h());
            }).find("without the GeLU"),
            std::string::npos);
  EXPECT_NE(kernel_error([&] {
              matmul_backward(t.h(), nullptr, nullptr, t.h(), t.h(), nullptr, 4, 4, 8, empty,
                              nullptr);
            }).find("'weight' is null"),
            std::string::npos);
  EXPECT_NE(kernel_error([&] {
              matmul_backward(nullptr, nullptr, t.f(), t.h(), nullptr, nullptr, 4, -1, 8,
                              empty, nullptr);
            }).find("C = -1"),
            std::string::npos);
}

TEST(CudaArgs, LayerNormRejectsBadShapesAndAliasing) {
  Fake t, u;
  EXPECT_NE(kernel_error([&] {
              layernorm_forward(t.h(), t.f(), t.f(), t.h(), t.h(), t.h(), 3, 0, nullptr);
            }).find("C = 0"),
            std::string::npos);
  EXPECT_NE(kernel_error([&] {
              fused_residual_layernorm_forward(t.h(), t.h(), t.f(), t.f(), u.h(), u.h(), u.h(),
                                               u.h(), 3, 4, nullptr);
            }).find("aliases"),
            std::string::npos);
  EXPECT_NE(kernel_error([&] {
              layernorm_backward(t.h(), t.f(), t.f(), t.h(), t.h(), t.h(), t.f(), t.f(), 3, 4,
                                 nullptr, nullptr);
            }).find("'scratch' is null"),
            std::string::npos);
}

TEST(CudaArgs, AttentionRejectsIndivisibleAndUncompiledHeadSizes) {
  Fake t;
  EXPECT_NE(kernel_error([&] {
              attention_forward(t.h(), t.f(), t.h(), 1, 8, 130, 2, nullptr);
            }).find("expected 64 or 128"),  // HS = 65
            std::string::npos);
  EXPECT_NE(kernel_error([&] {
              attention_forward(t.h(), t.f(), t.h(), 1, 8, 129, 2, nullptr);
            }).find("not divisible by NH = 2"),
            std::string::npos);
  EXPECT_NE(kernel_error([&] {
              attention_backward(t.h(), t.f(), t.h(), t.h(), nullptr, t.f(), 1, 8, 128, 2,
                                 nullptr);
            }).find("'out' is null"),
            std::string::npos);
  // Scratch sizing matches the CPU backward's B * NH * T floats: 2 * 3 * 5 = 30.
  EXPECT_EQ(attention_backward_scratch_floats(2, 5, 3), 30);
}

TEST(CudaArgs, LossOptimizerEmbeddingAndElementwiseRejectBadArguments) {
  Fake t;
  EXPECT_NE(kernel_error([&] {
              cross_entropy_forward(t.f(), t.f(), t.f(), t.h(), t.i(), 2, 0, nullptr);
            }).find("V = 0"),
            std::string::npos);
  EXPECT_NE(kernel_error([&] {
              cross_entropy_backward(t.h(), t.f(), t.h(), t.f(), nullptr, 2, 5, nullptr);
            }).find("'targets' is null"),
            std::string::npos);
  AdamWTensor x{t.f(), t.f(), t.f(), t.f(), nullptr, 4};
  EXPECT_NE(kernel_error([&] { adamw_update({x}, AdamWParams{}, 0, 1.0f, nullptr); })
                .find("step = 0"),
            std::string::npos);
  EXPECT_NE(kernel_error([&] { adamw_update({x}, AdamWParams{}, 1, 0.0f, nullptr); })
                .find("grad_scale = 0"),
            std::string::npos);
  x.m = nullptr;
  EXPECT_NE(kernel_error([&] { adamw_update({x}, AdamWParams{}, 1, 1.0f, nullptr); })
                .find("tensors[0]"),
            std::string::npos);
  EXPECT_NE(kernel_error([&] {
              sum_of_squares(t.d(), t.d(), t.f(), -1, nullptr);
            }).find("n = -1"),
            std::string::npos);
  EXPECT_NE(kernel_error([&] {
              adamw_update_from_device({x}, AdamWParams{}, nullptr, nullptr);
            }).find("'values'"),
            std::string::npos);
  EXPECT_NE(kernel_error([&] { clip_scale_from_sum(nullptr, t.d(), 1.0f, nullptr); })
                .find("'grad_scale'"),
            std::string::npos);
  EXPECT_NE(kernel_error([&] {
              sum_of_squares_groups(t.d(), {{SquaredSpan{t.f(), -1}}}, t.d(), nullptr);
            }).find("n = -1"),
            std::string::npos);
  EXPECT_NE(kernel_error([&] {
              embedding_forward(t.h(), t.i(), t.h(), nullptr, 1, 4, 8, 5, 5, nullptr);
            }).find("vocab slice [5, 5)"),
            std::string::npos);
  EXPECT_NE(kernel_error([&] { gelu_forward(t.h(), nullptr, 4, nullptr); }).find("'inp'"),
            std::string::npos);
  EXPECT_NE(kernel_error([&] {
              residual_forward(t.h(), t.h(), t.h(), -3, nullptr);
            }).find("N = -3"),
            std::string::npos);
}

TEST(CudaArgs, LaunchersWithNothingToDoMakeNoCudaCall) {
  Fake t;
  // N = 0 and an all-empty tensor list return before any launch: no CudaError without a GPU.
  EXPECT_NO_THROW(gelu_forward(t.h(), t.h(), 0, nullptr));
  EXPECT_NO_THROW(cast_to_bf16(t.h(), t.f(), 0, nullptr));
  EXPECT_NO_THROW(adamw_update({AdamWTensor{nullptr, nullptr, nullptr, nullptr, nullptr, 0}},
                               AdamWParams{}, 1, 1.0f, nullptr));
}

TEST(CudaCheck, MacrosNameTheCallFileAndLine) {
  // The macros take any expression of the status type, so a literal failure tests them
  // without a device.
  try {
    CUDA_CHECK(cudaErrorInvalidValue);
    FAIL() << "CUDA_CHECK did not throw";
  } catch (const CudaError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cudaErrorInvalidValue failed"), std::string::npos) << what;
    EXPECT_NE(what.find("cuda_args_test.cc:"), std::string::npos) << what;
  }
  try {
    CUBLAS_CHECK(CUBLAS_STATUS_NOT_SUPPORTED);
    FAIL() << "CUBLAS_CHECK did not throw";
  } catch (const CudaError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("CUBLAS_STATUS_NOT_SUPPORTED"), std::string::npos) << what;
  }
  EXPECT_NO_THROW(CUDA_CHECK(cudaSuccess));
}

// cuBLASLt is opened on first use (cublaslt_library.h), not linked: every entry point the
// kernels call resolves, the statuses read as the library names them, and the second call
// returns the same table. No device is needed to load the library.
TEST(CublasLtLibrary, OpensOnFirstUseWithEveryEntryPoint) {
  const CublasLtLibrary& lib = cublaslt();
  for (const void* fn :
       {reinterpret_cast<const void*>(lib.Create), reinterpret_cast<const void*>(lib.Destroy),
        reinterpret_cast<const void*>(lib.GetStatusName),
        reinterpret_cast<const void*>(lib.GetStatusString),
        reinterpret_cast<const void*>(lib.Matmul),
        reinterpret_cast<const void*>(lib.MatmulAlgoGetHeuristic),
        reinterpret_cast<const void*>(lib.MatmulDescCreate),
        reinterpret_cast<const void*>(lib.MatmulDescDestroy),
        reinterpret_cast<const void*>(lib.MatmulDescSetAttribute),
        reinterpret_cast<const void*>(lib.MatmulPreferenceCreate),
        reinterpret_cast<const void*>(lib.MatmulPreferenceDestroy),
        reinterpret_cast<const void*>(lib.MatmulPreferenceSetAttribute),
        reinterpret_cast<const void*>(lib.MatrixLayoutCreate),
        reinterpret_cast<const void*>(lib.MatrixLayoutDestroy)}) {
    EXPECT_NE(fn, nullptr);
  }
  EXPECT_STREQ(lib.GetStatusName(CUBLAS_STATUS_NOT_SUPPORTED), "CUBLAS_STATUS_NOT_SUPPORTED");
  EXPECT_EQ(&cublaslt(), &lib);
}

TEST(CudaCheck, DeviceProbeNeverThrowsAndExplainsItself) {
  bool available = false;
  EXPECT_NO_THROW(available = cuda_device_available());
  const std::string reason = cuda_unavailable_reason();
  EXPECT_FALSE(reason.empty());
  // The two agree: an available device is described as such.
  EXPECT_EQ(available, reason.find("device(s) available") != std::string::npos) << reason;
}

TEST(CudaResources, EmptyOwnersAreSafeToMoveAndDestroy) {
  DeviceBuffer a;
  DeviceBuffer b(std::move(a));
  EXPECT_EQ(b.get(), nullptr);
  EXPECT_EQ(b.bytes(), 0u);
  DeviceBuffer zero(0);  // zero bytes allocate nothing (no CUDA call)
  EXPECT_EQ(zero.get(), nullptr);
  CublasLtHandle h;
  EXPECT_FALSE(static_cast<bool>(h));
  Stream s;
  EXPECT_EQ(s.get(), nullptr);
  Event e;
  EXPECT_EQ(e.get(), nullptr);
}

}  // namespace
}  // namespace strata::kernels::cuda
