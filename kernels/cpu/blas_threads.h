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

// Whether OpenBLAS's sgemm gives the same bits on one thread and on two for the shapes of a
// small model's layer GEMMs (a 128 x 192 x 64 product, each transpose). It does on the Intel
// AVX-512 machines this was first measured on; on an AMD EPYC with OpenBLAS 0.3.21 it does not
// (its threaded path blocks the sums differently), so a run's losses then move in the last
// bits with --threads. Leaves OpenBLAS's thread count as it found it.
bool blas_same_bits_at_any_thread_count();

}  // namespace strata::kernels::cpu
