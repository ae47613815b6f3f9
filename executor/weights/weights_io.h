// Model weights in and out as safetensors with Hugging Face names and layouts (hf_tensor.h:
// GPT-2's for the GPT family, Llama's for RMSNorm + SwiGLU + rotary models), under any plan:
//   - check_weights_file: before any rank starts, the checkpoint (one file, or shards named
//     by a model.safetensors.index.json: hf_checkpoint.h) against the model: every tensor
//     present with its shape (wpe may hold more positions than seq_len: the first seq_len
//     are used, as when fine-tuning GPT-2 on shorter sequences) and a float dtype (F32,
//     F16, BF16, F64); no tensor the model does not have, except the family's non-parameters
//     (GPT-2's tied lm_head and attention-mask buffers; a tied Llama's lm_head, rotary
//     buffers). GPT-2 names may carry GPT2LMHeadModel's "transformer." prefix.
//   - weights_file_init: the UnitInit (param_init.h) that gives each rank exactly its
//     slice, read from the mapped files: its TP shard (by the same global index the seeded
//     init uses), its pipeline stage's units, its ZeRO-3 partition.
//   - save_weights: the full model as one F32 file with the same names, whatever the plan:
//     each unit's DP-rank-0 holders send their TP shard to world rank 0, which places it in
//     the file's tensors and writes them (replicated tensors once, the tied wte copy not at
//     all, vocabulary padding rows dropped). Collective over the world.
// The map between a rank's slices and the full tensors is full_tensors.h's, shared with
// the checkpoints (executor/checkpoint), which save optimizer state in sharded files.
// Deliberately not here: optimizer state, writing sharded files.
#pragma once

#include <cstdint>
#include <string>

#include "cost_model/specs/model_spec.h"
#include "cost_model/specs/plan.h"
#include "executor/comm/mpi_communicator.h"
#include "executor/comm/process_groups.h"
#include "executor/engine/model_state.h"
#include "executor/model/param_init.h"

namespace strata::weights {

void check_weights_file(const std::string& path, const ModelSpec& model, const std::string& flag);

model::UnitInit weights_file_init(const std::string& path, const ModelSpec& model,
                                  const std::string& flag);

void save_weights(const std::string& path, const ModelSpec& model, const Plan& plan,
                  engine::ModelState& state, const ProcessGroups& groups,
                  MpiCommunicator& world, std::int64_t vocab_row_alignment);

}  // namespace strata::weights
