// Nearest-word suggestions for mistyped subcommands and flags; see suggest.h.
#include "tools/strata/suggest.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "cost_model/specs/nearest_word.h"

namespace strata::cli {
namespace {

std::string nearest(const std::string& word, const std::vector<std::string>& candidates) {
  return nearest_word(word, candidates);
}

std::vector<std::string> subcommand_names(CLI::App& app) {
  std::vector<std::string> names;
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    names.push_back(sub->get_name());
  }
  return names;
}

}  // namespace

std::string unknown_subcommand_message(CLI::App& app, int argc, char** argv) {
  if (argc < 2) return "";
  const std::string word = argv[1];
  if (word.empty() || word[0] == '-') return "";
  const std::vector<std::string> names = subcommand_names(app);
  if (std::find(names.begin(), names.end(), word) != names.end()) return "";
  const std::string guess = nearest(word, names);
  return fmt::format("unknown command '{}'{} (commands: {})", word,
                     guess.empty() ? "" : fmt::format("; did you mean '{}'?", guess),
                     fmt::join(names, ", "));
}

std::string unknown_flags_message(CLI::App& app, int argc, char** argv) {
  if (argc < 2) return "";
  CLI::App* sub = nullptr;
  for (CLI::App* s : app.get_subcommands([](CLI::App*) { return true; })) {
    if (s->get_name() == argv[1]) sub = s;
  }
  if (sub == nullptr) return "";
  std::vector<std::string> flags;
  for (const CLI::Option* option : sub->get_options()) {
    for (const std::string& name : option->get_lnames()) flags.push_back("--" + name);
  }
  std::vector<std::string> unknown;
  for (int i = 2; i < argc; ++i) {
    std::string word = argv[i];
    if (word.rfind("--", 0) != 0 || word == "--") continue;
    word = word.substr(0, word.find('='));
    if (std::find(flags.begin(), flags.end(), word) != flags.end()) continue;
    const std::string guess = nearest(word, flags);
    unknown.push_back(fmt::format("unknown flag {}{}", word,
                                  guess.empty() ? "" : fmt::format(" (did you mean {}?)", guess)));
  }
  return fmt::format("{}", fmt::join(unknown, "; "));
}

}  // namespace strata::cli
