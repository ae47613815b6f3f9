// Which models call a layer kernel: layer_kernels.def's `uses`, by the choices a ModelSpec
// makes (its norm, its MLP, its positions) and whether tensor parallelism splits the layer.
#pragma once

#include <cstdint>

#include "cost_model/specs/model_spec.h"

namespace strata::model {

enum KernelUse : unsigned {
  kEveryModel = 1u << 0,
  kLayerNorm = 1u << 1,
  kRmsNorm = 1u << 2,
  kGeluMlp = 1u << 3,
  kSwigluMlp = 1u << 4,
  kRotary = 1u << 5,
  kTensorParallel = 1u << 6,
};

// The uses a model run at tensor-parallel degree tp calls: kEveryModel and one per choice.
inline unsigned kernel_uses(const ModelSpec& model, std::int64_t tp) {
  unsigned uses = kEveryModel;
  uses |= model.norm == NormKind::kRmsNorm ? kRmsNorm : kLayerNorm;
  uses |= model.mlp == MlpKind::kSwiglu ? kSwigluMlp : kGeluMlp;
  if (model.position == PositionKind::kRope) uses |= kRotary;
  if (tp > 1) uses |= kTensorParallel;
  return uses;
}

}  // namespace strata::model
