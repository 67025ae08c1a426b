// The option words a command takes before the program it runs. `hami run` hands the rest
// of its line to a program, so CLI11 alone would take a misspelt option (`--memroy=2g`) as
// the start of that program's arguments, and run the program without the limit the user
// meant to set. CheckOptionWords reads the words before the program against the options
// the command defines, and refuses the first it does not know.
//
// Pure: reads the definitions, prints nothing. Not thread-safe against a CLI::App that is
// being changed.
#pragma once

#include <CLI/CLI.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hami::cli {

// Where the options end: at "--", or at the first word that does not start with '-' and is
// not an option's value (the program's name). Returns "" when every word before that point
// is an option of `command` (its help flag included), written as CLI11 accepts it: `--name`,
// `--name=value`, `--name value`, `-x`, `-xvalue`, `-x value`, or a run of short flags
// (`-qh`). Otherwise returns the error for the first word that is not, naming it and the
// closest long option when one is near.
std::string CheckOptionWords(const CLI::App& command, std::span<const std::string> words);

// The long option of `command` nearest to `word` ("--memroy" -> "--memory"), or "" when
// none is close enough to be a likely misspelling.
std::string ClosestOption(const CLI::App& command, std::string_view word);

}  // namespace hami::cli
