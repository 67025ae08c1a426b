#include "cli/option_words.h"

#include <algorithm>
#include <cstddef>

namespace hami::cli {

namespace {

// Edits (insert, delete, substitute, swap of neighbours) that turn `a` into `b`.
size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

// Every option of `command`, the help flag included (CLI11 lists it among the options).
std::vector<const CLI::Option*> Options(const CLI::App& command) {
  return command.get_options([](const CLI::Option*) { return true; });
}

const CLI::Option* FindLong(const CLI::App& command, std::string_view name) {
  for (const CLI::Option* o : Options(command)) {
    for (const std::string& l : o->get_lnames()) {
      if (l == name) return o;
    }
  }
  return nullptr;
}

const CLI::Option* FindShort(const CLI::App& command, char name) {
  for (const CLI::Option* o : Options(command)) {
    for (const std::string& s : o->get_snames()) {
      if (s.size() == 1 && s[0] == name) return o;
    }
  }
  return nullptr;
}

// A flag expects no value (CLI11 sets expected(0) on every add_flag, the help flag included).
bool TakesValue(const CLI::Option* o) { return o->get_expected_max() > 0; }

std::string Unknown(const CLI::App& command, const std::string& word) {
  std::string name = word.substr(0, word.find('='));
  std::string msg = "unknown option '" + word + "'";
  if (std::string near = ClosestOption(command, name); !near.empty()) {
    msg += " (did you mean " + near + "?)";
  }
  msg += "; see '" + command.get_name() + " --help'. Options come before the program, which " +
         "may follow --";
  return msg;
}

}  // namespace

std::string ClosestOption(const CLI::App& command, std::string_view word) {
  std::string_view bare = word;
  while (!bare.empty() && bare.front() == '-') bare.remove_prefix(1);
  if (bare.empty()) return "";
  std::string best;
  size_t best_distance = SIZE_MAX;
  for (const CLI::Option* o : Options(command)) {
    for (const std::string& l : o->get_lnames()) {
      size_t d = EditDistance(bare, l);
      // A prefix of the option ("--mem") is as likely as a typo.
      if (l.size() > bare.size() && l.compare(0, bare.size(), bare) == 0 && bare.size() >= 2) {
        d = std::min<size_t>(d, 1);
      }
      if (d < best_distance) {
        best_distance = d;
        best = "--" + l;
      }
    }
  }
  // Two edits for a name of up to six letters, a third of it beyond that.
  size_t allowed = std::max<size_t>(2, bare.size() / 3);
  return best_distance <= allowed ? best : "";
}

std::string CheckOptionWords(const CLI::App& command, std::span<const std::string> words) {
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string& w = words[i];
    if (w == "--") return "";
    if (w.size() < 2 || w[0] != '-') return "";  // the program's name (or "-")
    if (w[1] == '-') {
      size_t eq = w.find('=');
      const CLI::Option* o = FindLong(command, std::string_view(w).substr(2, eq - 2));
      if (o == nullptr) return Unknown(command, w);
      if (eq == std::string::npos && TakesValue(o)) {
        if (i + 1 == words.size()) return "option " + w + " needs a value";
        ++i;
      }
      continue;
    }
    // One or more short names: "-q", "-qh"; a name that takes a value ends the run, and the
    // rest of the word, or the next word, is its value.
    for (size_t k = 1; k < w.size(); ++k) {
      const CLI::Option* o = FindShort(command, w[k]);
      if (o == nullptr) {
        return k == 1 ? Unknown(command, w)
                      : "unknown option '-" + std::string(1, w[k]) + "' in '" + w + "'";
      }
      if (TakesValue(o)) {
        if (k + 1 == w.size()) {
          if (i + 1 == words.size()) return "option -" + std::string(1, w[k]) + " needs a value";
          ++i;
        }
        break;
      }
    }
  }
  return "";
}

}  // namespace hami::cli
