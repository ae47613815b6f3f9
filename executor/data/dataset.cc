// Opening token streams by format, the validation split and the model check (see dataset.h).
#include "executor/data/dataset.h"

#include <filesystem>
#include <variant>

#include <fmt/format.h>

#include "cost_model/specs/errors.h"
#include "executor/data/corpus.h"
#include "executor/data/llmc_tokens.h"
#include "executor/data/mapped_file.h"
#include "executor/data/megatron_index.h"

namespace strata::data {
namespace fs = std::filesystem;

struct Dataset::Storage {
  std::variant<std::vector<std::uint8_t>, MappedFile, MegatronDataset, LlmcTokens> held;
};

DataFormat parse_data_format(const std::string& text, const std::string& flag) {
  if (text == "auto") return DataFormat::kAuto;
  if (text == "bytes") return DataFormat::kBytes;
  if (text == "megatron") return DataFormat::kMegatron;
  if (text == "llmc") return DataFormat::kLlmc;
  throw ConfigError(fmt::format("{}: value '{}', expected auto, bytes, megatron or llmc", flag, text));
}

std::string to_string(DataFormat format) {
  switch (format) {
    case DataFormat::kAuto: return "auto";
    case DataFormat::kBytes: return "bytes";
    case DataFormat::kMegatron: return "megatron";
    case DataFormat::kLlmc: return "llmc";
  }
  return "unknown";
}

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The Megatron prefix of PATH: PATH without a .bin / .idx ending.
std::string megatron_prefix(const std::string& path) {
  if (ends_with(path, ".bin") || ends_with(path, ".idx")) return path.substr(0, path.size() - 4);
  return path;
}

DataFormat detect(const std::string& path) {
  std::error_code ec;
  if (fs::is_regular_file(megatron_prefix(path) + ".idx", ec)) return DataFormat::kMegatron;
  if (ends_with(path, ".bin")) return DataFormat::kLlmc;
  return DataFormat::kBytes;
}

}  // namespace

Dataset Dataset::generated(std::uint64_t seed) {
  Dataset d;
  auto storage = std::make_shared<Storage>();
  storage->held = generated_corpus(seed, kGeneratedCorpusBytes);
  d.tokens_ = TokenView::of_bytes(std::get<std::vector<std::uint8_t>>(storage->held));
  d.storage_ = std::move(storage);
  d.format_ = DataFormat::kBytes;
  d.description_ = "generated";
  return d;
}

Dataset Dataset::open(const std::string& path, DataFormat format, const std::string& flag) {
  if (format == DataFormat::kAuto) format = detect(path);
  Dataset d;
  d.format_ = format;
  auto storage = std::make_shared<Storage>();
  switch (format) {
    case DataFormat::kMegatron: {
      const std::string prefix = megatron_prefix(path);
      storage->held = open_megatron(prefix, flag);
      const auto& m = std::get<MegatronDataset>(storage->held);
      d.tokens_ = m.tokens();
      d.description_ = fmt::format("megatron {} '{}' ({} tokens, {} documents)", to_string(m.type),
                                   prefix, d.tokens_.count, m.documents);
      break;
    }
    case DataFormat::kLlmc: {
      storage->held = open_llmc(path, flag);
      const auto& l = std::get<LlmcTokens>(storage->held);
      d.tokens_ = l.tokens();
      d.description_ = fmt::format("llm.c {} '{}' ({} tokens)", to_string(l.type), path, l.count);
      break;
    }
    case DataFormat::kBytes:
    case DataFormat::kAuto: {
      storage->held = MappedFile(path, flag);
      const auto& f = std::get<MappedFile>(storage->held);
      d.tokens_ = TokenView{f.data(), f.size(), TokenType::kU8};
      d.description_ = fmt::format("bytes of '{}' ({} tokens)", path, f.size());
      break;
    }
  }
  d.storage_ = std::move(storage);
  return d;
}

TokenSplit split_tokens(const TokenView& tokens, double valid_fraction) {
  const auto valid = static_cast<std::int64_t>(static_cast<double>(tokens.count) * valid_fraction);
  return TokenSplit{tokens.slice(0, tokens.count - valid), tokens.slice(tokens.count - valid, tokens.count)};
}

TokenStreams open_token_streams(Dataset train, const std::string& valid_data,
                                double valid_fraction, DataFormat format,
                                const std::string& valid_data_name) {
  TokenStreams d{std::move(train), std::nullopt, {}, {}};
  d.train_tokens = d.train.tokens();
  if (!valid_data.empty()) {
    d.valid_file = Dataset::open(valid_data, format, valid_data_name);
    d.valid_tokens = d.valid_file->tokens();
  } else if (valid_fraction > 0) {
    const TokenSplit split = split_tokens(d.train_tokens, valid_fraction);
    d.train_tokens = split.train;
    d.valid_tokens = split.valid;
  }
  return d;
}

void check_tokens(const TokenView& tokens, std::int64_t vocab, std::int64_t seq_len,
                  const std::string& what, const std::string& model_source) {
  if (tokens.count < seq_len + 1) {
    throw ConfigError(fmt::format("{}: {} tokens; expected at least {} (seq_len + 1)", what,
                                  tokens.count, seq_len + 1));
  }
  const BadToken bad = find_bad_token(tokens, vocab);
  if (bad.index >= 0) {
    throw ConfigError(fmt::format("{}: token {} has id {}, expected a whole number in [0, {}) "
                                  "(vocab of {})", what, bad.index, bad.value, vocab,
                                  model_source));
  }
}

}  // namespace strata::data
