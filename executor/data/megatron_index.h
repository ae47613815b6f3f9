// Megatron-LM's indexed dataset, PREFIX.bin + PREFIX.idx (../shared/reference/formats.md):
// the .idx read and checked against the .bin's length on open, the .bin's tokens exposed
// as one stream (documents back to back, as Megatron's GPT dataset samples across them),
// and the writer `strata data --from-text` uses.
// Checked on open, each a ConfigError naming the file and what is wrong: the magic, the
// version, the dtype code, the .idx's length against S and D, every sequence's bytes inside
// the .bin and back to back (as Megatron's builder writes them), the document index
// (starts at 0, never decreases, ends at S), and the .bin's length against the index.
// Deliberately not here: document-aware sampling (windows cross document boundaries, as
// Megatron's GPTDataset's do), the optional multimodal modes (accepted, ignored).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "executor/data/mapped_file.h"
#include "executor/data/token_view.h"

namespace strata::data {

// Megatron's dtype codes: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64, 7 float32,
// 8 uint16. Throws std::out_of_range for any other code.
TokenType megatron_token_type(int code);
int megatron_dtype_code(TokenType type);

struct MegatronDataset {
  MappedFile bin;
  TokenType type = TokenType::kU16;
  std::int64_t sequences = 0;
  std::int64_t documents = 0;
  TokenView tokens() const;
};

// Opens PREFIX.bin and PREFIX.idx; `flag` names the option in messages.
MegatronDataset open_megatron(const std::string& prefix, const std::string& flag);

// Writes PREFIX.bin and PREFIX.idx with one sequence per document (each document's tokens
// are `documents[i]`, which must fit `type`), atomically (temp files renamed at the end).
void write_megatron(const std::string& prefix, const std::vector<std::vector<std::int64_t>>& documents,
                    TokenType type);

}  // namespace strata::data
