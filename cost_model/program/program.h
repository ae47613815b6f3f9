// The Program: what every rank does in one training step, generated once from the Plan
// (docs/design.md, "One vocabulary"). The executor's engine replays it op for op and the
// simulator prices the very same ops, so what is measured and what is predicted are one
// sequence of decisions, made here and nowhere else.
//
// Two levels, so that a step of a large pipeline stays small (the planner prices
// thousands of them):
//   step ops     per pipeline rank, in order: the passes (forward / backward of micro-batch
//                m on chunk c: make_schedule's order), the pipeline messages around them,
//                then the step's tail (tied-embedding sum, the reductions not issued in a
//                pass, the global gradient norm, the optimizer step of each unit, ZeRO-1/2
//                parameter all-gathers).
//   pass bodies  what a pass does, unit by unit: the compute of each part of the chunk (the
//                embedding, each layer, the head) and the state moves around it. A pass op
//                names its body; a body is shared by every micro-batch it applies to (a
//                chunk has one forward body and one or two backward bodies: the last
//                micro-batch's backward also reduces the gradients it completes).
//
// The state moves (the decisions the engine and ModelState used to make on their own):
//   fetch     ZeRO-3 with offloaded parameters: the unit's 1/d shard starts up from the host
//             or NVMe `prefetch_distance` compute steps before the step that needs it.
//   gather    ZeRO-3: the unit's parameters all-gathered over DP one compute step ahead of
//             use (waiting for its fetch); release frees them right after their last use in
//             the pass. Nothing gathered is kept across passes (what holds ZeRO-3's model
//             state at 16 P / d).
//   reduce    DP: each unit is one gradient bucket, all-reduced (ZeRO 0/1) or reduce-
//             scattered into the rank's shard (2/3) as soon as its last gradient of the step
//             is ready: a layer right after the last micro-batch's backward of it, so that
//             the reduction overlaps the rest of that backward (Megatron's and DeepSpeed's
//             overlapped reduction); the embedding and the tied copy in the tail, after the
//             tied-embedding sum. With offloaded gradients (ZeRO >= 2) a layer's gradient is
//             reduce-scattered and its shard sent down after EVERY micro-batch's backward of
//             it, so its full gradient lives on the device for one layer's backward only
//             (ZeRO-Offload); with sequence parallelism once, after the LayerNorm sums.
//   norm sums sequence parallelism: a unit's LayerNorm gradients are partial sums over this
//             TP rank's token rows; they are summed over TP right before the unit's reduce.
//   kv sums   KV heads replicated over TP (t > kv_heads): the t / kv_heads ranks holding a
//             KV head each computed its K|V gradient from their own query heads only; a
//             layer's is summed over them right before each of its reduces (the gradient
//             is summed once either way: an offloaded one is fresh after every reduce).
//   optimizer AdamW of the unit's part, on the device, or on the host when the optimizer
//             state is offloaded (the gradients go down and the updated parameters come up
//             inside that op). In the tail, after the global gradient norm; but the host step
//             of a layer (and of the final norm) is in the last micro-batch's backward body,
//             right after the unit's last reduce (and its gradient's offload), when the norm
//             cannot change it and the backend overlaps host work (optimizer_in_backward:
//             clipping off, the CPU backend; not CUDA yet): the CPU works on the
//             layers whose gradients are final while the backward of the layers below runs
//             (ZeRO-Offload's overlap), and the tail steps only the vocabulary-sized units,
//             which are reduced there.
//   carried   with clipping on, the host steps wait for the global norm, so they cannot run
//             in the backward (nor on CUDA, whose issuing thread a layer's step there would
//             hold); instead the tail's host steps are carried into the next step
//             (host_optimizer_carried): the step ends without waiting for them, and the
//             next step waits for a unit's update right before its first use (its fetch:
//             carried plans offload parameters, gradients and optimizer state to host
//             memory, so a unit's update touches host memory only). The tail steps the
//             units in forward order, so the CPU updates layer i while the GPU runs the
//             forward of the layers before it: the same bits as stepping in the tail, as
//             the update of a unit reads nothing but its own state, gradient and the norm.
//
// Streams and order: every op runs on one of the rank's streams (Stream below). The CPU
// backend runs every op in list order on one thread, each a blocking call, so list order is
// the whole truth there, except host-stream ops, which a host thread runs in their own order
// beside it, each started after what the rules below make it wait for (where the rank has a
// core its compute threads leave free and no tier is NVMe: the NVMe store's one io_uring
// engine is the issuing thread's). The CUDA backend runs host work that touches host memory
// alone as host functions on a stream of its own (the carried steps above), and any other on
// the thread that issues the device's work, so its Programs keep the host optimizer of a
// plan with device parameters in the tail (BackendFacts::host_optimizer_in_backward,
// host_steps_carried). The CUDA backend and the simulator follow these rules:
//   1. an op starts after the op before it on the same stream (of the same list, or of the
//      pass whose body it is in, for body ops); an op on another stream than compute also
//      starts after every compute-stream op issued before it (the executor hands device
//      memory out in compute-stream order), which is what keeps a gather or a fetch a bounded
//      number of compute steps ahead;
//   2. it starts after the ops its `after` names (indices into the same list, always
//      earlier); a pass named there stands for its compute-stream ops (what a send sends is
//      computed there; the pass's reductions may still be running);
//   3. the tail's first op starts when every pass of the step, with all its body ops, is
//      complete (the tail is the step's end: nothing of it overlaps the pipeline), the host
//      optimizer steps in the backward bodies included.
// A body op starts no earlier than its pass starts. Receives block their stream until the
// matching send's data has arrived.
// Send completion: a send's buffer lives until its request is known complete, and the
// Program says where that is known, so that the engine frees it and the memory walk
// (program_memory.h) counts it at the same op. A receive from the neighbour q proves
// complete every send of this rank that q's list receives before its send of the received
// message (q's receives block, so they had all arrived when it posted that send:
// program_sends.h gives the whole argument). The receive's forward_sends_complete /
// backward_sends_complete say how many of this rank's forward / backward sends, the first
// in list order, are complete once it has returned (cumulative over the step); the engine
// waits for them there, which returns at once, and frees their buffers. The rest complete
// at the end of the pipeline. A middle rank of 1F1B so holds its warm-up's messages, not
// the step's.
// One comm stream carries gathers and reductions, as strata's engine runs them (one DP
// communicator, its NCCL operations in order). DeepSpeed reduces on a stream of its own
// beside the prefetching gathers, both sharing the rank's link; priced as a link that
// serves the ready ops one by one (ties in issue order), that gives the one stream's times
// under ZeRO-3: each comm op waits for the compute issued before it (rule 1) and a reduction
// is issued right after the compute that completes its gradient, so the comm ops become
// ready in list order. An op that waits for more breaks that, and there the one stream can
// be slower than DeepSpeed's two (tested, not modelled): with sequence parallelism a
// reduction waits for its LayerNorm sums and holds up the gathers issued after it; with
// offloaded parameters a gather waits for its fetch and holds up the reduction after it.
// Deliberately not here: durations (the time model and the simulator price ops), the bytes
// of each op (memory_model.h; a message's shape and dtype are here, for the deadlock check
// and the engine to agree on), the loss sum (metrics, not training), anything inside a
// compute step (the TP collectives of a layer are part of its compute).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "cost_model/specs/backend_facts.h"
#include "cost_model/specs/cluster_spec.h"
#include "cost_model/specs/conventions.h"
#include "cost_model/specs/model_spec.h"
#include "cost_model/specs/param_layout.h"
#include "cost_model/specs/plan.h"
#include "cost_model/program/schedule.h"
#include "cost_model/specs/train_spec.h"
#include "kernels/dtype.h"

namespace strata {

enum class Stream : std::uint8_t {
  kCompute,  // passes, compute steps, releases, device optimizer steps
  kComm,     // DP / embedding / TP state collectives: gathers, reductions, norm sums
  kCopy,     // device <-> host / NVMe: fetches, gradient offload
  kP2p,      // pipeline sends and receives
  kHost,     // the CPU optimizer step of offloaded optimizer state (a host thread's work)
};
inline constexpr int kStreamCount = 5;
std::string to_string(Stream stream);

enum class ProgramOpKind : std::uint8_t {
  // Step level: the pipeline (make_schedule's ops).
  kForward,       // pass: body `body` on (micro_batch, chunk)
  kBackward,      // pass: body `body`; recomputation happens inside its compute steps
  kRecvForward,
  kSendForward,
  kRecvBackward,
  kSendBackward,
  // Pass level.
  kCompute,       // the part `part` of the chunk for the pass's micro-batch (unit: see Part)
  kFetch,         // offloaded ZeRO-3 parameters: the unit's shard starts up
  kGather,        // ZeRO-3: all-gather the unit's parameters (after its fetch)
  kRelease,       // ZeRO-3: free the unit's gathered parameters
  kSumNormGrads,  // sequence parallel: the unit's LayerNorm gradients summed over TP
  kSumKvGrads,    // KV heads replicated over TP: the layer's K|V gradients summed over copies
  kReduceGrads,   // DP: all-reduce (ZeRO 0/1) or reduce-scatter (2/3) the unit's gradients
  kOffloadGrads,  // the unit's reduced gradient shard goes down to the host / NVMe
  // Step level: the tail.
  kTiedEmbeddingSum,  // p > 1: the unit's wte gradient summed over the first and last stage
  kGradNorm,          // the global gradient norm (sums of squares summed over the world)
  kOptimizerStep,     // AdamW on the unit's part
  kGatherParams,      // ZeRO-1/2: the unit's updated parameters all-gathered over DP
};
inline constexpr int kProgramOpKindCount = 18;
// Names shared by the executor's and the simulator's traces: "forward", "backward",
// "recv_forward", "send_forward", "recv_backward", "send_backward", "compute", "fetch",
// "gather", "release", "sum_norm_grads", "sum_kv_grads", "reduce_grads", "offload_grads",
// "tied_embedding_sum", "grad_norm", "optimizer_step", "gather_params".
std::string to_string(ProgramOpKind kind);

// The Program's kind of a schedule op (make_schedule's pipeline ops are the Program's step
// ops).
ProgramOpKind program_kind(OpKind kind);

// What a compute step computes. Its unit: the embedding, the layer, and for the head the
// final LayerNorm (the head also reads the wte of the embedding or of the tied copy).
enum class Part : std::uint8_t { kNone, kEmbedding, kLayer, kHead };

struct ProgramOp {
  static constexpr int kMaxAfter = 3;

  ProgramOpKind kind = ProgramOpKind::kForward;
  Stream stream = Stream::kCompute;
  Part part = Part::kNone;     // kCompute only
  DType message_dtype = DType::kF32;  // messages: the element type (ProgramOptions)
  std::int32_t micro_batch = -1;  // passes and messages
  std::int32_t chunk = -1;        // passes and messages: the local chunk
  std::int32_t peer = -1;         // messages: the pipeline rank on the other side
  std::int32_t unit = -1;         // index into RankProgram::units
  std::int32_t body = -1;         // passes: index into RankProgram::bodies
  // Ops of the same list that must be complete before this one starts (-1: none).
  std::array<std::int32_t, kMaxAfter> after{-1, -1, -1};
  // Receives (p > 1): this rank's first N forward / backward sends of the step (in list
  // order) are complete once this receive has returned ("Send completion" above).
  std::int32_t forward_sends_complete = 0;
  std::int32_t backward_sends_complete = 0;
  // Messages: the activation (forward) or its gradient (backward) of ONE sequence of the
  // micro-batch on this TP rank, (rows, width). A message is micro_batch such blocks
  // (message_elements): per sequence because a Program is shared by every micro-batch size
  // (program_plan), and 32-bit (seq_len and hidden each fit) to keep ProgramOp small.
  std::int32_t message_rows = 0;
  std::int32_t message_width = 0;

  bool operator==(const ProgramOp&) const = default;
  bool is_pass() const { return kind == ProgramOpKind::kForward || kind == ProgramOpKind::kBackward; }
  bool is_message() const;
  void add_after(std::int32_t index);  // std::logic_error when full
};

struct PassBody {
  bool forward = true;
  std::int32_t chunk = 0;
  bool reduces = false;  // a backward body that also reduces the gradients it completes
  std::vector<ProgramOp> ops;
};

struct ProgramUnit {
  std::string name;        // "embedding", "layer3", "wte_copy", "final_norm"
  UnitKind kind = UnitKind::kLayer;
  std::int64_t layer = -1;
  std::int32_t chunk = 0;  // the local chunk whose passes use it (partition.h: unit_chunk)
  std::int64_t params = 0; // on one TP rank, unpadded
};

struct RankProgram {
  std::int64_t pp_rank = 0;
  std::vector<ProgramUnit> units;  // partition.h's order
  std::vector<PassBody> bodies;
  std::vector<ProgramOp> ops;      // the step: pipeline ops, then the tail
  std::int32_t tail_begin = 0;     // index of the first tail op in `ops`
  // The tail's ops from here on are carried into the next step ("carried" above); -1 when
  // none is. Each carried op is a host optimizer step of its unit.
  std::int32_t carried_begin = -1;
  // Where the next step waits for a carried unit's update: before body op `body_op` of the
  // pass at step op `op` (the first op of the step that names the unit).
  struct CarriedWait {
    std::int32_t unit = -1, op = -1, body_op = -1;
    bool operator==(const CarriedWait&) const = default;
  };
  std::vector<CarriedWait> carried_waits;

  bool carries() const { return carried_begin >= 0; }
  // The first carried op's index in the tail (the tail's length when none is).
  std::size_t first_carried_in_tail() const {
    return static_cast<std::size_t>((carries() ? carried_begin : static_cast<std::int32_t>(ops.size())) -
                                    tail_begin);
  }

  std::int32_t unit_index(const std::string& name) const;  // -1 when absent
};

// `strata run --prefetch-depth`'s default (and predict's): what the engine fetches ahead.
inline constexpr int kDefaultPrefetchDepth = 2;

struct ProgramOptions {
  // Offloaded ZeRO-3 parameters: a unit's shard is fetched this many compute steps before
  // the step that uses it (`strata run --prefetch-depth`); 1 fetches right before the
  // gather (no prefetch). >= 1.
  int prefetch_distance = kDefaultPrefetchDepth;
  // Published conventions (Megatron with DeepSpeed ZeRO-3): the recomputed forward is a
  // pass of its own, so under ZeRO-3 with full recomputation a layer is gathered twice in
  // backward: once prefetched a step ahead, once on demand right before its compute (issued
  // before the next layer's prefetch, which then runs under the compute). strata's engine
  // recomputes inside the layer's backward with one gather.
  bool recompute_regathers = false;
  // The backend's wte shard padding (partition.h: vocab_row_alignment): the units' sizes.
  std::int64_t vocab_row_alignment = 1;
  // The backend's compute dtype (Backend::compute_dtype), in which the pipeline messages
  // move both ways: bf16 on the CUDA backend (what a plan is for), fp32 on the CPU backend.
  DType message_dtype = DType::kBF16;
  // The backend runs host work beside the device's (BackendFacts::host_optimizer_in_backward):
  // where the train spec clips nothing, the host optimizer steps layers in the backward.
  bool host_optimizer_in_backward = false;
  // The backend runs host-memory-only host steps beside the device's
  // (BackendFacts::host_steps_carried): with clipping, the tail's are carried into the next
  // step (host_optimizer_carried).
  bool host_steps_carried = false;
};

// The one maker of a Program's options, for the engine that replays it, `strata run`'s
// deadlock check, predict and the memory walk alike: from the backend that runs it (its
// facts: the wte padding, the dtype messages move in), the kernel conventions it is priced
// with (strata's executor: executor_conventions(backend); a published framework's:
// recompute_regathers) and the run's --prefetch-depth.
ProgramOptions program_options(const BackendFacts& backend, const KernelConventions& conventions,
                               int prefetch_depth = kDefaultPrefetchDepth);
// strata's executor on `backend`: what the engine replays.
ProgramOptions executor_program_options(Backend backend, int prefetch_depth = kDefaultPrefetchDepth);

struct Program {
  Plan plan;
  std::int64_t micro_batches = 0;
  ProgramOptions options;
  std::vector<RankProgram> ranks;  // [pp_rank]
};

// The Program of one pipeline rank (what the executor needs) or of all of them. Throws
// InfeasiblePlan when the plan does not fit the model and the global batch
// (Plan::check_against_model) and ConfigError for bad options.
// The plan as a rank's Program reads it: every field that cannot change the Program set to
// one value (dp and micro_batch: only the micro-batch count m matters; ZeRO 1 and 2 alike
// unless gradients are offloaded; an offload tier read only as offloaded or not, parameters
// only at ZeRO-3, gradients only from ZeRO-2; recomputation only where the options regather).
// make_rank_program builds from it, so plans with one program_plan and one m have one
// Program: the key of RankProgramCache (rank_program_cache.h).
Plan program_plan(const Plan& plan, const ProgramOptions& options);

// Whether the host optimizer steps each layer inside the backward (program.h, "optimizer"):
// the backend runs host work beside the device's (options.host_optimizer_in_backward), the
// optimizer state is offloaded and the train spec clips no gradients (with clipping, every
// step waits for the global norm). RankProgramCache keys on it.
bool optimizer_in_backward(const Plan& plan, const TrainSpec& train, const ProgramOptions& options);

// Whether the tail's host optimizer steps are carried into the next step (program.h,
// "carried"): the backend runs host-memory-only host work beside the device's
// (options.host_steps_carried), they do not run in the backward (optimizer_in_backward:
// the train spec clips, or the backend cannot run a layer's step there: CUDA), and the optimizer state, the gradients and the ZeRO-3
// parameters are all in host memory (not NVMe: its one io_uring engine is the issuing
// thread's), so that a unit's update touches nothing the next step's device work reads
// before the unit's fetch. RankProgramCache keys on it.
bool host_optimizer_carried(const Plan& plan, const TrainSpec& train, const ProgramOptions& options);

// `pipelines`: where the schedule's part is reused from (rank_pipeline_ops.h); made afresh
// when null.
class RankPipelineOpsCache;
RankProgram make_rank_program(const ModelSpec& model, const TrainSpec& train, const Plan& plan,
                              std::int64_t pp_rank, const ProgramOptions& options = {},
                              RankPipelineOpsCache* pipelines = nullptr);
Program make_program(const ModelSpec& model, const TrainSpec& train, const Plan& plan,
                     const ProgramOptions& options = {});

// The tag of a pipeline message: its micro-batch, the virtual stage that receives it and
// its direction (0 forward, 1 backward), unique within a step. The engine's send and
// receive (executor/engine/engine.cc) and the Program's deadlock check (program_check.h)
// both name a message by it.
std::int64_t pipeline_message_tag(std::int64_t pp, std::int64_t virtual_stages,
                                  std::int64_t micro_batch, std::int64_t receiver_vstage,
                                  bool forward);

// The elements of a message op of a plan with `micro_batch` sequences per micro-batch:
// micro_batch x message_rows x message_width (what the engine sends and receives).
std::int64_t message_elements(const ProgramOp& op, std::int64_t micro_batch);

// "(4096, 768) bf16": a message's whole shape and dtype, for faults and describe.
std::string message_shape(const ProgramOp& op, std::int64_t micro_batch);

// The largest number of (micro-batch, chunk) forwards whose activations a rank holds at
// once: forwards done minus backwards done, walking the rank's step ops.
std::int64_t max_in_flight(const RankProgram& rank);

// One line per op ("3 forward mb=1 chunk=0 body=0 after=[2]"; body ops indented under their
// pass), for tests and debugging.
std::string describe(const RankProgram& rank);

}  // namespace strata
