// Loading and saving Hugging Face safetensors under any plan (see weights_io.h).
#include "executor/weights/weights_io.h"

#include <mpi.h>

#include <map>
#include <memory>
#include <set>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cost_model/specs/errors.h"
#include "cost_model/specs/partition.h"
#include "executor/comm/mpi_check.h"
#include "executor/weights/full_tensors.h"
#include "executor/weights/hf_checkpoint.h"
#include "executor/weights/hf_tensor.h"
#include "executor/weights/safetensors.h"

namespace strata::weights {
namespace {

std::string shape_text(const std::vector<std::int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

HfTensorRef lookup(const HfCheckpoint& file, const HfNames& names, const std::string& name) {
  const HfTensorRef t = file.find(name);
  return t.entry != nullptr || names.optional_prefix.empty() ? t : file.find(names.optional_prefix + name);
}

void check_file(const HfCheckpoint& file, const HfNames& names, const ModelSpec& model,
                const std::string& flag) {
  // Messages name the file that holds the tensor: a shard's, or the one file's.
  const auto bad = [&](const std::string& path, const std::string& what) {
    return ConfigError(fmt::format("{}: '{}': {}", flag, path, what));
  };
  const std::string where = file.sharded() ? fmt::format(" in any of its {} shards", file.shard_count()) : "";
  std::set<std::string> expected;
  for (const HfTensor& g : names.tensors) {
    const HfTensorRef ref = lookup(file, names, g.name);
    if (ref.entry == nullptr) {
      throw bad(file.path(), fmt::format("no tensor '{}' (shape {}){}, which model {} needs", g.name,
                                         shape_text(g.shape), where, model.name));
    }
    const TensorEntry* t = ref.entry;
    expected.insert(t->name);
    const bool positions = g.segment == "wpe";
    const bool shape_ok = positions ? t->shape.size() == 2 && t->shape[0] >= g.shape[0] && t->shape[1] == g.shape[1]
                                    : t->shape == g.shape;
    if (!shape_ok) {
      throw bad(ref.file->path(), fmt::format("tensor '{}' has shape {}, expected {}{} (model {})", t->name,
                                              shape_text(t->shape), shape_text(g.shape),
                                              positions ? " or more positions" : "", model.name));
    }
    if (!SafetensorsFile::readable_dtype(t->dtype)) {
      throw bad(ref.file->path(), fmt::format("tensor '{}' has dtype {}, expected F32, F16, BF16 or F64",
                                              t->name, t->dtype));
    }
  }
  for (const auto& [name, ref] : file.tensors()) {
    if (expected.count(name) == 0 && !names.ignored(name, model)) {
      throw bad(ref.file->path(), fmt::format("tensor '{}' is not a parameter of model {} ({} layers, {} names)",
                                              name, model.name, model.layers, names.family));
    }
  }
}

}  // namespace

void check_weights_file(const std::string& path, const ModelSpec& model, const std::string& flag) {
  check_file(HfCheckpoint(path, flag), hf_names(model), model, flag);
}

model::UnitInit weights_file_init(const std::string& path, const ModelSpec& model,
                                  const std::string& flag) {
  auto file = std::make_shared<HfCheckpoint>(path, flag);
  HfNames names = hf_names(model);
  check_file(*file, names, model, flag);
  // Each strata segment's Hugging Face tensors (one, or the parts stacked in its rows), with
  // the file entry that holds each.
  struct Part {
    HfTensor tensor;
    HfTensorRef ref;
  };
  std::map<std::pair<std::string, std::string>, std::vector<Part>> by_segment;
  for (HfTensor& g : names.tensors) {
    const HfTensorRef ref = lookup(*file, names, g.name);
    by_segment[{g.unit, g.segment}].push_back({std::move(g), ref});
  }
  return unit_init_from([file, by_segment = std::move(by_segment)](const std::string& owner,
                                                                   const ParamSegment& s) {
    const auto it = by_segment.find({owner, s.name});
    if (it == by_segment.end()) {
      throw std::logic_error("weights: no Hugging Face tensor for " + owner + "." + s.name);
    }
    const std::vector<Part>& parts = it->second;
    return SegmentValues([file, &parts](std::int64_t row, std::int64_t col) {
      for (const Part& p : parts) {
        if (row >= p.tensor.first_row && row < p.tensor.first_row + p.tensor.rows()) {
          return p.ref.file->value(*p.ref.entry, p.tensor.file_index(p.ref.entry->shape, row, col));
        }
      }
      throw std::logic_error(fmt::format("weights: row {} of {} is in none of its tensors", row,
                                         parts.front().tensor.segment));
    });
  });
}

void save_weights(const std::string& path, const ModelSpec& model, const Plan& plan,
                  engine::ModelState& state, const ProcessGroups& groups,
                  MpiCommunicator& world, std::int64_t vocab_row_alignment) {
  const ParallelDims dims = parallel_dims(plan);
  const bool writer = world.rank() == 0;
  const std::vector<HfTensor> tensors = hf_names(model).tensors;
  std::unique_ptr<SafetensorsWriter> out;
  if (writer) {
    out = std::make_unique<SafetensorsWriter>(path);
    for (const HfTensor& g : tensors) out->declare(g.name, g.shape);
    out->begin({{"format", "pt"}, {"written_by", "strata"}});
  }
  // The units in file order, each with the pipeline rank that holds it.
  std::vector<std::string> units;
  for (const HfTensor& g : tensors) {
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
    // Rank 0: each TP shard of the unit placed into its file tensors (a segment's rows may
    // be several of them: Llama's q, k, v), then written.
    const std::int64_t pp = stage_of.at(name);
    std::map<std::string, std::vector<const HfTensor*>> parts_of;  // segment -> its tensors
    std::map<std::string, std::vector<float>> global;               // file tensor -> values
    for (const HfTensor& g : tensors) {
      if (g.unit != name) continue;
      std::int64_t n = 1;
      for (std::int64_t d : g.shape) n *= d;
      global[g.name].assign(static_cast<std::size_t>(n), 0.0f);
      parts_of[g.segment].push_back(&g);
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
      const ParamSegment* current = nullptr;
      const std::vector<const HfTensor*>* parts = nullptr;
      for_each_full_element(layout, 0, layout.count, [&](const ParamSegment& s, std::int64_t i,
                                                         std::int64_t R, std::int64_t C) {
        if (!s.counted_on(tp)) return;  // a copy held by an earlier TP rank too
        if (&s != current) {
          current = &s;
          parts = &parts_of.at(s.name);
        }
        for (const HfTensor* g : *parts) {
          if (R < g->first_row || R >= g->first_row + g->rows()) continue;
          global.at(g->name)[static_cast<std::size_t>(g->file_index(g->shape, R, C))] =
              shard[static_cast<std::size_t>(i)];
          return;
        }
      });
    }
    for (const HfTensor& g : tensors) {
      if (g.unit == name) out->write(g.name, global.at(g.name).data());
    }
  }
  if (writer) out->finish();
  world.barrier();  // the file is in place before any rank returns
}

}  // namespace strata::weights
