// cuDNN's fused attention or strata's kernels, checked against each other (see
// attention_launcher.h).
#include "kernels/cuda/attention_launcher.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <set>

#include <fmt/format.h>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_resources.h"
#include "kernels/cuda/cudnn_library.h"
#include "kernels/cuda/cudnn_sdpa.h"

namespace strata::kernels::cuda {
namespace {

std::vector<float> bf16_to_host(const bf16* device, std::size_t n, cudaStream_t stream) {
  std::vector<std::uint16_t> bits(n);
  CUDA_CHECK(cudaMemcpyAsync(bits.data(), device, n * 2, cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t u = static_cast<std::uint32_t>(bits[i]) << 16;
    std::memcpy(&x[i], &u, sizeof(u));
  }
  return x;
}

std::vector<float> f32_to_host(const float* device, std::size_t n, cudaStream_t stream) {
  std::vector<float> x(n);
  CUDA_CHECK(cudaMemcpyAsync(x.data(), device, n * 4, cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return x;
}

// ||a - b|| / ||b|| over the elements [begin, end) of rows of `width` at `stride` (NaN: 1e30).
double relative_l2(const std::vector<float>& a, const std::vector<float>& b, std::size_t rows,
                   std::size_t stride, std::size_t begin, std::size_t end) {
  double diff = 0, norm = 0;
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t j = begin; j < end; ++j) {
      const double x = a[r * stride + j], y = b[r * stride + j];
      diff += (x - y) * (x - y);
      norm += y * y;
    }
  }
  const double e = std::sqrt(diff / std::max(norm, 1e-30));
  return std::isfinite(e) ? e : 1e30;
}

}  // namespace

AttentionLauncher::AttentionLauncher(AttentionMode mode) : mode_(mode) {
  int device = 0, major = 0, minor = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  sm_ = major * 10 + minor;
}

AttentionLauncher::~AttentionLauncher() = default;
AttentionLauncher::AttentionLauncher(AttentionLauncher&&) noexcept = default;
AttentionLauncher& AttentionLauncher::operator=(AttentionLauncher&&) noexcept = default;

CudnnSdpa* AttentionLauncher::sdpa(std::string& why) {
  if (!sdpa_ && sdpa_error_.empty()) {
    try {
      sdpa_ = std::make_unique<CudnnSdpa>(*cudnn().library);
    } catch (const CudaError& e) {
      sdpa_error_ = e.what();
    }
  }
  why = sdpa_error_;
  return sdpa_.get();
}

CudnnSdpa* AttentionLauncher::started(Decision& d, const char* direction) {
  if (!d.cudnn) return nullptr;
  std::string why;
  CudnnSdpa* cudnn_sdpa = sdpa(why);
  if (cudnn_sdpa == nullptr) fall_back(d, direction, "cuDNN could not start: " + why);
  return cudnn_sdpa;
}

void AttentionLauncher::fall_back(Decision& d, const char* direction, const std::string& why) {
  if (mode_ == AttentionMode::kCudnn) throw CudaError("--attention cudnn: " + why);
  d.cudnn = false;
  d.why = fmt::format("strata's attention kernels ({}; {})", direction, why);
}

AttentionLauncher::Decision& AttentionLauncher::decide(const AttentionShape& s, bool backward) {
  const Key key{s.B, s.T, s.NH, s.KVH, s.HS, backward};
  if (auto it = decisions_.find(key); it != decisions_.end()) return it->second;
  Decision d;
  if (mode_ == AttentionMode::kKernels) {
    d.why = choose_attention(mode_, "", 0, s, sm_, backward).why;
  } else {
    const CudnnLoad& lib = cudnn();
    const AttentionChoice c = choose_attention(mode_, lib.library ? "" : lib.reason, lib.version,
                                               s, sm_, backward);
    d.cudnn = c.cudnn;
    d.why = c.why;
    if (c.cudnn) {
      d.why += fmt::format(", cuDNN {} from {}", cudnn_version_string(lib.version), lib.path);
    }
  }
  return decisions_.emplace(key, std::move(d)).first->second;
}

void AttentionLauncher::forward(bf16* out, float* lse, const bf16* qkv, int B, int T, int C,
                                int NH, int KVH, cudaStream_t stream) {
  const AttentionShape s{B, T, NH, KVH, NH > 0 ? C / NH : 0};
  Decision& d = decide(s, false);
  CudnnSdpa* cudnn_sdpa = started(d, "forward");
  const SdpaShape shape{B, T, NH, KVH, s.HS};
  if (d.cudnn && !d.checked) {
    // First call of this shape: cuDNN into scratch, the kernels into the real outputs.
    const auto n_out = static_cast<std::size_t>(B) * T * C;
    const auto n_lse = static_cast<std::size_t>(B) * NH * T;
    DeviceBuffer cudnn_out(n_out * 2), cudnn_lse(n_lse * 4);
    std::string failure;
    try {
      cudnn_sdpa->forward(cudnn_out.as<bf16>(), cudnn_lse.as<float>(), qkv, shape, stream);
    } catch (const CudaError& e) {
      failure = fmt::format("cuDNN declined the graph: {}", e.what());
    }
    attention_forward(out, lse, qkv, B, T, C, NH, KVH, stream);
    if (failure.empty()) {
      const double e_out = relative_l2(bf16_to_host(cudnn_out.as<bf16>(), n_out, stream),
                                       bf16_to_host(out, n_out, stream), 1, n_out, 0, n_out);
      const auto a = f32_to_host(cudnn_lse.as<float>(), n_lse, stream);
      const auto b = f32_to_host(lse, n_lse, stream);
      double e_lse = 0;
      for (std::size_t i = 0; i < n_lse; ++i) {
        const double err = std::fabs(a[i] - b[i]) / (1.0 + std::fabs(b[i]));
        e_lse = std::isfinite(err) ? std::max(e_lse, err) : 1e30;
      }
      if (e_out > kAgreeOutput || e_lse > kAgreeLse) {
        failure = fmt::format("cuDNN's forward differs from the kernels' (output relative error "
                              "{:.3g} > {}, or statistic {:.3g} > {})",
                              e_out, kAgreeOutput, e_lse, kAgreeLse);
      } else {
        d.checked = true;
        d.why += fmt::format("; checked against the kernels: output relative error {:.2g}", e_out);
      }
    }
    if (!failure.empty()) fall_back(d, "forward", failure);
    return;
  }
  if (d.cudnn) {
    cudnn_sdpa->forward(out, lse, qkv, shape, stream);
  } else {
    attention_forward(out, lse, qkv, B, T, C, NH, KVH, stream);
  }
}

void AttentionLauncher::backward(bf16* dqkv, float* scratch, const bf16* dout, const bf16* qkv,
                                 const bf16* out, const float* lse, int B, int T, int C, int NH,
                                 int KVH, cudaStream_t stream) {
  const AttentionShape s{B, T, NH, KVH, NH > 0 ? C / NH : 0};
  Decision& d = decide(s, true);
  CudnnSdpa* cudnn_sdpa = started(d, "backward");
  const SdpaShape shape{B, T, NH, KVH, s.HS};
  const auto kv = static_cast<std::size_t>(KVH) * s.HS;
  const auto width = static_cast<std::size_t>(C) + 2 * kv;
  if (d.cudnn && !d.checked) {
    const auto rows = static_cast<std::size_t>(B) * T;
    DeviceBuffer cudnn_dqkv(rows * width * 2);
    std::string failure;
    try {
      cudnn_sdpa->backward(cudnn_dqkv.as<bf16>(), dout, qkv, out, lse, shape, stream);
    } catch (const CudaError& e) {
      failure = fmt::format("cuDNN declined the graph: {}", e.what());
    }
    attention_backward(dqkv, scratch, dout, qkv, out, lse, B, T, C, NH, KVH, stream,
                       /*overwrite=*/true);
    if (failure.empty()) {
      const auto a = bf16_to_host(cudnn_dqkv.as<bf16>(), rows * width, stream);
      const auto b = bf16_to_host(dqkv, rows * width, stream);
      const double eq = relative_l2(a, b, rows, width, 0, C);
      const double ek = relative_l2(a, b, rows, width, C, C + kv);
      const double ev = relative_l2(a, b, rows, width, C + kv, width);
      const double worst = std::max({eq, ek, ev});
      if (worst > kAgreeGradient) {
        failure = fmt::format("cuDNN's backward differs from the kernels' (relative errors dq "
                              "{:.3g}, dk {:.3g}, dv {:.3g} > {})", eq, ek, ev, kAgreeGradient);
      } else {
        d.checked = true;
        d.why += fmt::format("; checked against the kernels: gradient relative error {:.2g}",
                             worst);
      }
    }
    if (!failure.empty()) fall_back(d, "backward", failure);
    return;
  }
  if (d.cudnn) {
    cudnn_sdpa->backward(dqkv, dout, qkv, out, lse, shape, stream);
  } else {
    attention_backward(dqkv, scratch, dout, qkv, out, lse, B, T, C, NH, KVH, stream,
                       /*overwrite=*/true);
  }
}

std::vector<std::string> AttentionLauncher::notes() const {
  std::set<std::string> seen;
  std::vector<std::string> lines;
  for (const auto& [key, d] : decisions_) {
    const auto& [B, T, NH, KVH, HS, backward] = key;
    const std::string line = fmt::format("attention at B {} T {} heads {}/{} of {}: {}", B, T, NH,
                                         KVH, HS, d.why);
    if (seen.insert(line).second) lines.push_back(line);
  }
  return lines;
}

}  // namespace strata::kernels::cuda
