// The CPU backend's causal attention, forward + backward, beside cblas_sgemm on this machine
// in the same run (issue 19: the attention ran at ~13 GFLOP/s against ~125 for the linear
// layers' GEMMs). Shapes of the GPT (hidden 256, 4 heads of 64), 2048 tokens per
// call: batch 8 at T = 256 and batch 2 at T = 1024.
//
// GFLOP/s counts the model's FLOPs: causal forward 2 B NH T^2 HS (two GEMMs of 2 T^2 HS,
// half of each masked), backward twice that; the backward's recomputed scores (FlashAttention
// -2's fifth GEMM) and what the diagonal tiles compute past the mask (rounded to 6-row groups
// and 16-column vectors) are work done but not counted. Issue 19's target: forward +
// backward at no less than half the rate of the first sgemm row, in the same run.
// The sgemm rows use the linear layers' shape (2048 x 768 x 256, the qkv projection) and the
// per-head score shape (T x T x 64) for comparison.
//
// Threads: OMP_NUM_THREADS and OPENBLAS_NUM_THREADS as set in the environment. Medians:
// --benchmark_repetitions=N --benchmark_report_aggregates_only=true.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/flash_attention.h"
#include "kernels/cpu/gemm.h"

namespace {

namespace kc = strata::kernels::cpu;

constexpr int kHidden = 256;
constexpr int kHeads = 4;
constexpr int kHeadSize = kHidden / kHeads;
constexpr int kTokens = 2048;

std::vector<float> filled(std::int64_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = dist(gen);
  return v;
}

double causal_forward_flops(int B, int T) {
  return 2.0 * B * kHeads * static_cast<double>(T) * T * kHeadSize;
}

void set_rate(benchmark::State& state, double flops_per_iteration) {
  state.counters["GFLOP/s"] = benchmark::Counter(
      flops_per_iteration * static_cast<double>(state.iterations()) / 1e9,
      benchmark::Counter::kIsRate);
}

struct AttentionBuffers {
  int B, T;
  std::vector<float> qkv, dout, out, lse, dqkv, scratch;
  explicit AttentionBuffers(int T_)
      : B(kTokens / T_), T(T_), qkv(filled(std::int64_t{kTokens} * 3 * kHidden, 1)),
        dout(filled(std::int64_t{kTokens} * kHidden, 2)),
        out(static_cast<std::size_t>(kTokens) * kHidden),
        lse(static_cast<std::size_t>(B) * kHeads * T),
        dqkv(qkv.size()),
        scratch(static_cast<std::size_t>(
            kc::flash_attention_backward_scratch_floats(B, T, kHeads))) {}
};

void BM_FlashAttentionForwardBackward(benchmark::State& state) {
  AttentionBuffers a(static_cast<int>(state.range(0)));
  for (auto _ : state) {
    kc::flash_attention_forward(a.out.data(), a.lse.data(), a.qkv.data(), a.B, a.T, kHidden,
                                kHeads);
    kc::flash_attention_backward(a.dqkv.data(), a.scratch.data(), a.dout.data(), a.qkv.data(),
                                 a.out.data(), a.lse.data(), a.B, a.T, kHidden, kHeads);
    benchmark::DoNotOptimize(a.dqkv.data());
  }
  set_rate(state, 3.0 * causal_forward_flops(a.B, a.T));
}

void BM_FlashAttentionForward(benchmark::State& state) {
  AttentionBuffers a(static_cast<int>(state.range(0)));
  for (auto _ : state) {
    kc::flash_attention_forward(a.out.data(), a.lse.data(), a.qkv.data(), a.B, a.T, kHidden,
                                kHeads);
    benchmark::DoNotOptimize(a.out.data());
  }
  set_rate(state, causal_forward_flops(a.B, a.T));
}

void BM_FlashAttentionBackward(benchmark::State& state) {
  AttentionBuffers a(static_cast<int>(state.range(0)));
  kc::flash_attention_forward(a.out.data(), a.lse.data(), a.qkv.data(), a.B, a.T, kHidden,
                              kHeads);
  for (auto _ : state) {
    kc::flash_attention_backward(a.dqkv.data(), a.scratch.data(), a.dout.data(), a.qkv.data(),
                                 a.out.data(), a.lse.data(), a.B, a.T, kHidden, kHeads);
    benchmark::DoNotOptimize(a.dqkv.data());
  }
  set_rate(state, 2.0 * causal_forward_flops(a.B, a.T));
}

// The materialised kernels the backend ran before (attention.h), for the before/after.
void BM_MaterialisedAttentionForwardBackward(benchmark::State& state) {
  AttentionBuffers a(static_cast<int>(state.range(0)));
  std::vector<float> probs(static_cast<std::size_t>(a.B) * kHeads * a.T * a.T);
  std::vector<float> scratch(
      static_cast<std::size_t>(kc::attention_backward_scratch_floats(a.B, a.T, kHeads)));
  for (auto _ : state) {
    kc::attention_forward(a.out.data(), probs.data(), a.qkv.data(), a.B, a.T, kHidden, kHeads);
    kc::attention_backward(a.dqkv.data(), scratch.data(), a.dout.data(), a.qkv.data(),
                           probs.data(), a.B, a.T, kHidden, kHeads);
    benchmark::DoNotOptimize(a.dqkv.data());
  }
  set_rate(state, 3.0 * causal_forward_flops(a.B, a.T));
}

// c (M, N) = a (M, K) @ b (N, K)^T, as the linear layers call it.
void BM_Sgemm(benchmark::State& state) {
  const int M = static_cast<int>(state.range(0));
  const int N = static_cast<int>(state.range(1));
  const int K = static_cast<int>(state.range(2));
  const auto a = filled(std::int64_t{M} * K, 3);
  const auto b = filled(std::int64_t{N} * K, 4);
  std::vector<float> c(static_cast<std::size_t>(M) * N);
  for (auto _ : state) {
    kc::sgemm(kc::Trans::kNo, kc::Trans::kYes, M, N, K, 1.0f, a.data(), K, b.data(), K, 0.0f,
              c.data(), N);
    benchmark::DoNotOptimize(c.data());
  }
  set_rate(state, 2.0 * M * N * K);
}

BENCHMARK(BM_Sgemm)
    ->Args({kTokens, 3 * kHidden, kHidden})
    ->Args({256, 256, kHeadSize})
    ->Args({1024, 1024, kHeadSize})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_FlashAttentionForwardBackward)->Arg(256)->Arg(1024)->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_FlashAttentionForward)->Arg(256)->Arg(1024)->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_FlashAttentionBackward)->Arg(256)->Arg(1024)->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_MaterialisedAttentionForwardBackward)->Arg(256)->Arg(1024)
    ->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
