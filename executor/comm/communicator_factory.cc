// CommunicatorFactory's out-of-line destructor (its vtable's home) and the MPI factory.
#include "executor/comm/communicator_factory.h"

#include <fmt/format.h>

#include <stdexcept>

#include "executor/comm/mpi_communicator.h"

namespace strata {

CommunicatorFactory::~CommunicatorFactory() = default;

int MpiCommunicatorFactory::world_rank() const { return world_->rank(); }

int MpiCommunicatorFactory::world_size() const { return world_->size(); }

std::unique_ptr<Communicator> MpiCommunicatorFactory::split(GroupKind /*kind*/, int color,
                                                            int key) {
  if (color < 0 && color != kNoGroup) {
    throw std::invalid_argument(fmt::format(
        "MpiCommunicatorFactory::split: color {} is neither >= 0 nor kNoGroup ({})", color,
        kNoGroup));
  }
  return world_->split(color == kNoGroup ? MPI_UNDEFINED : color, key);
}

}  // namespace strata
