// Fused softmax cross-entropy and its vocab-parallel pieces (see cross_entropy.h). Rows are
// independent, so everything runs OpenMP over rows; sums of exponentials accumulate in
// double in index order, so results do not depend on the thread count.
#include "kernels/cpu/cross_entropy.h"

#include <cmath>
#include <cstdint>

#include "kernels/cpu/arg_checks.h"

namespace strata::kernels::cpu {
namespace {

float row_max_of(const float* x, int n) {
  float m = -INFINITY;
  for (int j = 0; j < n; ++j) m = x[j] > m ? x[j] : m;
  return m;
}

double row_sum_exp(const float* x, int n, float max) {
  double s = 0.0;
  for (int j = 0; j < n; ++j) s += std::exp(x[j] - max);
  return s;
}

void check_targets(const char* kernel, const std::int32_t* targets, int BT, int V) {
  for (int i = 0; i < BT; ++i) {
    if (targets[i] < 0 || targets[i] >= V) {
      throw KernelError(fmt::format("{}: targets[{}] = {}; expected in [0, {})", kernel, i,
                                    targets[i], V));
    }
  }
}

void check_rows(const char* kernel, int BT, int V, const char* v_name) {
  detail::require_positive(kernel, "BT", BT);
  detail::require_positive(kernel, v_name, V);
}

}  // namespace

void cross_entropy_forward(float* losses, float* row_max, float* row_lse, const float* logits,
                           const std::int32_t* targets, int BT, int V) {
  constexpr const char* kName = "cross_entropy_forward";
  detail::require_tensor(kName, "losses", losses);
  detail::require_tensor(kName, "row_max", row_max);
  detail::require_tensor(kName, "row_lse", row_lse);
  detail::require_tensor(kName, "logits", logits);
  detail::require_tensor(kName, "targets", targets);
  check_rows(kName, BT, V, "V");
  check_targets(kName, targets, BT, V);
#pragma omp parallel for schedule(static)
  for (int i = 0; i < BT; ++i) {
    const float* x = logits + static_cast<std::int64_t>(i) * V;
    const float m = row_max_of(x, V);
    const double lse = m + std::log(row_sum_exp(x, V, m));
    row_max[i] = m;
    row_lse[i] = static_cast<float>(lse);
    losses[i] = static_cast<float>(lse - x[targets[i]]);
  }
}

void cross_entropy_backward(float* dlogits, const float* dlosses, const float* logits,
                            const float* row_lse, const std::int32_t* targets, int BT, int V) {
  constexpr const char* kName = "cross_entropy_backward";
  detail::require_tensor(kName, "targets", targets);
  check_rows(kName, BT, V, "V");
  check_targets(kName, targets, BT, V);
  vocab_parallel_cross_entropy_backward(dlogits, dlosses, logits, row_lse, targets, BT, V, 0);
}

void vocab_parallel_row_max(float* local_max, const float* logits, int BT, int Vlocal) {
  constexpr const char* kName = "vocab_parallel_row_max";
  detail::require_tensor(kName, "local_max", local_max);
  detail::require_tensor(kName, "logits", logits);
  check_rows(kName, BT, Vlocal, "Vlocal");
#pragma omp parallel for schedule(static)
  for (int i = 0; i < BT; ++i) {
    local_max[i] = row_max_of(logits + static_cast<std::int64_t>(i) * Vlocal, Vlocal);
  }
}

void vocab_parallel_sum_exp(float* local_sum, const float* logits, const float* global_max,
                            int BT, int Vlocal) {
  constexpr const char* kName = "vocab_parallel_sum_exp";
  detail::require_tensor(kName, "local_sum", local_sum);
  detail::require_tensor(kName, "logits", logits);
  detail::require_tensor(kName, "global_max", global_max);
  check_rows(kName, BT, Vlocal, "Vlocal");
#pragma omp parallel for schedule(static)
  for (int i = 0; i < BT; ++i) {
    local_sum[i] = static_cast<float>(
        row_sum_exp(logits + static_cast<std::int64_t>(i) * Vlocal, Vlocal, global_max[i]));
  }
}

void vocab_parallel_target_logit(float* target_logit, const float* logits,
                                 const std::int32_t* targets, int BT, int Vlocal,
                                 int vocab_start) {
  constexpr const char* kName = "vocab_parallel_target_logit";
  detail::require_tensor(kName, "target_logit", target_logit);
  detail::require_tensor(kName, "logits", logits);
  detail::require_tensor(kName, "targets", targets);
  check_rows(kName, BT, Vlocal, "Vlocal");
  detail::require_non_negative(kName, "vocab_start", vocab_start);
  for (int i = 0; i < BT; ++i) {
    if (targets[i] < 0) {
      throw KernelError(
          fmt::format("{}: targets[{}] = {}; expected >= 0", kName, i, targets[i]));
    }
    const std::int64_t j = static_cast<std::int64_t>(targets[i]) - vocab_start;
    target_logit[i] =
        (j >= 0 && j < Vlocal) ? logits[static_cast<std::int64_t>(i) * Vlocal + j] : 0.0f;
  }
}

void vocab_parallel_loss(float* losses, float* row_lse, const float* global_max,
                         const float* global_sum, const float* target_logit, int BT) {
  constexpr const char* kName = "vocab_parallel_loss";
  detail::require_tensor(kName, "losses", losses);
  detail::require_tensor(kName, "row_lse", row_lse);
  detail::require_tensor(kName, "global_max", global_max);
  detail::require_tensor(kName, "global_sum", global_sum);
  detail::require_tensor(kName, "target_logit", target_logit);
  detail::require_positive(kName, "BT", BT);
  for (int i = 0; i < BT; ++i) {
    if (!(global_sum[i] > 0.0f)) {
      throw KernelError(fmt::format("{}: global_sum[{}] = {}; expected > 0 (sum of exp)", kName,
                                    i, global_sum[i]));
    }
    const double lse = static_cast<double>(global_max[i]) + std::log(double{global_sum[i]});
    row_lse[i] = static_cast<float>(lse);
    losses[i] = static_cast<float>(lse - target_logit[i]);
  }
}

void vocab_parallel_cross_entropy_backward(float* dlogits, const float* dlosses,
                                           const float* logits, const float* row_lse,
                                           const std::int32_t* targets, int BT, int Vlocal,
                                           int vocab_start) {
  constexpr const char* kName = "vocab_parallel_cross_entropy_backward";
  detail::require_tensor(kName, "dlogits", dlogits);
  detail::require_tensor(kName, "dlosses", dlosses);
  detail::require_tensor(kName, "logits", logits);
  detail::require_tensor(kName, "row_lse", row_lse);
  detail::require_tensor(kName, "targets", targets);
  check_rows(kName, BT, Vlocal, "Vlocal");
  detail::require_non_negative(kName, "vocab_start", vocab_start);
  if (dlogits == logits) {
    throw KernelError(fmt::format("{}: dlogits aliases logits; expected separate buffers "
                                  "(dlogits is accumulated into)", kName));
  }
#pragma omp parallel for schedule(static)
  for (int i = 0; i < BT; ++i) {
    const std::int64_t row = static_cast<std::int64_t>(i) * Vlocal;
    const float* x = logits + row;
    float* dx = dlogits + row;
    const float lse = row_lse[i];
    const float dl = dlosses[i];
    for (int j = 0; j < Vlocal; ++j) dx[j] += std::exp(x[j] - lse) * dl;
    const std::int64_t jt = static_cast<std::int64_t>(targets[i]) - vocab_start;
    if (jt >= 0 && jt < Vlocal) dx[jt] -= dl;
  }
}

}  // namespace strata::kernels::cpu
