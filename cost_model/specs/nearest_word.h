// The nearest of some known words to a mistyped one, for "did you mean" in messages: a
// config file's unknown key (json_reader.h) and the CLI's unknown subcommand or flag
// (tools/strata/suggest.h).
#pragma once

#include <string>
#include <vector>

namespace strata {

// The candidate nearest to `word` by Levenshtein distance (a transposition counts two), within
// two edits; the first such on ties; "" when none is that close.
std::string nearest_word(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace strata
