// Backend: what the one engine (engine.h) needs from the hardware it replays a Program on.
// Two implementations: the CPU backend (executor/cpu: kernels/cpu in fp32, MPI, host
// memory under the device budget) and the CUDA backend (executor/cuda: kernels/cuda in bf16
// mixed precision, NCCL or host-staged communicators, the device pool, pinned host memory,
// compute / comm / copy / p2p streams). Pipeline, ZeRO, TP/SP, recomputation, offload and
// the optimizer are written once in the engine over this interface; a backend only says
// HOW each primitive runs, never WHEN (the Program says when).
//
// Streams: every call that issues device work names the Program stream it belongs to, or is
// on the compute stream. record() marks what has been issued on a stream so far; wait()
// makes a stream wait for such a mark. The CPU backend runs everything synchronously in
// call order, so its marks are -1 and its waits are no-ops. Its CUDA-semantics mode
// (executor/cpu/cuda_semantics) queues work on simulated streams instead, to check the order.
// Memory: allocate() is accounted (AccountingAllocator tags) on every backend, so peaks
// compare with the memory model the same way. Device memory is ordered on the compute
// stream: memory that work on another stream may still read is handed to release_after().
// Deliberately not here: the model's math (model/layer_ops.h, through layer_ops()), the
// order of anything (the Program), files and reports.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cost_model/specs/backend_facts.h"
#include "cost_model/specs/param_layout.h"
#include "cost_model/program/program.h"
#include "executor/comm/communicator_factory.h"
#include "executor/engine/tensor.h"
#include "executor/memory/accounting_allocator.h"
#include "executor/memory/pool_size_class.h"
#include "executor/model/layer_ops.h"
#include "kernels/cpu/adamw.h"
#include "kernels/dtype.h"

namespace strata::engine {

// A range of host memory that host work reads or writes (Backend::on_host).
struct HostTouch {
  const void* data = nullptr;
  std::int64_t bytes = 0;
  bool write = false;
};
inline HostTouch host_reads(const void* data, std::int64_t bytes) { return {data, bytes, false}; }
inline HostTouch host_writes(const void* data, std::int64_t bytes) { return {data, bytes, true}; }

// AdamW hyper-parameters of one step (1-based), as the kernels take them.
struct AdamWStep {
  float lr = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0;
  int step = 1;
};

// The scalars of a captured step (engine.h, "Captured steps") in device memory, where its
// replays read them when they run: the host writes the learning rate, AdamW's step and its
// bias corrections before each launch; the device writes the gradients' sum of squares and
// the clip factor (Backend::sum_squares_on_device, clip_factor_on_device), which the host
// reads after the step. A kernel
// launch's arguments are baked into a CUDA graph; these are not.
struct DeviceStepScalars {
  double grad_sq = 0;                   // sum of squares of the gradients (device-written)
  kernels::cpu::AdamWStepValues values;  // grad_scale device-written, the rest the host's
  std::int32_t step = 1;                // AdamW's (1-based)
  std::int32_t pad = 0;
};
static_assert(sizeof(DeviceStepScalars) == 32, "DeviceStepScalars: 4 doubles of device memory");
// The host-written part of the scalars of AdamW step hp.step at learning rate hp.lr.
DeviceStepScalars step_scalars(const AdamWStep& hp);

// n fp32 values in backend memory (Backend::sum_of_squares_over).
struct FloatSpan {
  const float* data = nullptr;
  std::int64_t n = 0;
};

// One layer op of a step as the backend timed it (Backend::timed_kernels): its name and its
// start and end marks (timestamps).
struct TimedKernel {
  const char* name = "";
  int start = -1, end = -1;
};

// One tensor of an AdamW step (Backend::adamw): n fp32 master parameters with their
// gradients and moments.
struct AdamWSpan {
  float* master = nullptr;
  void* copy = nullptr;  // receives the updated parameters in the compute dtype; null: none
  float* grad = nullptr;
  float* m = nullptr;
  float* v = nullptr;
  std::int64_t n = 0;
  bool decayed = true;  // AdamWStep::weight_decay applies; else none (biases, norms' weights)
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string_view name() const = 0;  // "cpu" | "cuda"
  // Whose facts (cost_model/specs/backend_facts.h) this backend trains by: the CUDA-semantics
  // mode checks CUDA's stream order but computes as the CPU backend does.
  virtual strata::Backend kind() const = 0;
  const BackendFacts& facts() const { return backend_facts(kind()); }
  // Activations and the compute copy of the weights: fp32 on the CPU, bf16 on CUDA. When it
  // is fp32 the parameters are their own fp32 master; otherwise a master copy is kept.
  DType compute_dtype() const { return facts().compute_dtype; }
  // Whether the weights the layer ops read are a compute copy kept apart from the fp32
  // master and refreshed by to_compute(): on CUDA (a bf16 copy), and in the CPU backend's
  // CUDA-semantics mode, which runs the same buffers and casts in fp32.
  virtual bool separate_compute_copy() const { return compute_dtype() != DType::kF32; }
  std::int64_t vocab_row_alignment() const { return facts().vocab_row_alignment; }
  virtual AccountingAllocator& accounting() = 0;

  // n elements on `tier` (device: the budgeted device memory; host: host memory, pinned on
  // CUDA), zero-filled when `zeroed`. Throws OutOfMemory over budget.
  virtual Tensor allocate(MemoryTier tier, DType dtype, std::int64_t n, const std::string& tag,
                          bool zeroed = true) = 0;
  // Frees `t` once the work issued on `stream` so far is done with it.
  virtual void release_after(Tensor t, Stream stream) = 0;

  virtual model::LayerOps& layer_ops() = 0;  // on the compute stream
  virtual CommunicatorFactory& communicators() = 0;

  // Model-state kernels on device-tier memory, on `stream`.
  virtual void zero(void* data, DType dtype, std::int64_t n, Stream stream) = 0;
  virtual void fill(float* data, float value, std::int64_t n) = 0;  // compute stream
  // The sum of squares of n fp32 (a fixed-order reduction: the same bits on every run).
  // Waits for the compute stream.
  virtual double sum_of_squares(const float* data, std::int64_t n) = 0;
  // The sum over `spans` of sum_of_squares(span), added in their order (the same bits), with
  // one wait for the compute stream: on CUDA each wait is a host round trip, and a norm
  // taken tensor by tensor waited ~150 times a step on GPT-2 124M.
  virtual double sum_of_squares_over(const std::vector<FloatSpan>& spans) {
    double sum = 0;
    for (const FloatSpan& s : spans) sum += sum_of_squares(s.data, s.n);
    return sum;
  }
  // AdamW on every tensor of `tensors` (their gradients times grad_scale: the clip factor),
  // each one's compute copy written in the same pass, on the compute stream. The engine hands
  // over all the tensors of a step it can at once: CUDA updates them in one fused launch (a
  // few for hundreds of tensors). A launch per tensor, with the norm's host wait per tensor,
  // measured 5.5 ms of GPT-2 124M's step on an H200 (1.2 ms predicted). The gradients may be
  // scaled in place.
  virtual void adamw(const std::vector<AdamWSpan>& tensors, const AdamWStep& hp,
                     float grad_scale) = 0;
  // The same update with the learning rate, step and clip factor read from `scalars` (device
  // memory) when it runs, the betas, eps and weight decay from hp: the form a captured step
  // replays. The default is for backends whose device memory the host reads (the CPU's).
  virtual void adamw_from_device(const std::vector<AdamWSpan>& tensors, const AdamWStep& hp,
                                 const DeviceStepScalars* scalars);
  // *sum = the sum over `groups` of sum_of_squares_over(group), added in their order
  // (ModelState::grad_norm's sums, unit by unit: the same bits), on the compute stream with no
  // host wait: a captured step's norm (a device sum over the ranks follows where there are
  // several). The default as adamw_from_device's.
  virtual void sum_squares_on_device(const std::vector<std::vector<FloatSpan>>& groups,
                                     double* sum);
  // scalars->values.grad_scale = cpu::clip_scale(sqrt(scalars->grad_sq), max_norm) (1 when
  // max_norm <= 0), on the compute stream with no host wait. The default as above.
  virtual void clip_factor_on_device(float max_norm, DeviceStepScalars* scalars);
  // dst (compute dtype) = src (fp32), on `stream`. A copy when the compute dtype is fp32.
  virtual void to_compute(void* dst, const float* src, std::int64_t n,
                          Stream stream = Stream::kCompute) = 0;
  // dst (device tier, fp32) = elements [begin, end) of the unit's seeded initial values,
  // model::init_unit_range's bits, drawn where dst lives; in place on return. False when this
  // backend has no such path (the caller draws them on the host and copies them in).
  virtual bool init_seeded(float* /*dst*/, const UnitLayout& /*unit*/, std::uint64_t /*seed*/,
                           std::int64_t /*begin*/, std::int64_t /*end*/) {
    return false;
  }

  // Bytes between any two tiers' memory. Synchronous with the host when either side is host
  // memory (the host may read or reuse it on return); otherwise ordered on `stream`.
  virtual void copy(void* dst, const void* src, std::int64_t bytes, Stream stream) = 0;
  // The same copy without the host waiting, as cudaMemcpyAsync: it is done at the next mark
  // recorded on `stream`, and until the host has waited for that mark (host_wait_for) it may
  // neither read a host destination nor write (or free) a host source. Host-tier memory is
  // pinned on CUDA and read or written by the copy while the host goes on; from pageable
  // memory (any other host memory) the source is staged before the call returns, and into
  // pageable memory the call is synchronous, as CUDA does.
  virtual void copy_async(void* dst, const void* src, std::int64_t bytes, Stream stream) = 0;
  // Host work on host memory that copies may touch (the CPU optimizer, accumulating offloaded
  // gradients, NVMe reads and writes): runs `work` now on the calling thread. The host is an
  // actor with its own program order: the CUDA-semantics mode checks `touches` against the
  // copies it has not waited for and names any race.
  virtual void on_host(const std::string& op, std::initializer_list<HostTouch> touches,
                       const std::function<void()>& work) {
    (void)op;
    (void)touches;
    work();
  }

  // Host work of a host-stream op (the CPU optimizer of offloaded optimizer state), in that
  // stream's order. With a host stream apart (host_stream_apart) it is queued there and the
  // call returns at once: record(Stream::kHost) marks it, wait(Stream::kHost, mark) makes
  // the work queued after it wait for a mark, and waits for a host mark wait for it; an
  // exception it throws comes out of the next wait or synchronize(). `touches`: the host
  // memory it reads and writes (the CUDA-semantics mode checks them when it is queued).
  // Without a host stream apart it runs now.
  virtual void run_on_host_stream(const std::string& op, std::vector<HostTouch> touches,
                                  std::function<void()> work) {
    (void)op;
    (void)touches;
    work();
  }
  virtual bool host_stream_apart() const { return false; }
  // The host stream runs only work that touches host memory alone, no device memory, copy
  // or backend call: CUDA's (host functions may make no CUDA call) and its CUDA-semantics
  // model's, which names any such call. The CPU backend's host thread runs any host work.
  virtual bool host_stream_host_memory_only() const { return false; }

  virtual int record(Stream stream) = 0;
  virtual void wait(Stream waiter, int mark) = 0;
  // Work that `comm` issues from now on starts after `mark`. Communicators run on streams of
  // their own (the pipeline links', group_streams.h), which no Program stream covers: a
  // receive into a block the pool just handed out must wait for the compute stream's last
  // readers of it, a send for the kernels that wrote its buffer. An event wait on CUDA, not
  // a host stall; nothing on the CPU backend, where every call has finished on return.
  virtual void wait(Communicator& comm, int mark) = 0;
  virtual void synchronize() = 0;  // every stream done
  // Every stream but the host stream done: the end of a step whose host work runs on past it
  // (engine.h, carried host steps). Throws what host work that has already run threw.
  virtual void synchronize_device() {
    for (Stream s : {Stream::kCompute, Stream::kComm, Stream::kCopy, Stream::kP2p}) host_wait(s);
  }
  virtual void host_wait(Stream stream) = 0;  // the host waits for one stream
  // The host waits for a mark (cudaEventSynchronize): for what its stream had been given
  // when it was recorded, not for the work issued since.
  virtual void host_wait_for(int mark) = 0;
  // Makes the calling thread able to drive this backend: a rank that is a thread may be
  // driven by another thread after a while (strata select runs a job's later slices on
  // whichever worker the schedule gives them), and a CUDA device is per thread.
  virtual void bind_to_calling_thread() {}

  // Op timing: a mark whose time is read after synchronize(), in seconds since `origin`.
  virtual int timestamp(Stream stream) = 0;
  virtual double seconds_between(int origin, int mark) = 0;
  virtual void clear_timestamps() = 0;
  // The layer ops issued since clear_timestamps(), one span each, when the backend times them
  // one by one (CUDA with CudaBackendOptions::kernel_trace: `strata run --kernel-trace`);
  // empty otherwise. Read after synchronize(), like every timestamp.
  virtual std::vector<TimedKernel> timed_kernels() const { return {}; }

  // Captured steps (CUDA graphs; engine.h, "Captured steps"). captures_steps: the run asked
  // for them and this backend can (CUDA, and the CUDA-semantics mode, which checks what CUDA
  // forbids while capturing: any host wait, host work, pageable copy). Between begin_capture
  // and end_capture the streams' work is recorded, not run; launch_graph runs it once more,
  // as recorded (the same pointers and arguments), on the streams it was recorded on.
  // Throws std::logic_error where captures_steps is false.
  virtual bool captures_steps() const { return false; }
  // Every collective of this rank's communicators runs on the device, with no host round trip
  // (NCCL's, and the CUDA-semantics mode's model of them): a step of several ranks can be
  // captured. Host-staged and MPI communicators cannot be.
  virtual bool collectives_on_device() const { return false; }
  virtual void begin_capture();
  virtual void end_capture();
  virtual void launch_graph();
  virtual void drop_graph() {}
  // The device pool's free blocks, sorted. A captured step's scratch blocks are free between
  // its runs; a replay is valid only while every block free after the capture still is
  // (nothing else holds one).
  virtual std::vector<FreeBlock> free_blocks() const { return {}; }

  // What the backend chose while running that a run should say, one line each (on CUDA:
  // which attention ran for each shape, cuDNN's or strata's kernels, and why).
  virtual std::vector<std::string> notes() const { return {}; }
};

// Where a rank runs, for the maker of its backend.
struct RankPlace {
  // Host-memory groups over the rank's job (MPI's when its ranks are processes, a
  // LocalWorld's when they are threads of one process); the backend bootstraps its own
  // communicators over them. Outlives the backend.
  CommunicatorFactory* host = nullptr;
  // The rank's GPU (mod the GPUs the machine has): its local rank on the node, or the device
  // of the strata select worker that runs it. Unused by the CPU backends.
  int device = 0;
  // The job's ranks are threads of one process (strata select). NCCL between threads would
  // need one communicator per device, all made by a single thread, so CUDA stages through
  // the host there.
  bool ranks_are_threads = false;
};

// Makes a rank's backend over its allocator (which outlives it). One maker per backend: the
// CPU one (executor/cpu), its CUDA-semantics mode (executor/cpu/cuda_semantics), CUDA
// (executor/cuda); executor/run/rank_training.h builds every rank through one.
using BackendMaker =
    std::function<std::unique_ptr<Backend>(AccountingAllocator& alloc, const RankPlace& place)>;

}  // namespace strata::engine
