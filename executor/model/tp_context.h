// What the model's layers need to know about their tensor-parallel group and their
// dimensions on this rank, plus the timed collectives they call at Megatron's f/g points
// (all-reduce; with sequence parallelism all-gather and reduce-scatter over token rows).
// Deliberately not here: pipeline or data parallelism (the engine owns those).
#pragma once

#include <chrono>
#include <cstdint>

#include "cost_model/model_spec.h"
#include "executor/comm/communicator.h"

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
  int Vshard = 1; // wte rows stored on this rank: ceil(V / t)
  int v0 = 0;     // first vocabulary id of this rank's shard
  int Vvalid = 1; // real (non-padding) rows of the shard
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
};

// sequence_parallel: the rule of cost_model/partition.h (InfeasiblePlan otherwise).
Dims make_dims(const ModelSpec& model, std::int64_t micro_batch, std::int64_t tp,
               std::int64_t tp_rank, bool sequence_parallel = false);

// The TP group and the seconds spent in its collectives (accumulated for the report).
class TpContext {
 public:
  explicit TpContext(Communicator& comm) : comm_(&comm) {}
  int size() const { return comm_->size(); }
  int rank() const { return comm_->rank(); }
  void all_reduce_sum(float* data, std::int64_t n) { timed([&] { comm_->all_reduce_sum(data, n); }); }
  void all_reduce_max(float* data, std::int64_t n) { timed([&] { comm_->all_reduce_max(data, n); }); }
  // in: (n) this rank's rows; out: (t, n) every rank's rows in rank order. A group of one
  // copies.
  void all_gather(const float* in, float* out, std::int64_t n);
  // in: (t, n) partial sums; out: (n) = the sum over ranks of in's row block tp_rank. A
  // group of one copies.
  void reduce_scatter_sum(const float* in, float* out, std::int64_t n);
  double comm_seconds() const { return seconds_; }
  void reset_seconds() { seconds_ = 0; }

 private:
  template <class F>
  void timed(F&& f) {
    if (comm_->size() == 1) return;  // a group of one: the sum is the input
    const auto t0 = std::chrono::steady_clock::now();
    f();
    seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  Communicator* comm_;
  double seconds_ = 0;
};

}  // namespace strata::model
