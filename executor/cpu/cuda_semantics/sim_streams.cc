#include "executor/cpu/cuda_semantics/sim_streams.h"

#include <algorithm>

namespace strata::cuda_semantics {

std::string to_string(SimStream s) {
  switch (s) {
    case SimStream::kCompute: return "compute";
    case SimStream::kComm: return "comm";
    case SimStream::kCopy: return "copy";
    case SimStream::kP2p: return "p2p";
    case SimStream::kLinkSend0: return "pipeline send link 0";
    case SimStream::kLinkSend1: return "pipeline send link 1";
    case SimStream::kLinkRecv0: return "pipeline receive link 0";
    case SimStream::kLinkRecv1: return "pipeline receive link 1";
    case SimStream::kHostFunctions: return "host-function";
    case SimStream::kHost: return "host";
  }
  return "unknown stream";
}

SimStream sim_stream_of(Stream s) {
  switch (s) {
    case Stream::kCompute: return SimStream::kCompute;
    case Stream::kHost: return SimStream::kHostFunctions;
    case Stream::kComm: return SimStream::kComm;
    case Stream::kCopy: return SimStream::kCopy;
    case Stream::kP2p: return SimStream::kP2p;
  }
  return SimStream::kCompute;
}

void join(Clock& into, const Clock& other) {
  for (int i = 0; i < kSimStreams; ++i) into[i] = std::max(into[i], other[i]);
}

}  // namespace strata::cuda_semantics
