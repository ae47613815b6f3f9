// Test helpers for the CPU kernels: central finite differences of a scalar loss worked in
// double, an elementwise closeness check |a - b| <= atol + rtol * |ref| that reports the
// worst element, and seeded random fills. Deliberately no kernel knowledge: the caller
// supplies the loss as a closure over its own buffers.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace strata::kernels::testing {

// Uniform values in [lo, hi) from a fixed seed (tests are deterministic).
std::vector<float> random_vector(std::int64_t n, std::uint32_t seed, float lo = -1.0f,
                                 float hi = 1.0f);

// Checks analytic[i] against the central difference (L(x + h) - L(x - h)) / (2h) for every
// element of x, where L is `loss` evaluated after perturbing x[i] in place (the actual fp32
// step is used as the denominator). x is restored afterwards. Passes when every element
// satisfies |analytic - numeric| <= atol + rtol * |numeric|; otherwise the message names the
// worst element, both values and the tolerance.
::testing::AssertionResult gradient_matches(const std::string& what, std::span<float> x,
                                            std::span<const float> analytic,
                                            const std::function<double()>& loss, double h,
                                            double atol, double rtol);

// |got[i] - ref[i]| <= atol + rtol * |ref[i]| for all i; reports the worst element.
::testing::AssertionResult all_close(const std::string& what, std::span<const float> got,
                                     std::span<const double> ref, double atol, double rtol);
::testing::AssertionResult all_close(const std::string& what, std::span<const float> got,
                                     std::span<const float> ref, double atol, double rtol);

// sum_i out[i] * w[i] in double: the scalar loss whose gradient w.r.t. out is w.
double weighted_sum(std::span<const float> out, std::span<const float> w);

// got - before, elementwise: the part a backward kernel ACCUMULATED onto prefilled grads.
std::vector<float> accumulated_part(std::span<const float> got,
                                    std::span<const float> before);

}  // namespace strata::kernels::testing
