// RankStreams and StreamEvent over kernels/cuda's Stream and Event owners.
#include "executor/cuda/streams.h"

#include "executor/cuda/system_error.h"
#include "kernels/cuda/cuda_check.h"

namespace strata::cuda {

StreamEvent StreamEvent::create() {
  StreamEvent e;
  e.event_ = as_system_error([] { return kernels::cuda::Event::create(/*timing=*/false); });
  return e;
}

void StreamEvent::record(cudaStream_t producer) const {
  as_system_error([&] { event_.record(producer); });
}

void StreamEvent::wait_on(cudaStream_t waiter) const {
  as_system_error([&] { CUDA_CHECK(cudaStreamWaitEvent(waiter, event_.get(), 0)); });
}

void StreamEvent::synchronize() const {
  as_system_error([&] { event_.synchronize(); });
}

RankStreams RankStreams::create() {
  RankStreams s;
  as_system_error([&] {
    s.compute_ = kernels::cuda::Stream::create();
    s.comm_ = kernels::cuda::Stream::create();
    s.copy_ = kernels::cuda::Stream::create();
  });
  return s;
}

void RankStreams::order(cudaStream_t waiter, cudaStream_t producer, const StreamEvent& event) {
  event.record(producer);
  event.wait_on(waiter);
}

void RankStreams::synchronize_all() const {
  as_system_error([&] {
    compute_.synchronize();
    comm_.synchronize();
    copy_.synchronize();
  });
}

}  // namespace strata::cuda
