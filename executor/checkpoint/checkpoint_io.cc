// Writing and resharding checkpoints (see checkpoint_io.h).
#include "executor/checkpoint/checkpoint_io.h"

#include <mpi.h>

#include <algorithm>
#include <system_error>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cost_model/specs/errors.h"
#include "cost_model/specs/partition.h"
#include "executor/checkpoint/durable_files.h"
#include "executor/comm/mpi_check.h"
#include "executor/weights/full_tensors.h"
#include "executor/weights/safetensors.h"

namespace strata::checkpoint {
namespace fs = std::filesystem;
using engine::ModelState;

namespace {

constexpr const char* kStateNames[] = {"params", "adam_m", "adam_v"};
constexpr ModelState::StateKind kKinds[] = {ModelState::StateKind::kParams,
                                            ModelState::StateKind::kAdamM,
                                            ModelState::StateKind::kAdamV};

std::string shard_name(int rank) { return fmt::format("rank-{:05d}.safetensors", rank); }

// The single-rank model's units: the full tensors every slice is a part of.
std::vector<UnitLayout> full_layouts(const ModelSpec& model) {
  return rank_unit_layouts(model, Plan{}, 0, 0, 1);
}

const ParamSegment* find_segment(const std::vector<UnitLayout>& units, const std::string& unit,
                                 const std::string& segment) {
  for (const UnitLayout& u : units) {
    if (u.name != unit) continue;
    for (const ParamSegment& s : u.segments) {
      if (s.name == segment) return &s;
    }
  }
  return nullptr;
}

// What a shard tensor is: readable without strata (the slice of each full tensor it holds).
std::string describe(const UnitLayout& unit, const char* state, const RankCoords& c,
                     const ModelState::Part& part, const std::vector<UnitLayout>& full) {
  Json segments = Json::array();
  for (const ParamSegment& s : unit.segments) {
    const ParamSegment* f = find_segment(full, weights::full_owner(unit), s.name);
    // Local (r, c) is full element (r / part_rows * part_stride + row_offset + r % part_rows,
    // col_offset + c): ParamSegment::global_index, spelled out for readers without strata.
    segments.push_back({{"name", s.name},
                        {"offset", s.offset},
                        {"local_shape", {s.rows, s.cols}},
                        {"valid_rows", s.valid_rows},
                        {"full_shape", {f ? f->rows : 0, f ? f->cols : 0}},
                        {"part_rows", s.part_rows},
                        {"part_stride", s.part_stride},
                        {"row_offset", s.row_offset},
                        {"col_offset", s.col_offset},
                        {"tp_replicated", s.tp_replicated},
                        {"tp_copies", s.tp_copies}});
  }
  return Json{{"unit", unit.name},          {"state", state},        {"tp_rank", c.tp},
              {"pp_rank", c.pp},            {"dp_rank", c.dp},       {"begin", part.begin},
              {"end", part.end},            {"unit_count", unit.count}, {"segments", segments}}
      .dump();
}

void write_shard(const fs::path& path, const Manifest& manifest, ModelState& state,
                 const ProcessGroups& groups) {
  const RankCoords c = groups.coords();
  // At stage 0 every DP rank holds the same state: DP rank 0 writes it.
  const bool writes = manifest.plan.zero_stage > 0 || c.dp == 0;
  const std::vector<UnitLayout> full = full_layouts(manifest.model);
  weights::SafetensorsWriter out(path.string());
  std::map<std::string, std::string> meta{{"format", "strata-checkpoint"},
                                          {"step", std::to_string(manifest.step)}};
  std::vector<std::pair<std::size_t, int>> pieces;  // (unit, kind)
  for (std::size_t u = 0; writes && u < state.size(); ++u) {
    const UnitLayout& layout = state.unit(u).layout;
    if (layout.kind == UnitKind::kTiedCopy) continue;  // the embedding's wte, saved there
    const ModelState::Part part = state.optimizer_part(u);
    for (int k = 0; k < 3; ++k) {
      const std::string name = layout.name + "/" + kStateNames[k];
      out.declare(name, {part.end - part.begin});
      meta[name] = describe(layout, kStateNames[k], c, part, full);
      pieces.emplace_back(u, k);
    }
  }
  out.begin(meta);
  for (const auto& [u, k] : pieces) {
    const std::vector<float> values = state.read_part(u, kKinds[k]);
    out.write(state.unit(u).layout.name + "/" + kStateNames[k], values.data());
  }
  out.finish();  // fsync'd and renamed into the temporary directory
}

void remove_all_checked(const fs::path& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  if (ec) {
    throw SystemError(fmt::format("checkpoint: cannot remove '{}': {}", path.string(), ec.message()));
  }
}

// --keep: the oldest complete checkpoints beyond the newest `keep` go, once the new one is in
// place (the incomplete ones are left to whoever is still writing them).
void prune(const fs::path& root, std::int64_t keep) {
  const std::vector<fs::path> complete = complete_checkpoints(root);
  const std::int64_t extra = static_cast<std::int64_t>(complete.size()) - keep;
  for (std::int64_t i = 0; i < extra; ++i) remove_all_checked(complete[static_cast<std::size_t>(i)]);
}

}  // namespace

fs::path save_checkpoint(const fs::path& root, Manifest manifest, ModelState& state,
                         const ProcessGroups& groups, MpiCommunicator& world,
                         std::optional<std::int64_t> keep) {
  const bool leader = world.rank() == 0;
  const std::string final_name = step_dir_name(manifest.step);
  const fs::path final_dir = root / final_name;
  const fs::path tmp = root / ("." + final_name + ".partial");
  if (leader) {
    remove_all_checked(tmp);  // of a writer killed halfway
    std::error_code ec;
    fs::create_directories(tmp, ec);
    if (ec) {
      throw SystemError(fmt::format("checkpoint: cannot create '{}': {}", tmp.string(), ec.message()));
    }
  }
  world.barrier();
  const fs::path shard = tmp / shard_name(world.rank());
  write_shard(shard, manifest, state, groups);
  std::error_code ec;
  std::int64_t bytes = static_cast<std::int64_t>(fs::file_size(shard, ec));
  if (ec) throw SystemError(fmt::format("checkpoint: cannot stat '{}': {}", shard.string(), ec.message()));
  std::vector<std::int64_t> sizes(static_cast<std::size_t>(world.size()));
  // Rank 0 has every size once every rank has written: the barrier before the manifest.
  // Watched as every blocking call is, so a rank lost while its shard is written ends the
  // job after --comm-timeout-s instead of leaving the others here for good.
  {
    const CommWatch::Scope watched = world.blocking(CommCall::kGather);
    MPI_CHECK(MPI_Gather(&bytes, 1, MPI_INT64_T, sizes.data(), 1, MPI_INT64_T, 0, world.handle()));
  }
  if (leader) {
    manifest.files.clear();
    for (int r = 0; r < world.size(); ++r) {
      manifest.files.push_back({shard_name(r), sizes[static_cast<std::size_t>(r)]});
    }
    write_file_durably(tmp / kManifestFile, manifest.to_json().dump(2) + "\n");
    fsync_path(tmp);
    // A checkpoint of the same step from an earlier run into this directory is replaced.
    if (fs::exists(final_dir, ec)) remove_all_checked(final_dir);
    rename_durably(tmp, final_dir);
    if (keep) prune(root, *keep);
  }
  world.barrier();  // the checkpoint is in place before any rank goes on
  return final_dir;
}

CheckpointReader::CheckpointReader(const fs::path& step_dir, const ModelSpec& model)
    : manifest_(read_complete(step_dir)) {
  const std::string source = (step_dir / kManifestFile).string();
  if (manifest_.model.to_json() != model.to_json()) {
    throw ConfigError(fmt::format("{}: written for model {}, not the run's model {}", source,
                                  manifest_.model.to_json().dump(), model.to_json().dump()));
  }
  auto full = std::make_shared<FullTensors>();
  for (const UnitLayout& u : full_layouts(model)) {
    for (const ParamSegment& s : u.segments) {
      FullTensor& t = (*full)[u.name + "/" + s.name];
      t.cols = s.cols;
      for (auto& v : t.values) v.assign(static_cast<std::size_t>(s.count()), 0.0f);
      t.covered.assign(static_cast<std::size_t>(s.count()), false);
    }
  }
  const Plan& plan = manifest_.plan;
  const ParallelDims dims = parallel_dims(plan);
  std::map<std::pair<int, int>, std::vector<UnitLayout>> layouts;  // by (pp, tp)
  for (int r = 0; r < dims.world_size(); ++r) {
    const RankCoords c = rank_coords(r, dims);
    auto [it, fresh] = layouts.try_emplace(std::make_pair(c.pp, c.tp));
    if (fresh) it->second = rank_unit_layouts(model, plan, c.pp, c.tp, manifest_.vocab_row_alignment);
    const fs::path path = step_dir / manifest_.files[static_cast<std::size_t>(r)].name;
    const weights::SafetensorsFile file(path.string(), "--resume");
    const auto bad = [&](const std::string& tensor, const std::string& what) {
      return ConfigError(fmt::format("checkpoint shard '{}': tensor '{}': {}", path.string(), tensor, what));
    };
    for (const weights::TensorEntry& t : file.entries()) {
      const auto meta = file.metadata().find(t.name);
      if (meta == file.metadata().end()) throw bad(t.name, "no metadata entry describing it");
      Json d;
      std::string unit_name, state;
      std::int64_t begin = 0, end = 0;
      try {
        d = Json::parse(meta->second);
        unit_name = d.at("unit").get<std::string>();
        state = d.at("state").get<std::string>();
        begin = d.at("begin").get<std::int64_t>();
        end = d.at("end").get<std::int64_t>();
        if (d.at("tp_rank").get<int>() != c.tp || d.at("pp_rank").get<int>() != c.pp ||
            d.at("dp_rank").get<int>() != c.dp) {
          throw bad(t.name, fmt::format("written by rank (tp {}, pp {}, dp {}), expected rank {} "
                                        "of the manifest's plan", d.at("tp_rank").dump(),
                                        d.at("pp_rank").dump(), d.at("dp_rank").dump(), r));
        }
      } catch (const Json::exception& e) {
        throw bad(t.name, fmt::format("bad metadata: {}", e.what()));
      }
      const auto kind = std::find(std::begin(kStateNames), std::end(kStateNames), state);
      if (kind == std::end(kStateNames)) throw bad(t.name, "unknown state '" + state + "'");
      const int k = static_cast<int>(kind - std::begin(kStateNames));
      const UnitLayout* layout = nullptr;
      for (const UnitLayout& u : it->second) {
        if (u.name == unit_name) layout = &u;
      }
      if (layout == nullptr || layout->kind == UnitKind::kTiedCopy) {
        throw bad(t.name, fmt::format("unit '{}' is not held by rank {} under the manifest's plan",
                                      unit_name, r));
      }
      if (t.dtype != "F32" || begin < 0 || end < begin || t.elements() != end - begin) {
        throw bad(t.name, fmt::format("{} {} elements for the slice [{}, {})", t.elements(),
                                      t.dtype, begin, end));
      }
      const std::string owner = weights::full_owner(*layout);
      weights::for_each_full_element(*layout, begin, end, [&](const ParamSegment& s, std::int64_t i,
                                                              std::int64_t row, std::int64_t col) {
        FullTensor& f = full->at(owner + "/" + s.name);
        const auto at = static_cast<std::size_t>(row * f.cols + col);
        f.values[k].at(at) = file.value(t, i - begin);
        f.covered[at] = true;
      });
    }
  }
  for (const auto& [name, t] : *full) {
    const auto missing = std::count(t.covered.begin(), t.covered.end(), false);
    if (missing > 0) {
      throw ConfigError(fmt::format("checkpoint '{}': {} of the {} elements of '{}' are in no "
                                    "shard", step_dir.string(), missing, t.covered.size(), name));
    }
  }
  full_ = std::move(full);
}

model::UnitInit CheckpointReader::init_of(int kind) const {
  return weights::unit_init_from([full = full_, kind](const std::string& owner, const ParamSegment& s) {
    const FullTensor& t = full->at(owner + "/" + s.name);
    return weights::SegmentValues([&t, kind](std::int64_t row, std::int64_t col) {
      return t.values[kind][static_cast<std::size_t>(row * t.cols + col)];
    });
  });
}

model::UnitInit CheckpointReader::params() const { return init_of(0); }

void CheckpointReader::load_moments(ModelState& state) const {
  const model::UnitInit m = init_of(1), v = init_of(2);
  for (std::size_t u = 0; u < state.size(); ++u) {
    const ModelState::Part part = state.optimizer_part(u);
    const auto n = static_cast<std::size_t>(part.end - part.begin);
    std::vector<float> mv(n), vv(n);
    m(state.unit(u).layout, mv.data(), part.begin, part.end);
    v(state.unit(u).layout, vv.data(), part.begin, part.end);
    state.write_moments(u, mv, vv);
  }
}

}  // namespace strata::checkpoint
