// choose_backend's decision table with injected probes (plain C++; runs on every machine):
// forced cpu never probes, forced cuda needs a device and otherwise names the probe's reason,
// nothing forced follows the probe, unknown names are ConfigErrors.
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "cost_model/specs/errors.h"
#include "executor/runtime/backend_select.h"

namespace strata {
namespace {

// A probe that records how often it ran and answers as told.
struct FakeProbe {
  bool available = false;
  std::string reason;
  int* calls = nullptr;
  DeviceProbe operator()() const {
    ++*calls;
    return {available, reason};
  }
};

TEST(BackendSelect, NothingForcedFollowsTheProbe) {
  int calls = 0;
  EXPECT_EQ(choose_backend(std::nullopt, FakeProbe{true, "", &calls}), Backend::kCuda);
  EXPECT_EQ(choose_backend(std::nullopt, FakeProbe{false, "0 devices", &calls}), Backend::kCpu);
  EXPECT_EQ(calls, 2);  // one probe per decision
}

TEST(BackendSelect, ForcedCpuWinsWithoutProbing) {
  int calls = 0;
  EXPECT_EQ(choose_backend(std::string("cpu"), FakeProbe{true, "", &calls}), Backend::kCpu);
  EXPECT_EQ(calls, 0);  // a GPU being present does not matter, so it is not asked
}

TEST(BackendSelect, ForcedCudaWithADevice) {
  int calls = 0;
  EXPECT_EQ(choose_backend(std::string("cuda"), FakeProbe{true, "", &calls}), Backend::kCuda);
  EXPECT_EQ(calls, 1);
}

TEST(BackendSelect, ForcedCudaWithoutADeviceNamesTheReason) {
  int calls = 0;
  try {
    choose_backend(std::string("cuda"),
                   FakeProbe{false, "cudaGetDeviceCount found 0 devices", &calls});
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "--backend cuda: no CUDA device: cudaGetDeviceCount found 0 devices");
  }
}

TEST(BackendSelect, UnknownNameIsAConfigErrorBeforeProbing) {
  int calls = 0;
  for (const char* name : {"gpu", "CUDA", ""}) {
    try {
      choose_backend(std::string(name), FakeProbe{true, "", &calls});
      FAIL() << "expected ConfigError for '" << name << "'";
    } catch (const ConfigError& e) {
      EXPECT_EQ(std::string(e.what()),
                std::string("--backend: '") + name + "' is not a backend; expected cpu or cuda");
    }
  }
  EXPECT_EQ(calls, 0);
}

TEST(BackendSelect, ABuildWithoutCudaNeverChoosesIt) {
  EXPECT_EQ(choose_backend(std::nullopt, no_cuda_backend_probe), Backend::kCpu);
  try {
    choose_backend(std::string("cuda"), no_cuda_backend_probe);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("built without the CUDA backend"), std::string::npos)
        << e.what();
  }
}

TEST(BackendSelect, AnEmptyProbeIsAnError) {
  EXPECT_THROW(choose_backend(std::nullopt, DeviceProbeFn{}), ConfigError);
  EXPECT_EQ(choose_backend(std::string("cpu"), DeviceProbeFn{}), Backend::kCpu);  // not needed
}

TEST(BackendSelect, Names) {
  EXPECT_EQ(to_string(Backend::kCpu), "cpu");
  EXPECT_EQ(to_string(Backend::kCuda), "cuda");
}

}  // namespace
}  // namespace strata
