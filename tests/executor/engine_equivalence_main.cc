// The plan-equivalence driver, run by ctest under `mpirun -np t*p*d`: trains the tiny model
// for 5 steps with the plan given on the command line, then rank 0 trains the single-rank
// plan (t = p = d = 1, one micro-batch) on MPI_COMM_SELF and compares each step's loss and
// gradient norm: docs/design.md's contract "same training, any plan" (fp32 CPU: 1e-4 relative).
// It also checks docs/design.md's "memory is predicted": every rank's measured peak device bytes
// (the accounting allocator, setup and 5 steps) against the memory model's prediction for
// its pipeline stage (estimate_memory on the CPU cluster), within 5%; both are printed.
// Its own main (not gtest_main): MPI is initialised once, rank 0 prints, and every rank exits
// with the verdict summed over every rank's checks.
// Built a second time with STRATA_EQUIVALENCE_CUDA (cuda_engine_equivalence): the plan's
// ranks then run the CUDA backend, every process sharing the one GPU (host-staged
// communicators; with --nccl one GPU a rank, NCCL's communicators, skipped where the machine
// has fewer GPUs than ranks), against the CPU single-rank reference within bf16 tolerance;
// exit code 77 (skipped) without a GPU. Its memory check is left to the CPU matrix (the CUDA activation
// convention differs). Its --check mode needs neither a GPU nor MPI: it builds what the GPU
// run of the entry would (model, plan, every rank's engine on the CUDA backend without a GPU)
// and exits 2 with the reason where the GPU run would fail before training; ctest runs it for
// every CUDA entry on every machine (cuda_runtime.cmake).
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "cost_model/specs/cluster_spec.h"
#include "cost_model/memory/memory_model.h"
#include "cost_model/specs/plan.h"
#include "executor/comm/mpi_communicator.h"
#include "executor/cpu/cuda_semantics/cuda_semantics_backend.h"
#include "executor/data/corpus.h"
#include "executor/run/rank_training.h"
#include "tests/executor/engine_test_support.h"
#include "tests/executor/program_trace.h"
#include "tests/executor/reference_cache.h"

#ifdef STRATA_EQUIVALENCE_CUDA
#include "executor/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "tests/executor/recorder_replay.h"
#endif

namespace {

struct Trace {
  std::vector<double> losses, norms;
  std::int64_t peak_device_bytes = 0;  // this rank's measured peak
  std::int64_t pp_rank = 0;
  std::vector<strata::TagUsage> tags;  // per-tag peaks, printed when the memory check fails
  bool ran_the_program = true;  // every step's trace was the rank's Program, op for op
  std::string not_captured;     // --cuda-graphs: why the steps were not captured ("" if they were)
};

#ifdef STRATA_EQUIVALENCE_CUDA
constexpr bool kCuda = true;
#else
constexpr bool kCuda = false;
#endif

// The model with head size 64 (the CUDA attention kernel needs 64 or 128): `heads` heads,
// hidden and ffn_hidden scaled alike. Rebuilt through ModelSpec::from_json, so that it is
// validated as a config file is: a multi-head model stays multi-head (kv_heads follows heads;
// a copy of the fields once left the tiny GPT's 4 KV heads beside 2 query heads, which every
// GPU run refused), a grouped-query one keeps its KV heads.
strata::ModelSpec with_head_size_64(const strata::ModelSpec& model, std::int64_t heads) {
  strata::Json j = model.to_json();
  const std::int64_t hidden = 64 * heads;
  j["ffn_hidden"] = model.ffn_hidden * hidden / model.hidden;
  j["hidden"] = hidden;
  j["heads"] = heads;
  if (model.kv_head_count() == model.heads) j.erase("kv_heads");
  return strata::ModelSpec::from_json(j, model.name + " at head size 64 (engine_equivalence_main.cc)");
}

// The tiny GPT; on CUDA twice as wide (hidden 128, 2 heads of 64: t = 2 needs two heads).
// --model NAME: a bundled model config instead (configs/models/NAME.json: tiny-llama for the
// Llama family's matrix); on CUDA its heads are widened to 64 the same way.
strata::ModelSpec equivalence_model(const std::string& name) {
  if (name.empty()) {
    const strata::ModelSpec tiny = strata::testing_support::tiny_model();
    return kCuda ? with_head_size_64(tiny, 2) : tiny;
  }
  const strata::ModelSpec model =
      strata::ModelSpec::load(std::string(STRATA_SOURCE_DIR) + "/configs/models/" + name + ".json");
  if (kCuda && model.head_dim() != 64 && model.head_dim() != 128) {
    return with_head_size_64(model, model.heads);
  }
  return model;
}

// How the plan's ranks run: the CPU backend, its CUDA-semantics mode, or (the CUDA build of
// this driver) the GPU: every rank on one GPU over host-staged communicators, or (--nccl) one
// GPU a rank over NCCL.
enum class Mode { kCpu, kCudaSemantics, kGpu, kGpuNccl };

// The CUDA-semantics pass also trains with weight decay (matrices and embeddings only, so
// the decay masks cut across ZeRO's shards) and a warmup + cosine learning rate, which the
// plain pass (and the tiny train spec) leave at 0 and constant.
strata::TrainSpec equivalence_train(double clip, bool decay_and_schedule) {
  strata::TrainSpec train = strata::testing_support::tiny_train();
  train.optimizer.grad_clip = clip;
  if (decay_and_schedule) {
    train.optimizer.weight_decay = 0.1;
    train.optimizer.lr_warmup_steps = 2;
    train.optimizer.lr_decay_style = strata::OptimizerSpec::DecayStyle::kCosine;
    train.optimizer.lr_decay_steps = 5;
    train.optimizer.min_lr = 1e-4;
  }
  return train;
}

strata::engine::OffloadOptions equivalence_offload() {
  strata::engine::OffloadOptions offload;
  offload.nvme_dir = "/tmp";  // offload to NVMe: the run directory goes there
  offload.adam_tile_floats = 4096;  // several tiles per unit: the streamed CPU AdamW
  return offload;
}

Trace train(const strata::ModelSpec& model, const strata::Plan& plan,
            strata::MpiCommunicator& world, double clip, int steps, Mode mode,
            bool decay_and_schedule, bool graphs = false) {
  const strata::TrainSpec train = equivalence_train(clip, decay_and_schedule);
  plan.check_against_model(model, train, "equivalence plan");
  const auto corpus = strata::data::generated_corpus(train.seed, 1 << 18);
  strata::engine::BackendMaker maker = strata::engine::cpu_backend_maker();
  if (mode == Mode::kCudaSemantics) {
    maker = strata::cuda_semantics::cuda_semantics_backend_maker(graphs);
  }
#ifdef STRATA_EQUIVALENCE_CUDA
  if (mode == Mode::kGpu || mode == Mode::kGpuNccl) {
    strata::cuda::CudaBackendOptions options;
    options.ranks_per_gpu = mode == Mode::kGpuNccl ? 1 : world.size();
    options.capture_steps = graphs;
    maker = strata::cuda::cuda_backend_maker(options);
  }
#endif
  strata::engine::RankTraining rank(model, train, plan, world, strata::TierBudgets{}, corpus,
                                    equivalence_offload(), maker);
  Trace t;
  const auto want = strata::testing_support::program_order(rank.engine().program());
  // A rank that carries its host steps (program.h, "carried") traces them in the next step.
  const auto want_first = strata::testing_support::program_order(
      rank.engine().program(), !rank.engine().carries_host_steps());
  for (int s = 0; s < steps; ++s) {
    const auto r = rank.engine().step(s);
    t.losses.push_back(r.loss);
    t.norms.push_back(r.grad_norm);
    if (strata::testing_support::measured_order(r.events) != (s == 0 ? want_first : want)) {
      t.ran_the_program = false;
    }
  }
  if (graphs && !rank.engine().captures_steps()) {
    t.not_captured = rank.engine().why_not_captured().empty() ? "the backend does not capture"
                                                               : rank.engine().why_not_captured();
  }
  t.peak_device_bytes = rank.allocator().peak_bytes().device;
  t.pp_rank = rank.groups().coords().pp;
  t.tags = rank.allocator().tags();
  return t;
}

// Measured peak device bytes of every rank vs the prediction for its stage; rank 0 prints
// and returns the number of ranks off by more than 5% (collective).
int check_memory(const strata::ModelSpec& model, const strata::Plan& plan, const Trace& got,
                 strata::MpiCommunicator& world) {
  const int size = world.size();
  std::vector<double> peaks(static_cast<std::size_t>(2 * size), 0.0);
  peaks[static_cast<std::size_t>(2 * world.rank())] = static_cast<double>(got.peak_device_bytes);
  peaks[static_cast<std::size_t>(2 * world.rank() + 1)] = static_cast<double>(got.pp_rank);
  world.all_reduce_sum(peaks.data(), 2 * size);
  if (world.rank() != 0) return 0;
  const auto cluster =
      strata::ClusterSpec::load(std::string(STRATA_SOURCE_DIR) + "/configs/clusters/local-cpu.json");
  strata::TrainSpec train = strata::testing_support::tiny_train();
  const auto estimate = strata::estimate_memory(model, cluster, train, plan);
  int failures = 0;
  double worst = 0;
  for (int r = 0; r < size; ++r) {
    const double measured = peaks[static_cast<std::size_t>(2 * r)];
    const auto stage = static_cast<std::size_t>(peaks[static_cast<std::size_t>(2 * r + 1)]);
    const double predicted = estimate.stages[stage].total.device;
    const double rel = (predicted - measured) / measured;
    const bool ok = std::abs(rel) <= 0.05;
    failures += ok ? 0 : 1;
    worst = std::max(worst, std::abs(rel));
    std::printf("%s rank %d (stage %zu): peak device bytes predicted %.0f measured %.0f (%+.2f%%)%s\n",
                plan.label().c_str(), r, stage, predicted, measured, 100 * rel,
                ok ? "" : "  <-- memory over 5%");
  }
  if (failures > 0) {  // rank 0's own tags, to see which term is off
    for (const auto& t : got.tags) {
      if (t.tier == strata::MemoryTier::kDevice) {
        std::printf("  rank 0 tag %-20s peak %lld\n", t.tag.c_str(), static_cast<long long>(t.peak_bytes));
      }
    }
  }
  std::printf("%s memory: worst rank %.2f%% from the prediction\n", plan.label().c_str(), 100 * worst);
  return failures;
}

// The command line: flags, then the entry's fields (t p d v schedule zero micro_batch
// grad_clip [recompute [sp|nosp [offload [first..last stage layers]]]]).
struct Options {
  // --cuda-semantics: the plan's ranks run the CPU backend's CUDA-semantics mode (queued
  // streams, a reusing pool, the race checker), against the plain CPU single rank, both with
  // weight decay and a warmup + cosine learning rate (equivalence_train).
  Mode mode = kCuda ? Mode::kGpu : Mode::kCpu;
  bool check = false;         // --check: build every rank without a GPU (run_check), no MPI
  // --cuda-graphs (with --cuda-semantics or on a GPU): the steps captured once and replayed
  // (engine.h, "Captured steps"), which the entry must allow.
  bool graphs = false;
  std::string model_name;     // --model NAME: configs/models/NAME.json instead of the tiny GPT
  std::string reference_dir;  // --reference-dir DIR: the single rank's losses kept there
  strata::ModelSpec model;
  strata::Plan plan;
  std::string clip_text;      // as given: part of the reference's key
  double clip = 0;
};

// The options, or nullopt after printing the usage.
std::optional<Options> parse_options(int argc, char** argv) {
  Options o;
  const char* program = argv[0];
  while (argc > 1 && std::string(argv[1]).rfind("--", 0) == 0) {
    const std::string flag = argv[1];
    if (flag == "--cuda-semantics") {
      o.mode = Mode::kCudaSemantics;
    } else if (flag == "--cuda-graphs") {
      o.graphs = true;
    } else if (flag == "--nccl" && kCuda) {
      o.mode = Mode::kGpuNccl;
    } else if (flag == "--check" && kCuda) {
      o.check = true;
    } else if ((flag == "--model" || flag == "--reference-dir") && argc > 2) {
      (flag == "--model" ? o.model_name : o.reference_dir) = argv[2];
      ++argv;
      --argc;
    } else {
      break;
    }
    ++argv;
    --argc;
  }
  if (argc < 9 || argc > 13) {
    std::fprintf(stderr,
                 "usage: %s [--cuda-semantics | --nccl] [--cuda-graphs] [--check] [--model NAME] "
                 "[--reference-dir DIR] "
                 "t p d v schedule zero micro_batch "
                 "grad_clip [recompute [sp|nosp [offload [first..last stage layers]]]]\n",
                 program);
    return std::nullopt;
  }
  o.model = equivalence_model(o.model_name);
  strata::Plan& plan = o.plan;
  plan = strata::testing_support::make_plan(
      std::atoll(argv[1]), std::atoll(argv[2]), std::atoll(argv[3]), std::atoll(argv[4]),
      strata::schedule_kind_from_string(argv[5]), std::atoi(argv[6]), std::atoll(argv[7]));
  if (argc > 9) plan.recompute = strata::recompute_from_string(argv[9]);
  if (argc > 10) plan.sequence_parallel = std::string(argv[10]) == "sp";
  if (argc > 11) {
    // Offload every model state the ZeRO stage lets go to that tier (plan.cc's rules:
    // gradients need ZeRO >= 2, parameters ZeRO-3).
    const strata::OffloadTier tier = strata::offload_tier_from_string(argv[11]);
    plan.offload.optimizer = tier;
    if (plan.zero_stage >= 2) plan.offload.gradients = tier;
    if (plan.zero_stage == 3) plan.offload.params = tier;
  }
  if (argc > 12) {
    // Uneven stages: "F..L", the first and last stage's layers (0: an even share).
    const std::string split = argv[12];
    const std::size_t dots = split.find("..");
    plan.first_stage_layers = std::atoll(split.substr(0, dots).c_str());
    plan.last_stage_layers = std::atoll(split.substr(dots + 2).c_str());
  }
  o.clip_text = argv[8];
  o.clip = std::atof(argv[8]);
  return o;
}

#ifdef STRATA_EQUIVALENCE_CUDA
// --check: what the GPU run of this entry constructs, built on any machine (ctest runs it
// for every CUDA entry, CI included): the model, train spec and plan as the run makes them,
// checked against each other, and every rank's engine built and stepped once on the CUDA
// backend without a GPU (tests/executor/recorder_replay.h: its allocations and the kernels'
// shape checks, no arithmetic). No MPI: each rank alone. Throws what a GPU run would refuse.
int run_check(const Options& o) {
  const bool decay_and_schedule = o.mode == Mode::kCudaSemantics;
  const strata::TrainSpec train = equivalence_train(o.clip, decay_and_schedule);
  o.plan.check_against_model(o.model, train, "equivalence plan");
  strata::testing_support::replay_every_rank(o.model, train, o.plan, 1, equivalence_offload());
  std::printf("CHECKED: %s, model %s (%s, hidden %lld, %lld heads, %lld KV heads): %lld ranks "
              "built and stepped on the CUDA backend without a GPU\n",
              o.plan.label().c_str(), o.model.name.c_str(), o.model.family_name().c_str(),
              static_cast<long long>(o.model.hidden), static_cast<long long>(o.model.heads),
              static_cast<long long>(o.model.kv_head_count()),
              static_cast<long long>(o.plan.world_size()));
  return 0;
}
#endif

int run(const Options& o, strata::MpiSession& session) {
  const Mode mode = o.mode;
  const std::string& model_name = o.model_name;
  const std::string& reference_dir = o.reference_dir;
  const strata::ModelSpec& model = o.model;
  const strata::Plan& plan = o.plan;
  const double clip = o.clip;
  constexpr int kSteps = 5;
  auto world = session.world();
#ifdef STRATA_EQUIVALENCE_CUDA
  if (!strata::kernels::cuda::cuda_device_available()) {
    if (world->rank() == 0) {
      std::printf("SKIPPED: %s\n", strata::kernels::cuda::cuda_unavailable_reason().c_str());
    }
    return 77;
  }
  // --nccl: one GPU a rank, so NCCL's communicators, never the host-staged ones; a machine
  // with fewer GPUs than the plan has ranks skips, saying so.
  int devices = 0;
  CUDA_CHECK(cudaGetDeviceCount(&devices));
  if (mode == Mode::kGpuNccl && devices < world->size()) {
    if (world->rank() == 0) {
      std::printf("SKIPPED: --nccl needs a GPU a rank: %d ranks, %d GPU(s)\n", world->size(),
                  devices);
    }
    return 77;
  }
#endif
  const bool decay_and_schedule = mode == Mode::kCudaSemantics;
  const Trace got = train(model, plan, *world, clip, kSteps, mode, decay_and_schedule, o.graphs);
  int failures = 0;
  if (world->rank() == 0) {
    // The single rank's losses depend on the model (the CUDA build's widened shapes), the
    // clipping and the decay and schedule, nothing else of the entry.
    const std::string key = (model_name.empty() ? std::string("tiny") : model_name) +
                            (kCuda ? "_gpu_shapes" : "") + "_clip" + o.clip_text +
                            (decay_and_schedule ? "_decay" : "_plain");
    const std::string file = strata::testing_support::reference_file(reference_dir, key);
    std::optional<strata::testing_support::StepLossesAndNorms> want =
        strata::testing_support::read_cached_reference(file);
    if (want) {
      std::printf("single-rank reference read from %s (an earlier entry of this run)\n",
                  file.c_str());
    } else {
      auto self = strata::MpiCommunicator::duplicate(MPI_COMM_SELF);
      const strata::Plan single = strata::testing_support::make_plan(
          1, 1, 1, 1, strata::ScheduleKind::kOneFOneB, 0,
          strata::testing_support::tiny_train().global_batch);
      const Trace trained =
          train(model, single, *self, clip, kSteps, Mode::kCpu, decay_and_schedule);
      want = strata::testing_support::StepLossesAndNorms{trained.losses, trained.norms};
      strata::testing_support::write_cached_reference(file, *want);
    }
    // fp32 CPU: 1e-4. bf16 on the GPU against the fp32 CPU: bf16 rounds every activation and
    // weight copy to 8 mantissa bits (2^-9 = 2e-3 relative); over 5 Adam steps the losses stay
    // within 2e-2 and the gradient norms within 5e-2.
    const double loss_tol = kCuda ? 2e-2 : 1e-4;
    const double norm_tol = kCuda ? 5e-2 : 1e-4;
    for (int s = 0; s < kSteps; ++s) {
      const double dl = std::abs(got.losses[s] - want->losses[s]) / std::abs(want->losses[s]);
      const double dn = std::abs(got.norms[s] - want->norms[s]) / std::abs(want->norms[s]);
      const bool ok = dl <= loss_tol && dn <= norm_tol;
      failures += ok ? 0 : 1;
      std::printf("%s step %d: loss %.7f vs single-rank %.7f (rel %.1e), grad norm %.6f vs %.6f (rel %.1e)%s\n",
                  plan.label().c_str(), s, got.losses[s], want->losses[s], dl, got.norms[s],
                  want->norms[s], dn, ok ? "" : "  <-- over 1e-4 (bf16: 2e-2, 5e-2)");
    }
    // The run must also train: the loss moves between steps (5 AdamW steps at lr 1e-3).
    if (!(got.losses.back() < got.losses.front())) {
      std::printf("loss did not fall over %d steps\n", kSteps);
      ++failures;
    }
  }
  // The CUDA-semantics pool keeps freed blocks until the next synchronize, so its peaks are
  // not the memory model's; the plain CPU pass checks memory.
  if (mode == Mode::kCpu) failures += check_memory(model, plan, got, *world);
  if (!got.not_captured.empty()) {
    std::printf("rank %d: --cuda-graphs, but the steps were not captured (%s): FAILED\n",
                world->rank(), got.not_captured.c_str());
    ++failures;
  }
  if (!got.ran_the_program) {
    std::printf("rank %d: the measured ops are not the Program's: FAILED\n", world->rank());
    ++failures;
  }
  world->barrier();  // keep ranks together until rank 0 is done
  double verdict = failures;
  world->all_reduce_sum(&verdict, 1);
  // The verdict is the exit code of every rank (mpirun fails if any rank does); PASSED is
  // printed last, once every rank's every check is in, for the reader only.
  if (world->rank() == 0) std::printf("%s\n", verdict == 0 ? "PASSED" : "FAILED");
  return verdict == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
#ifdef STRATA_EQUIVALENCE_CUDA
  // `--gpu-present [N]`, before MPI: ctest asks this first (cuda_runtime.cmake), so that a
  // machine without a GPU (or, for the --nccl entries, with fewer than N) skips each plan in
  // milliseconds instead of starting its ranks to find out.
  if ((argc == 2 || argc == 3) && std::string(argv[1]) == "--gpu-present") {
    if (!strata::kernels::cuda::cuda_device_available()) {
      std::printf("SKIPPED: %s\n", strata::kernels::cuda::cuda_unavailable_reason().c_str());
      return 77;
    }
    const int needed = argc == 3 ? std::atoi(argv[2]) : 1;
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
    if (devices >= needed) return 0;
    std::printf("SKIPPED: --nccl needs a GPU a rank: %d ranks, %d GPU(s)\n", needed, devices);
    return 77;
  }
#endif
  // Outside the try: a rank's error is printed and aborts the job before MPI is finalised
  // (finalising first would wait for the other ranks, which wait for this one).
  std::optional<Options> options;
  try {
    options = parse_options(argc, argv);
  } catch (const std::exception& e) {  // before MPI: nothing to abort
    std::fprintf(stderr, "engine equivalence: %s\n", e.what());
    return 2;
  }
  if (!options) return 2;
#ifdef STRATA_EQUIVALENCE_CUDA
  if (options->check) {
    try {
      return run_check(*options);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "engine equivalence --check: %s: %s\n", options->plan.label().c_str(),
                   e.what());
      return 2;
    }
  }
#endif
  std::optional<strata::MpiSession> session;
  try {
    session.emplace(&argc, &argv);
    return run(*options, *session);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "engine equivalence: %s\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 2);
    return 2;
  }
}
