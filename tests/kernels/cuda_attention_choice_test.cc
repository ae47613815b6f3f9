// The attention path's choice and cuDNN's loading, on the host (no GPU): which shapes strata's
// cuDNN graphs take, what each --attention mode chooses and says, and how looking for
// libcudnn.so.9 fails on a missing file, a file that is no library and a library without
// cuDNN's entry points (each naming the file and why), and succeeds where cuDNN is installed.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kernels/check.h"
#include "kernels/cuda/attention_choice.h"
#include "kernels/cuda/cudnn_library.h"

namespace strata::kernels::cuda {
namespace {

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Llama 3 8B's attention at micro-batch 1 on an H100 / H200 (sm 90) with cuDNN 9.13.
constexpr AttentionShape kLlama{1, 1024, 32, 8, 128};
constexpr int kHopper = 90;
constexpr std::size_t kCudnn913 = 91300;

TEST(AttentionChoice, ModesParseAndPrint) {
  for (const char* name : {"auto", "cudnn", "kernels"}) {
    const auto mode = attention_mode_from(name);
    ASSERT_TRUE(mode.has_value()) << name;
    EXPECT_EQ(to_string(*mode), name);
  }
  EXPECT_FALSE(attention_mode_from("flash").has_value());
  EXPECT_FALSE(attention_mode_from("").has_value());
}

TEST(AttentionChoice, CudnnGraphsTakeHeadSizes64And128WholeGroupsAndAmpereOn) {
  EXPECT_EQ(cudnn_sdpa_rejects(kLlama, kHopper, kCudnn913, false), "");
  EXPECT_EQ(cudnn_sdpa_rejects(kLlama, kHopper, kCudnn913, true), "");
  EXPECT_EQ(cudnn_sdpa_rejects({16, 1024, 12, 12, 64}, 80, 90000, true), "");  // GPT-2 124M, A100
  EXPECT_TRUE(has(cudnn_sdpa_rejects({1, 1024, 12, 12, 96}, kHopper, kCudnn913, false),
                  "head size 96"));
  EXPECT_TRUE(has(cudnn_sdpa_rejects({1, 1024, 12, 5, 64}, kHopper, kCudnn913, false),
                  "12 query heads over 5 KV heads"));
  EXPECT_TRUE(has(cudnn_sdpa_rejects(kLlama, 75, kCudnn913, false), "compute capability 7.5"));
  EXPECT_TRUE(has(cudnn_sdpa_rejects(kLlama, kHopper, 8907, false), "cuDNN version 8907"));
  EXPECT_TRUE(has(cudnn_sdpa_rejects({1, 0, 8, 8, 64}, kHopper, kCudnn913, false), "T = 0"));
  // T = 70: the forward graph takes it, the backward does not (not a multiple of 128).
  EXPECT_EQ(cudnn_sdpa_rejects({2, 70, 4, 1, 128}, kHopper, kCudnn913, false), "");
  EXPECT_TRUE(has(cudnn_sdpa_rejects({2, 70, 4, 1, 128}, kHopper, kCudnn913, true),
                  "sequence length 70"));
}

TEST(AttentionChoice, EachModeChoosesAndSaysWhy) {
  // auto with cuDNN found and a shape it takes: cuDNN.
  AttentionChoice c = choose_attention(AttentionMode::kAuto, "", kCudnn913, kLlama, kHopper, true);
  EXPECT_TRUE(c.cudnn);
  EXPECT_TRUE(has(c.why, "cuDNN's fused attention (backward)")) << c.why;
  // auto without the library: the kernels, naming why (the fallback of a machine without it).
  c = choose_attention(AttentionMode::kAuto, "libcudnn.so.9 not usable; /x: not found", 0, kLlama,
                       kHopper, false);
  EXPECT_FALSE(c.cudnn);
  EXPECT_TRUE(has(c.why, "strata's attention kernels (forward; cuDNN not used: libcudnn.so.9"))
      << c.why;
  // auto with the library but a shape its graphs do not take: the kernels, naming the shape.
  c = choose_attention(AttentionMode::kAuto, "", kCudnn913, {1, 70, 4, 1, 128}, kHopper, true);
  EXPECT_FALSE(c.cudnn);
  EXPECT_TRUE(has(c.why, "sequence length 70")) << c.why;
  // kernels: never cuDNN, whatever is installed.
  c = choose_attention(AttentionMode::kKernels, "", kCudnn913, kLlama, kHopper, false);
  EXPECT_FALSE(c.cudnn);
  EXPECT_TRUE(has(c.why, "--attention kernels")) << c.why;
  // cudnn: cuDNN or an error naming why not.
  EXPECT_TRUE(choose_attention(AttentionMode::kCudnn, "", kCudnn913, kLlama, kHopper, false).cudnn);
  try {
    choose_attention(AttentionMode::kCudnn, "libcudnn.so.9 not usable", 0, kLlama, kHopper, false);
    FAIL() << "--attention cudnn without cuDNN did not throw";
  } catch (const KernelError& e) {
    EXPECT_TRUE(has(e.what(), "--attention cudnn")) << e.what();
    EXPECT_TRUE(has(e.what(), "libcudnn.so.9 not usable")) << e.what();
  }
}

TEST(CudnnLibrary, CandidatesAreTheLoadersPathThenTheRuntimesDirectoryThenSitePackages) {
  EXPECT_EQ(cudnn_candidates("/opt/cuda/lib64", {"/venv/site", ""}),
            (std::vector<std::string>{"libcudnn.so.9", "/opt/cuda/lib64/libcudnn.so.9",
                                      "/venv/site/nvidia/cudnn/lib/libcudnn.so.9"}));
  EXPECT_EQ(cudnn_candidates("", {}), std::vector<std::string>{"libcudnn.so.9"});
}

TEST(CudnnLibrary, AFailedLookNamesEachFileAndWhy) {
  const std::string dir = ::testing::TempDir() + "/strata_fake_cudnn";
  std::filesystem::create_directories(dir);
  const std::string missing = dir + "/missing/libcudnn.so.9";
  const std::string not_a_library = dir + "/libcudnn.so.9";
  std::ofstream(not_a_library) << "not an ELF file\n";
  CudnnLoad load = open_cudnn({missing, not_a_library});
  EXPECT_EQ(load.library, nullptr);
  EXPECT_TRUE(has(load.reason, missing)) << load.reason;
  EXPECT_TRUE(has(load.reason, not_a_library)) << load.reason;
  // A real shared library without cuDNN's entry points (the C math library).
  load = open_cudnn({"libm.so.6"});
  EXPECT_EQ(load.library, nullptr);
  EXPECT_TRUE(has(load.reason, "libm.so.6: has no cudnn")) << load.reason;
  EXPECT_TRUE(has(open_cudnn({}).reason, "no place to look")) << open_cudnn({}).reason;
  std::filesystem::remove_all(dir);
}

TEST(CudnnLibrary, ThisMachinesCudnnIsVersion9WhereItIsFound) {
  const CudnnLoad& load = cudnn();
  if (load.library == nullptr) {
    // Not installed here: the reason names the soname looked for.
    EXPECT_TRUE(has(load.reason, "libcudnn.so.9")) << load.reason;
    return;
  }
  EXPECT_EQ(load.version / 10000, 9u) << cudnn_version_string(load.version);
  EXPECT_FALSE(load.path.empty());
  // Opening the file it names again gives the same version (every entry point resolved).
  EXPECT_EQ(open_cudnn({load.path}).version, load.version);
  EXPECT_EQ(cudnn_version_string(91300), "9.13.0");
}

}  // namespace
}  // namespace strata::kernels::cuda
