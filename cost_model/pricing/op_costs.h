// The price of every op of a Program from the time model's primitives (compute_model.h,
// collectives.h, time_model.h): the OpCosts the simulator replays (program_simulator.h).
// Each op is priced alone, as if nothing ran beside it; what hides behind what is not
// decided here but emerges from replaying the Program's streams.
//
// Per op, for one micro-batch on one TP rank (b sequences of s tokens, hidden h, c bytes
// per element in the compute precision, g bytes per gradient element in its reductions: 4,
// fp32, in strata's engine (backend_facts.h), c under published conventions that reduce in
// the parameters' dtype (LayerKernels::fp32_gradient_reductions), n a unit's parameters on
// one TP rank, the DP group d ranks t apart):
//   compute, a layer       forward: layer_forward + 12 kernel overheads (a Profile's
//                          op_overhead_s); TP: 2 all-reduces of s b h c over t (Megatron's f
//                          and g; with SP an all-gather and a reduce-scatter each, the same
//                          bus bytes). Backward: 2x the forward without a Profile, else each
//                          op's backward at its own measured shape and rate (24 overheads),
//                          plus the recomputation (full: the forward again, up to the GeLU
//                          output on the CPU backend; selective: the attention core); TP: 2
//                          all-reduces, plus the recomputation's 2 (1 when it stops before
//                          fc2). Split into forward_s / backward_s, recompute_s, tp_comm_s.
//   compute, the embedding forward: embedding_forward_s, and with t > 1 the all-reduce of
//                          its vocab-parallel output; backward: 2x its forward.
//   compute, the head      forward: the logits, the loss and, as the Program's head step
//                          does, the logits' backward (head_backward_s: 2x the forward
//                          without a Profile), with t > 1 the all-reduce of the input
//                          gradient; backward (the final LayerNorm's backward, whose bytes
//                          head_backward_s already counts): 0.
//   gather                 all-gather of n c over the DP group               dp_comm_s
//   reduce_grads           all-reduce (ZeRO 0/1) or reduce-scatter (2/3) of n g
//                          over the DP group                                  dp_comm_s
//   sum_norm_grads         all-reduce over TP of the unit's LayerNorm gradients (4h a
//                          layer, 2h the final norm), g bytes each           tp_comm_s
//   sum_kv_grads           all-reduce of a layer's K|V weight (and bias) shard, g bytes an
//                          element, over the t / kv_heads TP ranks sharing it  tp_comm_s
//   fetch, offload_grads   unit_offload_bytes' fetch and grads_down over the
//                          offload links                                      offload_s
//   release                0 (a free)
//   send                   p2p_transfer                                       pp_comm_s
//   tied_embedding_sum     all-reduce of the wte shard (ceil(V/t) h g) over the first and
//                          last stage (2 ranks, t d (p-1) apart)              dp_comm_s
//   grad_norm              all-reduce of one fp32 sum of squares over the world (t p d
//                          ranks, stride 1): latency only                     dp_comm_s
//   optimizer_step         device: device_optimizer_s of the unit's part (n/d at ZeRO >= 1,
//                          else n) -> optimizer_s, and unit_offload_bytes' optimizer transfers
//                          -> offload_s. Host (optimizer state offloaded, ZeRO-Offload's CPU
//                          AdamW): cpu_optimizer_s -> optimizer_s; the gradients down and the
//                          updated parameters up -> offload_s, and the NVMe reads and writes
//                          of m, v (and the master params) pipelined with the CPU step in
//                          chunks (ZeRO-Infinity's overlap-centric design): only their excess
//                          over the CPU step -> offload_s.
//   gather_params          ZeRO-1/2: all-gather of n c over the DP group     dp_comm_s
// The bytes of fetches, gradient offloads and optimizer steps are unit_offload_bytes': summed
// over a step's ops they are offload_traffic's (tested), what the executor moves.
//
// Deliberately not here: the Program (which ops, in which order: program.h), the replay
// (program_simulator.h), link contention between concurrent ops.
#pragma once

#include <cstdint>

#include "cost_model/program/program.h"
#include "cost_model/program/program_simulator.h"
#include "cost_model/pricing/time_model.h"

namespace strata {

class TimeModelCosts final : public OpCosts {
 public:
  // Keeps a reference to `ctx` (and through it to the specs): they must outlive this.
  explicit TimeModelCosts(const TimeContext& ctx);

  StepTimeParts compute(const RankProgram& rank, Part part, std::int32_t unit,
                        bool forward) const override;
  StepTimeParts state_move(const RankProgram& rank, ProgramOpKind kind,
                           std::int32_t unit) const override;
  StepTimeParts transfer(const RankProgram& rank, ProgramOpKind kind,
                         std::int32_t chunk) const override;
  StepTimeParts tail(const RankProgram& rank, const ProgramOp& op) const override;

  // What a fetch, an offload_grads or an optimizer step of `unit` moves over PCIe and NVMe
  // (empty for any other op kind).
  TransferBytes offload_bytes(const RankProgram& rank, ProgramOpKind kind, std::int32_t unit) const;

 private:
  double dp_collective_s(CollectiveOp op, double bytes) const;
  // A gradient element's bytes in its reductions (LayerKernels::fp32_gradient_reductions).
  double gradient_bytes() const;
  StepTimeParts optimizer_step(const ProgramUnit& unit) const;

  const TimeContext& ctx_;
  // Per micro-batch on one TP rank, computed once.
  double layer_forward_s_ = 0, layer_backward_s_ = 0, layer_recompute_s_ = 0;
  TpLayerComm tp_;
  double tp_one_s_ = 0;  // one all-reduce of s b h c over TP
  double embedding_forward_s_ = 0;
  double head_forward_s_ = 0, head_backward_s_ = 0;
  double p2p_s_ = 0;
};

}  // namespace strata
