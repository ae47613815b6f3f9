// Strict reading of JSON config objects: every key is looked up by name with its expected
// type, a missing or mistyped key is a ConfigError naming the file, the key path, the value
// and what was expected, and finish() rejects the keys nobody asked for (a typo never falls
// back to a default silently). Not a schema language: each spec's from_json says what it reads.
//
// read_json_file also refuses what no config needs and what would hurt later, each naming the
// file and the key path: nesting deeper than kMaxJsonDepth (checked on the raw text before
// nlohmann's recursive parser and destructor see it), a duplicate key (nlohmann keeps the last
// one silently), a number outside the double range (1e999), and a string or key longer than
// kMaxJsonStringBytes. Values quoted in a message are cut to kMaxQuotedValueChars, so a
// 50 MB string makes a one-line error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

// The declarations alone: nlohmann/json.hpp is about 25k lines, and most of strata includes a
// spec header that names Json without using it. A file that reads or builds Json includes
// <nlohmann/json.hpp> itself.
#include <nlohmann/json_fwd.hpp>

namespace strata {

using Json = nlohmann::json;

// Configs nest 3 levels, traces and reports 4; 32 leaves room and keeps every recursion
// (parse, dump, destruction) shallow.
inline constexpr int kMaxJsonDepth = 32;
// The longest string any config holds is a "source" note or a file path (PATH_MAX = 4096).
inline constexpr std::size_t kMaxJsonStringBytes = 4096;
// A quoted value in an error message is cut to this many characters.
inline constexpr std::size_t kMaxQuotedValueChars = 80;

// `text` cut to kMaxQuotedValueChars, marked "... (N bytes)" when it was longer.
std::string quote_cut(const std::string& text);
// The JSON text of a value for a message, cut like quote_cut.
std::string value_text(const Json& value);

// Parses JSON text under the rules above; `source` names it in messages. ConfigError on any
// violation or bad syntax.
Json parse_json_text(const std::string& text, const std::string& source);

// Reads and parses a JSON file; a missing file or bad syntax is a ConfigError naming it.
Json read_json_file(const std::string& path);

// Writes JSON to `path` atomically (temp file + rename), so a failure leaves nothing
// half-written. Throws SystemError on I/O failure.
void write_json_file(const std::string& path, const Json& value, int indent = 2);

class JsonObjectReader {
 public:
  // `source` names the file (or "<flag --x>") for messages; `path` is the key path of this
  // object inside it ("" for the root, "device" for a nested object).
  JsonObjectReader(const Json& object, std::string source, std::string path = "");

  std::int64_t get_int(const std::string& key);
  double get_number(const std::string& key);

  std::string get_string(const std::string& key);
  bool get_bool(const std::string& key);
  JsonObjectReader get_object(const std::string& key);
  const Json& get_array(const std::string& key);
  // One of the listed words, or a ConfigError listing them.
  std::string get_enum(const std::string& key, const std::vector<std::string>& allowed);

  bool has(const std::string& key) const;
  std::int64_t get_int_or(const std::string& key, std::int64_t fallback);
  double get_number_or(const std::string& key, double fallback);
  std::string get_string_or(const std::string& key, const std::string& fallback);
  bool get_bool_or(const std::string& key, bool fallback);
  std::string get_enum_or(const std::string& key, const std::vector<std::string>& allowed,
                          const std::string& fallback);

  // Marks a key as known without reading it (it is read elsewhere, or ignored on purpose).
  void allow(const std::string& key);

  // Throws ConfigError naming the first key that was never read.
  void finish() const;
  // Every key never read, in the object's order (for readers that report all problems at once).
  std::vector<std::string> unread_keys() const;
  // "file: key: unknown key", with "; did you mean 'k'?" when a key this reader was asked
  // for and the object lacks is within two edits of it (nearest_word.h).
  std::string unknown_key_message(const std::string& key) const;

  // Validation helpers that name this object's file and key path.
  [[noreturn]] void fail(const std::string& key, const std::string& value_text,
                         const std::string& expected) const;
  void require_positive(const std::string& key, double value) const;
  void require_non_negative(const std::string& key, double value) const;
  // Upper bounds on magnitudes (cost_model/specs/limits.h): they keep every product the cost model
  // and the executor form in int64 or double from overflowing.
  void require_at_most(const std::string& key, double value, double max) const;

  const std::string& source() const { return source_; }
  std::string key_path(const std::string& key) const;

 private:
  const Json& lookup(const std::string& key, const char* expected);

  const Json& object_;
  std::string source_;
  std::string path_;
  std::set<std::string> used_;
  // Every key asked for, read or only tested with has(): what a mistyped key may have meant.
  mutable std::set<std::string> asked_;
};

// "file: key: value <v> is not <expected>" in one place so every message reads alike.
std::string config_message(const std::string& source, const std::string& key_path,
                           const std::string& value_text, const std::string& expected);

}  // namespace strata
