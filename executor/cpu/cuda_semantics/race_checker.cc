#include "executor/cpu/cuda_semantics/race_checker.h"

#include <algorithm>

#include <fmt/format.h>

namespace strata::cuda_semantics {
namespace {

std::uintptr_t address(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

// "the compute stream", "the host": the host is an actor of the order, not a stream.
std::string actor(SimStream s) {
  return s == SimStream::kHost ? "the host" : "the " + to_string(s) + " stream";
}

}  // namespace

void RaceChecker::add_block(const void* data, std::int64_t bytes, const std::string& tag,
                            BlockKind kind) {
  Block& b = blocks_[address(data)];
  b.bytes = bytes;
  b.tag = tag;
  b.kind = kind;
  b.touches.clear();
}

void RaceChecker::rename_block(const void* data, const std::string& tag) {
  const auto it = blocks_.find(address(data));
  if (it != blocks_.end()) it->second.tag = tag;
}

void RaceChecker::remove_block(const void* data) { blocks_.erase(address(data)); }

bool RaceChecker::has_block(const void* data) const { return blocks_.count(address(data)) > 0; }

std::optional<BlockKind> RaceChecker::kind_of(const void* p) {
  const auto it = find(p);
  if (it == blocks_.end()) return std::nullopt;
  return it->second.kind;
}

std::map<std::uintptr_t, RaceChecker::Block>::iterator RaceChecker::find(const void* p) {
  const std::uintptr_t a = address(p);
  auto it = blocks_.upper_bound(a);
  if (it == blocks_.begin()) return blocks_.end();
  --it;
  if (a >= it->first + static_cast<std::uintptr_t>(it->second.bytes)) return blocks_.end();
  return it;
}

std::optional<std::string> RaceChecker::access(SimStream stream, std::int64_t position,
                                               const Clock& clock, const std::string& op,
                                               const std::vector<Access>& accesses) {
  std::optional<std::string> race;
  for (const Access& a : accesses) {
    if (a.data == nullptr || a.bytes <= 0) continue;
    const auto it = find(a.data);
    if (it == blocks_.end()) continue;
    Block& block = it->second;
    const std::int64_t lo = static_cast<std::int64_t>(address(a.data) - it->first);
    const std::int64_t hi = std::min(block.bytes, lo + a.bytes);
    for (const Touch& t : block.touches) {
      if (t.hi <= lo || hi <= t.lo || !(t.write || a.write)) continue;
      const bool ordered = t.stream == stream || clock[index_of(t.stream)] >= t.position;
      if (!ordered && !race) {
        race = fmt::format(
            "race on {}block '{}' (bytes [{}, {}) of {}): {} on {} (op {}) {} it, and {} on {} "
            "(op {}) {} it with no ordering edge between them ({} has waited for {} up to op {} "
            "only)",
            block.kind == BlockKind::kPinnedHost ? "pinned host " : "", block.tag, lo, hi,
            block.bytes, op, actor(stream), position, a.write ? "writes" : "reads", t.op,
            actor(t.stream), t.position, t.write ? "wrote" : "read", actor(stream),
            actor(t.stream), clock[index_of(t.stream)]);
      }
    }
    // What this access covers no later access needs to check against: a write ordered after
    // every earlier touch of its range (else it was reported), or a later read of the same
    // range on the same stream.
    std::erase_if(block.touches, [&](const Touch& t) {
      const bool covered = lo <= t.lo && t.hi <= hi;
      return covered && (a.write || (!t.write && t.stream == stream));
    });
    block.touches.push_back(Touch{stream, position, lo, hi, a.write, op});
  }
  return race;
}

}  // namespace strata::cuda_semantics
