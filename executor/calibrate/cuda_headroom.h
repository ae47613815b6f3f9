// The device memory a CUDA run takes outside its tensors (Profile::headroom), measured as
// the rise of cudaMemGetInfo's used bytes (total - free) across creating each thing: the
// context with the modules the kernels load, cuBLASLt's handle, an NCCL communicator.
// cudaMemGetInfo sees every process on the device: measure on an otherwise idle GPU.
// Deliberately not here: the caching allocator's fragmentation (the executor has no caching
// allocator; DevicePool accounts every block), communicators of more than one rank.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace strata::calibrate {

// total - free of the current device (creating its context when there is none yet).
// CudaError when the query fails.
std::int64_t device_bytes_in_use();

// What a one-rank NCCL communicator on the current device holds after one all-reduce (NCCL
// 2.22+ connects lazily, at the first collective): the rise of device_bytes_in_use, with the
// communicator destroyed afterwards. A communicator of several ranks allocates its peers'
// buffers on top (not measured here). -1 when strata was built without NCCL.
std::int64_t nccl_communicator_bytes(cudaStream_t stream);

}  // namespace strata::calibrate
