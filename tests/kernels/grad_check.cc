// Finite-difference and closeness helpers for the kernel tests (see grad_check.h).
#include "tests/kernels/grad_check.h"

#include <cmath>
#include <cstddef>
#include <sstream>

namespace strata::kernels::testing {

std::vector<float> random_vector(std::int64_t n, std::uint32_t seed, float lo, float hi) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = dist(gen);
  return v;
}

namespace {

struct Worst {
  double excess = -1.0;  // |a - b| - tolerance; > 0 means a failure
  std::size_t index = 0;
  double got = 0.0;
  double ref = 0.0;
  double tol = 0.0;
  std::size_t failures = 0;
};

void consider(Worst& w, std::size_t i, double got, double ref, double atol, double rtol) {
  const double tol = atol + rtol * std::fabs(ref);
  const double err = std::fabs(got - ref);
  const double excess = std::isfinite(err) ? err - tol : INFINITY;
  if (excess > 0.0) ++w.failures;
  if (excess > w.excess || i == 0) {
    w = Worst{excess, i, got, ref, tol, w.failures};
  }
}

::testing::AssertionResult verdict(const std::string& what, const Worst& w, std::size_t n,
                                   const char* got_name, const char* ref_name) {
  std::ostringstream msg;
  msg << what << ": worst element [" << w.index << "] of " << n << ": " << got_name << " = "
      << w.got << ", " << ref_name << " = " << w.ref << ", |diff| = " << std::fabs(w.got - w.ref)
      << ", tolerance = " << w.tol;
  if (w.failures == 0) return ::testing::AssertionSuccess() << msg.str();
  return ::testing::AssertionFailure() << msg.str() << " (" << w.failures << " elements fail)";
}

}  // namespace

::testing::AssertionResult gradient_matches(const std::string& what, std::span<float> x,
                                            std::span<const float> analytic,
                                            const std::function<double()>& loss, double h,
                                            double atol, double rtol) {
  if (x.size() != analytic.size()) {
    return ::testing::AssertionFailure()
           << what << ": " << x.size() << " inputs but " << analytic.size() << " gradients";
  }
  Worst worst;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float saved = x[i];
    const float plus = static_cast<float>(saved + h);
    const float minus = static_cast<float>(saved - h);
    x[i] = plus;
    const double l_plus = loss();
    x[i] = minus;
    const double l_minus = loss();
    x[i] = saved;
    const double numeric =
        (l_plus - l_minus) / (static_cast<double>(plus) - static_cast<double>(minus));
    consider(worst, i, analytic[i], numeric, atol, rtol);
  }
  return verdict(what, worst, x.size(), "analytic", "finite-difference");
}

::testing::AssertionResult all_close(const std::string& what, std::span<const float> got,
                                     std::span<const double> ref, double atol, double rtol) {
  if (got.size() != ref.size()) {
    return ::testing::AssertionFailure()
           << what << ": sizes differ, " << got.size() << " vs " << ref.size();
  }
  Worst worst;
  for (std::size_t i = 0; i < got.size(); ++i) consider(worst, i, got[i], ref[i], atol, rtol);
  return verdict(what, worst, got.size(), "got", "reference");
}

::testing::AssertionResult all_close(const std::string& what, std::span<const float> got,
                                     std::span<const float> ref, double atol, double rtol) {
  std::vector<double> r(ref.begin(), ref.end());
  return all_close(what, got, std::span<const double>(r), atol, rtol);
}

double weighted_sum(std::span<const float> out, std::span<const float> w) {
  double s = 0.0;
  for (std::size_t i = 0; i < out.size(); ++i) s += static_cast<double>(out[i]) * w[i];
  return s;
}

std::vector<float> accumulated_part(std::span<const float> got,
                                    std::span<const float> before) {
  std::vector<float> d(got.size());
  for (std::size_t i = 0; i < got.size(); ++i) d[i] = got[i] - before[i];
  return d;
}

}  // namespace strata::kernels::testing
