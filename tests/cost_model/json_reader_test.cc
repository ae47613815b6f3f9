// JsonObjectReader: typed lookups, the messages of each error, finish() on unknown keys,
// and read/write of JSON files (missing file, bad syntax, atomic write).
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cost_model/specs/errors.h"
#include "cost_model/specs/json_reader.h"
#include "tests/cost_model/spec_test_util.h"

namespace strata {
namespace {

using strata::testing::expect_error;

TEST(JsonReader, ReadsEachType) {
  const Json j = Json::parse(
      R"({"i": 3, "f": 2.5, "whole": 4.0, "s": "x", "b": true, "o": {"k": 1}, "a": [1, 2],
          "e": "cpu"})");
  JsonObjectReader r(j, "f.json");
  EXPECT_EQ(r.get_int("i"), 3);
  EXPECT_EQ(r.get_int("whole"), 4);  // 4.0 is an integer written as a float
  EXPECT_DOUBLE_EQ(r.get_number("f"), 2.5);
  EXPECT_EQ(r.get_string("s"), "x");
  EXPECT_TRUE(r.get_bool("b"));
  EXPECT_EQ(r.get_object("o").get_int("k"), 1);
  EXPECT_EQ(r.get_array("a").size(), 2u);
  EXPECT_EQ(r.get_enum("e", {"cpu", "cuda"}), "cpu");
  EXPECT_NO_THROW(r.finish());
}

TEST(JsonReader, OptionalKeysFallBackOnlyWhenAbsent) {
  const Json j = Json::parse(R"({"present": 7})");
  JsonObjectReader r(j, "f.json");
  EXPECT_EQ(r.get_int_or("present", 1), 7);
  EXPECT_EQ(r.get_int_or("absent", 1), 1);
  EXPECT_EQ(r.get_string_or("absent_s", "d"), "d");
  EXPECT_FALSE(r.get_bool_or("absent_b", false));
  EXPECT_DOUBLE_EQ(r.get_number_or("absent_n", 0.5), 0.5);
  EXPECT_EQ(r.get_enum_or("absent_e", {"a", "b"}, "b"), "b");
  // A present optional key of the wrong type is still an error, never a silent default.
  const Json bad = Json::parse(R"({"n": "seven"})");
  JsonObjectReader rb(bad, "f.json");
  expect_error<ConfigError>([&] { rb.get_int_or("n", 1); }, {"f.json", "n", "\"seven\"", "integer"});
}

TEST(JsonReader, MissingKeyNamesFileAndPath) {
  const Json j = Json::parse(R"({"device": {}})");
  JsonObjectReader r(j, "cluster.json");
  JsonObjectReader d = r.get_object("device");
  expect_error<ConfigError>([&] { d.get_number("memory_gib"); },
                            {"cluster.json", "device.memory_gib", "missing key", "number"});
}

TEST(JsonReader, WrongTypesNameValueAndExpectation) {
  const Json j = Json::parse(
      R"({"i": 2.5, "n": "x", "s": 3, "b": 1, "o": [], "a": {}, "e": "tpu", "big": 1e300})");
  JsonObjectReader r(j, "f.json");
  expect_error<ConfigError>([&] { r.get_int("i"); }, {"f.json", "i", "2.5", "an integer"});
  expect_error<ConfigError>([&] { r.get_number("n"); }, {"f.json", "n", "\"x\"", "a number"});
  expect_error<ConfigError>([&] { r.get_string("s"); }, {"f.json", "s", "3", "a string"});
  expect_error<ConfigError>([&] { r.get_bool("b"); }, {"f.json", "b", "1", "true or false"});
  expect_error<ConfigError>([&] { r.get_object("o"); }, {"f.json", "o", "[]", "an object"});
  expect_error<ConfigError>([&] { r.get_array("a"); }, {"f.json", "a", "{}", "an array"});
  expect_error<ConfigError>([&] { r.get_enum("e", {"cpu", "cuda"}); },
                            {"f.json", "e", "\"tpu\"", "one of cpu, cuda"});
  // 1e300 is a float far beyond int64: not an integer.
  expect_error<ConfigError>([&] { r.get_int("big"); }, {"f.json", "big", "an integer"});
}

TEST(JsonReader, RootMustBeAnObject) {
  const Json j = Json::parse("[1]");
  expect_error<ConfigError>([&] { JsonObjectReader r(j, "f.json"); },
                            {"f.json", "(root)", "[1]", "a JSON object"});
}

TEST(JsonReader, FinishRejectsUnreadKeysButNotAllowedOnes) {
  const Json j = Json::parse(R"({"layers": 2, "layres": 3, "skip": 0})");
  JsonObjectReader r(j, "model.json");
  r.get_int("layers");
  r.allow("skip");
  expect_error<ConfigError>([&] { r.finish(); }, {"model.json", "layres", "unknown key"});
}

// A mistyped optional key: the reader was asked for "ffn_hidden" (absent: its default
// applies) and finds "ffn_hiden", one edit away, unread. "layres" is two edits from
// "layers", which the file does have: no suggestion of a key already given. "zzz" is near
// nothing asked.
TEST(JsonReader, UnknownKeyNamesTheNearestKeyAskedFor) {
  const Json j = Json::parse(R"({"layers": 2, "ffn_hiden": 8})");
  JsonObjectReader r(j, "model.json");
  r.get_int("layers");
  EXPECT_FALSE(r.has("ffn_hidden"));
  expect_error<ConfigError>([&] { r.finish(); },
                            {"model.json: ffn_hiden: unknown key; did you mean 'ffn_hidden'?"});
  const Json k = Json::parse(R"({"layers": 2, "layres": 3, "zzz": 1})");
  JsonObjectReader q(k, "model.json");
  q.get_int("layers");
  EXPECT_FALSE(q.has("vocab"));
  EXPECT_EQ(q.unknown_key_message("layres"), "model.json: layres: unknown key");
  EXPECT_EQ(q.unknown_key_message("zzz"), "model.json: zzz: unknown key");
}

TEST(JsonReader, RangeHelpersNameKeyAndValue) {
  const Json j = Json::parse(R"({"o": {}})");
  JsonObjectReader r(j, "f.json");
  JsonObjectReader o = r.get_object("o");
  expect_error<ConfigError>([&] { o.require_positive("x", 0); }, {"f.json", "o.x", "0", "> 0"});
  expect_error<ConfigError>([&] { o.require_non_negative("y", -1.5); },
                            {"f.json", "o.y", "-1.5", ">= 0"});
  EXPECT_NO_THROW(o.require_positive("x", 1e-9));
  EXPECT_NO_THROW(o.require_non_negative("y", 0));
}

TEST(JsonFile, MissingFileAndBadSyntaxAreConfigErrors) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "strata_specs_json";
  std::filesystem::create_directories(dir);
  const std::string missing = (dir / "nope.json").string();
  std::filesystem::remove(missing);
  expect_error<ConfigError>([&] { read_json_file(missing); }, {missing, "cannot open"});
  const std::string bad = (dir / "bad.json").string();
  std::ofstream(bad) << "{\"a\": 1,}";
  expect_error<ConfigError>([&] { read_json_file(bad); }, {bad, "not valid JSON"});
}

TEST(JsonFile, WriteIsAtomicAndReadsBack) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "strata_specs_json";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "out.json").string();
  const Json value = Json::parse(R"({"a": [1, 2.5, "x"], "b": {"c": null}})");
  write_json_file(path, value);
  EXPECT_EQ(read_json_file(path), value);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));  // the temp file was renamed away
  // A directory that does not exist: SystemError, and nothing is left behind.
  const std::string unwritable = (dir / "no_such_dir" / "out.json").string();
  EXPECT_THROW(write_json_file(unwritable, value), SystemError);
  EXPECT_FALSE(std::filesystem::exists(unwritable));
}

// What read_json_file refuses beyond syntax, each message naming the file and the key path.
TEST(JsonText, DeepNestingIsRefusedBeforeParsing) {
  // 100,000 nested arrays once overflowed the stack while the message was built; the
  // pre-scan stops at level kMaxJsonDepth + 1 = 33, on line 2 of this text.
  const std::string deep = "{\n\"layers\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  expect_error<ConfigError>([&] { parse_json_text(deep, "m.json"); },
                            {"m.json", "line 2", "deeper than 32"});
  // 32 levels are fine; brackets inside strings do not count.
  const std::string ok = std::string(31, '[') + "{\"s\": \"[[[[\\\"[[[[\"}" + std::string(31, ']');
  EXPECT_NO_THROW(parse_json_text(ok, "ok.json"));
}

TEST(JsonText, DuplicateKeysNameTheKeyPath) {
  expect_error<ConfigError>(
      [] { parse_json_text(R"({"device": {"memory_gib": 80, "memory_gib": 40}})", "c.json"); },
      {"c.json", "device.memory_gib", "each key once"});
  // The same key in two objects is not a duplicate.
  EXPECT_NO_THROW(parse_json_text(R"({"a": {"k": 1}, "b": [{"k": 1}, {"k": 2}]})", "ok.json"));
}

TEST(JsonText, NumbersBeyondDoubleNameTheKey) {
  expect_error<ConfigError>(
      [] { parse_json_text(R"({"jobs": [{"a": 1}, {"grid": {"lr": [1, 1e999]}}]})", "w.json"); },
      {"w.json", "jobs[1].grid.lr[1]", "1e999", "double range"});
}

TEST(JsonText, LongStringsAreRefusedAndCutInTheMessage) {
  const std::string big(50 << 20, 'x');  // the 50 MB string of the issue
  try {
    parse_json_text("{\"name\": \"" + big + "\"}", "m.json");
    ADD_FAILURE() << "did not throw";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("m.json: name:"), std::string::npos) << m;
    EXPECT_NE(m.find("(52428800 bytes)"), std::string::npos) << m;
    // file, key, an 80-character head and the expectation: well under 300 characters.
    EXPECT_LT(m.size(), 300u) << m;
  }
  const std::string at_limit(kMaxJsonStringBytes, 'y');
  EXPECT_NO_THROW(parse_json_text("{\"source\": \"" + at_limit + "\"}", "ok.json"));
}

TEST(JsonReader, IntegersBeyondInt64AreErrorsNotWrapped) {
  // 2^63 = 9223372036854775808 is unsigned to nlohmann; read as int64 it wrapped to -2^63.
  const Json j = parse_json_text(R"({"a": 9223372036854775808, "b": 1e20, "c": 9223372036854775807})",
                                 "f.json");
  JsonObjectReader r(j, "f.json");
  expect_error<ConfigError>([&] { r.get_int("a"); }, {"f.json", "a", "9223372036854775808", "2^63"});
  expect_error<ConfigError>([&] { r.get_int("b"); }, {"f.json", "b", "integer"});
  EXPECT_EQ(r.get_int("c"), INT64_MAX);
  expect_error<ConfigError>([&] { r.require_at_most("c", 9.2e18, 1024); },
                            {"f.json", "c", "<= 1024"});
}

}  // namespace
}  // namespace strata
