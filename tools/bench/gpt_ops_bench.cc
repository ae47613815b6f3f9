// strata_gpt_ops_bench: times every op of one GPT training step on the GPU at a model's real
// shapes (one micro-batch of one layer, plus the head), so a slow step can be traced to the op
// that costs it: median of kReps CUDA-event timings after warm-ups, with TFLOP/s for the
// matmuls (2 * BT * C * OC per product) and GB/s for the memory-bound ops (bytes read +
// written once), and each op's share of a whole step (x layers x micro-batches).
// Inputs are random (never zeros: zeros run faster than real data on tensor cores).
// Usage: strata_gpt_ops_bench LAYERS HIDDEN HEADS FFN VOCAB MICRO_BATCH [SEQ=1024] [MICRO_BATCHES=4]
// Deliberately no correctness checks (tests/kernels does those) and no fusion experiments.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_resources.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/gelu.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/layernorm.h"

namespace {

namespace kc = strata::kernels::cuda;
using kc::bf16;

constexpr int kWarmups = 2;
constexpr int kReps = 10;

// A device buffer of n random values in [-1, 1) (bf16 or fp32).
template <class T>
kc::DeviceBuffer random_buffer(std::int64_t n, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<T> host(static_cast<std::size_t>(n));
  for (auto& x : host) x = T(dist(gen));
  kc::DeviceBuffer buf(host.size() * sizeof(T));
  buf.copy_from_host(host.data(), host.size() * sizeof(T));
  return buf;
}

struct Row {
  std::string op;
  double ms;
  double rate;  // TFLOP/s or GB/s
  const char* unit;
  double per_step_ms;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 7) {
    std::fprintf(stderr, "usage: %s LAYERS HIDDEN HEADS FFN VOCAB MICRO_BATCH [SEQ] [MICRO_BATCHES]\n",
                 argv[0]);
    return 2;
  }
  const int L = std::atoi(argv[1]), C = std::atoi(argv[2]), NH = std::atoi(argv[3]),
            F = std::atoi(argv[4]), V = std::atoi(argv[5]), B = std::atoi(argv[6]);
  const int T = argc > 7 ? std::atoi(argv[7]) : 1024;
  const int m = argc > 8 ? std::atoi(argv[8]) : 4;
  const int BT = B * T;
  const int Vp = (V + 127) / 128 * 128;
  try {
    kc::Stream stream = kc::Stream::create();
    cudaStream_t st = stream.get();
    kc::CublasLtHandle lt = kc::CublasLtHandle::create();
    const std::int64_t n = static_cast<std::int64_t>(BT) * C;
    const std::int64_t nf = static_cast<std::int64_t>(BT) * F;
    auto x = random_buffer<bf16>(n, 1), y = random_buffer<bf16>(n, 2), z = random_buffer<bf16>(n, 3);
    auto qkv = random_buffer<bf16>(3 * n, 4), dqkv = random_buffer<bf16>(3 * n, 5);
    auto h = random_buffer<bf16>(nf, 6), pre = random_buffer<bf16>(nf, 7);
    auto w_qkv = random_buffer<bf16>(3LL * C * C, 8), w_fc = random_buffer<bf16>(1LL * F * C, 9);
    auto w_fc2 = random_buffer<bf16>(1LL * F * C, 10), w_proj = random_buffer<bf16>(1LL * C * C, 11);
    auto bias = random_buffer<bf16>(std::max(3 * C, F), 12);
    auto ln_w = random_buffer<bf16>(C, 13), ln_b = random_buffer<bf16>(C, 14);
    auto wte = random_buffer<bf16>(1LL * Vp * C, 15);
    auto logits = random_buffer<bf16>(1LL * BT * Vp, 16);
    auto g_w = random_buffer<float>(1LL * Vp * C, 17), g_b = random_buffer<float>(std::max(3 * C, F), 18);
    auto mean = random_buffer<float>(BT, 19), rstd = random_buffer<float>(BT, 20);
    auto lse = random_buffer<float>(1LL * B * NH * T, 21), losses = random_buffer<float>(BT, 22);
    auto row_max = random_buffer<float>(BT, 23), row_lse = random_buffer<float>(BT, 24);
    auto ln_scratch = random_buffer<float>(kc::layernorm_backward_scratch_floats(BT, C), 25);
    auto att_scratch = random_buffer<float>(kc::attention_backward_scratch_floats(B, T, NH), 26);
    std::vector<std::int32_t> tgt(static_cast<std::size_t>(BT));
    for (int i = 0; i < BT; ++i) tgt[static_cast<std::size_t>(i)] = (i * 7919) % V;
    kc::DeviceBuffer targets(tgt.size() * 4);
    targets.copy_from_host(tgt.data(), tgt.size() * 4);
    std::vector<float> ones(static_cast<std::size_t>(BT), 1.0f / static_cast<float>(BT));
    kc::DeviceBuffer dlosses(ones.size() * 4);
    dlosses.copy_from_host(ones.data(), ones.size() * 4);
    {  // the attention inputs must be sane (lse from a real forward) for realistic timings
      kc::attention_forward(y.as<bf16>(), lse.as<float>(), qkv.as<bf16>(), B, T, C, NH, st);
      stream.synchronize();
    }

    kc::Event start = kc::Event::create(), stop = kc::Event::create();
    std::vector<Row> rows;
    const auto time_op = [&](const std::string& op, double flops, double bytes, double per_step,
                             const std::function<void()>& fn) {
      for (int i = 0; i < kWarmups; ++i) fn();
      std::vector<float> ms;
      for (int i = 0; i < kReps; ++i) {
        start.record(st);
        fn();
        stop.record(st);
        stop.synchronize();
        ms.push_back(stop.elapsed_ms_since(start));
      }
      std::sort(ms.begin(), ms.end());
      const double med = ms[ms.size() / 2];
      const bool matmul = flops > 0;
      rows.push_back({op, med, matmul ? flops / (med * 1e-3) / 1e12 : bytes / (med * 1e-3) / 1e9,
                      matmul ? "TFLOP/s" : "GB/s", med * per_step});
    };
    const double layer = static_cast<double>(L) * m;  // a layer op's calls per step
    const double head = m;
    const auto mm = [](double rows_, double k, double n_) { return 2.0 * rows_ * k * n_; };
    const double a = static_cast<double>(n) * 2;   // bytes of one (BT, C) bf16 tensor
    const double af = static_cast<double>(nf) * 2; // (BT, F)
    bf16* xb = x.as<bf16>();
    // Forward
    time_op("ln forward", 0, 2 * a, layer, [&] {
      kc::layernorm_forward(z.as<bf16>(), mean.as<float>(), rstd.as<float>(), xb, ln_w.as<bf16>(),
                            ln_b.as<bf16>(), BT, C, st);
    });
    time_op("qkv matmul+bias", mm(BT, C, 3 * C), 0, layer, [&] {
      kc::matmul_forward(qkv.as<bf16>(), xb, w_qkv.as<bf16>(), bias.as<bf16>(), BT, C, 3 * C, lt, st);
    });
    kc::attention_forward(y.as<bf16>(), lse.as<float>(), qkv.as<bf16>(), B, T, C, NH, st);
    time_op("attention forward", 2.0 * B * NH * T * static_cast<double>(T) * (C / NH), 0, layer, [&] {
      kc::attention_forward(y.as<bf16>(), lse.as<float>(), qkv.as<bf16>(), B, T, C, NH, st);
    });
    time_op("proj matmul+bias", mm(BT, C, C), 0, layer, [&] {
      kc::matmul_forward(z.as<bf16>(), y.as<bf16>(), w_proj.as<bf16>(), bias.as<bf16>(), BT, C, C, lt, st);
    });
    time_op("residual+ln forward", 0, 4 * a, layer, [&] {
      kc::fused_residual_layernorm_forward(x.as<bf16>(), z.as<bf16>(), mean.as<float>(),
                                           rstd.as<float>(), xb, y.as<bf16>(), ln_w.as<bf16>(),
                                           ln_b.as<bf16>(), BT, C, st);
    });
    time_op("fc matmul+bias+gelu(aux)", mm(BT, C, F), af, layer, [&] {
      kc::matmul_forward(h.as<bf16>(), z.as<bf16>(), w_fc.as<bf16>(), bias.as<bf16>(), BT, C, F, lt,
                         st, kc::GemmActivation::kGelu, pre.as<bf16>());
    });
    time_op("fc matmul+bias (no gelu)", mm(BT, C, F), 0, 0, [&] {
      kc::matmul_forward(h.as<bf16>(), z.as<bf16>(), w_fc.as<bf16>(), bias.as<bf16>(), BT, C, F, lt, st);
    });
    time_op("fc2 matmul+bias", mm(BT, F, C), 0, 0, [&] {
      kc::matmul_forward(y.as<bf16>(), h.as<bf16>(), w_fc2.as<bf16>(), bias.as<bf16>(), BT, F, C, lt, st);
    });
    time_op("residual add", 0, 3 * a, 0, [&] {
      kc::residual_forward(y.as<bf16>(), x.as<bf16>(), y.as<bf16>(), n, st);
    });
    time_op("fc2 matmul+bias+residual", mm(BT, F, C), 0, layer, [&] {
      kc::matmul_forward_residual(y.as<bf16>(), h.as<bf16>(), w_fc2.as<bf16>(), bias.as<bf16>(),
                                  x.as<bf16>(), BT, F, C, lt, st);
    });
    // Head (forward_s holds its backward too)
    time_op("logits matmul (V)", mm(BT, C, V), 0, 0, [&] {
      kc::matmul_forward(logits.as<bf16>(), z.as<bf16>(), wte.as<bf16>(), nullptr, BT, C, V, lt, st);
    });
    time_op("logits matmul (V padded)", mm(BT, C, Vp), 0, head, [&] {
      kc::matmul_forward(logits.as<bf16>(), z.as<bf16>(), wte.as<bf16>(), nullptr, BT, C, Vp, lt, st);
    });
    time_op("cross-entropy forward", 0, 2.0 * BT * V, 0, [&] {
      kc::cross_entropy_forward(losses.as<float>(), row_max.as<float>(), row_lse.as<float>(),
                                logits.as<bf16>(), targets.as<std::int32_t>(), BT, V, st);
    });
    time_op("cross-entropy backward", 0, 4.0 * BT * V, 0, [&] {
      kc::cross_entropy_backward(logits.as<bf16>(), dlosses.as<float>(), logits.as<bf16>(),
                                 row_lse.as<float>(), targets.as<std::int32_t>(), BT, V, st);
    });
    time_op("cross-entropy fwd+bwd (one pass)", 0, 4.0 * BT * V, head, [&] {
      kc::cross_entropy_forward_backward(losses.as<float>(), row_max.as<float>(),
                                         row_lse.as<float>(), logits.as<bf16>(),
                                         dlosses.as<float>(), targets.as<std::int32_t>(), BT, V,
                                         st, Vp);
    });
    time_op("logits dinp (V)", mm(BT, C, V), 0, 0, [&] {
      kc::matmul_backward(z.as<bf16>(), nullptr, nullptr, logits.as<bf16>(), nullptr, wte.as<bf16>(),
                          BT, C, V, lt, st, true);
    });
    time_op("logits dweight (V)", mm(BT, C, V), 0, 0, [&] {
      kc::matmul_backward(nullptr, g_w.as<float>(), nullptr, logits.as<bf16>(), z.as<bf16>(), nullptr,
                          BT, C, V, lt, st);
    });
    time_op("logits dinp (V padded)", mm(BT, C, Vp), 0, head, [&] {
      kc::matmul_backward(z.as<bf16>(), nullptr, nullptr, logits.as<bf16>(), nullptr, wte.as<bf16>(),
                          BT, C, Vp, lt, st, true);
    });
    time_op("logits dweight (V padded)", mm(BT, C, Vp), 0, head, [&] {
      kc::matmul_backward(nullptr, g_w.as<float>(), nullptr, logits.as<bf16>(), z.as<bf16>(), nullptr,
                          BT, C, Vp, lt, st);
    });
    // Backward of a layer
    const struct { const char* name; const kc::DeviceBuffer* inp; const kc::DeviceBuffer* w; int in, out; } linears[] = {
        {"fc2", &h, &w_fc2, F, C}, {"fc", &z, &w_fc, C, F}, {"proj", &y, &w_proj, C, C},
        {"qkv", &z, &w_qkv, C, 3 * C}};
    for (const auto& lin : linears) {
      const kc::DeviceBuffer& dout = lin.out == F ? pre : (lin.out == 3 * C ? dqkv : x);
      kc::DeviceBuffer& dinp = lin.in == F ? h : y;
      // fc2's dinp runs fused with the GeLU backward in a step (below).
      time_op(std::string(lin.name) + " dinp", mm(BT, lin.in, lin.out), 0,
              lin.in == F ? 0 : layer, [&] {
        kc::matmul_backward(dinp.as<bf16>(), nullptr, nullptr, dout.as<bf16>(), nullptr,
                            lin.w->as<bf16>(), BT, lin.in, lin.out, lt, st, true);
      });
      time_op(std::string(lin.name) + " dweight", mm(BT, lin.in, lin.out), 0, layer, [&] {
        kc::matmul_backward(nullptr, g_w.as<float>(), nullptr, dout.as<bf16>(), lin.inp->as<bf16>(),
                            nullptr, BT, lin.in, lin.out, lt, st);
      });
      time_op(std::string(lin.name) + " dbias", 0, static_cast<double>(BT) * lin.out * 2, layer, [&] {
        kc::matmul_backward(nullptr, nullptr, g_b.as<float>(), dout.as<bf16>(), nullptr, nullptr, BT,
                            lin.in, lin.out, lt, st);
      });
    }
    time_op("fc2 dinp+dgelu (fused)", mm(BT, F, C), 0, layer, [&] {
      kc::matmul_backward_dgelu(h.as<bf16>(), nullptr, nullptr, x.as<bf16>(), nullptr,
                                w_fc2.as<bf16>(), pre.as<bf16>(), BT, F, C, lt, st);
    });
    time_op("gelu backward", 0, 3 * af, 0, [&] {
      kc::gelu_backward(h.as<bf16>(), pre.as<bf16>(), h.as<bf16>(), nf, st, false);
    });
    time_op("ln backward", 0, 4 * a, 2 * layer, [&] {
      kc::layernorm_backward(x.as<bf16>(), g_b.as<float>(), g_b.as<float>() + C, z.as<bf16>(), y.as<bf16>(),
                             ln_w.as<bf16>(), mean.as<float>(), rstd.as<float>(), BT, C,
                             ln_scratch.as<float>(), st);
    });
    time_op("attention backward", 5.0 * B * NH * T * static_cast<double>(T) * (C / NH), 0, layer, [&] {
      kc::attention_backward(dqkv.as<bf16>(), att_scratch.as<float>(), z.as<bf16>(), qkv.as<bf16>(),
                             y.as<bf16>(), lse.as<float>(), B, T, C, NH, st, /*overwrite=*/true);
    });
    time_op("memset (BT, 3C) bf16", 0, 3 * a, 0, [&] {
      CUDA_CHECK(cudaMemsetAsync(dqkv.get(), 0, static_cast<std::size_t>(3 * a), st));
    });
    double total = 0;
    std::printf("GPT L=%d C=%d NH=%d F=%d V=%d (padded %d), micro-batch %d x T %d, %d micro-batches\n",
                L, C, NH, F, V, Vp, B, T, m);
    std::printf("%-28s %9s %12s %12s\n", "op", "ms", "rate", "ms per step");
    for (const Row& r : rows) {
      total += r.per_step_ms;
      std::printf("%-28s %9.3f %8.1f %-7s %9.1f\n", r.op.c_str(), r.ms, r.rate, r.unit, r.per_step_ms);
    }
    std::printf("sum over a step (ops with a per-step count): %.1f ms\n", total);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata_gpt_ops_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
