// Backend's defaults (see backend.h): the step scalars' host-written part, the device-scalar
// optimizer and norm for backends whose device memory the host reads, and the captured-step
// calls of a backend that cannot capture.
#include "executor/engine/backend.h"

#include <cmath>
#include <stdexcept>

#include "kernels/cpu/adamw.h"

namespace strata::engine {

DeviceStepScalars step_scalars(const AdamWStep& hp) {
  DeviceStepScalars s;
  s.values.lr = hp.lr;
  s.values.bias_correction1 = kernels::cpu::adamw_bias_correction(hp.beta1, hp.step);
  s.values.bias_correction2 = kernels::cpu::adamw_bias_correction(hp.beta2, hp.step);
  s.step = hp.step;
  return s;
}

void Backend::adamw_from_device(const std::vector<AdamWSpan>& tensors, const AdamWStep& hp,
                                const DeviceStepScalars* scalars) {
  AdamWStep read = hp;
  read.lr = scalars->values.lr;
  read.step = scalars->step;
  adamw(tensors, read, scalars->values.grad_scale);
}

void Backend::sum_squares_on_device(const std::vector<std::vector<FloatSpan>>& groups,
                                    double* sum) {
  double total = 0;
  for (const std::vector<FloatSpan>& group : groups) total += sum_of_squares_over(group);
  *sum = total;
}

void Backend::clip_factor_on_device(float max_norm, DeviceStepScalars* scalars) {
  scalars->values.grad_scale = kernels::cpu::clip_scale(std::sqrt(scalars->grad_sq), max_norm);
}

namespace {
[[noreturn]] void cannot_capture(std::string_view backend, const char* call) {
  throw std::logic_error(std::string(backend) + " backend: " + call +
                         " without captured steps (captures_steps() is false)");
}
}  // namespace

void Backend::begin_capture() { cannot_capture(name(), "begin_capture"); }
void Backend::end_capture() { cannot_capture(name(), "end_capture"); }
void Backend::launch_graph() { cannot_capture(name(), "launch_graph"); }

}  // namespace strata::engine
