// The one description of a model's tensors (layer_tensors.h): the published parameter counts
// of Llama 3 from the bundled configs, GPT-2's unchanged, the TP shards of grouped-query
// attention (split and replicated KV heads), SwiGLU's fused gate|up, the untied output unit,
// and the FLOPs a token.
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "cost_model/specs/errors.h"
#include "cost_model/specs/layer_tensors.h"
#include "cost_model/specs/model_spec.h"
#include "cost_model/specs/param_layout.h"
#include "cost_model/specs/partition.h"
#include "cost_model/specs/step_report.h"

namespace strata {
namespace {

ModelSpec bundled(const std::string& name) {
  return ModelSpec::load(
      (std::filesystem::path(STRATA_SOURCE_DIR) / "configs" / "models" / (name + ".json")).string());
}

// A Llama layer by hand (h hidden, f ffn_hidden, kv KV heads of d = h / heads channels):
//   attention: q_proj and o_proj h^2 each, k_proj and v_proj h (kv d) each  2h^2 + 2 h kv d
//   MLP: gate, up (h f each) and down (f h)                                  3 h f
//   two RMSNorm gains                                                        2h
// The model: L layers + the embedding V h + the untied lm_head V h (not when tied) + the
// final RMSNorm's h. Published (Meta's model cards, Hugging Face's parameter counts):
//   8B:   L 32,  h 4096,  f 14336, kv d = 8 x 128: 32 x 218,112,000 + 2 x 525,336,576 + 4096
//         = 8,030,261,248
//   70B:  L 80,  h 8192,  f 28672, kv d = 8 x 128: 80 x 855,654,400 + 2 x 1,050,673,152 + 8192
//         = 70,553,706,496
//   405B: L 126, h 16384, f 53248, kv d = 8 x 128: 126 x 3,187,703,808 + 2 x 2,101,346,304
//         + 16384 = 405,853,388,800
//   3.2 1B (tied): L 16, h 2048, f 8192, kv d = 8 x 64: 16 x 60,821,504 + 262,668,288 + 2048
//         = 1,235,814,400
std::int64_t llama_by_hand(std::int64_t L, std::int64_t h, std::int64_t f, std::int64_t kv_d,
                           std::int64_t V, bool tied) {
  const std::int64_t layer = 2 * h * h + 2 * h * kv_d + 3 * h * f + 2 * h;
  return L * layer + (tied ? 1 : 2) * V * h + h;
}

TEST(LayerTensors, Llama3ParameterCountsMatchThePublishedOnes) {
  struct Row {
    const char* config;
    double published;
    std::int64_t by_hand;
  };
  const Row rows[] = {
      {"llama3-8b", 8.030e9, llama_by_hand(32, 4096, 14336, 1024, 128256, false)},
      {"llama3-70b", 70.55e9, llama_by_hand(80, 8192, 28672, 1024, 128256, false)},
      {"llama3-405b", 405.85e9, llama_by_hand(126, 16384, 53248, 1024, 128256, false)},
      {"llama3.2-1b", 1.236e9, llama_by_hand(16, 2048, 8192, 512, 128256, true)},
  };
  for (const Row& r : rows) {
    SCOPED_TRACE(r.config);
    const ModelSpec m = bundled(r.config);
    EXPECT_EQ(m.total_params(), r.by_hand);
    EXPECT_NEAR(static_cast<double>(m.total_params()), r.published, 1e-3 * r.published);
  }
  EXPECT_EQ(bundled("llama3-8b").total_params(), 8030261248);
  EXPECT_EQ(bundled("llama3-70b").total_params(), 70553706496);
  EXPECT_EQ(bundled("llama3-405b").total_params(), 405853388800);
  EXPECT_EQ(bundled("llama3.2-1b").total_params(), 1235814400);
}

TEST(LayerTensors, Gpt2CountsUnchanged) {
  // 12 l h^2 + 13 l h + (V + s) h + 2h with l 12, h 768, V 50257, s 1024 (GPT-2 small).
  EXPECT_EQ(bundled("gpt2-124m").total_params(), 124439808);
  const ModelSpec m = bundled("gpt2-124m");
  EXPECT_EQ(m.params_per_layer(), 12 * 768 * 768 + 13 * 768);
  EXPECT_EQ(m.output_params(), 0);  // tied
}

TEST(LayerTensors, LlamaLayerTensorsInOrder) {
  const ModelSpec m = bundled("tiny-llama");  // h 64, heads 4 (d 16), kv 2, f 176
  std::string names;
  for (const TensorSpec& s : layer_tensor_specs(m)) names += std::string(s.name) + " ";
  // No biases, RMSNorm gains only, Q apart from K|V, SwiGLU gate|up fused.
  EXPECT_EQ(names, "ln1_w q_w kv_w proj_w ln2_w fc_w fc2_w ");
  const UnitLayout layer = layer_layout(m, TpShape{}, 0);
  EXPECT_EQ(layer.segment("kv_w").rows, 2 * 2 * 16);  // K and V, 2 heads of 16
  EXPECT_EQ(layer.segment("fc_w").rows, 2 * 176);     // gate | up
  EXPECT_EQ(layer.segment("fc2_w").cols, 176);
}

TEST(LayerTensors, LayoutCountsEqualTheCountsAtEveryLegalTp) {
  for (const char* name : {"tiny-llama", "llama3-70b", "gpt2-124m"}) {
    const ModelSpec m = bundled(name);
    for (std::int64_t tp : {1, 2, 4, 8, 16}) {
      if (!tensor_parallel_violation(m, tp).empty()) continue;
      SCOPED_TRACE(std::string(name) + " tp " + std::to_string(tp));
      std::int64_t layer_sum = 0;
      for (std::int64_t r = 0; r < tp; ++r) {
        const UnitLayout l = layer_layout(m, TpShape{tp, r, 1}, 3);
        EXPECT_EQ(l.count, layer_params_per_tp_rank(m, tp));
        layer_sum += l.count;
      }
      // Summed over the ranks: the layer once, plus the copies of what is replicated.
      EXPECT_GE(layer_sum, m.params_per_layer());
      EXPECT_EQ(output_layout(m, TpShape{tp, 0, 1}).count, output_params_per_tp_rank(m, tp));
    }
  }
}

TEST(LayerTensors, KvHeadsSplitThenReplicated) {
  const ModelSpec m = bundled("llama3-70b");  // 64 heads, 8 KV heads, d = 128
  // t = 4 <= 8: rank 3 holds KV heads 6 and 7 of each of K and V.
  const LocalShape split = local_shape(layer_tensor_specs(m)[2], m, TpShape{4, 3, 1});
  EXPECT_EQ(split.part_rows, 2 * 128);
  EXPECT_EQ(split.rows, 2 * 2 * 128);
  EXPECT_EQ(split.row_offset, 6 * 128);
  // t = 16 > 8: every rank holds one KV head, the one its 4 query heads use: rank 13's
  // query heads are 52..55, of KV group 55 / 8 = 6 (= 13 / (16 / 8)).
  const LocalShape replicated = local_shape(layer_tensor_specs(m)[2], m, TpShape{16, 13, 1});
  EXPECT_EQ(replicated.part_rows, 128);
  EXPECT_EQ(replicated.row_offset, 6 * 128);
  EXPECT_EQ(kv_heads_per_rank(m, 16), 1);
  EXPECT_TRUE(tensor_parallel_violation(m, 16).empty());
  // Each head on 16 / 8 = 2 ranks (none at t = 4); what their gradient sum moves: K and V of
  // one head, 2 x 128 rows of h = 8192 (no biases).
  EXPECT_EQ(kv_head_copies(m, 16), 2);
  EXPECT_EQ(kv_head_copies(m, 4), 1);
  EXPECT_EQ(replicated_kv_params_per_tp_rank(m, 16), 2 * 128 * 8192);
  EXPECT_EQ(replicated_kv_params_per_tp_rank(m, 4), 0);
  // The layout marks the copies; the first of each pair (even TP ranks) is the one a norm
  // counts and a weights file takes. A split tensor counts on every rank, a replicated one
  // on TP rank 0 only.
  const UnitLayout layer = layer_layout(m, TpShape{16, 13, 1}, 0);
  EXPECT_EQ(layer.segment("kv_w").tp_copies, 2);
  EXPECT_FALSE(layer.segment("kv_w").counted_on(13));
  EXPECT_TRUE(layer.segment("kv_w").counted_on(12));
  EXPECT_EQ(layer.segment("q_w").tp_copies, 1);
  EXPECT_TRUE(layer.segment("q_w").counted_on(13));
  EXPECT_TRUE(layer.segment("ln1_w").counted_on(0));
  EXPECT_FALSE(layer.segment("ln1_w").counted_on(12));
  EXPECT_EQ(layer_layout(m, TpShape{4, 3, 1}, 0).segment("kv_w").tp_copies, 1);
  // The GEMM widths of one rank: Q 64/16 heads + K, V one head each, of 128.
  EXPECT_EQ(layer_gemm_shapes(m, 16).qkv_out, 4 * 128 + 2 * 128);
  EXPECT_EQ(layer_gemm_shapes(m, 16).fc1_out, 2 * 28672 / 16);
}

TEST(LayerTensors, KvHeadsThatNeitherSplitNorReplicateAreRejected) {
  ModelSpec m = bundled("tiny-llama");
  m.heads = 24;
  m.hidden = 24 * 16;
  m.kv_heads = 8;
  m.ffn_hidden = 24 * 16;
  // t = 6 divides the 24 heads, but 8 % 6 = 2 and 6 % 8 = 6.
  const std::string why = tensor_parallel_violation(m, 6);
  EXPECT_NE(why.find("kv_heads = 8 and tp = 6"), std::string::npos) << why;
  EXPECT_THROW(layer_params_per_tp_rank(m, 6), InfeasiblePlan);
}

TEST(LayerTensors, UntiedOutputIsAUnitOfTheLastStage) {
  const ModelSpec m = bundled("tiny-llama");
  Plan plan;
  plan.pp = 2;
  const auto names = [&](std::int64_t pp_rank) {
    std::string out;
    for (const UnitLayout& u : rank_unit_layouts(m, plan, pp_rank, 0)) out += u.name + " ";
    return out;
  };
  EXPECT_EQ(names(0), "embedding layer0 layer1 ");
  EXPECT_EQ(names(1), "layer2 layer3 output final_norm ");  // no wte copy: nothing is tied
  // The last stage's vocabulary-sized parameters: lm_head (256 x 64), at any p.
  EXPECT_EQ(last_stage_vocab_params(m, 1, 1), 256 * 64);
  EXPECT_EQ(last_stage_vocab_params(bundled("tiny"), 1, 1), 0);        // tied, p = 1
  EXPECT_EQ(last_stage_vocab_params(bundled("tiny"), 1, 2), 256 * 64);  // tied copy
}

TEST(LayerTensors, FlopsPerTokenAreSixNPlusAttention) {
  // PaLM (Chowdhery et al. 2022, appendix B): 6 N + 12 l s h a token, N the GEMM weights of
  // the layers plus the output layer. Llama 3 8B: N = 32 x (2h^2 + 2 h kv d + 3hf) + V h
  // = 32 x 218,103,808 + 525,336,576 = 7,504,658,432; 12 l s h = 12 x 32 x 8192 x 4096.
  const ModelSpec m = bundled("llama3-8b");
  EXPECT_EQ(layer_matmul_params(m), 218103808);
  const double per_token = 6.0 * 7504658432.0 + 12.0 * 32 * 8192 * 4096;
  const double tokens = 8192.0;  // one sequence
  EXPECT_NEAR(model_flops_without_recompute(m, 1), per_token * tokens, 1e-12 * per_token * tokens);
  // Megatron's count adds one more forward of the layers: 2N_layers + 4 s h a layer.
  const double layers_forward = 32.0 * (2.0 * 218103808 + 4.0 * 8192 * 4096);
  const double megatron = (per_token + layers_forward) * tokens;
  EXPECT_NEAR(megatron_model_flops(m, 1), megatron, 1e-12 * megatron);
  EXPECT_NEAR(hardware_flops(m, 1, Recompute::kFull), megatron, 1e-12 * megatron);
}

}  // namespace
}  // namespace strata
