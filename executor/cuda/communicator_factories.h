// The CUDA backend's CommunicatorFactory implementations (communicator_factory.h), both built
// on a HOST factory (an MpiCommunicatorFactory in practice) that does the splitting:
//   NcclCommunicatorFactory:       the host group only bootstraps an NcclCommunicator (its
//                                  unique id travels through it) and is then dropped; one
//                                  GPU per rank (NCCL refuses two ranks of a group on one).
//   HostStagedCommunicatorFactory: the host group is kept and wrapped in a
//                                  HostStagedCommunicator; any number of ranks per GPU.
// Each group kind runs on the stream GroupStreams gives it, so e.g. the pipeline's sends can
// overlap the data-parallel reduction. Deliberately not here: choosing between the two
// (the rank setup knows how many ranks share a device), creating streams, ncclCommSplit.
#pragma once

#include <memory>
#include <vector>

#include <cuda_runtime.h>

#include "executor/comm/communicator_factory.h"
#include "executor/comm/group_streams.h"

namespace strata::cuda {

// The stream each group kind's communicator is bound to (streams are the caller's and must
// outlive the communicators). nullptr is the legacy default stream.
struct GroupStreams {
  cudaStream_t world = nullptr;
  cudaStream_t tp = nullptr;
  cudaStream_t dp = nullptr;
  cudaStream_t pp = nullptr;
  cudaStream_t model = nullptr;
  cudaStream_t embedding = nullptr;
  // Pipeline links: the streams of the links this rank sends on and receives on. Each link
  // needs a stream of its own (a rendezvous send blocks its stream until the peer receives),
  // so a GPU factory hands out pipe_send[i] / pipe_recv[i] to its i-th link of that kind.
  std::vector<cudaStream_t> pipe_send, pipe_recv;

  // Every kind on one stream (e.g. RankStreams::comm()).
  static GroupStreams all(cudaStream_t stream) {
    return GroupStreams{stream, stream, stream, stream, stream, stream, {stream, stream},
                        {stream, stream}};
  }
  // The stream of the `index`-th group of `kind` this rank joins (index matters for links).
  cudaStream_t of(GroupKind kind, int index = 0) const;
};

// Which stream the next group of a kind gets: the i-th pipeline link of a kind this rank
// joins in a set of process groups gets pipe_send[i] / pipe_recv[i] (LinkStreamIndex,
// group_streams.h); every other kind its one stream.
class LinkStreamCounter {
 public:
  cudaStream_t next(const GroupStreams& streams, GroupKind kind);

 private:
  LinkStreamIndex links_;
};

class HostStagedCommunicatorFactory final : public CommunicatorFactory {
 public:
  // host must outlive this factory (not the communicators it makes).
  HostStagedCommunicatorFactory(CommunicatorFactory& host, const GroupStreams& streams)
      : host_(&host), streams_(streams) {}
  int world_rank() const override { return host_->world_rank(); }
  int world_size() const override { return host_->world_size(); }
  std::unique_ptr<Communicator> split(GroupKind kind, int color, int key) override;

 private:
  cudaStream_t next_stream(GroupKind kind) { return links_.next(streams_, kind); }
  CommunicatorFactory* host_;
  GroupStreams streams_;
  LinkStreamCounter links_;
};

#ifdef STRATA_HAVE_NCCL
class NcclCommunicatorFactory final : public CommunicatorFactory {
 public:
  // host must outlive this factory (not the communicators it makes). split() also calls
  // ncclCommInitRank on the current device, collective over the new group.
  NcclCommunicatorFactory(CommunicatorFactory& host, const GroupStreams& streams)
      : host_(&host), streams_(streams) {}
  int world_rank() const override { return host_->world_rank(); }
  int world_size() const override { return host_->world_size(); }
  std::unique_ptr<Communicator> split(GroupKind kind, int color, int key) override;

 private:
  cudaStream_t next_stream(GroupKind kind) { return links_.next(streams_, kind); }
  CommunicatorFactory* host_;
  GroupStreams streams_;
  LinkStreamCounter links_;
};
#endif

}  // namespace strata::cuda
