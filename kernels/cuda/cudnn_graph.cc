// cuDNN backend graphs (see cudnn_graph.h).
#include "kernels/cuda/cudnn_graph.h"

#if STRATA_HAVE_CUDNN_HEADERS
#include <cstdio>
#include <utility>

#include <fmt/format.h>

#include "kernels/cuda/cuda_check.h"

namespace strata::kernels::cuda::cudnn {

void check(const CudnnLibrary& lib, cudnnStatus_t status, const char* what) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  char last[1024] = {};
  lib.GetLastErrorString(last, sizeof(last));
  throw CudaError(fmt::format("cuDNN: {} failed: {}{}{}", what, lib.GetErrorString(status),
                              last[0] != '\0' ? ": " : "", last));
}

// ---------------------------------------------------------------------------------------
// Descriptor, Handle

Descriptor::Descriptor(const CudnnLibrary& lib, cudnnBackendDescriptorType_t type) : lib_(&lib) {
  check(lib, lib.BackendCreateDescriptor(type, &desc_), "cudnnBackendCreateDescriptor");
}

Descriptor::~Descriptor() {
  if (desc_ != nullptr) lib_->BackendDestroyDescriptor(desc_);
}

Descriptor::Descriptor(Descriptor&& other) noexcept
    : lib_(other.lib_), desc_(std::exchange(other.desc_, nullptr)) {}

Descriptor& Descriptor::operator=(Descriptor&& other) noexcept {
  if (this != &other) {
    if (desc_ != nullptr) lib_->BackendDestroyDescriptor(desc_);
    lib_ = other.lib_;
    desc_ = std::exchange(other.desc_, nullptr);
  }
  return *this;
}

void Descriptor::set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                     std::int64_t count, const void* values) {
  check(*lib_, lib_->BackendSetAttribute(desc_, name, type, count, values),
        "cudnnBackendSetAttribute");
}

void Descriptor::set(cudnnBackendAttributeName_t name, const Descriptor& value) {
  cudnnBackendDescriptor_t d = value.get();
  set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &d);
}

void Descriptor::set(cudnnBackendAttributeName_t name, std::int64_t value) {
  set(name, CUDNN_TYPE_INT64, 1, &value);
}

void Descriptor::set(cudnnBackendAttributeName_t name, cudnnDataType_t value) {
  set(name, CUDNN_TYPE_DATA_TYPE, 1, &value);
}

void Descriptor::finalize() { check(*lib_, lib_->BackendFinalize(desc_), "cudnnBackendFinalize"); }

Handle::Handle(const CudnnLibrary& lib) : lib_(&lib) {
  check(lib, lib.Create(&handle_), "cudnnCreate");
}

Handle::~Handle() {
  if (handle_ != nullptr) lib_->Destroy(handle_);
}

void Handle::set_stream(cudaStream_t stream) {
  if (stream == stream_) return;
  check(*lib_, lib_->SetStream(handle_, stream), "cudnnSetStream");
  stream_ = stream;
}

// ---------------------------------------------------------------------------------------
// GraphBuilder

int GraphBuilder::tensor(const TensorSpec& spec) {
  Descriptor t(*lib_, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, spec.dtype);
  const auto rank = static_cast<std::int64_t>(spec.dims.size());
  t.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, rank, spec.dims.data());
  t.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, rank, spec.strides.data());
  t.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, spec.uid);
  t.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, std::int64_t{16});
  const bool is_virtual = spec.is_virtual, by_value = spec.by_value;
  t.set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
  if (by_value) t.set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
  t.finalize();
  tensors_.push_back(std::move(t));
  return static_cast<int>(tensors_.size() - 1);
}

int GraphBuilder::intermediate(std::vector<std::int64_t> dims, cudnnDataType_t dtype) {
  std::vector<std::int64_t> strides(dims.size(), 1);
  for (std::size_t i = dims.size() - 1; i-- > 0;) strides[i] = strides[i + 1] * dims[i + 1];
  return intermediate(std::move(dims), std::move(strides), dtype);
}

int GraphBuilder::intermediate(std::vector<std::int64_t> dims, std::vector<std::int64_t> strides,
                               cudnnDataType_t dtype) {
  return tensor({next_virtual_uid_++, dtype, std::move(dims), std::move(strides), true, false});
}

int GraphBuilder::scalar(std::int64_t uid) {
  return tensor({uid, CUDNN_DATA_FLOAT, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true});
}

void GraphBuilder::matmul(int a, int b, int c) {
  Descriptor desc(*lib_, CUDNN_BACKEND_MATMUL_DESCRIPTOR);
  desc.set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_DATA_FLOAT);
  desc.finalize();
  Descriptor op(*lib_, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
  op.set(CUDNN_ATTR_OPERATION_MATMUL_ADESC, tensors_.at(a));
  op.set(CUDNN_ATTR_OPERATION_MATMUL_BDESC, tensors_.at(b));
  op.set(CUDNN_ATTR_OPERATION_MATMUL_CDESC, tensors_.at(c));
  op.set(CUDNN_ATTR_OPERATION_MATMUL_DESC, desc);
  op.finalize();
  keep_.push_back(std::move(desc));
  ops_.push_back(std::move(op));
}

void GraphBuilder::pointwise(cudnnPointwiseMode_t mode, int x, int b, int t, int y,
                             cudnnDataType_t math, std::int64_t axis) {
  Descriptor desc(*lib_, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  desc.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
  desc.set(CUDNN_ATTR_POINTWISE_MATH_PREC, math);
  if (axis >= 0) desc.set(CUDNN_ATTR_POINTWISE_AXIS, axis);
  desc.finalize();
  Descriptor op(*lib_, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  op.set(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, desc);
  op.set(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, tensors_.at(x));
  if (b >= 0) op.set(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, tensors_.at(b));
  if (t >= 0) op.set(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, tensors_.at(t));
  op.set(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, tensors_.at(y));
  op.finalize();
  keep_.push_back(std::move(desc));
  ops_.push_back(std::move(op));
}

void GraphBuilder::reduction(cudnnReduceTensorOp_t reduce, int x, int y) {
  Descriptor desc(*lib_, CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
  desc.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &reduce);
  desc.set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_DATA_FLOAT);
  desc.finalize();
  Descriptor op(*lib_, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
  op.set(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, tensors_.at(x));
  op.set(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, tensors_.at(y));
  op.set(CUDNN_ATTR_OPERATION_REDUCTION_DESC, desc);
  op.finalize();
  keep_.push_back(std::move(desc));
  ops_.push_back(std::move(op));
}

void GraphBuilder::reshape(int x, int y) {
  Descriptor op(*lib_, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
  op.set(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, tensors_.at(x));
  op.set(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, tensors_.at(y));
  op.finalize();
  ops_.push_back(std::move(op));
}

Descriptor GraphBuilder::finalize(const Handle& handle) {
  std::vector<cudnnBackendDescriptor_t> ops;
  for (const Descriptor& op : ops_) ops.push_back(op.get());
  Descriptor graph(*lib_, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
            static_cast<std::int64_t>(ops.size()), ops.data());
  cudnnHandle_t h = handle.get();
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
  graph.finalize();
  return graph;
}

// ---------------------------------------------------------------------------------------
// Plans

namespace {

// The engine configurations cuDNN's heuristics (`mode`) offer for `graph`, best first.
std::vector<Descriptor> heuristic_configs(const CudnnLibrary& lib, const Descriptor& graph,
                                          cudnnBackendHeurMode_t mode) {
  Descriptor heur(lib, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  heur.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
  heur.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  heur.finalize();
  std::int64_t count = 0;
  check(lib, lib.BackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr),
        "cudnnBackendGetAttribute(ENGINEHEUR_RESULTS count)");
  std::vector<Descriptor> configs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (std::int64_t i = 0; i < count; ++i) {
    configs.emplace_back(lib, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    raw.push_back(configs.back().get());
  }
  if (count > 0) {
    check(lib, lib.BackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &count, raw.data()),
          "cudnnBackendGetAttribute(ENGINEHEUR_RESULTS)");
  }
  configs.resize(static_cast<std::size_t>(count));
  return configs;
}

// Whether the engine behind `config` says its results may differ from run to run.
bool nondeterministic(const CudnnLibrary& lib, const Descriptor& config) {
  Descriptor engine(lib, CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t raw = engine.get();
  std::int64_t n = 0;
  check(lib, lib.BackendGetAttribute(config.get(), CUDNN_ATTR_ENGINECFG_ENGINE,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &raw),
        "cudnnBackendGetAttribute(ENGINECFG_ENGINE)");
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  check(lib, lib.BackendGetAttribute(raw, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                                     CUDNN_TYPE_NUMERICAL_NOTE, CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n,
                                     notes),
        "cudnnBackendGetAttribute(ENGINE_NUMERICAL_NOTE)");
  for (std::int64_t i = 0; i < n; ++i) {
    if (notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) return true;
  }
  return false;
}

}  // namespace

Plan make_plan(const CudnnLibrary& lib, const Handle& handle, const Descriptor& graph,
               bool deterministic_only) {
  std::string tried;
  int offered = 0, skipped = 0;
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    std::vector<Descriptor> configs;
    try {
      configs = heuristic_configs(lib, graph, mode);
    } catch (const CudaError& e) {
      tried += fmt::format("; heuristics {}: {}", static_cast<int>(mode), e.what());
      continue;
    }
    for (const Descriptor& config : configs) {
      ++offered;
      try {
        if (deterministic_only && nondeterministic(lib, config)) {
          ++skipped;
          continue;
        }
        Plan p{Descriptor(lib, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR), 0};
        cudnnHandle_t h = handle.get();
        p.plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
        p.plan.set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, config);
        p.plan.finalize();
        std::int64_t n = 0;
        check(lib, lib.BackendGetAttribute(p.plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                           CUDNN_TYPE_INT64, 1, &n, &p.workspace_bytes),
              "cudnnBackendGetAttribute(EXECUTION_PLAN_WORKSPACE_SIZE)");
        return p;
      } catch (const CudaError& e) {
        if (tried.size() < 2000) tried += fmt::format("; {}", e.what());
      }
    }
  }
  throw CudaError(fmt::format("cuDNN: no execution plan for the graph ({} engine configurations "
                              "offered, {} of them nondeterministic and skipped){}",
                              offered, skipped, tried));
}

void execute(const CudnnLibrary& lib, const Handle& handle, const Plan& plan,
             const std::vector<std::int64_t>& uids, const std::vector<void*>& pointers,
             void* workspace) {
  Descriptor pack(lib, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
           static_cast<std::int64_t>(uids.size()), uids.data());
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
           static_cast<std::int64_t>(pointers.size()), pointers.data());
  pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  pack.finalize();
  check(lib, lib.BackendExecute(handle.get(), plan.plan.get(), pack.get()), "cudnnBackendExecute");
}

}  // namespace strata::kernels::cuda::cudnn
#endif
