// The executor's device memory walked through a rank's Program (see program_memory.h).
#include "cost_model/memory/program_memory.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

#include <boost/container/small_vector.hpp>
#include <fmt/format.h>

namespace strata {
namespace {

using Kind = ProgramOpKind;

// Whether every byte size is a whole number small enough that sums of them are exact in a
// double (below 2^53 with room for a step's worth of them): then the walk's running totals
// do not depend on the order the terms are added in, and a pass may be applied as its
// recorded sums (PassEffect) with bitwise the result of walking it op by op.
bool exact_in_double(const ExecutorMemoryTerms& t) {
  constexpr double kLimit = 0x1p40;  // 1 TiB a term; 2^13 of them stay below 2^53
  auto whole = [](double x) { return x >= 0 && x <= kLimit && std::trunc(x) == x; };
  for (double x : {t.persistent, t.losses, t.message, t.tokens, t.layer_saved, t.layer_backward_peak,
                   t.layer_forward_extra, t.head_backward_working, t.setup_peak, t.head_saved,
                   t.head_working, t.embedding_working, t.optimizer_working}) {
    if (!whole(x)) return false;
  }
  for (const auto* v : {&t.unit_grads, &t.unit_shard, &t.unit_gather, &t.unit_fetch}) {
    if (!std::all_of(v->begin(), v->end(), whole)) return false;
  }
  return true;
}

// Where the walk observed a moment: the pipeline op being walked (nullptr: the step's start or
// the tail) and the op within it. The peak's label is built from it once, at the end.
struct Place {
  const ProgramOp* pipeline_op = nullptr;
  const ProgramOp* op = nullptr;
  bool in_tail = false;
  bool in_setup = false;
};

// What the walk knows of each unit: whether its step gradient is held (ZeRO-2/3: touched
// and not yet reduced), how often it is gathered and how many fetched shards wait for it.
// Inline capacity for a rank's units (a 1T model's 128 layers over 8 stages is 16 plus the
// embedding and head's): the planner walks tens of thousands of Programs, recording each
// pass body's start and end state, and heap vectors here were a twentieth of a plan search.
struct UnitState {
  boost::container::small_vector<std::uint64_t, 4> touched;  // a bit per unit
  boost::container::small_vector<int, 40> gathered, fetched;
  std::int64_t outstanding = 0;        // the sum of gathered and fetched

  bool is_touched(std::size_t u) const { return (touched[u / 64] >> (u % 64)) & 1U; }
  void set_touched(std::size_t u, bool on) {
    const std::uint64_t bit = std::uint64_t{1} << (u % 64);
    touched[u / 64] = on ? (touched[u / 64] | bit) : (touched[u / 64] & ~bit);
  }
  // Nothing outstanding on both sides means every count is 0 on both: no need to compare.
  bool same_as(const UnitState& o) const {
    if (outstanding != o.outstanding || touched != o.touched) return false;
    return outstanding == 0 || (gathered == o.gathered && fetched == o.fetched);
  }
  void assign(const UnitState& o) {
    touched = o.touched;
    if (outstanding != 0 || o.outstanding != 0) {
      gathered = o.gathered;
      fetched = o.fetched;
    }
    outstanding = o.outstanding;
  }
};

// What one walk of a pass did, relative to where it started: enough to apply the pass again
// without walking its ops, when it starts in the same state (see Walk::pass).
struct PassEffect {
  bool valid = false;
  UnitState start, end;  // the units' state before and after it
  double live = 0, activations = 0, step_grads = 0;  // the pass's net change of each
  // Its highest moment: live + extra there, relative to the start, the activations and step
  // gradients then (relative), and the first op reaching it.
  double high = -std::numeric_limits<double>::infinity(), high_activations = 0, high_step_grads = 0;
  const ProgramOp* high_op = nullptr;
};

class Walk {
 public:
  Walk(const RankProgram& rank, const ExecutorMemoryTerms& t, const WalkOptions& options)
      : rank_(rank), t_(t), shift_(options.micro_batch_shift) {
    const bool reuse_passes = options.reuse_passes;
    if (options.shift_from_pass >= 0) shift_from_ = first_op_of_pass(options.shift_from_pass);
    const std::size_t units = rank.units.size();
    for (const auto* v : {&t.unit_grads, &t.unit_shard, &t.unit_gather, &t.unit_fetch}) {
      if (v->size() != units) {
        throw std::invalid_argument(fmt::format(
            "program memory: {} per-unit sizes for {} units", v->size(), units));
      }
    }
    units_.touched.assign((units + 63) / 64, 0);
    units_.gathered.assign(units, 0);
    units_.fetched.assign(units, 0);
    effects_.resize(rank.bodies.size());
    reuse_ = reuse_passes && exact_in_double(t);
    // The output layer whose gradient the head's forward touches: the untied one, else the
    // tied wte (the embedding, or its copy on the last stage).
    const std::int32_t untied = rank.unit_index("output");
    output_layer_ = untied >= 0 ? untied
                                : rank.unit_index(rank.unit_index("embedding") >= 0 ? "embedding"
                                                                                   : "wte_copy");
    live_ = t.persistent;
    if (t.setup_peak > live_) {  // the set-up's transient above the state it leaves placed
      place_.in_setup = true;
      observe(nullptr, t.setup_peak - live_);
      place_.in_setup = false;
    }
    live_ = t.persistent + t.losses;
    observe(nullptr, 0);
  }

  ProgramMemoryPeak run() {
    for (std::int32_t i = 0; i < rank_.tail_begin; ++i) step_op(rank_.ops[static_cast<std::size_t>(i)]);
    // The executor completes the sends no receive proved complete at the end of the pipeline.
    add_activation(-static_cast<double>(pending_[0] + pending_[1]) * t_.message);
    pending_ = {0, 0};
    for (std::size_t i = static_cast<std::size_t>(rank_.tail_begin); i < rank_.ops.size(); ++i) {
      place_ = {nullptr, nullptr, true};
      state_move(rank_.ops[i], false);
    }
    peak_.peak_at = label(peak_place_);
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
  // (nullptr: the step's start, or the pipeline op itself).
  void observe(const ProgramOp* op, double extra) {
    if (recording_ != nullptr && live_ + extra - pass_start_.live > recording_->high) {
      recording_->high = live_ + extra - pass_start_.live;
      recording_->high_activations = activations_ + extra - pass_start_.activations;
      recording_->high_step_grads = step_grads_ - pass_start_.step_grads;
      recording_->high_op = op;
    }
    if (live_ + extra <= peak_.peak_bytes) return;
    peak_.peak_bytes = live_ + extra;
    peak_.activations_at_peak = activations_ + extra;
    peak_.step_gradients_at_peak = step_grads_;
    peak_place_ = place_;
    peak_place_.op = op;
  }
  // "forward mb=3 chunk=0: compute layer5", "tail: optimizer_step layer2", "the step's start".
  std::string label(const Place& at) const {
    if (at.in_setup) return "set-up";
    std::string where = at.in_tail ? "tail" : "the step's start";
    if (at.pipeline_op != nullptr) {
      const bool shifted = at.pipeline_op - rank_.ops.data() >= shift_from_;
      where = fmt::format("{} mb={} chunk={}", to_string(at.pipeline_op->kind),
                          at.pipeline_op->micro_batch + (shifted ? shift_ : 0), at.pipeline_op->chunk);
    }
    if (at.op == nullptr) return where;
    std::string s = to_string(at.op->kind);
    if (at.op->unit >= 0) s += " " + rank_.units[static_cast<std::size_t>(at.op->unit)].name;
    return where + ": " + s;
  }
  // The list index of pass `ordinal`'s first op: its receive when one comes right before it
  // (schedule.cc's with_communication), else the pass.
  std::ptrdiff_t first_op_of_pass(std::int64_t ordinal) const {
    std::int64_t passes = 0;
    for (std::int32_t i = 0; i < rank_.tail_begin; ++i) {
      const ProgramOp& op = rank_.ops[static_cast<std::size_t>(i)];
      if (!op.is_pass()) continue;
      if (passes++ < ordinal) continue;
      const bool received = i > 0 && (rank_.ops[static_cast<std::size_t>(i - 1)].kind == Kind::kRecvForward ||
                                      rank_.ops[static_cast<std::size_t>(i - 1)].kind == Kind::kRecvBackward);
      return received ? i - 1 : i;
    }
    return rank_.tail_begin;
  }

  void touch_grads(std::int32_t unit) {
    const auto u = static_cast<std::size_t>(unit);
    if (!t_.transient_grads || units_.is_touched(u)) return;
    units_.set_touched(u, true);
    add_grads(t_.unit_grads[u]);
  }

  void step_op(const ProgramOp& op) {
    place_ = {&op, nullptr, false};
    switch (op.kind) {
      case Kind::kRecvForward:
      case Kind::kRecvBackward:
        if (op.peer == rank_.pp_rank) return;  // handed over: the sender's output, counted
        add_activation(t_.message);
        observe(nullptr, 0);
        complete_sends(op);
        return;
      case Kind::kSendForward:
      case Kind::kSendBackward:
        if (op.peer != rank_.pp_rank) ++pending_[op.kind == Kind::kSendForward ? 0 : 1];
        return;
      case Kind::kForward:
      case Kind::kBackward: pass(op); return;
      default: throw std::logic_error("program memory: " + to_string(op.kind) + " in the pipeline");
    }
  }

  // The sends the receive proves complete go back to the pool once it has returned
  // (program.h, "Send completion"), after the received message was allocated.
  void complete_sends(const ProgramOp& recv) {
    const std::array<std::int64_t, 2> known{recv.forward_sends_complete, recv.backward_sends_complete};
    for (std::size_t d = 0; d < 2; ++d) {
      const std::int64_t n = known[d] - completed_[d];
      if (n <= 0) continue;
      if (n > pending_[d]) throw std::logic_error("program memory: a receive completes sends not posted");
      add_activation(-static_cast<double>(n) * t_.message);
      pending_[d] -= n;
      completed_[d] = known[d];
    }
  }

  // A pass's effect depends only on its body and the units' state it starts in (the byte
  // totals only shift it). When a recorded walk of the same body started in the same state,
  // its effect is this walk's: applied, it makes a step of thousands of micro-batches cost
  // a step op each instead of a pass body each.
  void pass(const ProgramOp& op) {
    PassEffect& effect = effects_[static_cast<std::size_t>(op.body)];
    if (reuse_ && effect.valid && units_.same_as(effect.start)) {
      apply(effect);
      return;
    }
    if (!reuse_) {
      walk_pass(op);
      return;
    }
    effect.valid = false;
    effect.start.assign(units_);
    effect.high = -std::numeric_limits<double>::infinity();
    pass_start_ = {live_, activations_, step_grads_};
    recording_ = &effect;
    walk_pass(op);
    recording_ = nullptr;
    effect.end.assign(units_);
    effect.live = live_ - pass_start_.live;
    effect.activations = activations_ - pass_start_.activations;
    effect.step_grads = step_grads_ - pass_start_.step_grads;
    effect.valid = true;
  }

  void apply(const PassEffect& e) {
    // What the walk's observes would have left: the pass's highest moment, if it is higher
    // than the peak so far (the first op reaching it: later equal moments do not replace it).
    if (live_ + e.high > peak_.peak_bytes) {
      peak_.peak_bytes = live_ + e.high;
      peak_.activations_at_peak = activations_ + e.high_activations;
      peak_.step_gradients_at_peak = step_grads_ + e.high_step_grads;
      peak_place_ = place_;
      peak_place_.op = e.high_op;
    }
    live_ += e.live;
    activations_ += e.activations;
    step_grads_ += e.step_grads;
    units_.assign(e.end);
  }

  void walk_pass(const ProgramOp& op) {
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
          observe(what, t_.layer_forward_extra);
        } else {
          touch_grads(op.unit);
          observe(what, t_.layer_backward_peak - t_.layer_saved);
          add_activation(-t_.layer_saved - t_.message);  // its saved tensors and its input
        }
        return;
      case Part::kHead: {
        if (forward) {
          // The output layer's gradient gets the logits' share during the head's forward.
          touch_grads(output_layer_);
          add_activation(t_.head_saved);
          observe(what, t_.head_working);
          add_activation(-t_.tokens);  // the targets
        } else {
          touch_grads(op.unit);
          add_activation(t_.message);  // the gradient that flows down the chunk
          observe(what, t_.head_backward_working);
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
        ++units_.fetched[u];
        ++units_.outstanding;
        add_activation(t_.unit_fetch[u]);
        observe(what, 0);
        return;
      case Kind::kGather:
        if (units_.gathered[u]++ == 0) add_activation(t_.unit_gather[u]);
        ++units_.outstanding;
        observe(what, 0);
        if (units_.fetched[u] > 0) {  // the fetched shard is consumed by the gather
          --units_.fetched[u];
          --units_.outstanding;
          add_activation(-t_.unit_fetch[u]);
        }
        return;
      case Kind::kRelease:
        if (--units_.gathered[u] == 0) add_activation(-t_.unit_gather[u]);
        --units_.outstanding;
        return;
      case Kind::kReduceGrads:
        if (t_.offloaded_grads) {
          add_activation(t_.unit_shard[u]);
          observe(what, 0);
        }
        if (t_.transient_grads && units_.is_touched(u)) {
          units_.set_touched(u, false);
          add_grads(-t_.unit_grads[u]);
        }
        return;
      case Kind::kOffloadGrads:
        add_activation(-t_.unit_shard[u]);
        return;
      case Kind::kSumNormGrads:
      case Kind::kSumKvGrads:
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

  struct Totals {
    double live = 0, activations = 0, step_grads = 0;
  };

  const RankProgram& rank_;
  const ExecutorMemoryTerms& t_;
  std::int64_t shift_ = 0;  // WalkOptions::micro_batch_shift, from list index shift_from_
  std::ptrdiff_t shift_from_ = std::numeric_limits<std::ptrdiff_t>::max();
  bool reuse_ = false;  // recorded pass effects may stand for walks (exact_in_double)
  std::int32_t output_layer_ = -1;
  double live_ = 0, activations_ = 0, step_grads_ = 0;
  // [0] forward, [1] backward: sends posted and not completed, and completed so far.
  std::array<std::int64_t, 2> pending_{0, 0}, completed_{0, 0};
  UnitState units_;
  std::vector<PassEffect> effects_;  // [body] its last reusable walk
  PassEffect* recording_ = nullptr;  // the pass being walked, recording its effect
  Totals pass_start_;
  Place place_;       // where the walk is
  Place peak_place_;  // where the peak was first reached
  ProgramMemoryPeak peak_;
};

}  // namespace

ProgramMemoryPeak walk_program_memory(const RankProgram& rank, const ExecutorMemoryTerms& terms,
                                      const WalkOptions& options) {
  return Walk(rank, terms, options).run();
}

}  // namespace strata
