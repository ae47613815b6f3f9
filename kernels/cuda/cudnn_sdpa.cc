// cuDNN's fused attention on strata's layout (see cudnn_sdpa.h).
#include "kernels/cuda/cudnn_sdpa.h"

#include <cmath>
#include <limits>
#include <vector>

#include <fmt/format.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cudnn_graph.h"

namespace strata::kernels::cuda {

#if STRATA_HAVE_CUDNN_HEADERS
namespace {

using cudnn::GraphBuilder;
using cudnn::TensorSpec;
using Dims = std::vector<std::int64_t>;

// The graphs' tensor ids (GraphBuilder's virtual ones start above them).
enum Uid : std::int64_t {
  kQ = 1, kK, kV, kO, kStats, kScale, kNegInf, kDO, kDQ, kDK, kDV, kSoftmaxSum, kOne
};

constexpr std::int64_t kAlign = 256;  // bytes: where the backend's workspace starts after ours

// strata's packed layout in cuDNN's (B, H, S, D) terms.
struct Layout {
  std::int64_t B, T, NH, KVH, HS, row, C;
  explicit Layout(const SdpaShape& s)
      : B(s.B), T(s.T), NH(s.NH), KVH(s.KVH), HS(s.HS), row((s.NH + 2 * s.KVH) * s.HS),
        C(static_cast<std::int64_t>(s.NH) * s.HS) {}
  // Heads of a qkv row: (B, H, T, HS) at row stride `row`.
  TensorSpec heads(std::int64_t uid, std::int64_t h) const {
    return {uid, CUDNN_DATA_BFLOAT16, {B, h, T, HS}, {T * row, HS, row, 1}};
  }
  // The same heads transposed: (B, H, HS, T).
  TensorSpec heads_t(std::int64_t uid, std::int64_t h) const {
    return {uid, CUDNN_DATA_BFLOAT16, {B, h, HS, T}, {T * row, HS, 1, row}};
  }
  // out / dout: (B, NH, T, HS) of a (B, T, C) tensor.
  TensorSpec rows(std::int64_t uid) const {
    return {uid, CUDNN_DATA_BFLOAT16, {B, NH, T, HS}, {T * C, HS, C, 1}};
  }
  TensorSpec per_row(std::int64_t uid) const {  // (B, NH, T, 1) fp32: lse, softmax_sum
    return {uid, CUDNN_DATA_FLOAT, {B, NH, T, 1}, {NH * T, T, 1, 1}};
  }
  Dims scores() const { return {B, NH, T, T}; }
  Dims transposed_strides() const { return {NH * T * T, T * T, 1, T}; }
};

// -inf for the masked scores; cuDNN before 9.1 wanted the lowest finite value instead.
float masked_value(std::size_t version) {
  return version >= 90100 ? -std::numeric_limits<float>::infinity()
                          : std::numeric_limits<float>::lowest();
}

// The causal mask on `scores`: row index >= column index keeps a score, else `neg`.
int causal_mask(GraphBuilder& g, const Layout& l, int scores, int neg) {
  const int row = g.intermediate(l.scores(), CUDNN_DATA_INT32);
  const int col = g.intermediate(l.scores(), CUDNN_DATA_INT32);
  const int keep = g.intermediate(l.scores(), CUDNN_DATA_BOOLEAN);
  const int masked = g.intermediate(l.scores());
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, scores, -1, -1, row, CUDNN_DATA_INT32, 2);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, scores, -1, -1, col, CUDNN_DATA_INT32, 3);
  g.pointwise(CUDNN_POINTWISE_CMP_GE, row, col, -1, keep, CUDNN_DATA_BOOLEAN);
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, scores, neg, keep, masked);
  return masked;
}

void build_forward(GraphBuilder& g, const Layout& l) {
  const int q = g.tensor(l.heads(kQ, l.NH));
  const int kt = g.tensor(l.heads_t(kK, l.KVH));
  const int v = g.tensor(l.heads(kV, l.KVH));
  const int o = g.tensor(l.rows(kO));
  const int stats = g.tensor(l.per_row(kStats));
  const int scale = g.scalar(kScale);
  const int neg = g.scalar(kNegInf);
  const int s = g.intermediate(l.scores());
  g.matmul(q, kt, s);
  const int scaled = g.intermediate(l.scores());
  g.pointwise(CUDNN_POINTWISE_MUL, s, scale, -1, scaled);
  const int masked = causal_mask(g, l, scaled, neg);
  // The softmax and its statistic: max, exp(s - max), their sum, lse = max + log(sum).
  const int max = g.intermediate({l.B, l.NH, l.T, 1});
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, masked, max);
  const int shifted = g.intermediate(l.scores());
  g.pointwise(CUDNN_POINTWISE_SUB, masked, max, -1, shifted);
  const int e = g.intermediate(l.scores());
  g.pointwise(CUDNN_POINTWISE_EXP, shifted, -1, -1, e);
  const int sum = g.intermediate({l.B, l.NH, l.T, 1});
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, e, sum);
  const int log_sum = g.intermediate({l.B, l.NH, l.T, 1});
  g.pointwise(CUDNN_POINTWISE_LOG, sum, -1, -1, log_sum);
  g.pointwise(CUDNN_POINTWISE_ADD, max, log_sum, -1, stats);
  const int p = g.intermediate(l.scores());
  g.pointwise(CUDNN_POINTWISE_DIV, e, sum, -1, p);
  g.matmul(p, v, o);
}

// dX = a^T @ b into `out`, or (GQA) into all NH heads and then summed over each KV head's
// group by a reduction.
void grouped_matmul(GraphBuilder& g, const Layout& l, int a_t, int b, int out) {
  if (l.NH == l.KVH) {
    g.matmul(a_t, b, out);
    return;
  }
  const int full = g.intermediate({l.B, l.NH, l.T, l.HS}, {l.NH * l.T * l.HS, l.T * l.HS, l.HS, 1},
                                   CUDNN_DATA_BFLOAT16);
  g.matmul(a_t, b, full);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, full, out);
}

void build_backward(GraphBuilder& g, const Layout& l) {
  const int q = g.tensor(l.heads(kQ, l.NH));
  const int kt = g.tensor(l.heads_t(kK, l.KVH));
  const int vt = g.tensor(l.heads_t(kV, l.KVH));
  const int o = g.tensor(l.rows(kO));
  const int dout = g.tensor(l.rows(kDO));
  const int stats = g.tensor(l.per_row(kStats));
  const int dq = g.tensor(l.heads(kDQ, l.NH));
  const int dk = g.tensor(l.heads(kDK, l.KVH));
  const int dv = g.tensor(l.heads(kDV, l.KVH));
  const int softmax_sum = g.tensor(l.per_row(kSoftmaxSum));
  const int scale = g.scalar(kScale);
  const int neg = g.scalar(kNegInf);
  const int one = g.scalar(kOne);
  // softmax_sum = rowsum(dO * O): the softmax backward's subtrahend, kept in the workspace.
  const int d_o = g.intermediate({l.B, l.NH, l.T, l.HS},
                                 {l.NH * l.T * l.HS, l.T * l.HS, l.NH * l.HS, 1}, CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_MUL, dout, o, -1, d_o);
  const int rowsum = g.intermediate({l.B, l.NH, l.T, 1});
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, d_o, rowsum);
  g.pointwise(CUDNN_POINTWISE_MUL, rowsum, one, -1, softmax_sum);
  // P = exp(scale Q K^T - lse), masked.
  const int s = g.intermediate(l.scores());
  g.matmul(q, kt, s);
  const int scaled = g.intermediate(l.scores());
  g.pointwise(CUDNN_POINTWISE_MUL, s, scale, -1, scaled);
  const int shifted = g.intermediate(l.scores());
  g.pointwise(CUDNN_POINTWISE_SUB, scaled, stats, -1, shifted);
  const int masked = causal_mask(g, l, shifted, neg);
  const int p = g.intermediate(l.scores());
  g.pointwise(CUDNN_POINTWISE_EXP, masked, -1, -1, p);
  // dV = P^T dO.
  const int p_t = g.intermediate(l.scores(), l.transposed_strides(), CUDNN_DATA_BFLOAT16);
  g.reshape(p, p_t);
  grouped_matmul(g, l, p_t, dout, dv);
  // dS = P (dO V^T - softmax_sum) scale.
  const int dp = g.intermediate(l.scores());
  g.matmul(dout, vt, dp);
  const int centred = g.intermediate(l.scores());
  g.pointwise(CUDNN_POINTWISE_SUB, dp, softmax_sum, -1, centred);
  const int ds_unscaled = g.intermediate(l.scores());
  g.pointwise(CUDNN_POINTWISE_MUL, centred, p, -1, ds_unscaled);
  const int ds = g.intermediate(l.scores());
  g.pointwise(CUDNN_POINTWISE_MUL, ds_unscaled, scale, -1, ds);
  // dK = dS^T Q; dQ = dS K.
  const int ds_t = g.intermediate(l.scores(), l.transposed_strides(), CUDNN_DATA_BFLOAT16);
  g.reshape(ds, ds_t);
  grouped_matmul(g, l, ds_t, q, dk);
  const int k = g.intermediate({l.B, l.KVH, l.T, l.HS}, {l.T * l.row, l.HS, l.row, 1},
                               CUDNN_DATA_BFLOAT16);
  g.reshape(kt, k);
  g.matmul(ds, k, dq);
}

}  // namespace

struct CudnnSdpa::Impl {
  struct Prepared {
    cudnn::Plan plan;
    std::int64_t own_bytes = 0;  // ours before the backend's (softmax_sum)
  };
  const CudnnLibrary* lib;
  std::size_t version;
  cudnn::Handle handle;
  std::map<std::tuple<int, int, int, int, int, bool>, Prepared> plans;
  DeviceBuffer workspace;

  explicit Impl(const CudnnLibrary& l) : lib(&l), version(l.GetVersion()), handle(l) {}

  const Prepared& prepared(const SdpaShape& s, bool backward) {
    const auto key = std::tuple_cat(s.key(), std::tuple(backward));
    if (auto it = plans.find(key); it != plans.end()) return it->second;
    const Layout l(s);
    GraphBuilder g(*lib);
    if (backward) {
      build_backward(g, l);
    } else {
      build_forward(g, l);
    }
    const cudnn::Descriptor graph = g.finalize(handle);
    Prepared p{cudnn::make_plan(*lib, handle, graph, /*deterministic_only=*/backward), 0};
    if (backward) {
      p.own_bytes = (l.B * l.NH * l.T * 4 + kAlign - 1) / kAlign * kAlign;
    }
    const auto need = static_cast<std::size_t>(p.own_bytes + p.plan.workspace_bytes);
    if (workspace.bytes() < need) workspace = DeviceBuffer(need);
    return plans.emplace(key, std::move(p)).first->second;
  }

  void* workspace_at(std::int64_t offset) {
    return workspace.bytes() == 0 ? nullptr : static_cast<char*>(workspace.get()) + offset;
  }
};

CudnnSdpa::CudnnSdpa(const CudnnLibrary& lib) : impl_(std::make_unique<Impl>(lib)) {}
CudnnSdpa::~CudnnSdpa() = default;

void CudnnSdpa::forward(bf16* out, float* lse, const bf16* qkv, const SdpaShape& s,
                        cudaStream_t stream) {
  impl_->handle.set_stream(stream);
  const Impl::Prepared& p = impl_->prepared(s, false);
  const Layout l(s);
  float scale = 1.0f / std::sqrt(static_cast<float>(s.HS));
  float neg = masked_value(impl_->version);
  auto* base = const_cast<bf16*>(qkv);
  cudnn::execute(*impl_->lib, impl_->handle, p.plan, {kQ, kK, kV, kO, kStats, kScale, kNegInf},
                 {base, base + l.C, base + l.C + l.KVH * l.HS, out, lse, &scale, &neg},
                 impl_->workspace_at(0));
}

void CudnnSdpa::backward(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out,
                         const float* lse, const SdpaShape& s, cudaStream_t stream) {
  impl_->handle.set_stream(stream);
  const Impl::Prepared& p = impl_->prepared(s, true);
  const Layout l(s);
  float scale = 1.0f / std::sqrt(static_cast<float>(s.HS));
  float neg = masked_value(impl_->version);
  float one = 1.0f;
  auto* base = const_cast<bf16*>(qkv);
  cudnn::execute(*impl_->lib, impl_->handle, p.plan,
                 {kQ, kK, kV, kO, kDO, kStats, kDQ, kDK, kDV, kSoftmaxSum, kScale, kNegInf, kOne},
                 {base, base + l.C, base + l.C + l.KVH * l.HS, const_cast<bf16*>(out),
                  const_cast<bf16*>(dout), const_cast<float*>(lse), dqkv, dqkv + l.C,
                  dqkv + l.C + l.KVH * l.HS, impl_->workspace_at(0), &scale, &neg, &one},
                 impl_->workspace_at(p.own_bytes));
}

#else  // no cuDNN headers: nothing to run (the launcher never makes one)

struct CudnnSdpa::Impl {};
CudnnSdpa::CudnnSdpa(const CudnnLibrary&) {
  throw CudaError("cuDNN: this strata was built without cuDNN's headers");
}
CudnnSdpa::~CudnnSdpa() = default;
void CudnnSdpa::forward(bf16*, float*, const bf16*, const SdpaShape&, cudaStream_t) {}
void CudnnSdpa::backward(bf16*, const bf16*, const bf16*, const bf16*, const float*,
                         const SdpaShape&, cudaStream_t) {}

#endif

}  // namespace strata::kernels::cuda
