// The CUDA backend's host stream (see host_function_stream.h).
#include "executor/cuda/host_function_stream.h"

#include <utility>

#include "kernels/cuda/cuda_check.h"

namespace strata::cuda {

HostFunctionStream HostFunctionStream::create() {
  HostFunctionStream s;
  s.stream_ = kernels::cuda::Stream::create();
  s.failure_ = std::make_shared<Failure>();
  return s;
}

void HostFunctionStream::submit(std::function<void()> work) {
  auto task = std::make_unique<Task>(Task{std::move(work), failure_});
  CUDA_CHECK(cudaLaunchHostFunc(stream_.get(), &HostFunctionStream::run, task.get()));
  task.release();  // run() owns it now
}

void CUDART_CB HostFunctionStream::run(void* raw) noexcept {
  const std::unique_ptr<Task> task(static_cast<Task*>(raw));
  {
    const std::lock_guard<std::mutex> lock(task->failure->mutex);
    if (task->failure->error) return;  // after a failure: skipped
  }
  try {
    task->work();
  } catch (...) {
    const std::lock_guard<std::mutex> lock(task->failure->mutex);
    task->failure->error = std::current_exception();
  }
}

void HostFunctionStream::rethrow_failure() {
  if (!failure_) return;
  std::exception_ptr error;
  {
    const std::lock_guard<std::mutex> lock(failure_->mutex);
    error = std::exchange(failure_->error, nullptr);
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace strata::cuda
