// A communicator of the CUDA-semantics CPU mode: an MPI communicator whose every operation is
// an op on the simulated stream the CUDA backend would run that group on (group_streams.h),
// declared to the scheduler with what it reads and writes. Operations run at once after what
// their stream waits for (stream_scheduler.h), as NCCL's do once their stream reaches them;
// recv() also makes the host wait for its stream (NCCL's recv returns once the message is in),
// the other operations do not (NCCL's are asynchronous).
// Deliberately not here: the arithmetic (the MPI communicator's).
#pragma once

#include <memory>

#include "executor/comm/communicator.h"
#include "executor/comm/communicator_factory.h"
#include "executor/comm/group_streams.h"
#include "executor/cpu/cuda_semantics/stream_scheduler.h"

namespace strata::cuda_semantics {

class StreamedCommunicator final : public Communicator {
 public:
  StreamedCommunicator(std::unique_ptr<Communicator> inner, SimStream stream,
                       StreamScheduler& scheduler)
      : inner_(std::move(inner)), stream_(stream), scheduler_(&scheduler) {}

  SimStream stream() const { return stream_; }
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }

  STRATA_COMMUNICATOR_TRANSPORT
  void barrier() override;
  void synchronize() override;

 private:
  void refuse_in_capture(const char* op) const;

  std::unique_ptr<Communicator> inner_;
  SimStream stream_;
  StreamScheduler* scheduler_;
};

// Wraps the groups of a host factory (MPI) in StreamedCommunicators on the CUDA backend's
// streams. host must outlive it.
class StreamedCommunicatorFactory final : public CommunicatorFactory {
 public:
  StreamedCommunicatorFactory(CommunicatorFactory& host, StreamScheduler& scheduler)
      : host_(&host), scheduler_(&scheduler) {}
  int world_rank() const override { return host_->world_rank(); }
  int world_size() const override { return host_->world_size(); }
  std::unique_ptr<Communicator> split(GroupKind kind, int color, int key) override;

 private:
  CommunicatorFactory* host_;
  StreamScheduler* scheduler_;
  LinkStreamIndex links_;  // which link stream the next pipeline link gets
};

}  // namespace strata::cuda_semantics
