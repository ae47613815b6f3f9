// Strict JSON object reading; see json_reader.h.
#include "cost_model/json_reader.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "cost_model/errors.h"

namespace strata {

std::string config_message(const std::string& source, const std::string& key_path,
                           const std::string& value_text, const std::string& expected) {
  return fmt::format("{}: {}: got {}, expected {}", source, key_path.empty() ? "(root)" : key_path,
                     value_text, expected);
}

Json read_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    throw ConfigError(fmt::format("{}: cannot open file: {}", path, std::strerror(errno)));
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  try {
    return Json::parse(buffer.str());
  } catch (const Json::parse_error& e) {
    throw ConfigError(fmt::format("{}: not valid JSON: {}", path, e.what()));
  }
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
    throw ConfigError(config_message(source_, path_, object_.dump(), "a JSON object"));
  }
}

std::string JsonObjectReader::key_path(const std::string& key) const {
  return path_.empty() ? key : path_ + "." + key;
}

void JsonObjectReader::fail(const std::string& key, const std::string& value_text,
                            const std::string& expected) const {
  throw ConfigError(config_message(source_, key_path(key), value_text, expected));
}

bool JsonObjectReader::has(const std::string& key) const { return object_.contains(key); }

void JsonObjectReader::allow(const std::string& key) { used_.insert(key); }

const Json& JsonObjectReader::lookup(const std::string& key, const char* expected) {
  used_.insert(key);
  auto it = object_.find(key);
  if (it == object_.end()) {
    throw ConfigError(fmt::format("{}: {}: missing key, expected {}", source_, key_path(key),
                                  expected));
  }
  return *it;
}

std::int64_t JsonObjectReader::get_int(const std::string& key) {
  const Json& v = lookup(key, "an integer");
  if (v.is_number_integer() || v.is_number_unsigned()) return v.get<std::int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::floor(d) == d && std::fabs(d) < 9e15) return static_cast<std::int64_t>(d);
  }
  fail(key, v.dump(), "an integer");
}

double JsonObjectReader::get_number(const std::string& key) {
  const Json& v = lookup(key, "a number");
  if (!v.is_number()) fail(key, v.dump(), "a number");
  const double d = v.get<double>();
  if (!std::isfinite(d)) fail(key, v.dump(), "a finite number");
  return d;
}

std::string JsonObjectReader::get_string(const std::string& key) {
  const Json& v = lookup(key, "a string");
  if (!v.is_string()) fail(key, v.dump(), "a string");
  return v.get<std::string>();
}

bool JsonObjectReader::get_bool(const std::string& key) {
  const Json& v = lookup(key, "true or false");
  if (!v.is_boolean()) fail(key, v.dump(), "true or false");
  return v.get<bool>();
}

JsonObjectReader JsonObjectReader::get_object(const std::string& key) {
  const Json& v = lookup(key, "an object");
  if (!v.is_object()) fail(key, v.dump(), "an object");
  return JsonObjectReader(v, source_, key_path(key));
}

const Json& JsonObjectReader::get_array(const std::string& key) {
  const Json& v = lookup(key, "an array");
  if (!v.is_array()) fail(key, v.dump(), "an array");
  return v;
}

std::string JsonObjectReader::get_enum(const std::string& key,
                                       const std::vector<std::string>& allowed) {
  const std::string s = get_string(key);
  for (const auto& a : allowed) {
    if (a == s) return s;
  }
  fail(key, Json(s).dump(), fmt::format("one of {}", fmt::join(allowed, ", ")));
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

void JsonObjectReader::finish() const {
  for (auto it = object_.begin(); it != object_.end(); ++it) {
    if (!used_.count(it.key())) {
      throw ConfigError(fmt::format("{}: {}: unknown key", source_, key_path(it.key())));
    }
  }
}

void JsonObjectReader::require_positive(const std::string& key, double value) const {
  if (!(value > 0)) fail(key, fmt::format("{}", value), "a value > 0");
}

void JsonObjectReader::require_non_negative(const std::string& key, double value) const {
  if (!(value >= 0)) fail(key, fmt::format("{}", value), "a value >= 0");
}

}  // namespace strata
