// "Did you mean": the nearest subcommand or flag to a mistyped one, for main.cc's messages.
// CLI11 says only "A subcommand is required" or "The following arguments were not expected";
// these name what was typed and the closest word it could have meant.
#pragma once

#include <string>

#include "tools/strata/cli_fwd.h"

namespace strata::cli {

// "" when argv names a subcommand (or none); else a message naming the unknown word, the
// nearest subcommand when one is within two edits, and every subcommand.
std::string unknown_subcommand_message(CLI::App& app, int argc, char** argv);

// For each "--flag" in argv that the chosen subcommand does not know: "unknown flag --modle
// (did you mean --model?)"; "" when every flag is known.
std::string unknown_flags_message(CLI::App& app, int argc, char** argv);

}  // namespace strata::cli
