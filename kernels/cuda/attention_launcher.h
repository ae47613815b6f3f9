// The attention launcher: every attention call of the CUDA backend goes through here to
// cuDNN's fused SDPA (cudnn_sdpa.h) or to strata's hand-written kernels (attention.h), per
// direction and shape, as attention_choice.h decides from the switch, the library and the
// shape. The first call of a shape that would go to cuDNN runs both and compares them (the
// output and statistic, or the gradient, against the kernels' within bf16 bounds): cuDNN is
// used from then on only if it agrees, and a graph cuDNN declines (no engine, an error) leaves
// that shape on the kernels. Either way notes() says what ran and why, for the run's output.
// The first call of each shape therefore costs both paths and a host wait; later calls are the
// chosen path alone.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <cuda_runtime.h>

#include "kernels/cuda/attention_choice.h"
#include "kernels/cuda/common.h"

namespace strata::kernels::cuda {

class CudnnSdpa;

// How far cuDNN's results may be from the kernels' for cuDNN to be used: relative L2 error of
// the bf16 outputs (each side rounds to bf16 once, 2^-9, and sums in another order), and the
// statistic's absolute error (fp32 log-sum-exp of up to T terms, ~1e-6 relative each).
inline constexpr double kAgreeOutput = 1e-2;
inline constexpr double kAgreeGradient = 3e-2;  // dq, dk, dv each: two bf16 products deep
inline constexpr double kAgreeLse = 1e-3;

class AttentionLauncher {
 public:
  // Reads the current device's compute capability (needs a GPU); opens cuDNN on the first
  // call that may use it. Throws KernelError (kCudnn) when cuDNN cannot run a call.
  explicit AttentionLauncher(AttentionMode mode);
  ~AttentionLauncher();
  AttentionLauncher(AttentionLauncher&&) noexcept;
  AttentionLauncher& operator=(AttentionLauncher&&) noexcept;

  // attention_forward / attention_backward (attention.h, GQA overloads; backward overwrites).
  void forward(bf16* out, float* lse, const bf16* qkv, int B, int T, int C, int NH, int KVH,
               cudaStream_t stream);
  void backward(bf16* dqkv, float* scratch, const bf16* dout, const bf16* qkv, const bf16* out,
                const float* lse, int B, int T, int C, int NH, int KVH, cudaStream_t stream);

  // What ran, one line per distinct decision ("attention: cuDNN's fused attention (forward),
  // cuDNN 9.13.0 from /path", "attention: strata's attention kernels (backward; ...)").
  std::vector<std::string> notes() const;

 private:
  struct Decision {
    bool cudnn = false;
    bool checked = false;  // cuDNN's first call agreed with the kernels'
    std::string why;
  };
  using Key = std::tuple<int, int, int, int, int, bool>;
  Decision& decide(const AttentionShape& s, bool backward);
  CudnnSdpa* sdpa(std::string& why);  // null, with why, when cuDNN cannot be started
  // d's cuDNN when it decided for cuDNN and cuDNN starts; null otherwise (d then falls back).
  CudnnSdpa* started(Decision& d, const char* direction);
  // d goes to the kernels for `why` (--attention cudnn: CudaError instead).
  void fall_back(Decision& d, const char* direction, const std::string& why);

  AttentionMode mode_;
  int sm_ = 0;
  std::unique_ptr<CudnnSdpa> sdpa_;
  std::string sdpa_error_;  // why sdpa_ could not be made
  std::map<Key, Decision> decisions_;
};

}  // namespace strata::kernels::cuda
