// Llama's operators through a backend's LayerOps; see llama_op_bench.h.
#include "executor/calibrate/llama_op_bench.h"

#include <algorithm>
#include <string>

#include <fmt/format.h>

#include "cost_model/specs/errors.h"

namespace strata::calibrate {
namespace {

using engine::Tensor;

// A tensor of n compute-dtype elements (fp32 when `stats`) holding bench_values(n, seed).
Tensor filled(const LlamaOpBackend& backend, std::int64_t n, std::uint32_t seed,
              bool stats = false) {
  Tensor t = stats ? backend.ops->floats(n, "calibrate/llama")
                   : backend.ops->activations(n, "calibrate/llama");
  backend.fill(t, seed);
  return t;
}

void measure_attention(const LlamaOpBackend& backend, const model::Dims& d, int head_size,
                       bool backward, AttentionSeconds& out) {
  model::LayerOps& ops = *backend.ops;
  const int C = d.NHl * head_size;
  const std::int64_t rows = d.BT();
  const std::int64_t width = C + 2 * static_cast<std::int64_t>(d.KVHl) * head_size;
  const Tensor qkv = filled(backend, rows * width, 21);
  const Tensor attn = filled(backend, rows * C, 22);
  const Tensor stats = filled(backend, ops.attention_stats_floats(d.B, d.T, d.NHl), 23, true);
  out.head_size = head_size;
  out.forward_s = backend.seconds([&] {
    ops.attention_forward(attn.data(), stats.f32(), qkv.data(), d.B, d.T, C, d.NHl, d.KVHl);
  });
  if (!backward) return;
  // The backward recomputes the probabilities from a real forward's statistics (its output
  // and log-sum-exp are what the last timed call left).
  const Tensor dout = filled(backend, rows * C, 24);
  const Tensor dqkv = filled(backend, rows * width, 25);
  out.backward_s = backend.seconds([&] {
    ops.attention_backward(dqkv.data(), dout.data(), qkv.data(), attn.data(), stats.f32(), d.B,
                           d.T, C, d.NHl, d.KVHl);
  });
}

}  // namespace

LlamaOpShape llama_op_shape(const ModelSpec& model, std::int64_t micro_batch, std::int64_t tp,
                            bool backward) {
  if (tp < 1 || model.heads % tp != 0 || model.ffn_hidden % tp != 0) {
    throw ConfigError(fmt::format("calibrate: model '{}': tensor-parallel degree {} does not "
                                  "divide heads = {} and ffn_hidden = {}",
                                  model.name, tp, model.heads, model.ffn_hidden));
  }
  LlamaOpShape shape;
  shape.dims = model::make_dims(model, micro_batch, tp, /*tp_rank=*/0);
  shape.attention_head_sizes = {shape.dims.HS, 64, 128};
  std::sort(shape.attention_head_sizes.begin(), shape.attention_head_sizes.end());
  shape.attention_head_sizes.erase(
      std::unique(shape.attention_head_sizes.begin(), shape.attention_head_sizes.end()),
      shape.attention_head_sizes.end());
  shape.backward = backward;
  return shape;
}

LlamaOpSeconds measure_llama_ops(const LlamaOpBackend& backend, const LlamaOpShape& shape) {
  model::LayerOps& ops = *backend.ops;
  const model::Dims& d = shape.dims;
  const int BT = d.BT();
  const std::int64_t hidden = static_cast<std::int64_t>(BT) * d.C;
  const std::int64_t swiglu_in = static_cast<std::int64_t>(BT) * 2 * d.Fl;
  const std::int64_t swiglu_out = static_cast<std::int64_t>(BT) * d.Fl;
  const std::int64_t qkv = static_cast<std::int64_t>(BT) * d.qkv_width();
  LlamaOpSeconds s;

  // The layer's two norms: ln1 on the layer's input, ln2 on the residual stream after
  // attention (gpt_layer.cc); two inputs, so that the second does not find the first's rows
  // in a cache a layer would not have them in.
  const Tensor x1 = filled(backend, hidden, 1), x2 = filled(backend, hidden, 2);
  const Tensor gain = filled(backend, d.C, 3);
  const Tensor out1 = filled(backend, hidden, 4), out2 = filled(backend, hidden, 5);
  const Tensor rstd = filled(backend, 2 * static_cast<std::int64_t>(BT), 6, true);
  float* rstd1 = rstd.f32();
  float* rstd2 = rstd1 + BT;
  s.rmsnorm_s = backend.seconds([&] {
    ops.rmsnorm_forward(out1.data(), rstd1, x1.data(), gain.data(), BT, d.C, d.norm_eps);
    ops.rmsnorm_forward(out2.data(), rstd2, x2.data(), gain.data(), BT, d.C, d.norm_eps);
  });
  if (shape.backward) {
    // Both accumulate into the residual stream's gradient, as the layer's backward does;
    // sums of terms below ~1 over the repeats stay far from overflow.
    const Tensor dout1 = filled(backend, hidden, 7), dout2 = filled(backend, hidden, 8);
    const Tensor dres = filled(backend, hidden, 9);
    const Tensor dgain = filled(backend, 2 * static_cast<std::int64_t>(d.C), 10, true);
    s.rmsnorm_backward_s = backend.seconds([&] {
      ops.rmsnorm_backward(dres.data(), dgain.f32(), dout2.data(), x2.data(), gain.data(), rstd2,
                           BT, d.C);
      ops.rmsnorm_backward(dres.data(), dgain.f32() + d.C, dout1.data(), x1.data(), gain.data(),
                           rstd1, BT, d.C);
    });
  }

  const Tensor pre = filled(backend, swiglu_in, 11);
  const Tensor act = filled(backend, swiglu_out, 12);
  s.swiglu_s = backend.seconds([&] { ops.swiglu_forward(act.data(), pre.data(), BT, d.Fl); });
  if (shape.backward) {
    const Tensor dpre = filled(backend, swiglu_in, 13);
    s.swiglu_backward_s = backend.seconds(
        [&] { backend.swiglu_backward(dpre.data(), pre.data(), act.data(), BT, d.Fl); });
  }

  // In place on q and k of the packed rows; a rotation keeps the values bounded.
  const Tensor rows = filled(backend, qkv, 14);
  s.rope_s = backend.seconds([&] {
    ops.rope_forward(rows.data(), d.B, d.T, d.NHl + d.KVHl, d.HS, d.qkv_width(), d.rope);
  });
  if (shape.backward) {
    s.rope_backward_s = backend.seconds([&] {
      ops.rope_backward(rows.data(), d.B, d.T, d.NHl + d.KVHl, d.HS, d.qkv_width(), d.rope);
    });
  }

  for (int head_size : shape.attention_head_sizes) {
    measure_attention(backend, d, head_size, shape.backward, s.gqa.emplace_back());
  }
  return s;
}

}  // namespace strata::calibrate
