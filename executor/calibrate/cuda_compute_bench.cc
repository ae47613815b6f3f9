// CUDA compute microbenchmarks through kernels/cuda; see cuda_compute_bench.h.
#include "executor/calibrate/cuda_compute_bench.h"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "cost_model/specs/cluster_spec.h"
#include "cost_model/specs/errors.h"
#include "cost_model/specs/partition.h"
#include "executor/calibrate/cuda_timing.h"
#include "executor/cuda/pinned_host_buffer.h"
#include "executor/memory/accounting_allocator.h"
#include "kernels/cuda/adamw.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/layernorm.h"

namespace strata::calibrate {
namespace kc = strata::kernels::cuda;
using kc::bf16;
using kc::DeviceBuffer;

namespace {

// bench_values(n, seed) as T (bf16 or float), on the device.
template <class T>
DeviceBuffer device_values(std::int64_t n, std::uint32_t seed) {
  const std::vector<float> values = bench_values(n, seed);
  std::vector<T> host(values.begin(), values.end());
  DeviceBuffer buffer(host.size() * sizeof(T));
  buffer.copy_from_host(host.data(), host.size() * sizeof(T));
  return buffer;
}

// Zeroed device memory for n values of T (outputs, accumulators).
template <class T>
DeviceBuffer device_zeros(std::int64_t n) {
  DeviceBuffer buffer(static_cast<std::size_t>(n) * sizeof(T));
  CUDA_CHECK(cudaMemset(buffer.get(), 0, buffer.bytes()));
  return buffer;
}

int as_int(std::int64_t v, const char* what) {
  if (v <= 0 || v > (std::int64_t{1} << 31) - 1) {
    throw ConfigError(fmt::format("calibrate: {} = {}; expected 1..2^31-1", what, v));
  }
  return static_cast<int>(v);
}

}  // namespace

CudaComputeBench::CudaComputeBench()
    : stream_(kc::Stream::create()), lt_(kc::CublasLtHandle::create()) {}

GemmMeasurement CudaComputeBench::measure_linear(const LinearShape& layer, GemmPass pass,
                                                 const TimingOptions& timing) {
  const std::int64_t align = vocab_row_alignment(Backend::kCuda);
  const std::int64_t rows = layer.vocab_rows ? (layer.OC + align - 1) / align * align : layer.OC;
  const int BT = as_int(layer.BT, "BT"), C = as_int(layer.C, "C"), OC = as_int(rows, "OC");
  GemmMeasurement g;
  g.layer = layer;
  g.pass = pass;
  const cudaStream_t st = stream_.get();
  const DeviceBuffer inp = device_values<bf16>(layer.BT * layer.C, 1);
  const DeviceBuffer weight = device_values<bf16>(rows * layer.C, 2);
  const DeviceBuffer bias = device_values<bf16>(rows, 3);
  const bf16* b = layer.bias ? bias.as<bf16>() : nullptr;
  switch (pass) {
    case GemmPass::kForward: {
      g.m = layer.BT, g.n = layer.OC, g.k = layer.C;
      const DeviceBuffer out = device_zeros<bf16>(layer.BT * rows);
      if (layer.gelu_epilogue) {
        const DeviceBuffer pre = device_zeros<bf16>(layer.BT * rows);
        g.seconds = median_event_seconds(
            [&] {
              kc::matmul_forward(out.as<bf16>(), inp.as<bf16>(), weight.as<bf16>(), b, BT, C, OC,
                                 lt_, st, kc::GemmActivation::kGelu, pre.as<bf16>());
            },
            st, timing);
      } else if (layer.residual_epilogue) {
        const DeviceBuffer residual = device_values<bf16>(layer.BT * rows, 4);
        g.seconds = median_event_seconds(
            [&] {
              kc::matmul_forward_residual(out.as<bf16>(), inp.as<bf16>(), weight.as<bf16>(), b,
                                          residual.as<bf16>(), BT, C, OC, lt_, st);
            },
            st, timing);
      } else {
        g.seconds = median_event_seconds(
            [&] {
              kc::matmul_forward(out.as<bf16>(), inp.as<bf16>(), weight.as<bf16>(), b, BT, C, OC,
                                 lt_, st);
            },
            st, timing);
      }
      break;
    }
    case GemmPass::kBackwardInput: {
      g.m = layer.BT, g.n = layer.C, g.k = layer.OC;
      const DeviceBuffer dout = device_values<bf16>(layer.BT * rows, 5);
      const DeviceBuffer dinp = device_zeros<bf16>(layer.BT * layer.C);
      if (layer.dgelu_epilogue) {
        const DeviceBuffer pre = device_values<bf16>(layer.BT * layer.C, 6);
        g.seconds = median_event_seconds(
            [&] {
              kc::matmul_backward_dgelu(dinp.as<bf16>(), nullptr, nullptr, dout.as<bf16>(),
                                        inp.as<bf16>(), weight.as<bf16>(), pre.as<bf16>(), BT, C,
                                        OC, lt_, st);
            },
            st, timing);
      } else {
        g.seconds = median_event_seconds(
            [&] {
              kc::matmul_backward(dinp.as<bf16>(), nullptr, nullptr, dout.as<bf16>(),
                                  inp.as<bf16>(), weight.as<bf16>(), BT, C, OC, lt_, st,
                                  /*overwrite_dinp=*/true);
            },
            st, timing);
      }
      break;
    }
    case GemmPass::kBackwardWeight: {
      // Accumulating fp32 gradients: sums of terms below 1 stay far from overflow over the
      // repeats, so every call does the same work.
      g.m = layer.OC, g.n = layer.C, g.k = layer.BT;
      const DeviceBuffer dout = device_values<bf16>(layer.BT * rows, 5);
      const DeviceBuffer dweight = device_zeros<float>(rows * layer.C);
      const DeviceBuffer dbias = device_zeros<float>(rows);
      float* db = layer.bias ? dbias.as<float>() : nullptr;
      g.seconds = median_event_seconds(
          [&] {
            kc::matmul_backward(nullptr, dweight.as<float>(), db, dout.as<bf16>(), inp.as<bf16>(),
                                weight.as<bf16>(), BT, C, OC, lt_, st);
          },
          st, timing);
      break;
    }
  }
  return g;
}

double CudaComputeBench::layer_elementwise_s(std::int64_t BT, std::int64_t C,
                                             const TimingOptions& timing) {
  const int bt = as_int(BT, "BT"), c = as_int(C, "C");
  const std::int64_t n = BT * C;
  const cudaStream_t st = stream_.get();
  const DeviceBuffer x = device_values<bf16>(n, 5), proj = device_values<bf16>(n, 6);
  const DeviceBuffer w = device_values<bf16>(C, 7), b = device_values<bf16>(C, 8);
  const DeviceBuffer ln1 = device_zeros<bf16>(n), ln2 = device_zeros<bf16>(n),
                     resid = device_zeros<bf16>(n);
  const DeviceBuffer stats = device_zeros<float>(4 * BT);
  float* s = stats.as<float>();
  return median_event_seconds(
      [&] {
        kc::layernorm_forward(ln1.as<bf16>(), s, s + BT, x.as<bf16>(), w.as<bf16>(),
                              b.as<bf16>(), bt, c, st);
        kc::fused_residual_layernorm_forward(resid.as<bf16>(), ln2.as<bf16>(), s + 2 * BT,
                                             s + 3 * BT, x.as<bf16>(), proj.as<bf16>(),
                                             w.as<bf16>(), b.as<bf16>(), bt, c, st);
      },
      st, timing);
}

double CudaComputeBench::layer_elementwise_backward_s(std::int64_t BT, std::int64_t C,
                                                      const TimingOptions& timing) {
  const int bt = as_int(BT, "BT"), c = as_int(C, "C");
  const std::int64_t n = BT * C;
  const cudaStream_t st = stream_.get();
  const DeviceBuffer x = device_values<bf16>(n, 5), dy = device_values<bf16>(n, 6);
  const DeviceBuffer w = device_values<bf16>(C, 7), b = device_values<bf16>(C, 8);
  const DeviceBuffer ln = device_zeros<bf16>(n);
  const DeviceBuffer stats = device_zeros<float>(2 * BT);
  float* mean = stats.as<float>();
  float* rstd = mean + BT;
  kc::layernorm_forward(ln.as<bf16>(), mean, rstd, x.as<bf16>(), w.as<bf16>(), b.as<bf16>(), bt,
                        c, st);
  // dres accumulates both LayerNorms' input gradients, as in gpt_layer.cc's backward; bf16
  // sums of terms below ~1 stay finite over the repeats.
  const DeviceBuffer dres = device_zeros<bf16>(n);
  const DeviceBuffer dparams = device_zeros<float>(2 * C);
  const DeviceBuffer scratch = device_zeros<float>(kc::layernorm_backward_scratch_floats(bt, c));
  return median_event_seconds(
      [&] {
        for (int i = 0; i < 2; ++i) {
          kc::layernorm_backward(dres.as<bf16>(), dparams.as<float>(), dparams.as<float>() + C,
                                 dy.as<bf16>(), x.as<bf16>(), w.as<bf16>(), mean, rstd, bt, c,
                                 scratch.as<float>(), st);
        }
      },
      st, timing);
}

double CudaComputeBench::attention_s(std::int64_t B, std::int64_t T, std::int64_t C,
                                     std::int64_t NH, const TimingOptions& timing) {
  const int b = as_int(B, "B"), t = as_int(T, "T"), c = as_int(C, "C"), nh = as_int(NH, "NH");
  const cudaStream_t st = stream_.get();
  const DeviceBuffer qkv = device_values<bf16>(B * T * 3 * C, 9);
  const DeviceBuffer out = device_zeros<bf16>(B * T * C);
  const DeviceBuffer lse = device_zeros<float>(B * NH * T);
  return median_event_seconds(
      [&] { kc::attention_forward(out.as<bf16>(), lse.as<float>(), qkv.as<bf16>(), b, t, c, nh, st); },
      st, timing);
}

double CudaComputeBench::attention_backward_s(std::int64_t B, std::int64_t T, std::int64_t C,
                                              std::int64_t NH, const TimingOptions& timing) {
  const int b = as_int(B, "B"), t = as_int(T, "T"), c = as_int(C, "C"), nh = as_int(NH, "NH");
  const cudaStream_t st = stream_.get();
  const DeviceBuffer qkv = device_values<bf16>(B * T * 3 * C, 9);
  const DeviceBuffer dout = device_values<bf16>(B * T * C, 13);
  const DeviceBuffer out = device_zeros<bf16>(B * T * C);
  const DeviceBuffer lse = device_zeros<float>(B * NH * T);
  // The backward recomputes the probabilities from a real forward's log-sum-exp.
  kc::attention_forward(out.as<bf16>(), lse.as<float>(), qkv.as<bf16>(), b, t, c, nh, st);
  const DeviceBuffer dqkv = device_zeros<bf16>(B * T * 3 * C);
  const DeviceBuffer scratch = device_zeros<float>(kc::attention_backward_scratch_floats(b, t, nh));
  return median_event_seconds(
      [&] {
        kc::attention_backward(dqkv.as<bf16>(), scratch.as<float>(), dout.as<bf16>(),
                               qkv.as<bf16>(), out.as<bf16>(), lse.as<float>(), b, t, c, nh, st,
                               /*overwrite=*/true);
      },
      st, timing);
}

double CudaComputeBench::adamw_params_per_s(std::int64_t n, const TimingOptions& timing) {
  as_int(n, "AdamW parameters");
  const cudaStream_t st = stream_.get();
  const DeviceBuffer p = device_values<float>(n, 10), g = device_values<float>(n, 11);
  const DeviceBuffer m = device_zeros<float>(n), v = device_zeros<float>(n);
  const DeviceBuffer p16 = device_zeros<bf16>(n);
  kc::AdamWTensor tensor;
  tensor.param = p.as<float>();
  tensor.grad = g.as<float>();
  tensor.m = m.as<float>();
  tensor.v = v.as<float>();
  tensor.param_bf16 = p16.as<bf16>();
  tensor.n = n;
  kc::AdamWParams hp;
  hp.lr = 1e-4f;
  hp.weight_decay = 0.01f;
  int step = 0;
  // Step grows with each call as in training (bias correction differs per step, the work not).
  const double s = median_event_seconds(
      [&] { kc::adamw_update({tensor}, hp, ++step, 1.0f, st); }, st, timing);
  return static_cast<double>(n) / s;
}

double CudaComputeBench::copy_bytes_per_s(std::int64_t bytes, bool to_device,
                                          const TimingOptions& timing) {
  as_int(bytes, "copy bytes");
  AccountingAllocator accounting;  // unlimited: the driver is what refuses
  const cuda::PinnedHostBuffer host =
      cuda::PinnedHostBuffer::allocate(accounting, bytes, "calibrate/copy");
  const DeviceBuffer device(static_cast<std::size_t>(bytes));
  const cudaStream_t st = stream_.get();
  const auto n = static_cast<std::size_t>(bytes);
  const double s = median_event_seconds(
      [&] {
        if (to_device) {
          CUDA_CHECK(cudaMemcpyAsync(device.get(), host.data(), n, cudaMemcpyHostToDevice, st));
        } else {
          CUDA_CHECK(cudaMemcpyAsync(host.data(), device.get(), n, cudaMemcpyDeviceToHost, st));
        }
      },
      st, timing);
  return static_cast<double>(bytes) / s;
}

double CudaComputeBench::host_to_device_bytes_per_s(std::int64_t bytes,
                                                    const TimingOptions& timing) {
  return copy_bytes_per_s(bytes, true, timing);
}

double CudaComputeBench::device_to_host_bytes_per_s(std::int64_t bytes,
                                                    const TimingOptions& timing) {
  return copy_bytes_per_s(bytes, false, timing);
}

}  // namespace strata::calibrate
