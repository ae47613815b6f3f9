// The streams of one rank of the CUDA backend, as the CUDA-semantics CPU mode simulates them:
// the four Program streams the CUDA backend creates (compute, comm, copy, p2p; the Program's
// host stream is the compute stream there, cuda_backend.cc stream_of), the four pipeline link
// streams its communicator factory hands out (two for the links this rank sends on, two for
// those it receives on: GroupStreams::pipe_send / pipe_recv), and the host thread, which is no
// stream but takes part in the happens-before order (a host wait joins what it waited for).
// Deliberately not here: which communicator runs on which stream (streamed_communicator.h).
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "cost_model/program/program.h"

namespace strata::cuda_semantics {

enum class SimStream : std::uint8_t {
  kCompute,
  kComm,
  kCopy,
  kP2p,
  kLinkSend0,
  kLinkSend1,
  kLinkRecv0,
  kLinkRecv1,
  // The CUDA backend's host-function stream (Stream::kHost when host work runs apart): host
  // work queued in stream order, run by the driver's thread, not the issuing one.
  kHostFunctions,
  kHost,  // the issuing thread (last: the actor every stream's launches come after)
};
inline constexpr int kSimStreams = 10;

inline int index_of(SimStream s) { return static_cast<int>(s); }
std::string to_string(SimStream s);

// The stream the CUDA backend runs a Program stream's device work on.
SimStream sim_stream_of(Stream s);

// A vector clock over the streams: entry t is the last position of stream t known to have
// happened before (positions count the ops issued on a stream, from 1).
using Clock = std::array<std::int64_t, kSimStreams>;
void join(Clock& into, const Clock& other);

}  // namespace strata::cuda_semantics
