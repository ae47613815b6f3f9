// Parameters, gradients and AdamW state under ZeRO stages 0-3 on any backend (see
// model_state.h): set-up and placement in the tiers, and the step's state moves (fetch,
// gather, release, the gradient sums, reductions and offload, the norm). The optimizer is
// model_state_optimizer.cc's, checkpoint access model_state_checkpoint.cc's.
#include "executor/engine/model_state.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <tuple>

#include "cost_model/specs/model_state_bytes.h"
#include "executor/memory/host_pages.h"
#include "executor/model/param_init.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cpu/elementwise.h"

namespace strata::engine {
namespace cpu = strata::kernels::cpu;

namespace {

// The full gradients (stages 0-1) are allocated unzeroed: begin_step() zeroes them before
// every step, so a zero fill at set-up was a second pass over them (1.4 GB of fresh pages
// for gpt2-350m, faulted in and cleared at set-up and then cleared again by the first step).
constexpr bool kZeroedByBeginStep = false;

// model_state_bytes.h's widths are the float tensors this file allocates for them.
static_assert(kMasterBytes == sizeof(float) && kGradientBytes == sizeof(float) &&
              kMomentBytes == sizeof(float));

}  // namespace

ModelState::ModelState(Backend& backend, std::vector<UnitLayout> layouts, const Plan& plan,
                       const ProcessGroups& groups, Communicator& host_world,
                       std::uint64_t seed, const OffloadOptions& options,
                       std::int64_t micro_batches, const model::UnitInit& init)
    : backend_(&backend),
      groups_(&groups),
      host_world_(&host_world),
      zero_stage_(plan.zero_stage),
      offload_(plan.offload),
      host_only_(plan.zero3_state_in_host_memory()),
      options_(options),
      micro_batches_(micro_batches),
      sequence_parallel_(plan.sequence_parallel) {
  if (offload_ != OffloadPlan{}) {
    links_ = std::make_unique<OffloadLinks>(offload_, options, backend);
    if (params_off()) fetcher_ = std::make_unique<ParamFetcher>(*links_, backend);
  }
  const std::int64_t d = groups.dims().dp;
  const model::UnitInit seeded = model::SeededInit{seed, {}};
  const model::UnitInit& init_values = init ? init : seeded;
  units_.reserve(layouts.size());
  // One host buffer for every unit's initial values, sized for the largest: a fresh vector
  // per unit would fault in and zero its pages again (the largest are hundreds of MiB).
  std::int64_t largest = 0;
  for (auto& layout : layouts) {
    ParamUnit u;
    u.layout = std::move(layout);
    const UnitState sizes = unit_state(u.layout.count, d, zero_stage_, offload_,
                                       static_cast<int>(dtype_bytes(backend.compute_dtype())),
                                       !own_master());
    u.padded = sizes.padded;
    u.shard = sizes.shard;
    largest = std::max(largest, sizes.params.elements);
    units_.push_back(std::move(u));
  }
  // Page-aligned (the NVMe tier writes straight from it), in huge pages, and faulted in by
  // the first draw into it, which runs on every thread.
  const HostPages scratch(std::max<std::int64_t>(largest, 1) * 4, /*huge=*/true);
  TierBytes placed;
  for (std::size_t i = 0; i < units_.size(); ++i) {
    place(units_[i], init_values, scratch.as<float>());
    index_[units_[i].layout.name] = i;
    if (options_.on_placed) {
      const TierBytes unit = placed_bytes(units_[i]);
      placed.device += unit.device;
      placed.host += unit.host;
      placed.nvme += unit.nvme;
      options_.on_placed(placed);
    }
  }
}

TierBytes ModelState::placed_bytes(const ParamUnit& u) const {
  TierBytes bytes;
  for (const Tensor* t : {&u.params, &u.master, &u.grads, &u.grad_shard, &u.m, &u.v,
                          &u.host_params, &u.host_grads, &u.host_master, &u.host_m, &u.host_v}) {
    (t->tier() == MemoryTier::kDevice ? bytes.device : bytes.host) += static_cast<double>(t->bytes());
  }
  for (const std::string* name : {&u.nvme_params, &u.nvme_grads, &u.nvme_master, &u.nvme_m, &u.nvme_v}) {
    if (!name->empty()) bytes.nvme += static_cast<double>(links_->store().count(*name)) * 4;
  }
  return bytes;
}

std::int64_t ModelState::stored_elements(const ParamUnit& u) const {
  return zero_stage_ >= 3 ? u.shard : u.padded;
}

Tensor ModelState::alloc(MemoryTier tier, DType dtype, std::int64_t n, const std::string& tag,
                         bool zeroed) {
  return backend_->allocate(tier, dtype, n, tag, zeroed);
}

std::int64_t ModelState::opt_offset(const ParamUnit& u) const {
  return zero_stage_ == 1 || zero_stage_ == 2 ? groups_->coords().dp * u.shard : 0;
}

std::int32_t ModelState::index(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? -1 : static_cast<std::int32_t>(it->second);
}

void ModelState::place(ParamUnit& u, const model::UnitInit& init_values, float* init) {
  const DType c = backend_->compute_dtype();
  const std::int64_t dp_rank = groups_->coords().dp;
  // What each kind of state holds and where: model_state_bytes.h, which the memory model
  // prices the same way.
  const UnitState sizes = unit_state(u.layout.count, groups_->dims().dp, zero_stage_, offload_,
                                     static_cast<int>(dtype_bytes(c)), !own_master());
  // The parameters this rank stores: everything, or its shard at stage 3.
  const std::int64_t lo = zero_stage_ >= 3 ? dp_rank * u.shard : 0;
  const std::int64_t n = sizes.params.elements;
  if (place_seeded_on_device(u, init_values, lo)) return;
  // Parameters offloaded to the host are drawn where they live (on every thread, into
  // pinned memory on CUDA): a draw into `init` and a copy was a second pass over them. So is
  // a host master that holds the whole unit (the optimizer on the CPU, one DP rank or stage
  // 0), and the device's copy then reads pinned memory, not pageable (staged) memory.
  if (params_off() && offload_.params == OffloadTier::kCpu) {
    u.host_params = alloc(MemoryTier::kHost, DType::kF32, n, "offload:params", false);
    init = u.host_params.f32();
  } else if (!params_off() && offload_.optimizer == OffloadTier::kCpu && opt_offset(u) == 0 &&
             opt_elements(u) == n) {
    u.host_master = alloc(MemoryTier::kHost, DType::kF32, n, "offload:optimizer", false);
    init = u.host_master.f32();
  }
  init_values(u.layout, init, lo, lo + n);
  if (!params_off()) {
    u.params = alloc(MemoryTier::kDevice, c, n, "params", /*zeroed=*/false);
    if (own_master()) {
      backend_->copy(u.params.data(), init, n * 4, Stream::kCompute);
    } else {
      Tensor staging = alloc(MemoryTier::kDevice, DType::kF32, n, "dp_scratch", false);
      backend_->copy(staging.data(), init, n * 4, Stream::kCompute);
      backend_->to_compute(u.params.data(), staging.f32(), n);
    }
  }
  if (sizes.gradients.tier == OffloadTier::kNone) {
    if (zero_stage_ <= 1) {
      u.grads = alloc(MemoryTier::kDevice, DType::kF32, sizes.gradients.elements, "gradients",
                      kZeroedByBeginStep);
    } else {
      u.grad_shard = alloc(MemoryTier::kDevice, DType::kF32, sizes.gradients.elements, "gradients");
    }
  }
  const std::int64_t opt_n = sizes.moments.elements;
  // The fp32 values of the optimizer's part (init starts at element `lo`, opt_offset's origin).
  const float* part = init + opt_offset(u);
  if (sizes.moments.tier == OffloadTier::kNone) {
    u.m = alloc(MemoryTier::kDevice, DType::kF32, opt_n, "optimizer");
    u.v = alloc(MemoryTier::kDevice, DType::kF32, opt_n, "optimizer");
    if (sizes.master.elements > 0) {
      u.master = alloc(MemoryTier::kDevice, DType::kF32, sizes.master.elements, "master", false);
      backend_->copy(u.master.data(), part, opt_n * 4, Stream::kCompute);
    }
  }
  place_offloaded(u, part);
}

bool ModelState::place_seeded_on_device(ParamUnit& u, const model::UnitInit& init_values,
                                        std::int64_t lo) {
  // Only for state that lives on the device alone (no offload), and only a backend that
  // draws there; the allocations are place()'s, in its order, so the peaks do not move.
  const auto* seeded = init_values.target<model::SeededInit>();
  if (seeded == nullptr || links_ != nullptr) return false;  // links_: any offload
  const std::int64_t n = stored_elements(u);
  u.params = alloc(MemoryTier::kDevice, backend_->compute_dtype(), n, "params", false);
  if (own_master()) {
    // fp32 parameters are their own master: drawn straight into them (on the CPU backend
    // this saves place()'s host buffer and its copy, 1.4 GB for gpt2-350m).
    if (!backend_->init_seeded(u.params.f32(), u.layout, seeded->seed, lo, lo + n)) {
      u.params.reset();
      return false;
    }
  } else {
    Tensor staging = alloc(MemoryTier::kDevice, DType::kF32, n, "dp_scratch", false);
    if (!backend_->init_seeded(staging.f32(), u.layout, seeded->seed, lo, lo + n)) {
      u.params.reset();
      return false;
    }
    backend_->to_compute(u.params.data(), staging.f32(), n);
    backend_->release_after(std::move(staging), Stream::kCompute);
  }
  if (zero_stage_ <= 1) {
    u.grads = alloc(MemoryTier::kDevice, DType::kF32, u.padded, "gradients", kZeroedByBeginStep);
  }
  if (zero_stage_ >= 2) u.grad_shard = alloc(MemoryTier::kDevice, DType::kF32, u.shard, "gradients");
  const std::int64_t opt_n = opt_elements(u);
  u.m = alloc(MemoryTier::kDevice, DType::kF32, opt_n, "optimizer");
  u.v = alloc(MemoryTier::kDevice, DType::kF32, opt_n, "optimizer");
  if (!own_master()) {
    u.master = alloc(MemoryTier::kDevice, DType::kF32, opt_n, "master", false);
    // The master's part drawn again where it lies (cheaper than keeping staging alive).
    const std::int64_t part_lo = lo + opt_offset(u);
    backend_->init_seeded(u.master.f32(), u.layout, seeded->seed, part_lo, part_lo + opt_n);
  }
  if (seeded->progress) seeded->progress(n);
  return true;
}

void ModelState::place_offloaded(ParamUnit& u, const float* init_part) {
  if (!links_) return;
  const std::string& name = u.layout.name;
  if (params_off() && offload_.params == OffloadTier::kNvme) {
    // Stage 3: the optimizer's part is the whole shard (opt_offset 0).
    u.nvme_params = "params." + name;
    links_->store().create_from(u.nvme_params, init_part, u.shard);
  }
  if (grads_off()) {
    if (offload_.gradients == OffloadTier::kCpu) {
      u.host_grads = alloc(MemoryTier::kHost, DType::kF32, u.shard, "offload:gradients");
    } else {
      u.nvme_grads = "grads." + name;
      links_->store().create(u.nvme_grads, u.shard);
    }
  }
  if (!optimizer_off()) return;
  const std::int64_t opt_n = opt_elements(u);
  const bool nvme = offload_.optimizer == OffloadTier::kNvme;
  for (auto [host, nvme_name, prefix] :
       {std::tuple{&u.host_m, &u.nvme_m, "adam_m."}, std::tuple{&u.host_v, &u.nvme_v, "adam_v."}}) {
    if (nvme) {
      *nvme_name = prefix + name;
      links_->store().create(*nvme_name, opt_n);
    } else {
      *host = alloc(MemoryTier::kHost, DType::kF32, opt_n, "offload:optimizer");
    }
  }
  // fp32 master params of the optimizer's part, unless the offloaded params are the master.
  if (params_off()) return;
  if (nvme) {
    u.nvme_master = "master." + name;
    links_->store().create_from(u.nvme_master, init_part, opt_n);
  } else if (u.host_master.empty()) {  // else drawn into it (place())
    u.host_master = alloc(MemoryTier::kHost, DType::kF32, opt_n, "offload:optimizer", false);
    cpu::copy(u.host_master.f32(), init_part, opt_n);
  }
}

ShardSource ModelState::shard_source(const ParamUnit& u) const {
  return ShardSource{u.host_params.empty() ? nullptr : u.host_params.f32(), u.nvme_params, u.shard};
}

void ModelState::reset_transfers() {
  optimizer_transfer_s_ = 0;
  if (links_) links_->reset_bytes();
}

const void* ModelState::weights(std::size_t u) const {
  const ParamUnit& p = units_.at(u);
  if (zero_stage_ < 3) return p.params.data();
  if (p.gathers <= 0) {
    throw std::logic_error("ModelState: weights of " + p.layout.name + " while not gathered");
  }
  return p.gathered.data();
}

float* ModelState::grads(std::size_t u) {
  ParamUnit& p = units_.at(u);
  if (p.grads.empty()) p.grads = alloc(MemoryTier::kDevice, DType::kF32, p.padded, "gradients");
  return p.grads.f32();
}

void ModelState::begin_step() {
  land_pending_down();  // a forward_backward without the tail (evaluation) may leave one
  for (auto& u : units_) {
    if (!u.grads.empty()) backend_->zero(u.grads.data(), DType::kF32, u.padded, Stream::kCompute);
    u.grad_downs = 0;
    u.host_read_mark = -1;  // marks are per step (the engine synchronised the last one)
  }
}

void ModelState::fetch(std::size_t u) {
  if (!fetcher_) throw std::logic_error("ModelState: fetch without offloaded parameters");
  ParamUnit& p = units_.at(u);
  const int reading = fetcher_->prefetch(p.layout.name, shard_source(p));
  if (reading >= 0) p.host_read_mark = reading;
}

void ModelState::gather(std::size_t u) {
  ParamUnit& p = units_.at(u);
  if (zero_stage_ < 3) throw std::logic_error("ModelState: gather below ZeRO-3");
  if (p.gathers++ > 0) return;  // already gathered in this pass
  const DType c = backend_->compute_dtype();
  p.gathered = alloc(MemoryTier::kDevice, c, p.padded, "zero3_gather", false);
  const void* shard = p.params.data();
  Tensor up;
  if (params_off()) {
    ParamFetcher::Fetched fetched = fetcher_->take(p.layout.name, shard_source(p));
    if (!p.host_params.empty() && fetched.ready >= 0) p.host_read_mark = fetched.ready;
    // This op's stream (comm) waits for the shard's copy, the prefetched one included.
    backend_->wait(Stream::kComm, fetched.ready);
    if (own_master()) {
      up = std::move(fetched.device);
    } else if (groups_->dp().size() == 1) {
      // One rank: the gathered parameters are the shard, cast straight in (a one-rank
      // all-gather would copy them once more).
      backend_->to_compute(p.gathered.data(), fetched.device.f32(), p.shard, Stream::kComm);
      backend_->release_after(std::move(fetched.device), Stream::kComm);
      return;
    } else {
      // The cast on the gather's own stream, between the copy it reads and the all-gather
      // that reads it (on a GPU it once ran on the compute stream, ordered with neither: the
      // DP all-gather read the pool block before or while the cast wrote it, and NaN came).
      up = alloc(MemoryTier::kDevice, c, p.shard, "offload:param_fetch", false);
      backend_->to_compute(up.data(), fetched.device.f32(), p.shard, Stream::kComm);
      backend_->release_after(std::move(fetched.device), Stream::kComm);
    }
    shard = up.data();
    // The DP group's collectives run on a stream of their own (group_streams.h).
    backend_->wait(groups_->dp(), backend_->record(Stream::kComm));
  }
  groups_->dp().all_gather(shard, p.gathered.data(), p.shard, c);
  if (!up.empty()) backend_->release_after(std::move(up), Stream::kComm);
}

void ModelState::release(std::size_t u) {
  ParamUnit& p = units_.at(u);
  if (p.gathers <= 0) throw std::logic_error("ModelState: release without gather of " + p.layout.name);
  if (--p.gathers == 0) p.gathered.reset();
}

void ModelState::sum_norm_grads(std::size_t u) {
  // With SP each TP rank's LayerNorm gain/bias gradients cover only its token rows: summed
  // over TP (Megatron does the same once per step) so every rank holds the full one.
  static constexpr const char* kNorms[] = {"ln1_w", "ln1_b", "ln2_w", "ln2_b", "lnf_w", "lnf_b"};
  ParamUnit& p = units_.at(u);
  float* g = grads(u);
  for (const auto& seg : p.layout.segments) {
    for (const char* name : kNorms) {
      if (seg.name == name) groups_->tp().all_reduce_sum(g + seg.offset, seg.count(), DType::kF32);
    }
  }
}

void ModelState::sum_kv_grads(std::size_t u) {
  // KV heads replicated over TP: each copy's K|V gradient holds its own query heads' part;
  // summed over the ranks holding the head, so the copies take the same step and stay equal.
  Communicator* copies = groups_->kv_copies();
  ParamUnit& p = units_.at(u);
  float* g = grads(u);
  for (const auto& seg : p.layout.segments) {
    if (seg.tp_copies == 1) continue;
    if (copies == nullptr || copies->size() != seg.tp_copies) {
      throw std::logic_error(fmt::format("ModelState: {}'s {} has {} TP copies but the process "
                                         "groups have no KV-copies group of that size (made "
                                         "from parallel_dims(plan, model))",
                                         p.layout.name, seg.name, seg.tp_copies));
    }
    copies->all_reduce_sum(g + seg.offset, seg.count(), DType::kF32);
  }
}

void ModelState::reduce_grads(std::size_t u) {
  ParamUnit& p = units_.at(u);
  float* g = grads(u);
  if (zero_stage_ <= 1) {
    groups_->dp().all_reduce_sum(g, p.padded, DType::kF32);
    return;
  }
  if (grads_off()) {
    p.grad_shard = alloc(MemoryTier::kDevice, DType::kF32, p.shard, "dp_scratch", false);
  }
  groups_->dp().reduce_scatter_sum(g, p.grad_shard.data(), p.shard, DType::kF32);
  backend_->release_after(std::move(p.grads), Stream::kComm);
}

void ModelState::offload_grads(std::size_t u) {
  ParamUnit& p = units_.at(u);
  if (!grads_off() || p.grad_shard.empty()) {
    throw std::logic_error("ModelState: offload_grads of " + p.layout.name + " with nothing reduced");
  }
  send_grad_shard_down(p);
  // Freed in compute order once the copy stream has read it (the memory walk frees it here,
  // program_memory.cc).
  backend_->release_after(std::move(p.grad_shard), Stream::kCopy);
}

void ModelState::send_grad_shard_down(ParamUnit& u) {
  land_pending_down();
  // Downs per step: one per micro-batch for layers without SP (program.h), else one.
  const bool per_micro_batch = u.layout.kind == UnitKind::kLayer && !sequence_parallel_;
  const std::int64_t downs_per_step = per_micro_batch ? micro_batches_ : 1;
  PendingDown down;
  down.unit = static_cast<std::size_t>(&u - units_.data());
  down.first = u.grad_downs == 0;
  down.last = ++u.grad_downs == downs_per_step;
  const std::int64_t n = u.shard;
  float* dst = nullptr;
  if (offload_.gradients == OffloadTier::kCpu && down.first) {
    dst = u.host_grads.f32();  // the step's first shard is the sum so far
  } else {
    down.staging = alloc(MemoryTier::kHost, DType::kF32, n, "offload:grad_staging", false);
    dst = down.staging.f32();
  }
  down.ready = links_->device_to_host_async(dst, u.grad_shard.f32(), n);
  pending_down_ = std::move(down);
}

void ModelState::land_pending_down() {
  if (!pending_down_) return;
  PendingDown down = std::move(*pending_down_);
  pending_down_.reset();
  ParamUnit& u = units_.at(down.unit);
  const std::int64_t n = u.shard;
  backend_->host_wait_for(down.ready);
  const auto add_into = [&](float* sum, const float* shard) {
    backend_->on_host("accumulate the gradients of " + u.layout.name,
                      {host_reads(shard, n * 4), host_writes(sum, n * 4)},
                      [&] { cpu::accumulate(sum, shard, n); });
  };
  if (offload_.gradients == OffloadTier::kCpu) {
    if (!down.first) add_into(u.host_grads.f32(), down.staging.f32());
    return;
  }
  // NVMe: accumulated in place (read, add, write); the norm's share taken once final.
  const float* total = down.staging.f32();
  Tensor acc;
  if (!down.first) {
    acc = alloc(MemoryTier::kHost, DType::kF32, n, "offload:grad_staging", false);
    links_->nvme_to_host(u.nvme_grads, acc.f32(), n);
    add_into(acc.f32(), down.staging.f32());
    total = acc.f32();
  }
  if (down.last) u.grad_sq = local_sum_of_squares(u, total, groups_->coords().dp * u.shard, true);
  links_->host_to_nvme(u.nvme_grads, total, n);
}

void ModelState::tied_embedding_sum(std::size_t u) {
  // The first stage's wte and the last stage's copy get the sum of both gradients.
  ParamUnit& p = units_.at(u);
  if (groups_->embedding() == nullptr) return;
  const auto& wte = p.layout.segment("wte");
  groups_->embedding()->all_reduce_sum(grads(u) + wte.offset, wte.count(), DType::kF32);
}

std::vector<FloatSpan> ModelState::norm_spans(const ParamUnit& u, const float* slice,
                                              std::int64_t lo) const {
  // The tied copy equals the embedding's wte after the embedding-group sum: counted there.
  if (u.layout.kind == UnitKind::kTiedCopy) return {};
  const std::int64_t tp_rank = groups_->coords().tp;
  const std::int64_t hi = lo + u.shard;
  std::vector<FloatSpan> spans;
  for (const auto& s : u.layout.segments) {
    if (!s.counted_on(tp_rank)) continue;
    const std::int64_t a = std::max(lo, s.offset);
    const std::int64_t b = std::min(hi, s.offset + s.count());
    if (a < b) spans.push_back({slice + (a - lo), b - a});
  }
  return spans;
}

double ModelState::local_sum_of_squares(const ParamUnit& u, const float* slice, std::int64_t lo,
                                        bool on_host) const {
  const std::vector<FloatSpan> spans = norm_spans(u, slice, lo);
  if (!on_host) return backend_->sum_of_squares_over(spans);  // one wait for the device
  double sum = 0;
  for (const FloatSpan& s : spans) {
    backend_->on_host("sum of squares of " + u.layout.name + "'s gradients",
                      {host_reads(s.data, s.n * 4)},
                      [&] { sum += cpu::sum_of_squares(s.data, s.n); });
  }
  return sum;
}

void ModelState::use_device_scalars(DeviceStepScalars* scalars) {
  if (scalars != nullptr && (optimizer_off() || grads_off() || params_off())) {
    throw std::logic_error("ModelState: device step scalars need the optimizer state, gradients "
                           "and parameters on the device");
  }
  device_scalars_ = scalars;
}

double ModelState::grad_norm(const OptimizerSpec& opt) {
  land_pending_down();
  if (device_scalars_ != nullptr) {
    // The same spans, unit by unit, as the host path below sums (the same bits).
    const std::int64_t dp_rank = groups_->coords().dp;
    std::vector<std::vector<FloatSpan>> groups;
    for (auto& u : units_) {
      const std::int64_t lo = dp_rank * u.shard;
      groups.push_back(zero_stage_ <= 1 ? norm_spans(u, u.grads.f32() + lo, lo)
                                        : norm_spans(u, u.grad_shard.f32(), lo));
    }
    backend_->sum_squares_on_device(groups, &device_scalars_->grad_sq);
    // Every rank's sum, summed over the world on the device (in rank order, as the host's),
    // on the world group's stream (group_streams.h: the comm stream), between the sum and the
    // clip factor on the compute stream.
    if (groups_->world().size() > 1) {
      backend_->wait(groups_->world(), backend_->record(Stream::kCompute));
      groups_->world().all_reduce_sum(&device_scalars_->grad_sq, 1);
      backend_->wait(Stream::kCompute, backend_->record(Stream::kComm));
    }
    backend_->clip_factor_on_device(static_cast<float>(opt.grad_clip), device_scalars_);
    return std::numeric_limits<double>::quiet_NaN();
  }
  // Every rank sums its slices; the world sum counts each parameter once.
  const std::int64_t dp_rank = groups_->coords().dp;
  double sq = 0;
  for (auto& u : units_) {
    const std::int64_t lo = dp_rank * u.shard;
    if (grads_off() && offload_.gradients == OffloadTier::kNvme) {
      sq += u.grad_sq;  // taken when the shard was final (send_grad_shard_down)
    } else if (grads_off()) {
      sq += local_sum_of_squares(u, u.host_grads.f32(), lo, true);
    } else if (zero_stage_ <= 1) {
      sq += local_sum_of_squares(u, u.grads.f32() + lo, lo, false);
    } else {
      sq += local_sum_of_squares(u, u.grad_shard.f32(), lo, false);
    }
  }
  host_world_->all_reduce_sum(&sq, 1);
  const double norm = std::sqrt(sq);
  clip_ = cpu::clip_scale(norm, static_cast<float>(opt.grad_clip));
  return norm;
}

}  // namespace strata::engine
