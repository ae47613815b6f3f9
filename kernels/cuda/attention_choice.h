// Which attention runs on the GPU (cuDNN's fused SDPA or strata's hand-written kernels) and why:
// the switch (`strata run --attention`), whether cuDNN was found, and whether the shape is one
// strata's cuDNN graphs (cudnn_sdpa.h) are written for. Plain host logic: tested on any machine.
// Deliberately not here: opening the library (cudnn_library.h), running either path, or what
// happens when cuDNN declines a graph at run time (attention_launcher.h falls back then).
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace strata::kernels::cuda {

enum class AttentionMode {
  kAuto,     // cuDNN where it is found and takes the shape, else the kernels (the default)
  kCudnn,    // cuDNN or an error
  kKernels,  // strata's hand-written kernels
};
std::optional<AttentionMode> attention_mode_from(const std::string& name);  // auto|cudnn|kernels
std::string to_string(AttentionMode mode);

// One attention call's shape: B sequences of T tokens, NH query heads of HS, KVH KV heads.
struct AttentionShape {
  int B = 0, T = 0, NH = 0, KVH = 0, HS = 0;
};

// "" when strata's cuDNN SDPA graphs are written for this shape on this GPU (compute
// capability sm, e.g. 90) and cuDNN version, else why not. `backward`: the backward graph,
// which additionally needs T % 128 == 0 (cuDNN up to 9.15 mis-handles other lengths without
// a padding mask, which its frontend works around and strata's graph does not).
std::string cudnn_sdpa_rejects(const AttentionShape& s, int sm, std::size_t cudnn_version,
                               bool backward);

struct AttentionChoice {
  bool cudnn = false;
  std::string why;  // for the run's line: what runs and, when it is not cuDNN, why not
};

// The choice for one direction of one shape. cudnn_reason: "" when the library loaded, else
// why not (CudnnLoad::reason). Throws KernelError for kCudnn when cuDNN cannot run
// it, naming why.
AttentionChoice choose_attention(AttentionMode mode, const std::string& cudnn_reason,
                                 std::size_t cudnn_version, const AttentionShape& s, int sm,
                                 bool backward);

}  // namespace strata::kernels::cuda
