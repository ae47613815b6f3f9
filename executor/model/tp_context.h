// What the model's layers need to know about their tensor-parallel group and their
// dimensions on this rank, plus the timed collectives they call at Megatron's f/g points
// (all-reduce; with sequence parallelism all-gather and reduce-scatter over token rows).
// Deliberately not here: pipeline or data parallelism (the engine owns those).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "cost_model/specs/model_spec.h"
#include "executor/comm/communicator.h"
#include "kernels/dtype.h"
#include "kernels/rope_frequency.h"

namespace strata::model {

// Sizes of one micro-batch on one TP rank. "l" = local (per TP rank).
struct Dims {
  int B = 1;      // sequences per micro-batch
  int T = 1;      // sequence length
  int C = 1;      // hidden
  int F = 1;      // ffn hidden
  int NH = 1;     // heads
  int V = 1;      // vocabulary
  int t = 1;      // TP degree
  int tp_rank = 0;
  int Cl = 1;     // C / t (attention width on this rank)
  int NHl = 1;    // NH / t
  int Fl = 1;     // F / t
  int Vshard = 1; // wte rows stored on this rank: ceil(V / t), padded to the alignment
  int v0 = 0;     // first vocabulary id of this rank's shard: tp_rank ceil(V / t)
  int Vvalid = 1; // real (non-padding) rows of the shard
  int HS = 1;     // head size C / NH
  int KVH = 1;    // key/value heads (= NH without grouped-query attention)
  int KVHl = 1;   // KVH / t, or 1 when t > KVH: the KV heads of this rank's query heads
  // The family's choices the layers dispatch on (ModelSpec's, see there).
  NormKind norm = NormKind::kLayerNorm;
  float norm_eps = 1e-5f;  // RMSNorm's; the LayerNorm kernels keep GPT-2's 1e-5
  MlpKind mlp = MlpKind::kGelu;
  PositionKind position = PositionKind::kLearned;
  kernels::RopeFrequencies rope;  // theta and rope_scaling (kernels/rope_frequency.h)
  // Sequence parallelism (Korthikanti et al. 2022): outside the TP region (LayerNorms,
  // residuals, the pipeline messages) this rank holds token rows [tp_rank R, (tp_rank+1) R)
  // of the (B*T, C) activations, R = BT / t: the flattened (batch, sequence) rows, so with
  // B = 1 exactly Megatron's sequence split; the bytes are the same for any B.
  bool sp = false;
  int BT() const { return B * T; }
  std::int64_t act() const { return static_cast<std::int64_t>(B) * T * C; }  // (B, T, C)
  // Token rows this rank holds outside the TP region: BT / t with SP, else BT.
  int rows() const { return sp ? BT() / t : BT(); }
  std::int64_t act_local() const { return static_cast<std::int64_t>(rows()) * C; }  // (rows, C)
  // A row of the attention input on this rank: [q (NHl HS) | k (KVHl HS) | v (KVHl HS)].
  int qkv_width() const { return Cl + 2 * KVHl * HS; }
  // A row of fc1's output: F / t, or SwiGLU's [gate | up] 2 F / t.
  int fc1_width() const { return mlp == MlpKind::kSwiglu ? 2 * Fl : Fl; }
};

// sequence_parallel: the rule of cost_model/specs/partition.h (InfeasiblePlan otherwise).
// cost_model/specs/backend_facts.h's executor_family_violation: InfeasiblePlan with its reason.
// vocab_row_alignment: the backend's wte shard padding (partition.h): Vshard = the padded
// rows, Vvalid the real ones.
Dims make_dims(const ModelSpec& model, std::int64_t micro_batch, std::int64_t tp,
               std::int64_t tp_rank, bool sequence_parallel = false,
               std::int64_t vocab_row_alignment = 1);

// The TP group and the seconds spent in its collectives (accumulated for the report; on a
// backend whose collectives are asynchronous this is the time to issue them). Activations
// move in the compute dtype given at construction; the loss statistics in fp32.
class TpContext {
 public:
  TpContext(Communicator& comm, DType activations) : comm_(&comm), dtype_(activations) {}
  int size() const { return comm_->size(); }
  int rank() const { return comm_->rank(); }
  DType dtype() const { return dtype_; }
  // Activations: in place, the sum over the group.
  void all_reduce_sum(void* data, std::int64_t n) { timed([&] { comm_->all_reduce_sum(data, n, dtype_); }); }
  // in: (n) this rank's rows; out: (t, n) every rank's rows in rank order.
  void all_gather(const void* in, void* out, std::int64_t n) {
    timed([&] { comm_->all_gather(in, out, n, dtype_); }, /*single_is_identity=*/false);
  }
  // in: (t, n) partial sums; out: (n) = the sum over ranks of in's row block tp_rank.
  void reduce_scatter_sum(const void* in, void* out, std::int64_t n) {
    timed([&] { comm_->reduce_scatter_sum(in, out, n, dtype_); }, /*single_is_identity=*/false);
  }
  // fp32 statistics (loss, LayerNorm gradients under sequence parallelism).
  void all_reduce_sum_f32(float* data, std::int64_t n) {
    timed([&] { comm_->all_reduce_sum(data, n, DType::kF32); });
  }
  void all_reduce_max_f32(float* data, std::int64_t n) {
    timed([&] { comm_->all_reduce_max(data, n, DType::kF32); });
  }
  double comm_seconds() const { return seconds_; }
  void reset_seconds() { seconds_ = 0; }

 private:
  // A group of one has nothing to exchange: a sum or max over it is the input (a gather or
  // scatter over it still copies in to out, which the communicator does).
  template <class F>
  void timed(F&& f, bool single_is_identity = true) {
    if (single_is_identity && comm_->size() == 1) return;
    const auto t0 = std::chrono::steady_clock::now();
    f();
    seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  Communicator* comm_;
  DType dtype_;
  double seconds_ = 0;
};

}  // namespace strata::model
