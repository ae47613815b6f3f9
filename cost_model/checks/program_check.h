// Deadlock freedom of a Program, proved before any work (docs/design.md: bad input gets a clear
// error before any work). A step cannot hang when
//   1. every send has exactly one receive of the same (sender, receiver, tag) and every
//      receive one send, and the two agree on the message's shape and dtype (ProgramOp's
//      message fields: a receive smaller than its send fails MPI's matching, a larger one
//      waits on NCCL for elements that never come);
//   2. every cross-rank collective (the tied-embedding sum of the first and last stage, the
//      global gradient norm) is entered by every member of its group, and any two members
//      enter the collectives they share in the same relative order;
//   3. the check graph (program_graph.h) is acyclic: a cycle is a set of ops each waiting
//      for the next, i.e. a hang, reported with its ops rank by rank.
// Collectives inside a rank's own group (DP and TP: the replicas of one pipeline rank, which
// replay the same RankProgram) agree by construction and are not checked.
#pragma once

#include <string>

#include "cost_model/specs/errors.h"
#include "cost_model/program/program.h"

namespace strata {

// A Program that would hang; the message names the fault (and a cycle's ops, rank by rank).
class ProgramDeadlock : public InfeasiblePlan {
 public:
  using InfeasiblePlan::InfeasiblePlan;
};

// Throws ProgramDeadlock for the first fault of 1-3 above.
void check_deadlock_free(const Program& program);

// The same, as a message: empty when the Program cannot hang (for callers that drop a
// candidate with its reason instead of failing).
std::string deadlock_fault(const Program& program);

}  // namespace strata
