// The kinds a rank's memory is told in: one list of names for a prediction (each pipeline
// stage, from the memory model: stage_memory_kinds.h) and for a run (its allocation tags,
// mapped here), so that `predict`, `run`'s memory_tags.json and report.json, `compare` and
// `diff` speak of the same bytes.
//   params       the parameters (compute precision, and fp32 masters where they are kept)
//   gradients    the gradients, with ZeRO-2/3's full gradient buffers live at that moment
//   optimizer    the optimizer state (AdamW's moments, and masters on the optimizer's tier)
//   activations  everything else a step holds on the device: saved tensors, working sets,
//                and -- as strata's executor holds them and its memory walk prices them --
//                the in-flight pipeline messages, ZeRO-3's gathered units and fetched
//                shards, the token ids and the losses
//   buffers      the buffers priced apart from those: the published convention's gradient
//                bucket, pipeline buffers and ZeRO-3 gathers, CUDA's GEMM workspace (outside
//                the pool), and on host and NVMe the staging buffers of offload
//   headroom     reserved for the CUDA context, communicators and fragmentation (the
//                profile's or the cluster's; a prediction only: a run has no tag for it)
// Deliberately not here: the bytes themselves (step_report.h's MemoryByKind) and how a
// prediction fills them (stage_memory_kinds.h).
#pragma once

#include <array>
#include <string_view>

namespace strata {

enum class MemoryKind { kParams, kGradients, kOptimizer, kActivations, kBuffers, kHeadroom };
inline constexpr int kMemoryKindCount = 6;
inline constexpr std::array<MemoryKind, kMemoryKindCount> kMemoryKinds = {
    MemoryKind::kParams,      MemoryKind::kGradients, MemoryKind::kOptimizer,
    MemoryKind::kActivations, MemoryKind::kBuffers,   MemoryKind::kHeadroom};

// "params", "gradients", "optimizer", "activations", "buffers", "headroom": the JSON keys.
std::string_view to_string(MemoryKind kind);
// For sentences: "parameters", "gradients", "optimizer state", "activations", "buffers",
// "reserved headroom".
std::string_view describe(MemoryKind kind);

// The kind of the bytes an allocation tag holds on a tier ("device", "host" or "nvme").
// The model state's tags are their kind on every tier ("params", "master" and
// "offload:params" are params, ...);
// any other tag is "activations" on the device (the executor walk's accounting, see above)
// and "buffers" on host and NVMe (offload's staging and fetch buffers).
MemoryKind memory_kind_of_tag(std::string_view tag, std::string_view tier);

}  // namespace strata
