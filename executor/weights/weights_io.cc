// Loading and saving GPT-2 safetensors under any plan (see weights_io.h).
#include "executor/weights/weights_io.h"

#include <mpi.h>

#include <map>
#include <memory>
#include <set>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cost_model/errors.h"
#include "cost_model/partition.h"
#include "executor/comm/mpi_check.h"
#include "executor/weights/full_tensors.h"
#include "executor/weights/gpt2_tensors.h"
#include "executor/weights/safetensors.h"

namespace strata::weights {
namespace {

std::string shape_text(const std::vector<std::int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

const TensorEntry* lookup(const SafetensorsFile& file, const std::string& name) {
  const TensorEntry* t = file.find(name);
  return t != nullptr ? t : file.find("transformer." + name);
}

// Element (R, C) of strata's global tensor: its index in the file's tensor.
std::int64_t file_index(const Gpt2Tensor& g, const TensorEntry& t, std::int64_t row, std::int64_t col) {
  if (g.transposed) return col * t.shape[1] + row;  // HF (in, out): in = strata's column
  const std::int64_t cols = t.shape.size() == 2 ? t.shape[1] : 1;
  return row * cols + col;
}

void check_file(const SafetensorsFile& file, const ModelSpec& model, const std::string& flag) {
  const auto bad = [&](const std::string& what) {
    return ConfigError(fmt::format("{}: '{}': {}", flag, file.path(), what));
  };
  std::set<std::string> expected;
  for (const Gpt2Tensor& g : gpt2_tensors(model)) {
    const TensorEntry* t = lookup(file, g.name);
    if (t == nullptr) {
      throw bad(fmt::format("no tensor '{}' (shape {}), which model {} needs", g.name,
                            shape_text(g.shape), model.name));
    }
    expected.insert(t->name);
    const bool positions = g.segment == "wpe";
    const bool shape_ok = positions ? t->shape.size() == 2 && t->shape[0] >= g.shape[0] && t->shape[1] == g.shape[1]
                                    : t->shape == g.shape;
    if (!shape_ok) {
      throw bad(fmt::format("tensor '{}' has shape {}, expected {}{} (model {})", t->name,
                            shape_text(t->shape), shape_text(g.shape),
                            positions ? " or more positions" : "", model.name));
    }
    if (!SafetensorsFile::readable_dtype(t->dtype)) {
      throw bad(fmt::format("tensor '{}' has dtype {}, expected F32, F16, BF16 or F64", t->name, t->dtype));
    }
  }
  for (const TensorEntry& t : file.entries()) {
    if (expected.count(t.name) == 0 && !is_ignored_gpt2_tensor(t.name)) {
      throw bad(fmt::format("tensor '{}' is not a parameter of model {} ({} layers, GPT-2 names)",
                            t.name, model.name, model.layers));
    }
  }
}

}  // namespace

void check_weights_file(const std::string& path, const ModelSpec& model, const std::string& flag) {
  check_file(SafetensorsFile(path, flag), model, flag);
}

model::UnitInit weights_file_init(const std::string& path, const ModelSpec& model,
                                  const std::string& flag) {
  auto file = std::make_shared<SafetensorsFile>(path, flag);
  check_file(*file, model, flag);
  std::map<std::pair<std::string, std::string>, Gpt2Tensor> by_segment;
  for (Gpt2Tensor& g : gpt2_tensors(model)) by_segment[{g.unit, g.segment}] = std::move(g);
  return unit_init_from([file, by_segment = std::move(by_segment)](const std::string& owner,
                                                                   const ParamSegment& s) {
    const auto it = by_segment.find({owner, s.name});
    if (it == by_segment.end()) throw std::logic_error("weights: no GPT-2 tensor for " + owner + "." + s.name);
    const Gpt2Tensor& g = it->second;
    const TensorEntry& t = *lookup(*file, g.name);
    return SegmentValues([file, &g, &t](std::int64_t row, std::int64_t col) {
      return file->value(t, file_index(g, t, row, col));
    });
  });
}

void save_weights(const std::string& path, const ModelSpec& model, const Plan& plan,
                  engine::ModelState& state, const ProcessGroups& groups,
                  MpiCommunicator& world, std::int64_t vocab_row_alignment) {
  const ParallelDims dims = parallel_dims(plan);
  const bool writer = world.rank() == 0;
  const std::vector<Gpt2Tensor> tensors = gpt2_tensors(model);
  std::unique_ptr<SafetensorsWriter> out;
  if (writer) {
    out = std::make_unique<SafetensorsWriter>(path);
    for (const Gpt2Tensor& g : tensors) out->declare(g.name, g.shape);
    out->begin({{"format", "pt"}, {"written_by", "strata"}});
  }
  // The units in file order, each with the pipeline rank that holds it.
  std::vector<std::string> units;
  for (const Gpt2Tensor& g : tensors) {
    if (units.empty() || units.back() != g.unit) units.push_back(g.unit);
  }
  std::map<std::string, std::int64_t> stage_of;
  for (std::int64_t pp = 0; pp < plan.pp; ++pp) {
    for (const UnitLayout& u : rank_unit_layouts(model, plan, pp, 0, vocab_row_alignment)) {
      if (u.kind != UnitKind::kTiedCopy) stage_of[u.name] = pp;
    }
  }
  for (std::size_t k = 0; k < units.size(); ++k) {
    const std::string& name = units[k];
    const int tag = static_cast<int>(k);
    std::vector<float> mine;
    if (state.index(name) >= 0) {
      mine = state.full_params(name);  // collective over this rank's DP group
      if (!writer && groups.coords().dp == 0) {
        // Watched: a writer lost mid-save ends the job after --comm-timeout-s.
        const CommWatch::Scope watched = world.blocking(CommCall::kWaitSend, 0);
        MPI_CHECK(MPI_Send(mine.data(), static_cast<int>(mine.size()), MPI_FLOAT, 0, tag, world.handle()));
      }
    }
    if (!writer) continue;
    // Rank 0: each TP shard of the unit placed into its global tensors, then written.
    const std::int64_t pp = stage_of.at(name);
    std::map<std::string, std::vector<float>> global;
    for (const Gpt2Tensor& g : tensors) {
      if (g.unit != name) continue;
      std::int64_t n = 1;
      for (std::int64_t d : g.shape) n *= d;
      global[g.segment].assign(static_cast<std::size_t>(n), 0.0f);
    }
    for (int tp = 0; tp < dims.tp; ++tp) {
      UnitLayout layout;
      for (UnitLayout& u : rank_unit_layouts(model, plan, pp, tp, vocab_row_alignment)) {
        if (u.name == name) layout = std::move(u);
      }
      const int from = world_rank_of(RankCoords{tp, 0, static_cast<int>(pp)}, dims);
      std::vector<float> shard;
      if (from == 0) {
        shard = std::move(mine);
      } else {
        shard.resize(static_cast<std::size_t>(layout.count));
        const CommWatch::Scope watched = world.blocking(CommCall::kRecv, from);
        MPI_CHECK(MPI_Recv(shard.data(), static_cast<int>(shard.size()), MPI_FLOAT, from, tag,
                           world.handle(), MPI_STATUS_IGNORE));
      }
      for_each_full_element(layout, 0, layout.count, [&](const ParamSegment& s, std::int64_t i,
                                                         std::int64_t R, std::int64_t C) {
        if (s.tp_replicated && tp > 0) return;  // identical on every TP rank
        const Gpt2Tensor* g = nullptr;
        for (const Gpt2Tensor& c : tensors) {
          if (c.unit == name && c.segment == s.name) g = &c;
        }
        const std::int64_t out_cols = g->shape.size() == 2 ? g->shape[1] : 1;
        const std::int64_t at = g->transposed ? C * out_cols + R : R * out_cols + C;
        global.at(s.name)[static_cast<std::size_t>(at)] = shard[static_cast<std::size_t>(i)];
      });
    }
    for (const Gpt2Tensor& g : tensors) {
      if (g.unit == name) out->write(g.name, global.at(g.segment).data());
    }
  }
  if (writer) out->finish();
  world.barrier();  // the file is in place before any rank returns
}

}  // namespace strata::weights
