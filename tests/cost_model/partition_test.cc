// The plan's cut of the model (cost_model/specs/partition.h, param_layout.h): each rule stated once
// and each count equal to the layout it summarises.
#include "cost_model/specs/partition.h"

#include <gtest/gtest.h>

#include "cost_model/specs/errors.h"
#include "cost_model/specs/param_layout.h"

namespace strata {
namespace {

ModelSpec model(std::int64_t layers, std::int64_t hidden, std::int64_t heads, std::int64_t seq,
                std::int64_t vocab) {
  ModelSpec m;
  m.name = "test";
  m.layers = layers;
  m.hidden = hidden;
  m.heads = heads;
  m.ffn_hidden = 4 * hidden;
  m.seq_len = seq;
  m.vocab = vocab;
  return m;
}

TEST(Partition, ClosedFormCountsEqualTheLayouts) {
  // vocab 257 does not divide by t = 2 or 4: the last wte shard is padded (ceil(V/t) rows).
  const ModelSpec m = model(4, 64, 4, 32, 257);
  for (std::int64_t tp : {1, 2, 4}) {
    for (std::int64_t rank = 0; rank < tp; ++rank) {
      const TpShape shape{tp, rank};
      EXPECT_EQ(layer_layout(m, shape, 1).count, layer_params_per_tp_rank(m, tp)) << tp;
      EXPECT_EQ(embedding_layout(m, shape).count, embedding_params_per_tp_rank(m, tp)) << tp;
      EXPECT_EQ(tied_copy_layout(m, shape).count, tied_copy_params_per_tp_rank(m, tp)) << tp;
      EXPECT_EQ(final_norm_layout(m).count, final_norm_params(m));
    }
  }
  // t = 2: ceil(257 / 2) = 129 rows of 64 per shard.
  EXPECT_EQ(vocab_shard_rows(m, 2), 129);
  // At t = 1, f = 4h: 12 h^2 + 13 h = 12 * 4096 + 832.
  EXPECT_EQ(layer_params_per_tp_rank(m, 1), 12 * 64 * 64 + 13 * 64);
}

TEST(Partition, RulesNameTheirNumbers) {
  const ModelSpec m = model(8, 64, 4, 30, 256);
  EXPECT_TRUE(tensor_parallel_violation(m, 2).empty());
  EXPECT_NE(tensor_parallel_violation(m, 3).find("heads % tp = 4 % 3 = 1"), std::string::npos);
  // seq_len 30: t = 2 splits it, t = 4 does not (30 % 4 = 2).
  EXPECT_TRUE(sequence_parallel_violation(m, 2).empty());
  EXPECT_NE(sequence_parallel_violation(m, 4).find("30 % 4 = 2"), std::string::npos);
  EXPECT_NE(sequence_parallel_violation(m, 1).find("needs tp > 1"), std::string::npos);
  EXPECT_TRUE(pipeline_violation(m, 2, 2).empty());
  EXPECT_NE(pipeline_violation(m, 3, 1).find("8 % (3*1) = 2"), std::string::npos);
}

TEST(Partition, UnevenStagesAsMegatronSplitsThem) {
  // BLOOM-176B's 70 layers on 12 stages: no even split (70 % 12 = 10); with 5 layers on the
  // first and on the last stage the other 10 stages take (70 - 10) / 10 = 6 each.
  const ModelSpec bloom = model(70, 14336, 112, 2048, 250880);
  Plan plan;
  plan.pp = 12;
  EXPECT_NE(pipeline_violation(bloom, plan).find("70 % (12*1) = 10"), std::string::npos);
  plan.first_stage_layers = 5;
  plan.last_stage_layers = 5;
  EXPECT_TRUE(pipeline_violation(bloom, plan).empty());
  EXPECT_EQ(chunk_layers(bloom, plan, 0, 0).layers, 5);
  EXPECT_EQ(chunk_layers(bloom, plan, 1, 0).first_layer, 5);
  EXPECT_EQ(chunk_layers(bloom, plan, 1, 0).layers, 6);
  EXPECT_EQ(chunk_layers(bloom, plan, 10, 0).first_layer, 5 + 9 * 6);  // 59
  const ChunkLayers last = chunk_layers(bloom, plan, 11, 0);
  EXPECT_EQ(last.first_layer, 65);
  EXPECT_EQ(last.layers, 5);
  EXPECT_TRUE(last.last);
  // Only the first set: the other 11 stages share 70 - 4 = 66, 6 each.
  plan.last_stage_layers = 0;
  plan.first_stage_layers = 4;
  EXPECT_EQ(chunk_layers(bloom, plan, 11, 0).layers, 6);
  // Rules: a remainder that does not split, no pipeline, p v = 2 not adding up.
  plan.first_stage_layers = 5;
  EXPECT_NE(pipeline_violation(bloom, plan).find("65 layers left"), std::string::npos);
  plan.first_stage_layers = 4;
  plan.pp = 1;
  EXPECT_NE(pipeline_violation(bloom, plan).find("need a pipeline"), std::string::npos);
  plan.pp = 2;
  plan.first_stage_layers = 30;
  plan.last_stage_layers = 30;
  EXPECT_NE(pipeline_violation(bloom, plan).find("must be the model's 70 layers"), std::string::npos);
  plan.last_stage_layers = 40;
  EXPECT_TRUE(pipeline_violation(bloom, plan).empty());
  // Each layer's unit is on the rank whose stage holds it.
  plan.pp = 12;
  plan.first_stage_layers = 5;
  plan.last_stage_layers = 5;
  const auto units = rank_unit_layouts(bloom, plan, 11, 0);
  EXPECT_EQ(units.front().name, "layer65");
  EXPECT_EQ(unit_chunk(bloom, plan, 11, units.front()), 0);
  EXPECT_THROW(unit_chunk(bloom, plan, 10, units.front()), InfeasiblePlan);
}

// Megatron-Core's accounting options resolved into the first and last counts. Llama 3 405B
// on p16 v2 with the embedding and the loss each counted as a layer: (126 + 2) / 32 = 4 a
// virtual stage, so the first and the last hold 3 real layers: the same split as the counts
// 3 and 3 above. The embedding alone: 127 is not a multiple of 32, named. 8 layers on p2 v1
// with the loss alone: (8 + 1) / 2 is not whole either; 7 layers: (7 + 1) / 2 = 4, the last
// stage 3 and the first the even share of the rest, 4.
TEST(Partition, EmbeddingAndLossCountedAsLayersShortenTheEnds) {
  const ModelSpec llama = model(126, 16384, 128, 8192, 128256);
  Plan counted;
  counted.pp = 16;
  counted.virtual_stages = 2;
  counted.schedule = ScheduleKind::kInterleaved;
  counted.embedding_counts_as_layer = true;
  counted.loss_counts_as_layer = true;
  ASSERT_TRUE(pipeline_violation(llama, counted).empty()) << pipeline_violation(llama, counted);
  Plan explicit_counts = counted;
  explicit_counts.embedding_counts_as_layer = false;
  explicit_counts.loss_counts_as_layer = false;
  explicit_counts.first_stage_layers = 3;
  explicit_counts.last_stage_layers = 3;
  for (std::int64_t vstage = 0; vstage < 32; ++vstage) {
    const ChunkLayers a = chunk_layers(llama, counted, vstage % 16, vstage / 16);
    const ChunkLayers b = chunk_layers(llama, explicit_counts, vstage % 16, vstage / 16);
    EXPECT_EQ(a.layers, b.layers) << vstage;
    EXPECT_EQ(a.first_layer, b.first_layer) << vstage;
  }
  Plan embedding_only = counted;
  embedding_only.loss_counts_as_layer = false;
  EXPECT_NE(pipeline_violation(llama, embedding_only).find("the 127 layers so counted"),
            std::string::npos) << pipeline_violation(llama, embedding_only);
  // Not both ways at once.
  Plan both = counted;
  both.first_stage_layers = 3;
  EXPECT_NE(pipeline_violation(llama, both).find("not both"), std::string::npos);

  Plan loss_only;
  loss_only.pp = 2;
  loss_only.loss_counts_as_layer = true;
  EXPECT_FALSE(pipeline_violation(model(8, 64, 4, 32, 256), loss_only).empty());
  const ModelSpec seven = model(7, 64, 4, 32, 256);
  ASSERT_TRUE(pipeline_violation(seven, loss_only).empty()) << pipeline_violation(seven, loss_only);
  EXPECT_EQ(chunk_layers(seven, loss_only, 0, 0).layers, 4);
  EXPECT_EQ(chunk_layers(seven, loss_only, 1, 0).layers, 3);
  EXPECT_EQ(chunk_layers(seven, loss_only, 1, 0).first_layer, 4);
}

TEST(Partition, UnevenInterleavedStagesShortenTheFirstAndLastVirtualStage) {
  // Llama 3 405B (section 3.3 of the Llama 3 paper): 126 layers on 16 pipeline stages, the
  // first and the last stage one layer short, interleaved. With v = 2 there are 32 virtual
  // stages; an even share would be 128 / 32 = 4, so virtual stage 0 and 31 take 3 and the
  // other 30 share 126 - 6 = 120, 4 each (the embedding and the loss each in a layer's slot).
  const ModelSpec llama = model(126, 16384, 128, 8192, 128256);
  Plan plan;
  plan.pp = 16;
  plan.virtual_stages = 2;
  plan.schedule = ScheduleKind::kInterleaved;
  EXPECT_NE(pipeline_violation(llama, plan).find("126 % (16*2) = 30"), std::string::npos);
  plan.first_stage_layers = 3;
  plan.last_stage_layers = 3;
  EXPECT_TRUE(pipeline_violation(llama, plan).empty()) << pipeline_violation(llama, plan);
  const ChunkLayers first = chunk_layers(llama, plan, 0, 0);  // virtual stage 0
  EXPECT_TRUE(first.first);
  EXPECT_EQ(first.layers, 3);
  // Rank 0's second chunk is virtual stage 16: after 3 + 15 * 4 = 63 layers.
  const ChunkLayers second = chunk_layers(llama, plan, 0, 1);
  EXPECT_EQ(second.vstage, 16);
  EXPECT_EQ(second.first_layer, 63);
  EXPECT_EQ(second.layers, 4);
  const ChunkLayers last = chunk_layers(llama, plan, 15, 1);  // virtual stage 31
  EXPECT_TRUE(last.last);
  EXPECT_EQ(last.first_layer, 123);
  EXPECT_EQ(last.layers, 3);
  // Every layer in exactly one chunk, in order.
  std::int64_t next = 0;
  for (std::int64_t vstage = 0; vstage < 32; ++vstage) {
    const ChunkLayers c = chunk_layers(llama, plan, vstage % 16, vstage / 16);
    EXPECT_EQ(c.first_layer, next) << vstage;
    next += c.layers;
  }
  EXPECT_EQ(next, 126);
  // 8 layers on p = 2, v = 2 with the first and last virtual stage one short: 1 | 3 | 3 | 1.
  const ModelSpec tiny = model(8, 64, 4, 32, 256);
  Plan small;
  small.pp = 2;
  small.virtual_stages = 2;
  small.schedule = ScheduleKind::kInterleaved;
  small.first_stage_layers = 1;
  small.last_stage_layers = 1;
  EXPECT_TRUE(pipeline_violation(tiny, small).empty());
  EXPECT_EQ(chunk_layers(tiny, small, 1, 0).first_layer, 1);  // virtual stage 1
  EXPECT_EQ(chunk_layers(tiny, small, 1, 0).layers, 3);
  EXPECT_EQ(chunk_layers(tiny, small, 0, 1).first_layer, 4);  // virtual stage 2
  EXPECT_EQ(chunk_layers(tiny, small, 1, 1).layers, 1);
  // A remainder that does not split over the shared virtual stages is named so.
  small.first_stage_layers = 2;
  EXPECT_NE(pipeline_violation(tiny, small).find("over the other 2 virtual stages"),
            std::string::npos) << pipeline_violation(tiny, small);
}

TEST(Partition, InterleavedChunksAndTheUnitsOfEachRank) {
  // 8 layers, p = 2, v = 2: virtual stages of 2 layers; chunk c of rank r is stage 2c + r.
  const ModelSpec m = model(8, 64, 4, 32, 256);
  Plan plan;
  plan.pp = 2;
  plan.virtual_stages = 2;
  plan.schedule = ScheduleKind::kInterleaved;
  const ChunkLayers c = chunk_layers(m, plan, 1, 1);  // stage 3: layers 6, 7, the head
  EXPECT_EQ(c.vstage, 3);
  EXPECT_EQ(c.first_layer, 6);
  EXPECT_EQ(c.layers, 2);
  EXPECT_TRUE(c.last);
  EXPECT_FALSE(c.first);
  EXPECT_THROW(chunk_layers(m, plan, 2, 0), InfeasiblePlan);

  // Rank 0: the embedding, then layers 0 1 (stage 0) and 4 5 (stage 2).
  std::vector<std::string> names;
  for (const auto& u : rank_unit_layouts(m, plan, 0, 0)) names.push_back(u.name);
  EXPECT_EQ(names, (std::vector<std::string>{"embedding", "layer0", "layer1", "layer4", "layer5"}));
  // Rank 1: layers 2 3 (stage 1) and 6 7 (stage 3), its tied wte copy and the final norm.
  names.clear();
  const auto units = rank_unit_layouts(m, plan, 1, 0);
  for (const auto& u : units) names.push_back(u.name);
  EXPECT_EQ(names, (std::vector<std::string>{"layer2", "layer3", "layer6", "layer7", "wte_copy",
                                             "final_norm"}));
  EXPECT_EQ(unit_chunk(m, plan, 1, units[0]), 0);  // layer 2: stage 1 = chunk 0 of rank 1
  EXPECT_EQ(unit_chunk(m, plan, 1, units[3]), 1);  // layer 7: stage 3 = chunk 1
  EXPECT_EQ(unit_chunk(m, plan, 1, units[5]), 1);  // the final norm: the last chunk
  EXPECT_THROW(unit_chunk(m, plan, 0, units[0]), InfeasiblePlan);  // layer 2 is not on rank 0
}

// rank_unit_layouts makes one layer's layout and copies it for the others (a layer's tensors
// do not depend on its index): each copy is the layout layer_layout makes for its layer,
// field by field, on every TP rank of an interleaved plan and of an uneven one.
TEST(Partition, CopiedLayerLayoutsAreEachLayersOwn) {
  const ModelSpec m = model(16, 64, 4, 32, 100);
  Plan interleaved;
  interleaved.tp = 2;
  interleaved.pp = 2;
  interleaved.virtual_stages = 2;
  Plan uneven;
  uneven.tp = 2;
  uneven.pp = 3;
  uneven.first_stage_layers = 5;  // 5 + 6 + 5
  uneven.last_stage_layers = 5;
  std::int64_t compared = 0;
  for (const Plan& plan : {interleaved, uneven})
  for (std::int64_t r = 0; r < plan.pp; ++r) {
    for (std::int64_t tp_rank = 0; tp_rank < plan.tp; ++tp_rank) {
      for (const UnitLayout& unit : rank_unit_layouts(m, plan, r, tp_rank, 8)) {
        if (unit.kind != UnitKind::kLayer) continue;
        const UnitLayout own = layer_layout(m, TpShape{plan.tp, tp_rank, 8}, unit.layer);
        EXPECT_EQ(unit.name, own.name);
        EXPECT_EQ(unit.count, own.count);
        ASSERT_EQ(unit.segments.size(), own.segments.size()) << unit.name;
        for (std::size_t i = 0; i < own.segments.size(); ++i) {
          const ParamSegment& a = unit.segments[i];
          const ParamSegment& b = own.segments[i];
          const std::string what = unit.name + " " + b.name;
          EXPECT_EQ(a.name, b.name) << what;
          EXPECT_EQ(a.code, b.code) << what;
          EXPECT_EQ(a.layer, b.layer) << what;
          EXPECT_EQ(a.offset, b.offset) << what;
          EXPECT_EQ(a.rows, b.rows) << what;
          EXPECT_EQ(a.cols, b.cols) << what;
          EXPECT_EQ(a.part_rows, b.part_rows) << what;
          EXPECT_EQ(a.part_stride, b.part_stride) << what;
          EXPECT_EQ(a.row_offset, b.row_offset) << what;
          EXPECT_EQ(a.col_offset, b.col_offset) << what;
          EXPECT_EQ(a.global_cols, b.global_cols) << what;
          EXPECT_EQ(a.valid_rows, b.valid_rows) << what;
          EXPECT_EQ(a.init, b.init) << what;
          EXPECT_EQ(a.init_std, b.init_std) << what;
          EXPECT_EQ(a.tp_replicated, b.tp_replicated) << what;
          EXPECT_EQ(a.tp_copies, b.tp_copies) << what;
        }
        ++compared;
      }
    }
  }
  EXPECT_EQ(compared, 2 * 16 * 2);  // every layer of both plans once per TP rank
}

}  // namespace
}  // namespace strata
