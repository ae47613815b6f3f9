// ScopedThreads: sets the OpenMP thread count for a scope and restores it after, for tests
// that compare results at several thread counts.
#pragma once

#include <omp.h>

namespace strata::testing_support {

class ScopedThreads {
 public:
  explicit ScopedThreads(int n) : saved_(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~ScopedThreads() { omp_set_num_threads(saved_); }
  ScopedThreads(const ScopedThreads&) = delete;
  ScopedThreads& operator=(const ScopedThreads&) = delete;

 private:
  int saved_;
};

}  // namespace strata::testing_support
