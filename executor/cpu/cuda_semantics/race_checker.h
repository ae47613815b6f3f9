// The happens-before checker of the CUDA-semantics CPU mode: every block (a pool allocation
// or a pinned host buffer, named by its tag) remembers the accesses that no later access has covered yet
// (stream, position on that stream, byte range, read or write, the op). An op that touches an
// overlapping range from another stream, where one of the two writes and the earlier one is
// not ordered before it (the op's stream has not waited, directly or through other streams or
// the host, for the earlier op's position), is a race: reported naming the op, the block and
// both streams. Frees count as writes on the compute stream (the pool hands a freed block out
// again in compute-stream order), so a block reused by another stream before the compute
// stream is done with its previous contents is caught too. The host is an actor like a
// stream (SimStream::kHost): its work on pinned host blocks (the CPU optimizer, gradient
// accumulation, NVMe reads and writes, a free) races with a copy it has not waited for.
// Deliberately not here: executing anything (stream_scheduler.h), which op touches what (the
// wrappers declare it).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "executor/cpu/cuda_semantics/sim_streams.h"

namespace strata::cuda_semantics {

// Device memory (the pool's) or pinned host memory (what the CUDA backend's host-tier
// allocations are): copies touching pinned memory run on their stream while the host goes on.
// Host memory in no block is pageable.
enum class BlockKind : std::uint8_t { kDevice, kPinnedHost };

struct Access {
  const void* data = nullptr;
  std::int64_t bytes = 0;
  bool write = false;
};

class RaceChecker {
 public:
  // Blocks: [data, data + bytes), named `tag` in reports. Accesses outside every block (host
  // vectors, kernels' own scratch) are not checked.
  void add_block(const void* data, std::int64_t bytes, const std::string& tag,
                 BlockKind kind = BlockKind::kDevice);
  void rename_block(const void* data, const std::string& tag);
  void remove_block(const void* data);
  bool has_block(const void* data) const;
  // The kind of the block p lies in; nullopt when in none (pageable host memory).
  std::optional<BlockKind> kind_of(const void* p);

  // The op `op` at `position` on `stream`, whose stream has seen `clock`, makes `accesses`.
  // Returns the first race found (and records the accesses either way).
  std::optional<std::string> access(SimStream stream, std::int64_t position, const Clock& clock,
                                    const std::string& op, const std::vector<Access>& accesses);

 private:
  struct Touch {
    SimStream stream;
    std::int64_t position;
    std::int64_t lo, hi;  // byte offsets in the block
    bool write;
    std::string op;
  };
  struct Block {
    std::int64_t bytes = 0;
    std::string tag;
    BlockKind kind = BlockKind::kDevice;
    std::vector<Touch> touches;
  };
  // The block holding p, or end().
  std::map<std::uintptr_t, Block>::iterator find(const void* p);

  std::map<std::uintptr_t, Block> blocks_;
};

}  // namespace strata::cuda_semantics
