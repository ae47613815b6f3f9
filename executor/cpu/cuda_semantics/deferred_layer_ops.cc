// The CPU kernels queued on the simulated compute stream (see deferred_layer_ops.h), each with
// the reads and writes layer_kernels.def lists for it (an accumulated output is both), in
// elements of fp32 or int32.
#include "executor/cpu/cuda_semantics/deferred_layer_ops.h"

#include <cstring>
#include <utility>

#include "executor/cpu/cuda_semantics/cuda_semantics_backend.h"

namespace strata::cuda_semantics {
namespace {

constexpr std::int64_t kF = 4;  // bytes of an fp32 or int32 element

std::int64_t elements(int a, int b) { return static_cast<std::int64_t>(a) * b; }
Access reads(const void* p, std::int64_t count) { return Access{p, count * kF, false}; }
Access writes(const void* p, std::int64_t count) { return Access{p, count * kF, true}; }

}  // namespace

void DeferredLayerOps::launch(const char* op, std::vector<Access> accesses,
                              std::function<void()> kernel) {
  scheduler_->enqueue(SimStream::kCompute, op, accesses, std::move(kernel));
}

engine::Tensor DeferredLayerOps::activations(std::int64_t count, const std::string& tag) {
  return backend_->device_block(DType::kF32, count, tag);
}

engine::Tensor DeferredLayerOps::floats(std::int64_t count, const std::string& tag) {
  return backend_->device_block(DType::kF32, count, tag);
}

// Each kernel: its reads and writes (layer_kernels.def), then the CPU kernel on the stream.
#define STRATA_LAYER_KERNEL(name, uses, params, args, flops, ...) \
  void DeferredLayerOps::name params {                              \
    launch(#name, {__VA_ARGS__}, [=, this] { cpu_.name args; });    \
  }
#include "executor/model/layer_kernels.def"

void DeferredLayerOps::cross_entropy_forward_backward(float* losses, engine::Tensor& logits,
                                                      const float* dlosses,
                                                      const std::int32_t* targets, int BT,
                                                      int Vlocal, int ld, int v0,
                                                      model::TpContext& tp) {
  if (scheduler_->capturing()) {
    // Captured (TP = 1: no collective inside): a kernel like the others. The CPU kernel hands
    // back a buffer of its own, so the gradient lands in a pool block taken now, at issue, as
    // the CUDA kernel's does.
    engine::Tensor dlogits = backend_->device_block(DType::kF32, logits.size(), "dlogits");
    const std::int64_t count = logits.size();
    void* z = logits.data();
    float* out = dlogits.f32();
    launch("cross_entropy_forward_backward",
           {reads(z, count), reads(dlosses, BT), reads(targets, BT), writes(losses, BT),
            writes(out, count)},
           [=, this, tp = &tp] {
             engine::Tensor view(z, count, DType::kF32, MemoryTier::kDevice, nullptr);
             cpu_.cross_entropy_forward_backward(losses, view, dlosses, targets, BT, Vlocal, ld,
                                                 v0, *tp);
             std::memcpy(out, view.data(), static_cast<std::size_t>(count) * sizeof(float));
           });
    logits = std::move(dlogits);
    return;
  }
  scheduler_->run_now(
      SimStream::kCompute, "cross_entropy_forward_backward",
      {reads(logits.data(), elements(BT, ld)), reads(dlosses, BT), reads(targets, BT),
       writes(losses, BT), writes(logits.data(), elements(BT, ld))},
      [&] {
        cpu_.cross_entropy_forward_backward(losses, logits, dlosses, targets, BT, Vlocal, ld, v0, tp);
      });
  logits = backend_->adopt(std::move(logits), "dlogits");
}

}  // namespace strata::cuda_semantics
