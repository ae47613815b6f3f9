// cuDNN's fused attention (kernels/cuda/cudnn_sdpa.h) on strata's packed layout against the CPU
// twin (kernels/cpu/flash_attention.h), as the hand-written kernels are tested
// (cuda_gqa_attention_test.cc, the same bounds): head sizes 64 and 128, one KV head per query
// head, groups of 4 and multi-query, sequence lengths the backward graph takes (multiples of
// 128). Outputs start as NaN. Also: the backward is bit-identical across runs (strata picks
// deterministic engines), and the launcher in its default mode computes the same whichever
// path it takes and says which. Skipped where cuDNN is not found (the skip names why); a graph
// cuDNN declines FAILS here with cuDNN's words, so that a GPU check shows it.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/cpu/flash_attention.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_launcher.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cudnn_library.h"
#include "kernels/cuda/cudnn_sdpa.h"
#include "tests/kernels/attention_grad_metric.h"
#include "tests/kernels/cuda_test_util.h"
#include "tests/kernels/gqa_shape.h"
#include "tests/kernels/grad_check.h"

namespace strata::kernels::cuda {
namespace {

using strata::kernels::testing::all_close;
using strata::kernels::testing::GqaShape;
using strata::kernels::testing::random_vector;
using strata::kernels::testing::qkv_parts;
using strata::kernels::testing::worst_part_relative_norm;
using testing::CudaTest;
using testing::from_device;
using testing::from_device_bf16;
using testing::rounded_bf16;
using testing::to_device_bf16;

// The CPU twin's forward and (from zero) backward of one shape on seeded inputs.
struct Reference {
  std::vector<float> qkv, dout, out, lse, dqkv;
};
Reference reference(const GqaShape& s) {
  Reference r;
  r.qkv = rounded_bf16(random_vector(s.qkv_size(), 51));
  r.dout = rounded_bf16(random_vector(s.out_size(), 52));
  r.out.resize(s.out_size());
  r.lse.resize(s.lse_size());
  cpu::flash_attention_forward(r.out.data(), r.lse.data(), r.qkv.data(), s.B, s.T, s.C(), s.NH,
                               s.KVH);
  r.dqkv.assign(s.qkv_size(), 0.0f);
  std::vector<float> scratch(cpu::flash_attention_backward_scratch_floats(s.B, s.T, s.NH));
  cpu::flash_attention_backward(r.dqkv.data(), scratch.data(), r.dout.data(), r.qkv.data(),
                                r.out.data(), r.lse.data(), s.B, s.T, s.C(), s.NH, s.KVH);
  return r;
}

class CudnnAttention : public CudaTest, public ::testing::WithParamInterface<GqaShape> {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    if (IsSkipped()) return;
    if (cudnn().library == nullptr) GTEST_SKIP() << "no cuDNN: " << cudnn().reason;
  }
};

TEST_P(CudnnAttention, ForwardAndBackwardMatchCpuTwin) {
  const GqaShape s = GetParam();
  const Reference r = reference(s);
  CudnnSdpa sdpa(*cudnn().library);
  const SdpaShape shape{s.B, s.T, s.NH, s.KVH, s.HS};
  auto d_qkv = to_device_bf16(r.qkv), d_dout = to_device_bf16(r.dout);
  auto d_out = to_device_bf16(std::vector<float>(s.out_size(), NAN));
  auto d_lse = testing::to_device(std::vector<float>(s.lse_size(), NAN));
  try {
    sdpa.forward(d_out.as<bf16>(), d_lse.as<float>(), d_qkv.as<bf16>(), shape, stream());
    sync();
  } catch (const CudaError& e) {
    FAIL() << "forward: " << e.what();
  }
  // The kernels' bounds (cuda_gqa_attention_test.cc): convex combinations of v in [-1, 1]
  // rounded to bf16, 1e-2; the statistic in fp32 on both sides, 1e-4.
  EXPECT_TRUE(all_close("out", from_device_bf16(d_out, s.out_size()), r.out, 1e-2, 1e-2));
  EXPECT_TRUE(all_close("lse", from_device<float>(d_lse, s.lse_size()), r.lse, 1e-4, 1e-4));

  // The backward from the CPU's own forward results (the same statistic either way).
  auto c_out = to_device_bf16(r.out);
  auto c_lse = testing::to_device(r.lse);
  std::vector<std::vector<float>> runs;
  for (int run = 0; run < 2; ++run) {
    auto d_dqkv = to_device_bf16(std::vector<float>(s.qkv_size(), NAN));
    try {
      sdpa.backward(d_dqkv.as<bf16>(), d_dout.as<bf16>(), d_qkv.as<bf16>(), c_out.as<bf16>(),
                    c_lse.as<float>(), shape, stream());
      sync();
    } catch (const CudaError& e) {
      FAIL() << "backward: " << e.what();
    }
    runs.push_back(from_device_bf16(d_dqkv, s.qkv_size()));
  }
  EXPECT_TRUE(all_close("dqkv", runs[0], r.dqkv, 3e-2, 2e-2));
  EXPECT_LE(worst_part_relative_norm(runs[0], r.dqkv, s.B, s.T,
                                     std::size_t(s.NH + 2 * s.KVH) * s.HS,
                                     qkv_parts(s.T, s.C(), std::size_t(s.KVH) * s.HS, false)),
            1e-2);
  // A deterministic engine: the same bits twice (NaN never equals, so a hole fails too).
  EXPECT_EQ(runs[0], runs[1]);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudnnAttention,
                         ::testing::Values(GqaShape{64, 2, 128, 4, 4}, GqaShape{128, 1, 256, 8, 2},
                                           GqaShape{64, 1, 256, 8, 1},
                                           GqaShape{128, 2, 128, 4, 4}),
                         [](const ::testing::TestParamInfo<GqaShape>& info) {
                           const GqaShape& s = info.param;
                           return "HS" + std::to_string(s.HS) + "_B" + std::to_string(s.B) +
                                  "_T" + std::to_string(s.T) + "_NH" + std::to_string(s.NH) +
                                  "_KVH" + std::to_string(s.KVH);
                         });

class AttentionLauncherTest : public CudaTest {};

// Whatever path the default mode takes (cuDNN, or the kernels with the reason), the results are
// the CPU twin's within the kernels' bounds, and notes() names the path of both directions.
// T = 70: the backward stays on the kernels (not a multiple of 128), the forward may not.
TEST_F(AttentionLauncherTest, DefaultModeMatchesCpuTwinAndSaysWhichRan) {
  for (const GqaShape s : {GqaShape{64, 1, 256, 8, 2}, GqaShape{128, 2, 70, 4, 1}}) {
    SCOPED_TRACE(::testing::Message() << "HS " << s.HS << " T " << s.T);
    const Reference r = reference(s);
    AttentionLauncher launcher(AttentionMode::kAuto);
    auto d_qkv = to_device_bf16(r.qkv), d_dout = to_device_bf16(r.dout);
    auto d_out = to_device_bf16(std::vector<float>(s.out_size(), NAN));
    auto d_lse = testing::to_device(std::vector<float>(s.lse_size(), NAN));
    DeviceBuffer scratch(attention_backward_scratch_floats(s.B, s.T, s.NH) * sizeof(float));
    for (int call = 0; call < 2; ++call) {  // the first call compares, the second runs one path
      auto d_dqkv = to_device_bf16(std::vector<float>(s.qkv_size(), NAN));
      launcher.forward(d_out.as<bf16>(), d_lse.as<float>(), d_qkv.as<bf16>(), s.B, s.T, s.C(),
                       s.NH, s.KVH, stream());
      launcher.backward(d_dqkv.as<bf16>(), scratch.as<float>(), d_dout.as<bf16>(),
                        d_qkv.as<bf16>(), d_out.as<bf16>(), d_lse.as<float>(), s.B, s.T, s.C(),
                        s.NH, s.KVH, stream());
      sync();
      EXPECT_TRUE(all_close("out", from_device_bf16(d_out, s.out_size()), r.out, 1e-2, 1e-2));
      EXPECT_TRUE(all_close("dqkv", from_device_bf16(d_dqkv, s.qkv_size()), r.dqkv, 3e-2, 2e-2));
    }
    const std::vector<std::string> notes = launcher.notes();
    ASSERT_EQ(notes.size(), 2u);  // forward and backward of the one shape
    for (const std::string& note : notes) {
      EXPECT_TRUE(note.find("cuDNN's fused attention") != std::string::npos ||
                  note.find("strata's attention kernels") != std::string::npos)
          << note;
    }
  }
}

}  // namespace
}  // namespace strata::kernels::cuda
