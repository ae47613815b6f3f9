// The bundled configs (configs/<kind>/<name>.json) as the cost model's tests load them.
#pragma once

#include <string>

#include "cost_model/cluster_spec.h"
#include "cost_model/model_spec.h"
#include "cost_model/train_spec.h"

namespace strata::testing {

inline ModelSpec bundled_model(const std::string& name) {
  return ModelSpec::load(std::string(STRATA_SOURCE_DIR) + "/configs/models/" + name + ".json");
}
inline ClusterSpec bundled_cluster(const std::string& name) {
  return ClusterSpec::load(std::string(STRATA_SOURCE_DIR) + "/configs/clusters/" + name + ".json");
}
inline TrainSpec bundled_train(const std::string& name) {
  return TrainSpec::load(std::string(STRATA_SOURCE_DIR) + "/configs/train/" + name + ".json");
}

}  // namespace strata::testing
