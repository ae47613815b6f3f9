// `strata data`: prepares and inspects training data.
//   --from-text FILE --out PREFIX [--documents paragraph|line] [--dtype T]
//       byte-level tokens of a text file into a Megatron PREFIX.bin/.idx (one document per
//       blank-line-separated paragraph, or per line). Each document keeps the newlines that
//       end it, so the documents back to back are the file itself. --dtype picks the token
//       type (Megatron's codes: uint8, int8, int16, uint16 (default, as Megatron's
//       preprocessor writes for vocabularies under 65,500), int32, int64, float32, float64).
//   --print-batches N --data FILE --model M --train T [--data-format F] [--valid-fraction F]
//       the first N global batches `strata run` trains on (JSON, one line per step: each
//       sequence's seq_len + 1 tokens), for checks against other frameworks.
// Deliberately not here: tokenizers other than bytes, the formats themselves (executor/data).
#include <CLI/CLI.hpp>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cost_model/specs/errors.h"
#include "cost_model/specs/json_reader.h"
#include "executor/data/batch.h"
#include "executor/data/dataset.h"
#include "executor/data/megatron_index.h"
#include "tools/strata/commands.h"
#include "tools/strata/inputs.h"

namespace strata::cli {
namespace {

struct DataOptions {
  std::string from_text;
  std::string out;
  std::string documents = "paragraph";
  std::string dtype = "uint16";
  std::int64_t print_batches = 0;
  std::string data;
  std::string data_format = "auto";
  std::string model;
  std::string train;
  double valid_fraction = 0;
};

data::TokenType parse_dtype(const std::string& text) {
  for (int code = 1; code <= 8; ++code) {
    const data::TokenType t = data::megatron_token_type(code);
    if (data::to_string(t) == text) return t;
  }
  throw ConfigError(fmt::format("--dtype: value '{}', expected uint8, int8, int16, uint16, int32, "
                                "int64, float32 or float64", text));
}

// Documents of `text`: lines, or paragraphs (runs of non-blank lines, each with the blank
// lines after it). Every byte lands in exactly one document.
std::vector<std::vector<std::int64_t>> split_documents(const std::string& text, bool by_line) {
  std::vector<std::vector<std::int64_t>> docs;
  std::vector<std::int64_t> doc;
  bool blank_run = false;  // paragraph mode: inside the blank lines that end a paragraph
  std::size_t line_start = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const bool end_of_line = text[i] == '\n' || i + 1 == text.size();
    if (!end_of_line) continue;
    const std::string_view line(text.data() + line_start, i + 1 - line_start);
    const bool blank = line.find_first_not_of(" \t\r\n") == std::string_view::npos;
    if (!by_line && !blank && blank_run && !doc.empty()) {
      docs.push_back(std::move(doc));
      doc.clear();
    }
    for (unsigned char c : line) doc.push_back(c);
    blank_run = blank;
    if (by_line) {
      docs.push_back(std::move(doc));
      doc.clear();
    }
    line_start = i + 1;
  }
  if (!doc.empty()) docs.push_back(std::move(doc));
  return docs;
}

int from_text(const DataOptions& o, std::ostream& out) {
  if (o.out.empty()) throw ConfigError("--out: missing; --from-text writes PREFIX.bin and PREFIX.idx");
  if (o.documents != "paragraph" && o.documents != "line") {
    throw ConfigError(fmt::format("--documents: value '{}', expected paragraph or line", o.documents));
  }
  const data::TokenType type = parse_dtype(o.dtype);
  std::ifstream in(o.from_text, std::ios::binary);
  if (!in) throw ConfigError(fmt::format("--from-text: cannot read '{}'", o.from_text));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (text.empty()) throw ConfigError(fmt::format("--from-text: '{}' is empty, expected text", o.from_text));
  if (type == data::TokenType::kI8) {
    for (unsigned char c : text) {
      if (c > 127) {
        throw ConfigError(fmt::format("--dtype int8: '{}' has byte {}, which int8 cannot hold; "
                                      "pick uint8 or wider", o.from_text, static_cast<int>(c)));
      }
    }
  }
  const auto docs = split_documents(text, o.documents == "line");
  data::write_megatron(o.out, docs, type);
  out << fmt::format("wrote {}.bin and {}.idx: {} tokens ({}) in {} documents ({} per document)\n",
                     o.out, o.out, text.size(), o.dtype, docs.size(), o.documents);
  return 0;
}

int print_batches(const DataOptions& o, std::ostream& out) {
  if (o.model.empty() || o.train.empty()) {
    throw ConfigError("--print-batches: needs --model and --train (the sequence length, batch and seed)");
  }
  const ModelSpec model = ModelSpec::load(resolve_config("models", o.model, "--model"));
  const TrainSpec train = TrainSpec::load(resolve_config("train", o.train, "--train"));
  const data::Dataset ds = o.data.empty() ? data::Dataset::generated(train.seed)
                                          : data::Dataset::open(o.data, data::parse_data_format(o.data_format, "--data-format"), "--data");
  data::TokenView tokens = ds.tokens();
  if (o.valid_fraction > 0) tokens = data::split_tokens(tokens, o.valid_fraction).train;
  data::check_tokens(tokens, model.vocab, model.seq_len, "--data", o.model);
  const data::BatchSampler sampler(tokens, train.seed, model.seq_len);
  const std::int64_t T = model.seq_len;
  std::vector<std::int32_t> in(static_cast<std::size_t>(T)), tg(static_cast<std::size_t>(T));
  for (std::int64_t step = 0; step < o.print_batches; ++step) {
    Json seqs = Json::array();
    for (std::int64_t b = 0; b < train.global_batch; ++b) {
      sampler.sequence(step, b, in.data(), tg.data());
      Json seq = Json::array();
      for (std::int64_t i = 0; i < T; ++i) seq.push_back(in[static_cast<std::size_t>(i)]);
      seq.push_back(tg[static_cast<std::size_t>(T - 1)]);
      seqs.push_back(std::move(seq));
    }
    out << Json{{"step", step}, {"tokens", seqs}}.dump() << "\n";
  }
  return 0;
}

}  // namespace

void add_data_command(CLI::App& app, CommandContext& context) {
  auto o = std::make_shared<DataOptions>();
  CLI::App* command = app.add_subcommand(
      "data", "Prepare training data (text to a Megatron .bin/.idx of byte tokens) or print the "
              "batches a run would train on");
  command->add_option("--from-text", o->from_text, "text file to tokenize (bytes are tokens)");
  command->add_option("--out", o->out, "--from-text: PREFIX of the PREFIX.bin and PREFIX.idx written");
  command->add_option("--documents", o->documents, "paragraph (default) or line: one document per");
  command->add_option("--dtype", o->dtype, "token type of the .bin (default uint16)");
  command->add_option("--print-batches", o->print_batches, "print the first N global batches as JSON lines");
  command->add_option("--data", o->data, "--print-batches: the data (as `strata run --data`)");
  command->add_option("--data-format", o->data_format, "auto, bytes, megatron or llmc");
  command->add_option("--model", o->model, "--print-batches: the model (seq_len, vocab)");
  command->add_option("--train", o->train, "--print-batches: the training setup (batch, seed)");
  command->add_option("--valid-fraction", o->valid_fraction, "as `strata run --valid-fraction`");
  command->callback([o, &context] {
    if (o->from_text.empty() == (o->print_batches <= 0)) {
      throw ConfigError("strata data: give exactly one of --from-text FILE or --print-batches N");
    }
    context.exit_code = o->from_text.empty() ? print_batches(*o, *context.out) : from_text(*o, *context.out);
  });
}

}  // namespace strata::cli
