// The Workload vocabulary and its grid expansion (see workload.h).
#include "cost_model/specs/workload.h"

#include <cmath>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cost_model/specs/errors.h"
#include "cost_model/specs/limits.h"

namespace strata {
namespace {

const std::vector<std::string> kGridKeys = {"lr", "global_batch", "seed", "weight_decay"};

bool integral(const std::string& key) { return key == "global_batch" || key == "seed"; }

std::string value_text(const std::string& key, double v) {
  return integral(key) ? fmt::format("{}", static_cast<std::int64_t>(v)) : fmt::format("{:g}", v);
}

std::string short_key(const std::string& key) {
  if (key == "global_batch") return "gb";
  if (key == "weight_decay") return "wd";
  return key;
}

}  // namespace

WorkloadSpec WorkloadSpec::from_json(const Json& json, const std::string& source) {
  JsonObjectReader r(json, source);
  WorkloadSpec w;
  w.name = r.get_string("name");
  r.allow("source");
  if (r.has("cluster")) {
    w.cluster = r.get_string("cluster");
    if (w.cluster->empty()) r.fail("cluster", "\"\"", "a bundled cluster name or a file");
  }
  if (r.has("validation")) {
    JsonObjectReader v = r.get_object("validation");
    EvalSpec e;
    e.valid_data = v.get_string_or("data", "");
    e.valid_fraction = v.get_number_or("fraction", 0);
    e.eval_every = v.get_int_or("eval_every", e.eval_every);
    e.eval_batches = v.get_int_or("eval_batches", e.eval_batches);
    v.finish();
    if (v.has("data") && e.valid_data.empty()) v.fail("data", "\"\"", "a file of validation tokens");
    const auto name = [&](const std::string& key) {
      return fmt::format("{}: {}", source, v.key_path(key));
    };
    check_eval_spec(e, {name("data"), name("fraction"), name("eval_every"), name("eval_batches")});
    w.validation = e;
  }
  const Json& jobs = r.get_array("jobs");
  if (jobs.empty()) r.fail("jobs", "[]", "at least one job");
  std::set<std::string> names;
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    const std::string path = fmt::format("jobs[{}]", i);
    if (!jobs[i].is_object()) {
      throw ConfigError(fmt::format("{}: {}: expected an object", source, path));
    }
    JsonObjectReader j(jobs[i], source, path);
    WorkloadJobSpec job;
    job.name = j.get_string("name");
    if (job.name.empty()) j.fail("name", "\"\"", "a non-empty name");
    if (!names.insert(job.name).second) j.fail("name", job.name, "a name no other job has");
    job.model = j.get_string("model");
    job.train = j.get_string("train");
    job.steps = j.get_int("steps");
    j.require_positive("steps", static_cast<double>(job.steps));
    j.require_at_most("steps", static_cast<double>(job.steps), limits::kSteps);
    if (j.has("grid")) {
      JsonObjectReader g = j.get_object("grid");
      for (const std::string& key : kGridKeys) {
        if (!g.has(key)) continue;
        const Json& values = g.get_array(key);
        if (values.empty()) g.fail(key, "[]", "a non-empty list of values");
        GridAxis axis{key, {}};
        for (std::size_t k = 0; k < values.size(); ++k) {
          const std::string at = fmt::format("{}[{}]", key, k);
          if (!values[k].is_number()) g.fail(at, values[k].dump(), "a number");
          const double v = values[k].get<double>();
          if (!std::isfinite(v)) g.fail(at, values[k].dump(), "a finite number");
          if (integral(key) && (v != std::floor(v) || v < (key == "seed" ? 0 : 1))) {
            g.fail(at, values[k].dump(), key == "seed" ? "an integer >= 0" : "an integer >= 1");
          }
          if (key == "lr" && !(v > 0)) g.fail(at, values[k].dump(), "a learning rate > 0");
          if (key == "weight_decay" && v < 0) g.fail(at, values[k].dump(), "a weight decay >= 0");
          // The same bounds as the train spec's keys (cost_model/specs/limits.h); a seed stays
          // below 2^53, where a double still holds it exactly.
          const double max = key == "lr" || key == "weight_decay" ? limits::kLearningRate
                             : key == "global_batch"              ? double(limits::kGlobalBatch)
                                                                  : 9e15;
          g.require_at_most(at, v, max);
          axis.values.push_back(v);
        }
        job.grid.push_back(std::move(axis));
      }
      g.finish();
    }
    j.finish();
    w.jobs.push_back(std::move(job));
  }
  r.finish();
  return w;
}

WorkloadSpec WorkloadSpec::load(const std::string& path) { return from_json(read_json_file(path), path); }

std::vector<Job> expand(const WorkloadSpec& workload, const WorkloadResolver& resolve,
                        const std::string& source) {
  std::vector<Job> out;
  for (std::size_t i = 0; i < workload.jobs.size(); ++i) {
    const WorkloadJobSpec& spec = workload.jobs[i];
    const std::string path = fmt::format("jobs[{}]", i);
    const ModelSpec model = resolve.model(spec.model, path + ".model");
    TrainSpec train = resolve.train(spec.train, path + ".train");
    train.steps = spec.steps;
    // Every point of the grid, the first axis varying slowest.
    std::vector<std::size_t> at(spec.grid.size(), 0);
    while (true) {
      Job job{spec.name, model, train, spec.model, spec.train};
      for (std::size_t a = 0; a < spec.grid.size(); ++a) {
        const GridAxis& axis = spec.grid[a];
        const double v = axis.values[at[a]];
        if (axis.key == "lr") job.train.optimizer.lr = v;
        if (axis.key == "global_batch") job.train.global_batch = static_cast<std::int64_t>(v);
        if (axis.key == "seed") job.train.seed = static_cast<std::uint64_t>(v);
        if (axis.key == "weight_decay") job.train.optimizer.weight_decay = v;
        job.name += fmt::format(" {}={}", short_key(axis.key), value_text(axis.key, v));
      }
      out.push_back(std::move(job));
      std::size_t a = spec.grid.size();
      while (a > 0 && ++at[a - 1] == spec.grid[a - 1].values.size()) at[--a] = 0;
      if (a == 0) break;
    }
  }
  if (out.empty()) throw ConfigError(fmt::format("{}: jobs: the workload expands to no job", source));
  return out;
}

}  // namespace strata
