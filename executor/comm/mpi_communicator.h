// MpiCommunicator: the Communicator over an MPI communicator, on HOST buffers, for the CPU
// backend (and underneath HostStagedCommunicator); and MpiSession, the RAII owner of
// MPI_Init_thread / MPI_Finalize.
//
// Determinism: floating-point sums (kF32, kF64, kBF16) do NOT use MPI_Allreduce /
// MPI_Reduce_scatter. OpenMPI's tuned component picks its algorithm by message size and rank
// count, so for a fixed size and count the order is in practice fixed, but it is not the
// rank order, differs between message sizes (and between OpenMPI versions), and
// recursive-doubling variants can add operands in a rank-dependent order. Instead a sum moves
// data only (MPI_Alltoallv / MPI_Allgatherv, which copy bytes) and adds locally in rank order
// 0, 1, ..., size-1, so the result is bit-identical on every rank and rerun, and a 1-rank
// group returns its input unchanged. bf16 is moved as its 16 raw bits (MPI has no bf16 type),
// added in fp32 and rounded once (kernels/bf16.h). Bandwidth matches a ring (each rank sends
// (size-1)/size of the data per phase). Max and int64 all-reduce sums are exact in any
// order, so they use MPI_Allreduce (bf16 max through fp32, which holds every bf16 exactly);
// an int64 reduce-scatter takes the rank-ordered path, exact as well. A sum or
// reduce-scatter allocates a transient scratch of n elements (s*n for reduce-scatter, n fp32
// for a bf16 max) for the call (outside the AccountingAllocator, like NCCL's internal
// buffers). Measured on the 2-core dev machine (shared, noisy): 2^20 floats over 4
// ranks ~22 ms, on par with MPI_Allreduce (~24 ms).
//
// Not thread-safe: one thread per rank drives a communicator (MPI_THREAD_FUNNELED). Every
// MpiCommunicator (and ProcessGroups) must be destroyed before the MpiSession finalises MPI.
//
// Watched: given a CommWatch (comm_watch.h), every call that can block (each collective,
// MPI_Recv, the MPI_Wait of a request, MPI_Comm_split/dup) is recorded with its peer's world
// rank (or the group's world ranks) while it runs, so a watchdog can end a job whose rank
// hangs. Communicators made by duplicate() and split() share their parent's watch.
#pragma once

#include <mpi.h>

#include <memory>
#include <vector>

#include "executor/comm/comm_watch.h"
#include "executor/comm/communicator.h"

namespace strata {

class MpiCommunicator final : public Communicator {
 public:
  // Takes ownership of comm (MPI_Comm_free in the destructor; MPI_COMM_WORLD/SELF are never
  // freed) and sets MPI_ERRORS_RETURN on it so failures reach MPI_CHECK. watch: optional,
  // must outlive the communicator.
  explicit MpiCommunicator(MPI_Comm comm, CommWatch* watch = nullptr);
  // A private duplicate of comm (MPI_Comm_dup): its messages never mix with comm's.
  static std::unique_ptr<MpiCommunicator> duplicate(MPI_Comm comm, CommWatch* watch = nullptr);
  // MPI_Comm_split: ranks passing the same color form a group, ordered by key (then by rank
  // here). color == MPI_UNDEFINED returns nullptr (this rank is in no group). Collective.
  std::unique_ptr<MpiCommunicator> split(int color, int key) const;

  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;
  ~MpiCommunicator() override;

  MPI_Comm handle() const { return comm_; }

  // Records a blocking call for the watch (none: a no-op) while the scope lives; peer is a
  // rank of this group, -1 for a collective. For MPI calls made on handle() elsewhere.
  CommWatch::Scope blocking(CommCall call, int peer = -1) const;
  CommWatch* watch() const { return watch_; }
  // The world rank of this group's `rank` (itself when unwatched: the table is not built).
  int world_rank_of(int rank) const;

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  STRATA_COMMUNICATOR_TRANSPORT
  void barrier() override;

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  CommWatch* watch_ = nullptr;
  std::vector<int> world_ranks_;  // world rank of each rank of this group (when watched)
};

// Initialises MPI (MPI_THREAD_FUNNELED: only the main thread calls MPI) and finalises it
// on destruction. Construct one in main(). If MPI is already initialised (by another owner)
// the session does not own it and will not finalise it; constructing one after MPI_Finalize
// throws SystemError, because MPI cannot be initialised twice.
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  ~MpiSession();

  // A private duplicate of MPI_COMM_WORLD (watched by `watch` when given).
  std::unique_ptr<MpiCommunicator> world(CommWatch* watch = nullptr) const;
  int world_rank() const;
  int world_size() const;

 private:
  bool owns_ = false;
};

}  // namespace strata
