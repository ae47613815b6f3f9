// The executor's device memory walked through a rank's Program (see program_memory.h).
#include "cost_model/program_memory.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

namespace strata {
namespace {

using Kind = ProgramOpKind;

class Walk {
 public:
  Walk(const RankProgram& rank, const ExecutorMemoryTerms& t) : rank_(rank), t_(t) {
    const std::size_t units = rank.units.size();
    for (const auto* v : {&t.unit_grads, &t.unit_shard, &t.unit_gather, &t.unit_fetch}) {
      if (v->size() != units) {
        throw std::invalid_argument(fmt::format(
            "program memory: {} per-unit sizes for {} units", v->size(), units));
      }
    }
    touched_.assign(units, false);
    gathered_.assign(units, 0);
    fetched_.assign(units, 0);
    live_ = t.persistent + t.losses;
    observe(nullptr, 0);
  }

  ProgramMemoryPeak run() {
    for (std::int32_t i = 0; i < rank_.tail_begin; ++i) step_op(rank_.ops[static_cast<std::size_t>(i)]);
    // The executor completes its sends at the end of the pipeline.
    add_activation(-static_cast<double>(sends_) * t_.message);
    sends_ = 0;
    for (std::size_t i = static_cast<std::size_t>(rank_.tail_begin); i < rank_.ops.size(); ++i) {
      const ProgramOp& op = rank_.ops[i];
      pipeline_op_ = nullptr;
      in_tail_ = true;
      state_move(op, false);
    }
    return peak_;
  }

 private:
  void add_activation(double bytes) {
    live_ += bytes;
    activations_ += bytes;
  }
  void add_grads(double bytes) {
    live_ += bytes;
    step_grads_ += bytes;
  }
  // A moment at which `extra` transient bytes are live on top of what is held, during `op`
  // (nullptr: the step's start, or the pipeline op itself). The label is built only when the
  // peak rises: building one per op made a walk of 8192 micro-batches take 30 s.
  void observe(const ProgramOp* op, double extra) {
    if (live_ + extra <= peak_.peak_bytes) return;
    peak_.peak_bytes = live_ + extra;
    peak_.peak_at = op != nullptr ? label(*op) : where();
    peak_.activations_at_peak = activations_ + extra;
    peak_.step_gradients_at_peak = step_grads_;
  }
  // Where the walk is: the pipeline op ("forward mb=3 chunk=0"), the tail, or the start.
  std::string where() const {
    if (pipeline_op_ != nullptr) {
      return fmt::format("{} mb={} chunk={}", to_string(pipeline_op_->kind),
                         pipeline_op_->micro_batch, pipeline_op_->chunk);
    }
    return in_tail_ ? "tail" : "the step's start";
  }
  std::string label(const ProgramOp& op) const {
    std::string s = to_string(op.kind);
    if (op.unit >= 0) s += " " + rank_.units[static_cast<std::size_t>(op.unit)].name;
    return where() + ": " + s;
  }
  void touch_grads(std::int32_t unit) {
    const auto u = static_cast<std::size_t>(unit);
    if (!t_.transient_grads || touched_[u]) return;
    touched_[u] = true;
    add_grads(t_.unit_grads[u]);
  }

  void step_op(const ProgramOp& op) {
    pipeline_op_ = &op;
    switch (op.kind) {
      case Kind::kRecvForward:
      case Kind::kRecvBackward: add_activation(t_.message); observe(nullptr, 0); return;
      case Kind::kSendForward:
      case Kind::kSendBackward: ++sends_; return;
      case Kind::kForward:
      case Kind::kBackward: pass(op); return;
      default: throw std::logic_error("program memory: " + to_string(op.kind) + " in the pipeline");
    }
  }

  void pass(const ProgramOp& op) {
    const PassBody& body = rank_.bodies[static_cast<std::size_t>(op.body)];
    bool first = false, last = false;
    for (const ProgramOp& b : body.ops) {
      first = first || b.part == Part::kEmbedding;
      last = last || b.part == Part::kHead;
    }
    if (body.forward) {
      // The micro-batch's token ids (first stage) and targets (last stage) come up.
      add_activation((first ? t_.tokens : 0) + (last ? t_.tokens : 0));
    }
    for (const ProgramOp& b : body.ops) {
      if (b.kind == Kind::kCompute) {
        compute(b, body.forward);
      } else {
        state_move(b, true);
      }
    }
    if (!body.forward && first) add_activation(-t_.message - t_.tokens);  // the gradient, the ids
  }

  void compute(const ProgramOp& op, bool forward) {
    const ProgramOp* what = &op;
    switch (op.part) {
      case Part::kEmbedding:
        if (forward) {
          observe(what, t_.embedding_working);
          add_activation(t_.message);
        } else {
          touch_grads(op.unit);
          observe(what, t_.embedding_working);
        }
        return;
      case Part::kLayer:
        if (forward) {
          add_activation(t_.layer_saved + t_.message);
          observe(what, 0);
        } else {
          touch_grads(op.unit);
          observe(what, t_.layer_backward_peak - t_.layer_saved);
          add_activation(-t_.layer_saved - t_.message);  // its saved tensors and its input
        }
        return;
      case Part::kHead: {
        if (forward) {
          // The tied wte's gradient gets the logits' share during the head's forward.
          const std::int32_t wte = rank_.unit_index(rank_.unit_index("embedding") >= 0 ? "embedding" : "wte_copy");
          touch_grads(wte);
          add_activation(t_.head_saved);
          observe(what, t_.head_working);
          add_activation(-t_.tokens);  // the targets
        } else {
          touch_grads(op.unit);
          add_activation(t_.message);  // the gradient that flows down the chunk
          observe(what, 0);
          add_activation(-t_.head_saved - t_.message);  // its saved tensors and lnf_in
        }
        return;
      }
      case Part::kNone: break;
    }
    throw std::logic_error("program memory: a compute op with no part");
  }

  void state_move(const ProgramOp& op, bool in_pass) {
    const ProgramOp* what = &op;
    const auto u = static_cast<std::size_t>(op.unit < 0 ? 0 : op.unit);
    switch (op.kind) {
      case Kind::kFetch:
        ++fetched_[u];
        add_activation(t_.unit_fetch[u]);
        observe(what, 0);
        return;
      case Kind::kGather:
        if (gathered_[u]++ == 0) add_activation(t_.unit_gather[u]);
        observe(what, 0);
        if (fetched_[u] > 0) {  // the fetched shard is consumed by the gather
          --fetched_[u];
          add_activation(-t_.unit_fetch[u]);
        }
        return;
      case Kind::kRelease:
        if (--gathered_[u] == 0) add_activation(-t_.unit_gather[u]);
        return;
      case Kind::kReduceGrads:
        if (t_.offloaded_grads) {
          add_activation(t_.unit_shard[u]);
          observe(what, 0);
        }
        if (t_.transient_grads && touched_[u]) {
          touched_[u] = false;
          add_grads(-t_.unit_grads[u]);
        }
        return;
      case Kind::kOffloadGrads:
        add_activation(-t_.unit_shard[u]);
        return;
      case Kind::kSumNormGrads:
      case Kind::kTiedEmbeddingSum:
      case Kind::kGradNorm:
        observe(what, 0);
        return;
      case Kind::kOptimizerStep:
      case Kind::kGatherParams:
        observe(what, t_.optimizer_working);
        return;
      default: break;
    }
    (void)in_pass;
    throw std::logic_error("program memory: " + to_string(op.kind) + " is not a state move");
  }

  const RankProgram& rank_;
  const ExecutorMemoryTerms& t_;
  double live_ = 0, activations_ = 0, step_grads_ = 0;
  std::int64_t sends_ = 0;
  std::vector<bool> touched_;
  std::vector<int> gathered_, fetched_;
  const ProgramOp* pipeline_op_ = nullptr;  // the pipeline op being walked; nullptr in the tail
  bool in_tail_ = false;
  ProgramMemoryPeak peak_;
};

}  // namespace

ProgramMemoryPeak walk_program_memory(const RankProgram& rank, const ExecutorMemoryTerms& terms) {
  return Walk(rank, terms).run();
}

}  // namespace strata
