// The token stream a run trains (or validates) on, whatever the file: the generated corpus
// (no --data), a file's raw bytes, a Megatron PREFIX.bin/.idx or an llm.c token file, each
// memory-mapped and validated on open (megatron_index.h, llmc_tokens.h). The format is named
// by --data-format or, with "auto", by the file: PATH.idx or PREFIX.bin beside PREFIX.idx is
// Megatron, any other *.bin is llm.c's, anything else raw bytes.
// Also here: the held-out validation split and the check of a stream against the model
// (enough tokens for a window, every token id below the vocabulary), run before any rank
// starts.
// Deliberately not here: sampling (batch.h), tokenizers.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "executor/data/token_view.h"

namespace strata::data {

enum class DataFormat { kAuto, kBytes, kMegatron, kLlmc };
// "auto" | "bytes" | "megatron" | "llmc"; ConfigError naming `flag` otherwise.
DataFormat parse_data_format(const std::string& text, const std::string& flag);
std::string to_string(DataFormat format);

class Dataset {
 public:
  // The generated pseudo-English corpus of `seed` (corpus.h), as bytes.
  static Dataset generated(std::uint64_t seed);
  // PATH in `format` (kAuto: detected as above). ConfigError naming `flag`, the file and what
  // is wrong when it cannot be read or is not valid.
  static Dataset open(const std::string& path, DataFormat format, const std::string& flag);

  TokenView tokens() const { return tokens_; }
  DataFormat format() const { return format_; }
  // One line for the run's banner: "megatron uint16 'p' (1,234 tokens, 12 documents)".
  const std::string& description() const { return description_; }

 private:
  struct Storage;
  std::shared_ptr<const Storage> storage_;  // owns the bytes or the mapping
  TokenView tokens_;
  DataFormat format_ = DataFormat::kBytes;
  std::string description_;
};

// The held-out split: the last `valid_fraction` of the tokens validate, the rest train.
struct TokenSplit {
  TokenView train;
  TokenView valid;
};
TokenSplit split_tokens(const TokenView& tokens, double valid_fraction);

// A run's token streams: the training data and, when asked for, validation tokens from a file
// of their own or the held-out last fraction of the training tokens (then the training part is
// the rest). `strata run` and `strata select` open them through this one function, so a job of
// a select run trains and validates on the tokens `strata run` would with the same flags.
struct TokenStreams {
  Dataset train;
  std::optional<Dataset> valid_file;
  TokenView train_tokens, valid_tokens;
  bool has_valid() const { return valid_tokens.count > 0; }
};
// valid_data: a file in `format` ("": none; ConfigError naming `valid_data_name` when it cannot
// be opened); valid_fraction: in [0, 1), 0 for none (eval_spec.h checks both before).
TokenStreams open_token_streams(Dataset train, const std::string& valid_data,
                                double valid_fraction, DataFormat format,
                                const std::string& valid_data_name);

// ConfigError naming `what` (the flag and file) unless the stream holds at least
// seq_len + 1 tokens and every token id is in [0, vocab).
void check_tokens(const TokenView& tokens, std::int64_t vocab, std::int64_t seq_len,
                  const std::string& what, const std::string& model_source);

}  // namespace strata::data
