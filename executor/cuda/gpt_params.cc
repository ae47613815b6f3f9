#include "executor/cuda/gpt_params.h"

#include "executor/model/param_init.h"

#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "executor/cuda/system_error.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cuda/adamw.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/elementwise.h"

namespace strata::cuda {

GptParams::GptParams(std::vector<UnitLayout> units, std::uint64_t seed, DevicePool& pool,
                     cudaStream_t stream)
    : units_(std::move(units)) {
  for (std::size_t i = 0; i < units_.size(); ++i) {
    index_[units_[i].name] = i;
    offsets_[units_[i].name] = total_;
    total_ += (units_[i].count + kUnitAlignment - 1) / kUnitAlignment * kUnitAlignment;
  }
  const std::int64_t f32 = total_ * static_cast<std::int64_t>(sizeof(float));
  master_ = pool.allocate(f32, "params");
  params16_ = pool.allocate(total_ * static_cast<std::int64_t>(sizeof(bf16)), "params");
  grads_ = pool.allocate(f32, "gradients");
  m_ = pool.allocate(f32, "optimizer");
  v_ = pool.allocate(f32, "optimizer");
  norm_ = pool.allocate(sizeof(double), "optimizer_scratch");
  norm_scratch_ = pool.allocate(kernels::cuda::kSumOfSquaresScratchDoubles * sizeof(double),
                                "optimizer_scratch");
  // Master weights: each unit initialised on the host (the CPU backend's values), copied up.
  as_system_error([&] {
    for (const auto& unit : units_) {
      std::vector<float> host(static_cast<std::size_t>(unit.count));
      // Every element is a pure function of its index, so the ranges fill in parallel (a
      // 1.5B model is ~30 s on one core).
      constexpr std::int64_t kPieces = 64;
#pragma omp parallel for schedule(dynamic)
      for (std::int64_t piece = 0; piece < kPieces; ++piece) {
        const std::int64_t lo = unit.count * piece / kPieces;
        const std::int64_t hi = unit.count * (piece + 1) / kPieces;
        if (hi > lo) model::init_unit_range(unit, seed, host.data() + lo, lo, hi);
      }
      CUDA_CHECK(cudaMemcpyAsync(master_.as<float>() + offset(unit.name), host.data(),
                                 host.size() * sizeof(float), cudaMemcpyHostToDevice, stream));
      CUDA_CHECK(cudaStreamSynchronize(stream));  // `host` goes out of scope next
    }
  });
  kernels::cuda::cast_to_bf16(params16_.as<bf16>(), master_.as<float>(), total_, stream);
  as_system_error([&] { CUDA_CHECK(cudaStreamSynchronize(stream)); });
}

const UnitLayout& GptParams::layout(const std::string& unit) const {
  const auto it = index_.find(unit);
  if (it == index_.end()) throw std::out_of_range("GptParams: no unit '" + unit + "'");
  return units_[it->second];
}

std::int64_t GptParams::offset(const std::string& unit) const {
  const auto it = offsets_.find(unit);
  if (it == offsets_.end()) throw std::out_of_range("GptParams: no unit '" + unit + "'");
  return it->second;
}

const bf16* GptParams::weight(const std::string& unit, const std::string& segment) const {
  return weights(unit) + layout(unit).segment(segment).offset;
}

float* GptParams::grad(const std::string& unit, const std::string& segment) const {
  return grads(unit) + layout(unit).segment(segment).offset;
}

model::LayerTensors<const bf16*> GptParams::layer_weights(const std::string& unit) const {
  return model::layer_tensors(weights(unit), layer_offsets(layout(unit)));
}

model::LayerTensors<float*> GptParams::layer_grads(const std::string& unit) const {
  return model::layer_tensors(grads(unit), layer_offsets(layout(unit)));
}

void GptParams::zero_grads(cudaStream_t stream) const {
  as_system_error([&] {
    CUDA_CHECK(cudaMemsetAsync(grads_.data(), 0, static_cast<std::size_t>(total_) * sizeof(float),
                               stream));
  });
}

double GptParams::clip_and_update(const OptimizerSpec& opt, int step, cudaStream_t stream) {
  namespace kc = kernels::cuda;
  double sum_sq = 0;
  as_system_error([&] {
    CUDA_CHECK(cudaMemsetAsync(norm_.data(), 0, sizeof(double), stream));
    kc::sum_of_squares(norm_.as<double>(), norm_scratch_.as<double>(), grads_.as<float>(), total_,
                       stream);
    CUDA_CHECK(cudaMemcpyAsync(&sum_sq, norm_.data(), sizeof(double), cudaMemcpyDeviceToHost,
                               stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
  });
  const double norm = std::sqrt(sum_sq);
  const float clip = kernels::cpu::clip_scale(norm, static_cast<float>(opt.grad_clip));
  const kc::AdamWParams hp{static_cast<float>(opt.lr), static_cast<float>(opt.beta1),
                           static_cast<float>(opt.beta2), static_cast<float>(opt.eps),
                           static_cast<float>(opt.weight_decay)};
  kc::adamw_update({{master_.as<float>(), grads_.as<float>(), m_.as<float>(), v_.as<float>(),
                     params16_.as<bf16>(), total_}},
                   hp, step, clip, stream);
  return norm;
}

std::vector<float> GptParams::master(const std::string& unit, cudaStream_t stream) const {
  std::vector<float> out(static_cast<std::size_t>(layout(unit).count));
  as_system_error([&] {
    CUDA_CHECK(cudaMemcpyAsync(out.data(), master_.as<float>() + offset(unit),
                               out.size() * sizeof(float), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
  });
  return out;
}

}  // namespace strata::cuda
