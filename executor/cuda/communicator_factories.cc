// The GPU communicator factories (see communicator_factories.h): split on the host, then wrap
// (host-staged) or bootstrap NCCL over the host group and drop it.
#include "executor/cuda/communicator_factories.h"

#include <stdexcept>

#include "executor/cuda/host_staged_communicator.h"
#ifdef STRATA_HAVE_NCCL
#include "executor/cuda/nccl_communicator.h"
#endif

namespace strata::cuda {

cudaStream_t GroupStreams::of(GroupKind kind) const {
  switch (kind) {
    case GroupKind::kWorld: return world;
    case GroupKind::kTp: return tp;
    case GroupKind::kDp: return dp;
    case GroupKind::kPp: return pp;
    case GroupKind::kModel: return model;
    case GroupKind::kEmbedding: return embedding;
  }
  throw std::invalid_argument("GroupStreams::of: unknown GroupKind");
}

std::unique_ptr<Communicator> HostStagedCommunicatorFactory::split(GroupKind kind, int color,
                                                                   int key) {
  const cudaStream_t stream = streams_.of(kind);  // before the collective: a bad kind fails alone
  std::unique_ptr<Communicator> host = host_->split(kind, color, key);
  if (!host) return nullptr;
  return std::make_unique<HostStagedCommunicator>(std::move(host), stream);
}

#ifdef STRATA_HAVE_NCCL
std::unique_ptr<Communicator> NcclCommunicatorFactory::split(GroupKind kind, int color,
                                                             int key) {
  const cudaStream_t stream = streams_.of(kind);
  const std::unique_ptr<Communicator> host = host_->split(kind, color, key);
  if (!host) return nullptr;
  // The host group carries only the unique id; it is freed when this returns.
  return NcclCommunicator::create(*host, stream);
}
#endif

}  // namespace strata::cuda
