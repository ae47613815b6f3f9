// The GPU communicator factories (see communicator_factories.h): split on the host, then wrap
// (host-staged) or bootstrap NCCL over the host group and drop it.
#include "executor/cuda/communicator_factories.h"

#include <stdexcept>
#include <string>

#include "executor/cuda/host_staged_communicator.h"
#ifdef STRATA_HAVE_NCCL
#include "executor/cuda/nccl_communicator.h"
#endif

namespace strata::cuda {

cudaStream_t GroupStreams::of(GroupKind kind, int index) const {
  const auto link = [index](const std::vector<cudaStream_t>& streams) {
    if (index < 0 || index >= static_cast<int>(streams.size())) {
      throw std::invalid_argument("GroupStreams::of: no stream for pipeline link " + std::to_string(index));
    }
    return streams[static_cast<std::size_t>(index)];
  };
  switch (kind) {
    case GroupKind::kPpSend: return link(pipe_send);
    case GroupKind::kPpRecv: return link(pipe_recv);
    case GroupKind::kWorld: return world;
    case GroupKind::kTp:
    case GroupKind::kKvCopies: return tp;
    case GroupKind::kDp: return dp;
    case GroupKind::kPp: return pp;
    case GroupKind::kModel: return model;
    case GroupKind::kEmbedding: return embedding;
  }
  throw std::invalid_argument("GroupStreams::of: unknown GroupKind");
}

cudaStream_t LinkStreamCounter::next(const GroupStreams& streams, GroupKind kind) {
  const int link = links_.next(kind);
  return link < 0 ? streams.of(kind) : streams.of(kind, link);
}

std::unique_ptr<Communicator> HostStagedCommunicatorFactory::split(GroupKind kind, int color,
                                                                   int key) {
  std::unique_ptr<Communicator> host = host_->split(kind, color, key);
  if (!host) return nullptr;
  return std::make_unique<HostStagedCommunicator>(std::move(host), next_stream(kind));
}

#ifdef STRATA_HAVE_NCCL
std::unique_ptr<Communicator> NcclCommunicatorFactory::split(GroupKind kind, int color,
                                                             int key) {
  const std::unique_ptr<Communicator> host = host_->split(kind, color, key);
  if (!host) return nullptr;
  // The host group carries only the unique id; it is freed when this returns.
  return NcclCommunicator::create(*host, next_stream(kind));
}
#endif

}  // namespace strata::cuda
