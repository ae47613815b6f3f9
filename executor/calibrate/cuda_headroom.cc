// Device memory measured by cudaMemGetInfo; see cuda_headroom.h.
#include "executor/calibrate/cuda_headroom.h"

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_resources.h"

#if STRATA_HAVE_NCCL
#include <nccl.h>
#endif

namespace strata::calibrate {

std::int64_t device_bytes_in_use() {
  std::size_t free = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return static_cast<std::int64_t>(total) - static_cast<std::int64_t>(free);
}

#if STRATA_HAVE_NCCL

namespace {

// Owns an NCCL communicator: destroyed on every path out.
class NcclComm {
 public:
  explicit NcclComm(int device) { NCCL_CHECK(ncclCommInitAll(&comm_, 1, &device)); }
  ~NcclComm() {
    if (comm_ != nullptr) ncclCommDestroy(comm_);  // nothing to do about a failure here
  }
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;
  ncclComm_t get() const { return comm_; }

 private:
  ncclComm_t comm_ = nullptr;
};

}  // namespace

std::int64_t nccl_communicator_bytes(cudaStream_t stream) {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  const kernels::cuda::DeviceBuffer value(sizeof(float));
  CUDA_CHECK(cudaMemsetAsync(value.get(), 0, sizeof(float), stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  const std::int64_t before = device_bytes_in_use();
  NcclComm comm(device);
  NCCL_CHECK(ncclAllReduce(value.get(), value.get(), 1, ncclFloat, ncclSum, comm.get(), stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return device_bytes_in_use() - before;
}

#else

std::int64_t nccl_communicator_bytes(cudaStream_t) { return -1; }

#endif

}  // namespace strata::calibrate
