// A small builder over cuDNN's backend (graph) API (cudnn_graph.h): RAII descriptors, the
// handle, tensors, the operations attention needs (matmul, pointwise, reduction, reshape),
// the operation graph, an execution plan picked by cuDNN's heuristics, and its execution.
// Every failing call throws CudaError naming the call and cuDNN's own message (its last
// error string), so that a graph cuDNN does not take says why; callers fall back on that.
// Only with cuDNN's headers (cudnn_entry_points.h: STRATA_HAVE_CUDNN_HEADERS).
// Deliberately not here: what a graph computes (cudnn_sdpa.cc), where the library comes from
// (cudnn_library.h).
#pragma once

#include "kernels/cuda/cudnn_entry_points.h"

#if STRATA_HAVE_CUDNN_HEADERS
#include <cstdint>
#include <string>
#include <vector>

#include <cuda_runtime.h>

namespace strata::kernels::cuda::cudnn {

// cudnnStatus_t checked: CudaError naming `what`, the status and cuDNN's last message.
void check(const CudnnLibrary& lib, cudnnStatus_t status, const char* what);

// One backend descriptor, destroyed with its owner.
class Descriptor {
 public:
  Descriptor() = default;
  Descriptor(const CudnnLibrary& lib, cudnnBackendDescriptorType_t type);
  ~Descriptor();
  Descriptor(Descriptor&& other) noexcept;
  Descriptor& operator=(Descriptor&& other) noexcept;
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;

  cudnnBackendDescriptor_t get() const { return desc_; }
  // cudnnBackendSetAttribute with `count` values of `type` at `values`.
  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, std::int64_t count,
           const void* values);
  void set(cudnnBackendAttributeName_t name, const Descriptor& value);
  void set(cudnnBackendAttributeName_t name, std::int64_t value);
  void set(cudnnBackendAttributeName_t name, cudnnDataType_t value);
  void finalize();

 private:
  const CudnnLibrary* lib_ = nullptr;
  cudnnBackendDescriptor_t desc_ = nullptr;
};

// cudnnHandle_t, destroyed with its owner; runs on the stream last given to set_stream.
class Handle {
 public:
  explicit Handle(const CudnnLibrary& lib);
  ~Handle();
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  cudnnHandle_t get() const { return handle_; }
  void set_stream(cudaStream_t stream);

 private:
  const CudnnLibrary* lib_;
  cudnnHandle_t handle_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

// A tensor of an operation graph: 4 dimensions and strides (elements), a unique id. Virtual
// tensors live inside the fused kernel; by-value ones are host scalars given at execution.
struct TensorSpec {
  std::int64_t uid = 0;
  cudnnDataType_t dtype = CUDNN_DATA_FLOAT;
  std::vector<std::int64_t> dims, strides;
  bool is_virtual = false;
  bool by_value = false;
};

class GraphBuilder {
 public:
  explicit GraphBuilder(const CudnnLibrary& lib) : lib_(&lib) {}

  // A tensor (its descriptor finalized); returns its index for the operations below.
  int tensor(const TensorSpec& spec);
  // A virtual fp32 (or `dtype`) tensor of these dims, packed row-major; uid taken from the
  // builder's own counter (above every caller-given uid: kFirstVirtualUid).
  int intermediate(std::vector<std::int64_t> dims, cudnnDataType_t dtype = CUDNN_DATA_FLOAT);
  // A virtual tensor with these dims and strides.
  int intermediate(std::vector<std::int64_t> dims, std::vector<std::int64_t> strides,
                   cudnnDataType_t dtype);
  // A host fp32 scalar given by value at execution (uid chosen by the caller).
  int scalar(std::int64_t uid);

  void matmul(int a, int b, int c);  // c = a @ b over the last two dims, fp32 compute
  // y = mode(x) / mode(x, b) / mode(x, b, t) (BINARY_SELECT: y = t ? x : b); axis for GEN_INDEX.
  void pointwise(cudnnPointwiseMode_t mode, int x, int b, int t, int y,
                 cudnnDataType_t math = CUDNN_DATA_FLOAT, std::int64_t axis = -1);
  void reduction(cudnnReduceTensorOp_t op, int x, int y);  // over the dims where y has 1
  void reshape(int x, int y);                               // the same elements, y's layout

  // The operation graph of everything added, finalized on `handle`.
  Descriptor finalize(const Handle& handle);

  static constexpr std::int64_t kFirstVirtualUid = 1000;

 private:
  const CudnnLibrary* lib_;
  std::vector<Descriptor> tensors_;
  std::vector<Descriptor> ops_;
  std::vector<Descriptor> keep_;  // op sub-descriptors (matmul, pointwise, reduction)
  std::int64_t next_virtual_uid_ = kFirstVirtualUid;
};

// An execution plan for an operation graph: the first of cuDNN's heuristic choices (mode A,
// then its fallback list) that finalizes, optionally only among engines without the
// NONDETERMINISTIC numerical note. Throws CudaError naming why none did.
struct Plan {
  Descriptor plan;
  std::int64_t workspace_bytes = 0;
};
Plan make_plan(const CudnnLibrary& lib, const Handle& handle, const Descriptor& graph,
               bool deterministic_only);

// Runs `plan` with one device (or, for by-value tensors, host) pointer per uid, on the
// handle's stream.
void execute(const CudnnLibrary& lib, const Handle& handle, const Plan& plan,
             const std::vector<std::int64_t>& uids, const std::vector<void*>& pointers,
             void* workspace);

}  // namespace strata::kernels::cuda::cudnn
#endif
