// Strict JSON object reading; see json_reader.h.
#include "cost_model/specs/json_reader.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cost_model/specs/errors.h"
#include "cost_model/specs/nearest_word.h"

namespace strata {

namespace {

// The byte length of s cut at or below n bytes without splitting a UTF-8 sequence.
std::size_t utf8_cut(const std::string& s, std::size_t n) {
  if (s.size() <= n) return s.size();
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return n;
}

// A key as a message shows it: plain keys as they are, an empty or odd one ("", "tp ",
// "a:b") JSON-quoted so that it can be seen, every one cut.
// Plain: a word of [A-Za-z0-9_] followed by array indices ("lr[0]", which callers pass).
std::string display_key(const std::string& key) {
  const auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  std::size_t i = 0;
  while (i < key.size() && word(key[i])) ++i;
  bool plain = i > 0;
  while (plain && i < key.size()) {
    std::size_t j = i + 1;
    while (j < key.size() && std::isdigit(static_cast<unsigned char>(key[j]))) ++j;
    plain = key[i] == '[' && j > i + 1 && j < key.size() && key[j] == ']';
    i = j + 1;
  }
  return plain ? quote_cut(key) : quote_cut(Json(key).dump());
}

// Nesting depth checked on the raw text, before anything recursive touches it: brackets
// outside strings, with escapes inside strings skipped.
void check_depth(const std::string& text, const std::string& source) {
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) {
        const auto line = 1 + std::count(text.begin(), text.begin() + static_cast<long>(i), '\n');
        throw ConfigError(fmt::format("{}: line {}: arrays and objects nested deeper than {} "
                                      "levels, expected at most {}",
                                      source, line, kMaxJsonDepth, kMaxJsonDepth));
      }
    } else if (c == ']' || c == '}') {
      --depth;  // unbalanced text is the parser's error to report
    }
  }
}

// Follows nlohmann's parse events to know the key path being parsed (for messages), and
// refuses duplicate keys and over-long strings as they are read.
class PathTracker {
 public:
  explicit PathTracker(const std::string& source) : source_(source) {}

  bool on_event(Json::parse_event_t event, Json& parsed) {
    using E = Json::parse_event_t;
    switch (event) {
      case E::object_start: frames_.push_back(Frame{false, 0, {}, {}}); break;
      case E::array_start: frames_.push_back(Frame{true, 0, {}, {}}); break;
      case E::key: {
        Frame& top = frames_.back();
        const std::string& key = parsed.get_ref<const std::string&>();
        top.key = key;
        if (key.size() > kMaxJsonStringBytes) {
          fail_here(fmt::format("a key of {} bytes", key.size()),
                    fmt::format("keys of at most {} bytes", kMaxJsonStringBytes));
        }
        if (!top.keys.insert(key).second) {
          fail_here("a second value for this key", "each key once per object");
        }
        break;
      }
      case E::value:
        if (parsed.is_string() && parsed.get_ref<const std::string&>().size() > kMaxJsonStringBytes) {
          fail_here(value_text(parsed), fmt::format("a string of at most {} bytes",
                                                    kMaxJsonStringBytes));
        }
        next_element();
        break;
      case E::object_end:
      case E::array_end:
        frames_.pop_back();
        next_element();
        break;
    }
    return true;
  }

  // "jobs[2].grid.lr[0]", or "" at the root.
  std::string path() const {
    std::string p;
    for (const Frame& f : frames_) {
      if (f.array) {
        p += fmt::format("[{}]", f.index);
      } else if (!f.key.empty() || !f.keys.empty()) {
        if (!p.empty()) p += '.';
        p += display_key(f.key);
      }
    }
    return p;
  }

  [[noreturn]] void fail_here(const std::string& got, const std::string& expected) const {
    throw ConfigError(config_message(source_, path(), got, expected));
  }

 private:
  struct Frame {
    bool array = false;
    std::size_t index = 0;     // arrays: the element being read
    std::string key;           // objects: the key being read
    std::set<std::string> keys;
  };
  void next_element() {
    if (!frames_.empty() && frames_.back().array) ++frames_.back().index;
  }

  const std::string& source_;
  std::vector<Frame> frames_;
};

}  // namespace

std::string quote_cut(const std::string& text) {
  if (text.size() <= kMaxQuotedValueChars) return text;
  return fmt::format("{}... ({} bytes)", text.substr(0, utf8_cut(text, kMaxQuotedValueChars)),
                     text.size());
}

std::string value_text(const Json& value) {
  if (value.is_string()) {
    const std::string& s = value.get_ref<const std::string&>();
    if (s.size() > kMaxQuotedValueChars) {
      // Only the head is dumped: a 50 MB string is never copied into a message.
      std::string head = Json(s.substr(0, utf8_cut(s, kMaxQuotedValueChars))).dump();
      head.pop_back();  // the closing quote
      return fmt::format("{}...\" ({} bytes)", head, s.size());
    }
  }
  return quote_cut(value.dump());
}

std::string config_message(const std::string& source, const std::string& key_path,
                           const std::string& value_text, const std::string& expected) {
  // value_text() already cut what it made (a little over kMaxQuotedValueChars); a caller's
  // raw dump is cut here, at a bound that leaves those alone.
  const std::string value = value_text.size() <= 4 * kMaxQuotedValueChars
                                ? value_text
                                : quote_cut(value_text);
  return fmt::format("{}: {}: got {}, expected {}", source,
                     key_path.empty() ? "(root)" : quote_cut(key_path), value, expected);
}

Json parse_json_text(const std::string& text, const std::string& source) {
  check_depth(text, source);
  PathTracker tracker(source);
  try {
    return Json::parse(text, [&tracker](int /*depth*/, Json::parse_event_t event, Json& parsed) {
      return tracker.on_event(event, parsed);
    });
  } catch (const Json::out_of_range& e) {
    // nlohmann's only out_of_range while parsing: a number beyond the double range (1e999).
    tracker.fail_here(quote_cut(e.what()), "a number within the double range (|x| < 1.8e308)");
  } catch (const Json::exception& e) {
    const std::string where = tracker.path();
    throw ConfigError(fmt::format("{}: {}not valid JSON: {}", source,
                                  where.empty() ? "" : where + ": ", quote_cut(e.what())));
  }
}

Json read_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    throw ConfigError(fmt::format("{}: cannot open file: {}", path, std::strerror(errno)));
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  return parse_json_text(buffer.str(), path);
}

void write_json_file(const std::string& path, const Json& value, int indent) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) {
      throw SystemError(fmt::format("{}: cannot open for writing: {}", tmp, std::strerror(errno)));
    }
    out << value.dump(indent) << '\n';
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      throw SystemError(fmt::format("{}: write failed: {}", tmp, std::strerror(errno)));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    throw SystemError(fmt::format("{}: rename to {} failed: {}", tmp, path, std::strerror(err)));
  }
}

JsonObjectReader::JsonObjectReader(const Json& object, std::string source, std::string path)
    : object_(object), source_(std::move(source)), path_(std::move(path)) {
  if (!object_.is_object()) {
    throw ConfigError(config_message(source_, path_, value_text(object_), "a JSON object"));
  }
}

std::string JsonObjectReader::key_path(const std::string& key) const {
  return path_.empty() ? display_key(key) : path_ + "." + display_key(key);
}

void JsonObjectReader::fail(const std::string& key, const std::string& value_text,
                            const std::string& expected) const {
  throw ConfigError(config_message(source_, key_path(key), value_text, expected));
}

bool JsonObjectReader::has(const std::string& key) const {
  asked_.insert(key);
  return object_.contains(key);
}

void JsonObjectReader::allow(const std::string& key) { used_.insert(key); }

const Json& JsonObjectReader::lookup(const std::string& key, const char* expected) {
  used_.insert(key);
  asked_.insert(key);
  auto it = object_.find(key);
  if (it == object_.end()) {
    throw ConfigError(fmt::format("{}: {}: missing key, expected {}", source_, key_path(key),
                                  expected));
  }
  return *it;
}

std::int64_t JsonObjectReader::get_int(const std::string& key) {
  const Json& v = lookup(key, "an integer");
  if (v.is_number_unsigned()) {
    // nlohmann keeps 2^63..2^64-1 as unsigned; get<int64_t> would wrap them negative.
    if (v.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)) {
      fail(key, value_text(v), "an integer below 2^63");
    }
    return v.get<std::int64_t>();
  }
  if (v.is_number_integer()) return v.get<std::int64_t>();
  if (v.is_number_float()) {
    // A whole float is taken while doubles still hold every integer exactly (2^53).
    const double d = v.get<double>();
    if (std::floor(d) == d && std::fabs(d) < 9e15) return static_cast<std::int64_t>(d);
    if (std::floor(d) == d) fail(key, value_text(v), "an integer (a float only below 9e15)");
  }
  fail(key, value_text(v), "an integer");
}

double JsonObjectReader::get_number(const std::string& key) {
  const Json& v = lookup(key, "a number");
  if (!v.is_number()) fail(key, value_text(v), "a number");
  const double d = v.get<double>();
  if (!std::isfinite(d)) fail(key, value_text(v), "a finite number");
  return d;
}

std::string JsonObjectReader::get_string(const std::string& key) {
  const Json& v = lookup(key, "a string");
  if (!v.is_string()) fail(key, value_text(v), "a string");
  return v.get<std::string>();
}

bool JsonObjectReader::get_bool(const std::string& key) {
  const Json& v = lookup(key, "true or false");
  if (!v.is_boolean()) fail(key, value_text(v), "true or false");
  return v.get<bool>();
}

JsonObjectReader JsonObjectReader::get_object(const std::string& key) {
  const Json& v = lookup(key, "an object");
  if (!v.is_object()) fail(key, value_text(v), "an object");
  return JsonObjectReader(v, source_, key_path(key));
}

const Json& JsonObjectReader::get_array(const std::string& key) {
  const Json& v = lookup(key, "an array");
  if (!v.is_array()) fail(key, value_text(v), "an array");
  return v;
}

std::string JsonObjectReader::get_enum(const std::string& key,
                                       const std::vector<std::string>& allowed) {
  const std::string s = get_string(key);
  for (const auto& a : allowed) {
    if (a == s) return s;
  }
  fail(key, value_text(Json(s)), fmt::format("one of {}", fmt::join(allowed, ", ")));
}

std::int64_t JsonObjectReader::get_int_or(const std::string& key, std::int64_t fallback) {
  return has(key) ? get_int(key) : fallback;
}
double JsonObjectReader::get_number_or(const std::string& key, double fallback) {
  return has(key) ? get_number(key) : fallback;
}
std::string JsonObjectReader::get_string_or(const std::string& key, const std::string& fallback) {
  return has(key) ? get_string(key) : fallback;
}
bool JsonObjectReader::get_bool_or(const std::string& key, bool fallback) {
  return has(key) ? get_bool(key) : fallback;
}
std::string JsonObjectReader::get_enum_or(const std::string& key,
                                          const std::vector<std::string>& allowed,
                                          const std::string& fallback) {
  return has(key) ? get_enum(key, allowed) : fallback;
}

std::vector<std::string> JsonObjectReader::unread_keys() const {
  std::vector<std::string> keys;
  for (auto it = object_.begin(); it != object_.end(); ++it) {
    if (!used_.count(it.key())) keys.push_back(it.key());
  }
  return keys;
}

std::string JsonObjectReader::unknown_key_message(const std::string& key) const {
  std::vector<std::string> absent;
  for (const std::string& k : asked_) {
    if (!object_.contains(k)) absent.push_back(k);
  }
  const std::string guess = nearest_word(key, absent);
  return fmt::format("{}: {}: unknown key{}", source_, quote_cut(key_path(key)),
                     guess.empty() ? "" : fmt::format("; did you mean '{}'?", guess));
}

void JsonObjectReader::finish() const {
  const std::vector<std::string> unread = unread_keys();
  if (!unread.empty()) throw ConfigError(unknown_key_message(unread.front()));
}

void JsonObjectReader::require_positive(const std::string& key, double value) const {
  if (!(value > 0)) fail(key, fmt::format("{}", value), "a value > 0");
}

void JsonObjectReader::require_non_negative(const std::string& key, double value) const {
  if (!(value >= 0)) fail(key, fmt::format("{}", value), "a value >= 0");
}

void JsonObjectReader::require_at_most(const std::string& key, double value, double max) const {
  if (!(value <= max)) fail(key, fmt::format("{}", value), fmt::format("a value <= {}", max));
}

}  // namespace strata
