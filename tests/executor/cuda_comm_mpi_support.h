// Shared by the GPU communicator tests that run under mpirun (cuda_runtime_nccl_mpi_test,
// cuda_runtime_host_staged_mpi_test): device upload/download, order-sensitive f32 and bf16
// inputs with the host reference of communicator.h's sum contract, and the binaries' main:
// MPI session, device selection, mpi_test_main.h's printer, exit code over ranks and abort on
// a rank's fatal failure, and exit 77 (ctest's SKIP) on every rank when the devices are
// missing, naming the reason.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <vector>

#include "executor/comm/communicator.h"
#include "executor/comm/mpi_check.h"
#include "executor/comm/mpi_communicator.h"
#include "executor/runtime/mpi_launch.h"
#include "kernels/bf16.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_resources.h"
#include "tests/executor/mpi_test_main.h"

namespace strata::cuda::test {

using kernels::cuda::DeviceBuffer;

template <class T>
DeviceBuffer to_device(const std::vector<T>& x) {
  DeviceBuffer d(x.size() * sizeof(T));
  if (!x.empty()) d.copy_from_host(x.data(), x.size() * sizeof(T));
  CUDA_CHECK(cudaDeviceSynchronize());  // communicator streams do not wait for the legacy one
  return d;
}

// Waits for what comm enqueued, then copies n elements back.
template <class T>
std::vector<T> from_device(Communicator& comm, const DeviceBuffer& d, std::size_t n) {
  comm.synchronize();
  std::vector<T> x(n);
  if (n > 0) d.copy_to_host(x.data(), n * sizeof(T));
  return x;
}

// Order-sensitive f32 values: even ranks contribute ~1e7, odd ranks ~1, so float sums in
// another order than 0, 1, 2, ... round differently.
inline float f32_value(int rank, std::int64_t i) {
  return (rank % 2 == 0 ? 1e7f : 1.0f) * (0.1f + 0.37f * static_cast<float>(i)) /
         static_cast<float>(rank + 1);
}

// bf16 values from a fixed hash: both signs, magnitudes 2^-6 .. 2^10, so fp32 partial sums
// carry bits bf16 cannot, and rounding once differs from rounding per addition.
inline Bf16Bits bf16_value(int rank, std::int64_t i) {
  std::uint32_t h = static_cast<std::uint32_t>(rank) * 2654435761u ^
                    static_cast<std::uint32_t>(i) * 40503u;
  h ^= h >> 13;
  h *= 0x5bd1e995u;
  h ^= h >> 15;
  const float mantissa = 1.0f + static_cast<float>(h & 0x7fu) / 128.0f;
  const int exponent = static_cast<int>((h >> 7) % 16u) - 6;
  const float sign = ((h >> 11) & 1u) != 0 ? -1.0f : 1.0f;
  return float_to_bf16(sign * std::ldexp(mantissa, exponent));
}

inline std::vector<std::uint16_t> bits_of(const std::vector<Bf16Bits>& v) {
  std::vector<std::uint16_t> out;
  out.reserve(v.size());
  for (Bf16Bits b : v) out.push_back(b.bits);
  return out;
}

// The contract's sums, per element: ((x_0 + x_1) + x_2) + ... (bf16: in fp32, rounded once).
inline std::vector<float> f32_contract_sum(int size, std::int64_t n) {
  std::vector<float> out(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    float sum = f32_value(0, i);
    for (int r = 1; r < size; ++r) sum += f32_value(r, i);
    out[static_cast<std::size_t>(i)] = sum;
  }
  return out;
}
inline std::vector<Bf16Bits> bf16_contract_sum(int size, std::int64_t n) {
  std::vector<Bf16Bits> out(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    float sum = bf16_to_float(bf16_value(0, i));
    for (int r = 1; r < size; ++r) sum += bf16_to_float(bf16_value(r, i));
    out[static_cast<std::size_t>(i)] = float_to_bf16(sum);
  }
  return out;
}

// ctest's SKIP_RETURN_CODE for these binaries (tests/executor/cuda_runtime.cmake).
inline constexpr int kSkipped = 77;

// one_device_per_rank: NCCL's requirement (rank i of a node on device i); otherwise every rank
// of the node runs on device 0, sharing it (the host-staged communicator's case).
inline int mpi_gpu_test_main(int argc, char** argv, const char* name, bool one_device_per_rank) {
  ::testing::InitGoogleTest(&argc, argv);
  try {
    MpiSession session(&argc, &argv);
    const int rank = session.world_rank();
    const LaunchEnv env = detect_launch_env();
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess) {
      (void)cudaGetLastError();
      devices = 0;
    }
    const int needed = one_device_per_rank ? env.local_size : 1;
    int ok = devices >= needed ? 1 : 0;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    if (ok == 0) {
      if (rank == 0) {
        std::printf("SKIPPED: %s needs %d CUDA device(s) on this node (%d ranks here, %d devices "
                    "seen by rank 0): %s\n",
                    name, needed, env.local_size, devices,
                    kernels::cuda::cuda_unavailable_reason().c_str());
      }
      return kSkipped;
    }
    CUDA_CHECK(cudaSetDevice(one_device_per_rank ? env.local_rank % devices : 0));
    if (rank == 0 && !one_device_per_rank) {
      std::printf("%s: %d ranks share device 0\n", name, env.local_size);
    }
    // A fatal failure on any rank ends the job (mpi_test_main.h): never a hang.
    return testing_support::run_tests_on_every_rank(rank);
  } catch (const std::exception& e) {
    return testing_support::fail_outside_tests(name, e);
  }
}

}  // namespace strata::cuda::test
