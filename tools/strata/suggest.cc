// Nearest-word suggestions for mistyped subcommands and flags; see suggest.h.
#include "tools/strata/suggest.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <vector>

#include <fmt/format.h>

namespace strata::cli {
namespace {

// Levenshtein distance: a transposition ("plna") counts two, still within the threshold.
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The candidate nearest to `word` within two edits; "" when none is that close.
std::string nearest(const std::string& word, const std::vector<std::string>& candidates) {
  constexpr std::size_t kMaxEdits = 2;
  std::string best;
  std::size_t best_distance = kMaxEdits + 1;
  for (const std::string& c : candidates) {
    const std::size_t d = edit_distance(word, c);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  return best;
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
