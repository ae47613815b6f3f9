// OpenBLAS's thread count held at one for a scope: a kernel that calls sgemm from inside its
// own OpenMP region (the tiled attention) must not let each of its threads start OpenBLAS's
// threads too (nested threading: on a 2-core machine, 4 busy threads and much slower steps).
// OpenBLAS's count is per process; the scope restores it on exit. It changes nothing when
// the region will run one thread (strata select's jobs share a process and run with one
// OpenMP thread, so they never race on it).
#pragma once

namespace strata::kernels::cpu {

class SerialBlasScope {
 public:
  // omp_threads: the threads of the OpenMP region the scope surrounds.
  explicit SerialBlasScope(int omp_threads);
  ~SerialBlasScope();
  SerialBlasScope(const SerialBlasScope&) = delete;
  SerialBlasScope& operator=(const SerialBlasScope&) = delete;

 private:
  int saved_ = 0;  // the count to restore; 0 when nothing was changed
};

}  // namespace strata::kernels::cpu
