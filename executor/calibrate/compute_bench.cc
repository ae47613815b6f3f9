// CPU compute microbenchmarks through kernels/cpu; see compute_bench.h. Buffers are filled
// with small deterministic values (no denormals, no NaN) so every run does the same work.
#include "executor/calibrate/compute_bench.h"

#include <atomic>
#include <cerrno>
#include <map>
#include <system_error>
#include <tuple>

#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cost_model/specs/errors.h"
#include "cost_model/specs/layer_tensors.h"
#include "executor/calibrate/compute_profile.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cpu/flash_attention.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/layernorm.h"

namespace strata::calibrate {
namespace kc = strata::kernels::cpu;

std::vector<float> bench_values(std::int64_t n, std::uint32_t seed) {
  std::vector<float> v(static_cast<std::size_t>(n));
  std::uint32_t x = seed * 2654435761u + 1u;  // a fixed linear congruential sequence
  for (float& f : v) {
    x = x * 1664525u + 1013904223u;
    f = static_cast<float>(x >> 8) / static_cast<float>(1u << 24) - 0.5f;
  }
  return v;
}

namespace {

int as_int(std::int64_t v, const char* what) {
  if (v <= 0 || v > (std::int64_t{1} << 31) - 1) {
    throw ConfigError(fmt::format("calibrate: {} = {}; expected 1..2^31-1", what, v));
  }
  return static_cast<int>(v);
}

void require_divides(std::int64_t tp, std::int64_t value, const char* what) {
  if (tp < 1 || value % tp != 0) {
    throw ConfigError(fmt::format("calibrate: tensor-parallel degree {} does not divide {} = {}",
                                  tp, what, value));
  }
}

}  // namespace

std::string to_string(GemmPass pass) {
  switch (pass) {
    case GemmPass::kForward: return "forward";
    case GemmPass::kBackwardInput: return "backward_input";
    case GemmPass::kBackwardWeight: return "backward_weight";
  }
  return "unknown";
}

std::vector<LinearShape> model_linear_shapes(const ModelSpec& model, std::int64_t micro_batch,
                                             std::int64_t tp) {
  require_divides(tp, model.heads, "heads");
  require_divides(tp, model.ffn_hidden, "ffn_hidden");
  require_divides(tp, model.vocab, "vocab");
  const std::int64_t BT = micro_batch * model.seq_len;
  const LayerGemmShapes g = layer_gemm_shapes(model, tp);
  const bool bias = model.biases;
  std::vector<LinearShape> layers = {
      {"qkv", BT, g.qkv_in, g.qkv_out, bias},
      {"proj", BT, g.proj_in, g.proj_out, bias},
      {"fc1", BT, g.fc1_in, g.fc1_out, bias},
      {"fc2", BT, g.fc2_in, g.fc2_out, bias},
      {"logits", BT, model.hidden, model.vocab / tp, false},
  };
  // SwiGLU runs as a kernel of its own after fc1, and its backward after fc2's GEMMs.
  const bool gelu = model.mlp == MlpKind::kGelu;
  layers[2].gelu_epilogue = gelu;
  layers[3].residual_epilogue = tp == 1;
  layers[3].dgelu_epilogue = gelu;
  layers[4].vocab_rows = true;
  return layers;
}

GemmMeasurement measure_linear(const LinearShape& layer, GemmPass pass,
                               const TimingOptions& timing) {
  const int BT = as_int(layer.BT, "BT"), C = as_int(layer.C, "C"), OC = as_int(layer.OC, "OC");
  GemmMeasurement g;
  g.layer = layer;
  g.pass = pass;
  std::vector<float> inp = bench_values(layer.BT * layer.C, 1);
  std::vector<float> weight = bench_values(layer.OC * layer.C, 2);
  std::vector<float> bias = bench_values(layer.OC, 3);
  std::vector<float> out(static_cast<std::size_t>(layer.BT * layer.OC));
  switch (pass) {
    case GemmPass::kForward:
      g.m = BT, g.n = OC, g.k = C;
      g.seconds = median_call_seconds(
          [&] {
            kc::matmul_forward(out.data(), inp.data(), weight.data(),
                               layer.bias ? bias.data() : nullptr, BT, C, OC);
          },
          timing);
      break;
    case GemmPass::kBackwardInput: {
      // dinp (BT, C) = dout (BT, OC) @ weight (OC, C); beta 0 so values stay bounded.
      const std::vector<float> dout = bench_values(layer.BT * layer.OC, 4);
      g.m = BT, g.n = C, g.k = OC;
      g.seconds = median_call_seconds(
          [&] {
            kc::sgemm(kc::Trans::kNo, kc::Trans::kNo, BT, C, OC, 1.0f, dout.data(), OC,
                      weight.data(), C, 0.0f, inp.data(), C);
          },
          timing);
      break;
    }
    case GemmPass::kBackwardWeight: {
      // dweight (OC, C) = dout^T (OC, BT) @ inp (BT, C).
      const std::vector<float> dout = bench_values(layer.BT * layer.OC, 4);
      g.m = OC, g.n = C, g.k = BT;
      g.seconds = median_call_seconds(
          [&] {
            kc::sgemm(kc::Trans::kYes, kc::Trans::kNo, OC, C, BT, 1.0f, dout.data(), OC,
                      inp.data(), C, 0.0f, weight.data(), C);
          },
          timing);
      break;
    }
  }
  return g;
}

std::vector<GemmSample> gemm_samples(const std::vector<GemmMeasurement>& measurements) {
  // (m, n, k) -> (total FLOPs, total seconds); std::map keeps the output sorted.
  std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t>, std::pair<double, double>> by;
  for (const GemmMeasurement& g : measurements) {
    auto& [flops, seconds] = by[{g.m, g.n, g.k}];
    flops += g.flops();
    seconds += g.seconds;
  }
  std::vector<GemmSample> samples;
  for (const auto& [shape, totals] : by) {
    GemmSample s;
    std::tie(s.m, s.n, s.k) = shape;
    s.flops_per_s = totals.first / totals.second;
    samples.push_back(s);
  }
  return samples;
}

double measure_layer_elementwise_s(std::int64_t BT, std::int64_t C, std::int64_t F,
                                   const TimingOptions& timing) {
  const int bt = as_int(BT, "BT"), c = as_int(C, "C");
  const std::int64_t n = BT * C;
  const std::int64_t nf = BT * as_int(F, "F");
  const std::vector<float> x = bench_values(n, 5), w = bench_values(C, 7), bias = bench_values(C, 8);
  const std::vector<float> fc1 = bench_values(nf, 6);
  std::vector<float> ln_out(static_cast<std::size_t>(n)), r(static_cast<std::size_t>(n)),
      y(static_cast<std::size_t>(n)), gelu_out(static_cast<std::size_t>(nf));
  std::vector<float> mean(static_cast<std::size_t>(BT)), rstd(static_cast<std::size_t>(BT));
  return median_call_seconds(
      [&] {
        // In the layer's order; r and y are rewritten from x each call (bounded values).
        kc::layernorm_forward(ln_out.data(), mean.data(), rstd.data(), x.data(), w.data(),
                              bias.data(), bt, c);
        kc::copy(r.data(), x.data(), n);
        kc::add_bias(r.data(), bias.data(), bt, c);
        kc::residual_forward(r.data(), r.data(), x.data(), n);
        kc::layernorm_forward(ln_out.data(), mean.data(), rstd.data(), r.data(), w.data(),
                              bias.data(), bt, c);
        kc::gelu_forward(gelu_out.data(), fc1.data(), nf);
        kc::copy(y.data(), x.data(), n);
        kc::add_bias(y.data(), bias.data(), bt, c);
        kc::residual_forward(y.data(), y.data(), r.data(), n);
      },
      timing);
}

double measure_layer_elementwise_backward_s(std::int64_t BT, std::int64_t C, std::int64_t F,
                                            const TimingOptions& timing) {
  const int bt = as_int(BT, "BT"), c = as_int(C, "C"), f = as_int(F, "F");
  const std::int64_t n = BT * C;
  const std::int64_t nf = BT * F;
  const std::vector<float> x = bench_values(n, 5), dy = bench_values(n, 6), w = bench_values(C, 7),
                           bias = bench_values(C, 8), fc1 = bench_values(nf, 9), dgelu = bench_values(nf, 10),
                           dqkv = bench_values(3 * n, 11);
  std::vector<float> ln_out(static_cast<std::size_t>(n)), mean(static_cast<std::size_t>(BT)),
      rstd(static_cast<std::size_t>(BT));
  kc::layernorm_forward(ln_out.data(), mean.data(), rstd.data(), x.data(), w.data(), bias.data(),
                        bt, c);
  // The kernels accumulate: over a few thousand calls of terms below ~1 the sums stay far
  // from overflow and from denormals, so every call does the same work.
  std::vector<float> dr(static_cast<std::size_t>(n)), dx(static_cast<std::size_t>(n)),
      dfc1(static_cast<std::size_t>(nf)), dw(static_cast<std::size_t>(C)),
      db(static_cast<std::size_t>(C)), dbias(static_cast<std::size_t>(3 * C + F));
  return median_call_seconds(
      [&] {
        kc::copy(dr.data(), dy.data(), n);
        kc::matmul_backward(nullptr, nullptr, dbias.data(), dy.data(), nullptr, nullptr, bt, f, c);
        kc::gelu_backward(dfc1.data(), fc1.data(), dgelu.data(), nf);
        kc::matmul_backward(nullptr, nullptr, dbias.data(), dfc1.data(), nullptr, nullptr, bt, c, f);
        kc::layernorm_backward(dr.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(),
                               mean.data(), rstd.data(), bt, c);
        kc::copy(dx.data(), dr.data(), n);
        kc::matmul_backward(nullptr, nullptr, dbias.data(), dr.data(), nullptr, nullptr, bt, c, c);
        kc::matmul_backward(nullptr, nullptr, dbias.data(), dqkv.data(), nullptr, nullptr, bt, c,
                            3 * c);
        kc::layernorm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(),
                               mean.data(), rstd.data(), bt, c);
      },
      timing);
}

double measure_attention_s(std::int64_t B, std::int64_t T, std::int64_t C, std::int64_t NH,
                           const TimingOptions& timing) {
  const int b = as_int(B, "B"), t = as_int(T, "T"), c = as_int(C, "C"), nh = as_int(NH, "NH");
  if (C % NH != 0) {
    throw ConfigError(fmt::format("calibrate: heads {} do not divide hidden {}", NH, C));
  }
  const std::vector<float> qkv = bench_values(B * T * 3 * C, 9);
  std::vector<float> out(static_cast<std::size_t>(B * T * C));
  std::vector<float> lse(static_cast<std::size_t>(B * NH * T));
  return median_call_seconds(
      [&] { kc::flash_attention_forward(out.data(), lse.data(), qkv.data(), b, t, c, nh); },
      timing);
}

double measure_attention_flops_per_s(std::int64_t B, std::int64_t T, std::int64_t C,
                                     std::int64_t NH, const TimingOptions& timing) {
  const double s = measure_attention_s(B, T, C, NH, timing);
  return attention_causal_flops(B, T, C, NH) / s;
}

double measure_attention_backward_s(std::int64_t B, std::int64_t T, std::int64_t C,
                                    std::int64_t NH, const TimingOptions& timing) {
  const int b = as_int(B, "B"), t = as_int(T, "T"), c = as_int(C, "C"), nh = as_int(NH, "NH");
  if (C % NH != 0) {
    throw ConfigError(fmt::format("calibrate: heads {} do not divide hidden {}", NH, C));
  }
  const std::vector<float> qkv = bench_values(B * T * 3 * C, 9);
  const std::vector<float> dout = bench_values(B * T * C, 13);
  std::vector<float> out(static_cast<std::size_t>(B * T * C));
  std::vector<float> lse(static_cast<std::size_t>(B * NH * T));
  kc::flash_attention_forward(out.data(), lse.data(), qkv.data(), b, t, c, nh);
  std::vector<float> dqkv(static_cast<std::size_t>(B * T * 3 * C));
  std::vector<float> scratch(
      static_cast<std::size_t>(kc::flash_attention_backward_scratch_floats(b, t, nh)));
  return median_call_seconds(
      [&] {
        kc::flash_attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(),
                                     out.data(), lse.data(), b, t, c, nh);
      },
      timing);
}

double measure_attention_backward_flops_per_s(std::int64_t B, std::int64_t T, std::int64_t C,
                                              std::int64_t NH, const TimingOptions& timing) {
  const double s = measure_attention_backward_s(B, T, C, NH, timing);
  return attention_backward_causal_flops(B, T, C, NH) / s;
}

namespace {

// Forked processes that run `work` in a loop until destroyed: the destructor raises a stop
// flag in shared memory and reaps every child, so no error path leaves one behind.
class BusyProcesses {
 public:
  BusyProcesses(int count, const std::function<void()>& work) {
    void* mem = mmap(nullptr, sizeof(std::atomic<int>), PROT_READ | PROT_WRITE,
                     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) throw std::system_error(errno, std::generic_category(), "calibrate: mmap");
    stop_ = new (mem) std::atomic<int>(0);
    for (int i = 0; i < count; ++i) {
      const pid_t pid = fork();
      if (pid == 0) {
        while (stop_->load(std::memory_order_relaxed) == 0) work();
        _exit(0);  // never back into the parent's code
      }
      if (pid < 0) {
        const int error = errno;
        stop();
        throw std::system_error(error, std::generic_category(), "calibrate: fork");
      }
      children_.push_back(pid);
    }
  }
  BusyProcesses(const BusyProcesses&) = delete;
  BusyProcesses& operator=(const BusyProcesses&) = delete;
  ~BusyProcesses() { stop(); }

 private:
  void stop() noexcept {
    if (stop_ == nullptr) return;
    stop_->store(1);
    for (pid_t pid : children_) {
      int status = 0;
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
    }
    children_.clear();
    munmap(stop_, sizeof(std::atomic<int>));
    stop_ = nullptr;
  }
  std::atomic<int>* stop_ = nullptr;
  std::vector<pid_t> children_;
};

}  // namespace

double measure_busy_cores_slowdown(const LinearShape& layer, int busy_cores,
                                   const TimingOptions& timing) {
  if (busy_cores < 2) return 1.0;
  const int BT = as_int(layer.BT, "BT"), C = as_int(layer.C, "C"), OC = as_int(layer.OC, "OC");
  const std::vector<float> inp = bench_values(layer.BT * layer.C, 1);
  const std::vector<float> weight = bench_values(layer.OC * layer.C, 2);
  const std::vector<float> bias = bench_values(layer.OC, 3);
  std::vector<float> out(static_cast<std::size_t>(layer.BT * layer.OC));
  std::vector<float> act(out.size());
  const auto work = [&] {
    kc::matmul_forward(out.data(), inp.data(), weight.data(), bias.data(), BT, C, OC);
    kc::gelu_forward(act.data(), out.data(), static_cast<std::int64_t>(out.size()));
  };
  // Alone and busy timed back to back, in pairs, and the median of the pairs' ratios: a shared
  // VM drifts by ~25% for seconds at a time, which one alone and one busy figure taken apart
  // would read as a slowdown (or a speed-up); within a pair the drift is mostly the same.
  constexpr int kPairs = 7;
  std::vector<double> ratios;
  for (int i = 0; i < kPairs; ++i) {
    const double alone_s = median_call_seconds(work, timing);
    double busy_s = 0;
    {
      BusyProcesses others(busy_cores - 1, work);
      busy_s = median_call_seconds(work, timing);
    }
    ratios.push_back(busy_s / alone_s);
  }
  return median(ratios);
}

}  // namespace strata::calibrate
