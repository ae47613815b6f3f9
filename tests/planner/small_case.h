// A model, cluster and training setup small enough that the planner's candidate counts can
// be worked out by hand (planner tests). Built in code, not loaded, so the counts do not
// move when a bundled config changes.
#pragma once

#include "cost_model/specs/cluster_spec.h"
#include "cost_model/specs/model_spec.h"
#include "cost_model/specs/train_spec.h"
#include "cost_model/specs/units.h"

namespace strata::testing {

// 4 layers, hidden 64, 4 heads, ffn 256, sequence 32, vocabulary 128.
inline ModelSpec small_model() {
  ModelSpec model;
  model.name = "small";
  model.layers = 4;
  model.hidden = 64;
  model.heads = 4;
  model.seq_len = 32;
  model.vocab = 128;
  model.ffn_hidden = 256;
  return model;
}

// One node of 4 devices with A100-like figures; `device_gib` sets the device memory so tests
// can make every plan fit (80) or none (a fraction of a MiB). Run by the CPU backend, whose
// executor trains any head size: the model's 16 is not one the CUDA kernels run
// (backend_facts.h), and the planner offers strata's executor nothing it cannot train.
inline ClusterSpec small_cluster(double device_gib = 80.0, std::int64_t nodes = 1) {
  using namespace units;
  ClusterSpec cluster;
  cluster.name = "small";
  cluster.backend = Backend::kCpu;
  cluster.nodes = nodes;
  cluster.gpus_per_node = 4;
  cluster.device = {"a100-like", device_gib * kGiB, 312e12, 19.5e12, 2039 * kGB, "test"};
  cluster.host = {1024 * kGiB, 25 * kGB, 64, 2e12, 200 * kGB, "test"};
  cluster.nvme = {4000 * kGB, 25 * kGB, 10 * kGB, "test"};
  cluster.intra_node = {300 * kGB, 2 * kMicrosecond, "test"};
  cluster.inter_node = {25 * kGB, 5 * kMicrosecond, "test"};
  return cluster;
}

inline TrainSpec small_train(std::int64_t global_batch = 8) {
  TrainSpec train;
  train.global_batch = global_batch;
  train.precision = Precision::kBf16;
  train.steps = 1;
  return train;
}

}  // namespace strata::testing
