// The exact memory peak of a long pipeline from a shorter one: the steady phase of 1F1B
// (interleaved or not) repeats, so the Program memory walk (program_memory.h) of m
// micro-batches needs only the warm-up, the first steady periods, the last ones and the
// cool-down. The planner walks every pipeline rank of thousands of plans; a rank's walk then
// costs O(p v) ops instead of O(m v).
//
// Why it is exact. Rank r of p runs W forwards (the warm-up: min(p - r - 1, m) for 1F1B,
// 2 (p - r - 1) + (v - 1) p for interleaved, capped at m v), then S = m v - W pairs
// (forward W + k, backward k), then W backwards. Every rank runs the forwards and the
// backwards in one order, a function of the index k alone, with period P pairs (1 for 1F1B,
// p v interleaved: the chunk is a function of k mod p v, the micro-batch grows by p a
// period); adding a period to the middle of the steady phase adds P pairs to every rank at
// the same place of the order. So the Program for m - j q micro-batches (q = 1 for 1F1B, p
// interleaved) is the Program for m with j periods cut out of the middle of every rank's
// steady phase, micro-batches relabelled (the last micro-batch's reducing backward is
// still the last), and what a receive proves complete (program_sends.h) is the same count
// relative to the sends posted.
// The walk's state at the start of a pair (the inputs in flight per chunk, the pending sends
// of each direction, the units' touched / gathered / fetched state, the bytes) is the same
// at the start of every period once the steady phase has settled: a pair's receive proves
// complete the sends its neighbour received a fixed number of pairs earlier (at most a few
// pairs, or p on the rank that wraps around to rank 0), so once the neighbours' matching
// ops are in their steady phases too (within K0 <= P + 4 pairs; the end of the phase may
// meet a neighbour's cool-down in its last P + 4), the pending sends are bounded and
// periodic; every unit has been touched within the first period; ZeRO-3's gathers are
// released inside their pass. This is where the sends being completed as the schedule
// proves them matters: kept to the step's end they grew every period, and no period was
// like the one before. The walk is deterministic: from the same state the same ops make
// the same moments. So every settled period repeats the moments of the first settled one,
// adds nothing to the peak (nor to its first moment, which the walk keeps), and leaves the
// state as it found it: walking the first 2 P + 4 pairs (a settled period among them) and
// the last P + 4 pairs with the cool-down gives the peak of all S. The losses (the last
// stage's m + 1 token rows) are held all step: they shift every moment alike, and the walk
// takes them from the real m. tests/cost_model/steady_cut_test.cc checks the cut walk
// against the full one, to the byte and the moment's label, on a matrix of plans.
// Not cut: GPipe (every forward adds to the in-flight activations; there is no steady
// phase), and a steady phase too short to hold what is kept.
#pragma once

#include <cstdint>

#include "cost_model/specs/plan.h"

namespace strata {

struct SteadyCut {
  std::int64_t micro_batches = 0;  // m' to walk (m when nothing is cut)
  // m - m': what the walk of m' adds to the micro-batch of every op of pass `from_pass` on
  // (the passes in list order, 0-based; its receive too), to name the moments as in m.
  std::int64_t shift = 0;
  std::int64_t from_pass = -1;  // -1 when nothing is cut
};

SteadyCut steady_cut(ScheduleKind kind, std::int64_t pp, std::int64_t virtual_stages,
                     std::int64_t micro_batches, std::int64_t pp_rank);

}  // namespace strata
