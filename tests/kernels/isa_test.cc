// The CPU kernels' instruction-set levels (kernels/cpu/isa.h): STRATA_CPU_ISA's names, the
// cap it sets and its errors, and that the process's level is the CPU's capped by it (the
// kernel-path ctest entries run this under each value, including one no CPU knows).
#include "kernels/cpu/isa.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "kernels/check.h"

namespace strata::kernels::cpu {
namespace {

// The KernelError `f` throws, "" where it throws none.
template <class F>
std::string isa_error_of(F f) {
  try {
    f();
  } catch (const KernelError& e) {
    return e.what();
  }
  return {};
}

TEST(Isa, NamesAreTheLevelsSpelling) {
  for (IsaLevel l : {IsaLevel::kBaseline, IsaLevel::kAvx2, IsaLevel::kAvx512}) {
    EXPECT_EQ(parse_isa_level(isa_name(l)), l);
  }
  EXPECT_EQ(parse_isa_level("avx2"), IsaLevel::kAvx2);
  EXPECT_EQ(parse_isa_level("AVX2"), std::nullopt);  // one spelling, as documented
  EXPECT_EQ(parse_isa_level("avx-512"), std::nullopt);
  EXPECT_EQ(parse_isa_level(""), std::nullopt);
}

TEST(Isa, TheVariableCapsTheCpusLevel) {
  EXPECT_EQ(capped_isa_level(IsaLevel::kAvx512, nullptr), IsaLevel::kAvx512);  // unset
  EXPECT_EQ(capped_isa_level(IsaLevel::kAvx512, ""), IsaLevel::kAvx512);
  EXPECT_EQ(capped_isa_level(IsaLevel::kAvx512, "avx2"), IsaLevel::kAvx2);
  EXPECT_EQ(capped_isa_level(IsaLevel::kAvx512, "baseline"), IsaLevel::kBaseline);
  EXPECT_EQ(capped_isa_level(IsaLevel::kAvx2, "avx2"), IsaLevel::kAvx2);
}

TEST(Isa, AnUnknownValueOrOneAboveTheCpuIsAClearError) {
  const std::string unknown = isa_error_of([] { capped_isa_level(IsaLevel::kAvx512, "avx9"); });
  EXPECT_NE(unknown.find("STRATA_CPU_ISA = 'avx9'"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("expected baseline, avx2 or avx512"), std::string::npos) << unknown;
  const std::string above = isa_error_of([] { capped_isa_level(IsaLevel::kAvx2, "avx512"); });
  EXPECT_NE(above.find("STRATA_CPU_ISA = 'avx512'"), std::string::npos) << above;
  EXPECT_NE(above.find("runs at most 'avx2'"), std::string::npos) << above;
  // An explicit version the CPU lacks, asked of a kernel, names the kernel.
  if (cpu_isa_level() < IsaLevel::kAvx512) {
    const std::string asked = isa_error_of([] { isa_level_for(Isa::kAvx512, "some_kernel"); });
    EXPECT_NE(asked.find("some_kernel"), std::string::npos) << asked;
  }
}

// This process's level, against the variable it was started with.
TEST(Isa, TheProcessRunsTheCpusLevelCappedByTheVariable) {
  const char* value = std::getenv(kCpuIsaVariable);
  const std::string expected_error =
      isa_error_of([&] { capped_isa_level(cpu_isa_level(), value); });
  if (!expected_error.empty()) {
    // Every kernel call fails with the same message, every time (the cached error).
    EXPECT_EQ(isa_error_of([] { active_isa_level(); }), expected_error);
    EXPECT_EQ(isa_error_of([] { isa_level_for(Isa::kBest, "k"); }), expected_error);
    EXPECT_EQ(isa_error_of([] { check_isa_environment(); }), expected_error);
    return;
  }
  EXPECT_EQ(active_isa_level(), capped_isa_level(cpu_isa_level(), value));
  EXPECT_EQ(isa_level_for(Isa::kBest, "k"), active_isa_level());
  EXPECT_EQ(isa_level_for(Isa::kBaseline, "k"), IsaLevel::kBaseline);  // explicit: no cap
  EXPECT_EQ(use_avx512(Isa::kBest, "k"), active_isa_level() == IsaLevel::kAvx512);
}

}  // namespace
}  // namespace strata::kernels::cpu
