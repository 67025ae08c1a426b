#include "kube/selector.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>

namespace hami::kube {

namespace {

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool IsAlnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}
bool IsLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

// A label name: at most 63 characters, [A-Za-z0-9] at both ends, [-A-Za-z0-9_.] between.
const char* NameProblem(std::string_view s) {
  if (s.empty()) return "is empty";
  if (s.size() > 63) return "is longer than 63 characters";
  if (!IsAlnum(s.front()) || !IsAlnum(s.back())) return "must begin and end with [A-Za-z0-9]";
  for (char c : s) {
    if (!IsAlnum(c) && c != '-' && c != '_' && c != '.') return "may hold only [-A-Za-z0-9_.]";
  }
  return nullptr;
}

// A DNS subdomain (RFC 1123): dot-separated lowercase labels, at most 253 characters.
const char* PrefixProblem(std::string_view s) {
  if (s.empty()) return "the prefix before '/' is empty";
  if (s.size() > 253) return "the prefix is longer than 253 characters";
  size_t start = 0;
  while (true) {
    size_t dot = s.find('.', start);
    std::string_view label = s.substr(start, dot == std::string_view::npos ? s.npos : dot - start);
    if (label.empty() || !IsLowerAlnum(label.front()) || !IsLowerAlnum(label.back())) {
      return "the prefix must be a lowercase DNS subdomain such as hami.io";
    }
    for (char c : label) {
      if (!IsLowerAlnum(c) && c != '-') {
        return "the prefix must be a lowercase DNS subdomain such as hami.io";
      }
    }
    if (dot == std::string_view::npos) return nullptr;
    start = dot + 1;
  }
}

std::string KeyProblem(std::string_view key) {
  std::string_view name = key;
  size_t slash = key.find('/');
  if (slash != std::string_view::npos) {
    if (const char* p = PrefixProblem(key.substr(0, slash))) return p;
    name = key.substr(slash + 1);
    if (name.find('/') != std::string_view::npos) return "a key has at most one '/'";
  }
  if (const char* p = NameProblem(name)) return std::string("the name ") + p;
  return {};
}

const char* ValueProblem(std::string_view value) {
  return value.empty() ? nullptr : NameProblem(value);
}

enum class Tok {
  kEnd,
  kIdent,
  kEquals,
  kDoubleEquals,
  kNotEquals,
  kNot,
  kOpen,
  kClose,
  kComma,
  kGreater,
  kLess
};

struct Token {
  Tok kind;
  std::string_view text;
  size_t begin;  // offset in the selector
  size_t end;
};

bool IsSpecial(char c) {
  return c == '=' || c == '!' || c == '(' || c == ')' || c == ',' || c == '<' || c == '>';
}

class Lexer {
 public:
  explicit Lexer(std::string_view s) : s_(s) {}

  Token Next() {
    while (pos_ < s_.size() && IsSpace(s_[pos_])) ++pos_;
    const size_t begin = pos_;
    if (pos_ == s_.size()) return {Tok::kEnd, {}, begin, begin};
    const char c = s_[pos_];
    const bool then_equals = pos_ + 1 < s_.size() && s_[pos_ + 1] == '=';
    Tok kind;
    size_t len = 1;
    switch (c) {
      case '=':
        kind = then_equals ? Tok::kDoubleEquals : Tok::kEquals;
        len = then_equals ? 2 : 1;
        break;
      case '!':
        kind = then_equals ? Tok::kNotEquals : Tok::kNot;
        len = then_equals ? 2 : 1;
        break;
      case '(':
        kind = Tok::kOpen;
        break;
      case ')':
        kind = Tok::kClose;
        break;
      case ',':
        kind = Tok::kComma;
        break;
      case '<':
        kind = Tok::kLess;
        break;
      case '>':
        kind = Tok::kGreater;
        break;
      default:
        kind = Tok::kIdent;
        len = 0;
        while (begin + len < s_.size() && !IsSpace(s_[begin + len]) &&
               !IsSpecial(s_[begin + len])) {
          ++len;
        }
    }
    pos_ = begin + len;
    return {kind, s_.substr(begin, len), begin, pos_};
  }

  Token Peek() {
    const size_t saved = pos_;
    Token t = Next();
    pos_ = saved;
    return t;
  }

 private:
  std::string_view s_;
  size_t pos_ = 0;
};

std::string Describe(const Token& t) {
  if (t.kind == Tok::kEnd) return "the end";
  return "'" + std::string(t.text) + "'";
}

class LabelParser {
 public:
  explicit LabelParser(std::string_view text) : text_(text), lex_(text) {}

  Result<std::vector<LabelSelector::Requirement>> Run() {
    std::vector<LabelSelector::Requirement> out;
    if (lex_.Peek().kind == Tok::kEnd) return out;
    while (true) {
      const size_t begin = lex_.Peek().begin;
      auto r = Requirement();
      if (!r.ok()) return std::move(r).error();
      out.push_back(std::move(*r));
      Token t = lex_.Next();
      if (t.kind == Tok::kEnd) return out;
      if (t.kind != Tok::kComma) {
        return Bad("expected ',' or the end after \"" +
                   std::string(text_.substr(begin, last_end_ - begin)) + "\", found " +
                   Describe(t));
      }
    }
  }

 private:
  Error Bad(const std::string& detail) const {
    return Error(ErrorCode::kInvalidArgument,
                 "invalid label selector \"" + std::string(text_) + "\": " + detail);
  }

  Token Take() {
    Token t = lex_.Next();
    if (t.kind != Tok::kEnd) last_end_ = t.end;
    return t;
  }

  Result<LabelSelector::Requirement> Requirement() {
    using Op = LabelSelector::Op;
    Token key = Take();
    const bool negated = key.kind == Tok::kNot;
    if (negated) key = Take();
    if (key.kind != Tok::kIdent) {
      return Bad(std::string("expected a label key") + (negated ? " after '!'" : "") + ", found " +
                 Describe(key));
    }
    if (key.text == "in" || key.text == "notin") {
      return Bad("'" + std::string(key.text) + "' is an operator, not a label key");
    }
    if (std::string why = KeyProblem(key.text); !why.empty()) {
      return Bad("key \"" + std::string(key.text) + "\": " + why);
    }
    LabelSelector::Requirement r{std::string(key.text), Op::kExists, {}};
    if (negated) {
      r.op = Op::kDoesNotExist;
      return r;
    }
    Token op = lex_.Peek();
    switch (op.kind) {
      case Tok::kEnd:
      case Tok::kComma:
        return r;
      case Tok::kEquals:
      case Tok::kDoubleEquals:
      case Tok::kNotEquals: {
        Take();
        r.op = op.kind == Tok::kNotEquals ? Op::kNotEquals : Op::kEquals;
        Token v = lex_.Peek();
        if (v.kind == Tok::kIdent) {
          Take();
          r.values.emplace_back(v.text);
        } else if (v.kind == Tok::kEnd || v.kind == Tok::kComma) {
          r.values.emplace_back();
        } else {
          return Bad("expected a value after \"" + r.key + std::string(op.text) + "\", found " +
                     Describe(v));
        }
        break;
      }
      case Tok::kIdent:
        if (op.text == "in" || op.text == "notin") {
          Take();
          r.op = op.text == "in" ? Op::kIn : Op::kNotIn;
          HAMI_TRY(Set(r));
          break;
        }
        return Bad("expected an operator (=, ==, !=, in, notin) after key \"" + r.key +
                   "\", found " + Describe(op));
      case Tok::kGreater:
      case Tok::kLess:
        return Bad("operator " + Describe(op) + " after key \"" + r.key +
                   "\" is not supported (=, ==, !=, in, notin)");
      default:
        return Bad("expected an operator (=, ==, !=, in, notin) after key \"" + r.key +
                   "\", found " + Describe(op));
    }
    for (const std::string& v : r.values) {
      if (const char* why = ValueProblem(v)) {
        return Bad("value \"" + v + "\" of key \"" + r.key + "\" " + why);
      }
    }
    std::sort(r.values.begin(), r.values.end());
    r.values.erase(std::unique(r.values.begin(), r.values.end()), r.values.end());
    return r;
  }

  // "(a, b)": items between the parentheses, split at commas; an empty item is the empty value.
  Status Set(LabelSelector::Requirement& r) {
    Token open = Take();
    if (open.kind != Tok::kOpen) {
      return Bad("expected '(' after \"" + r.key + " " +
                 (r.op == LabelSelector::Op::kIn ? "in" : "notin") + "\", found " + Describe(open));
    }
    while (true) {
      Token t = Take();
      if (t.kind == Tok::kIdent) {
        r.values.emplace_back(t.text);
        t = Take();
      } else {
        r.values.emplace_back();
      }
      if (t.kind == Tok::kClose) return OkStatus();
      if (t.kind != Tok::kComma) {
        return Bad("expected ',' or ')' in the set of key \"" + r.key + "\", found " + Describe(t));
      }
    }
  }

  std::string_view text_;
  Lexer lex_;
  size_t last_end_ = 0;
};

template <typename Lookup>
bool MatchLabels(const std::vector<LabelSelector::Requirement>& requirements, Lookup lookup) {
  using Op = LabelSelector::Op;
  for (const LabelSelector::Requirement& r : requirements) {
    const std::optional<std::string_view> v = lookup(r.key);
    bool ok = false;
    switch (r.op) {
      case Op::kEquals:
      case Op::kIn:
        ok = v && std::binary_search(r.values.begin(), r.values.end(), *v);
        break;
      case Op::kNotEquals:
      case Op::kNotIn:
        ok = !v || !std::binary_search(r.values.begin(), r.values.end(), *v);
        break;
      case Op::kExists:
        ok = v.has_value();
        break;
      case Op::kDoesNotExist:
        ok = !v.has_value();
        break;
    }
    if (!ok) return false;
  }
  return true;
}

const nlohmann::json* Member(const nlohmann::json& object, std::string_view key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

}  // namespace

Result<LabelSelector> LabelSelector::Parse(std::string_view text) {
  LabelSelector s;
  s.requirements_ = HAMI_TRY(LabelParser(text).Run());
  return s;
}

bool LabelSelector::Matches(const std::map<std::string, std::string>& labels) const {
  return MatchLabels(requirements_, [&](const std::string& key) -> std::optional<std::string_view> {
    auto it = labels.find(key);
    if (it == labels.end()) return std::nullopt;
    return it->second;
  });
}

bool LabelSelector::Matches(const nlohmann::json& object) const {
  const nlohmann::json* metadata = Member(object, "metadata");
  const nlohmann::json* labels = metadata ? Member(*metadata, "labels") : nullptr;
  return MatchLabels(requirements_, [&](const std::string& key) -> std::optional<std::string_view> {
    const nlohmann::json* v = labels ? Member(*labels, key) : nullptr;
    if (v == nullptr || !v->is_string()) return std::nullopt;
    return v->get_ref<const std::string&>();
  });
}

std::string LabelSelector::String() const {
  std::string out;
  for (const Requirement& r : requirements_) {
    if (!out.empty()) out += ',';
    if (r.op == Op::kDoesNotExist) out += '!';
    out += r.key;
    switch (r.op) {
      case Op::kEquals:
        out += '=';
        out += r.values.front();
        break;
      case Op::kNotEquals:
        out += "!=";
        out += r.values.front();
        break;
      case Op::kIn:
      case Op::kNotIn: {
        out += r.op == Op::kIn ? " in (" : " notin (";
        for (size_t i = 0; i < r.values.size(); ++i) {
          if (i > 0) out += ',';
          out += r.values[i];
        }
        out += ')';
        break;
      }
      case Op::kExists:
      case Op::kDoesNotExist:
        break;
    }
  }
  return out;
}

namespace {

Error BadField(std::string_view text, const std::string& detail) {
  return Error(ErrorCode::kInvalidArgument,
               "invalid field selector \"" + std::string(text) + "\": " + detail);
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

bool IsFieldChar(char c) { return IsAlnum(c) || c == '.' || c == '_' || c == '-' || c == '/'; }

}  // namespace

Result<FieldSelector> FieldSelector::Parse(std::string_view text) {
  FieldSelector s;
  // Terms end at commas that no backslash escapes.
  std::vector<std::string_view> terms;
  size_t start = 0;
  bool escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    if (escaped) {
      escaped = false;
    } else if (text[i] == '\\') {
      escaped = true;
    } else if (text[i] == ',') {
      terms.push_back(text.substr(start, i - start));
      start = i + 1;
    }
  }
  terms.push_back(text.substr(start));

  for (std::string_view term : terms) {
    if (term.empty()) continue;
    // The first operator splits the term: "!=", "==" or "=", whichever starts first.
    size_t at = term.find_first_of("!=");
    while (at != std::string_view::npos && term.substr(at, 2) != "!=" && term[at] != '=') {
      at = term.find_first_of("!=", at + 1);
    }
    if (at == std::string_view::npos) {
      return BadField(text, "can't understand \"" + std::string(term) + "\" (want field=value)");
    }
    const size_t op_len = term.substr(at, 2) == "!=" || term.substr(at, 2) == "==" ? 2 : 1;
    Requirement r{std::string(Trim(term.substr(0, at))), term[at] != '!', {}};
    if (r.field.empty()) {
      return BadField(text, "missing field name in \"" + std::string(term) + "\"");
    }
    if (!std::all_of(r.field.begin(), r.field.end(), IsFieldChar)) {
      return BadField(text, "field name \"" + r.field +
                                "\" may hold only letters, digits and '.', '_', '-', '/'");
    }
    std::string_view raw = term.substr(at + op_len);
    for (size_t i = 0; i < raw.size(); ++i) {
      const char c = raw[i];
      if (c == '\\') {
        if (i + 1 == raw.size()) {
          return BadField(text, "a lone '\\' ends the value of \"" + std::string(term) + "\"");
        }
        const char e = raw[++i];
        if (e != '\\' && e != ',' && e != '=') {
          return BadField(text, std::string("invalid escape sequence \"\\") + e + "\" in \"" +
                                    std::string(term) + "\" (only \\\\ \\, \\=)");
        }
        r.value += e;
      } else if (c == '=') {
        return BadField(text,
                        "unescaped '=' in the value of \"" + std::string(term) + "\" (write \\=)");
      } else {
        r.value += c;
      }
    }
    s.requirements_.push_back(std::move(r));
  }
  return s;
}

Status FieldSelector::CheckSupported(const std::vector<std::string_view>& supported) const {
  for (const Requirement& r : requirements_) {
    if (std::find(supported.begin(), supported.end(), r.field) == supported.end()) {
      return Error(ErrorCode::kInvalidArgument, "field label not supported: " + r.field);
    }
  }
  return OkStatus();
}

bool FieldSelector::Matches(const nlohmann::json& object) const {
  for (const Requirement& r : requirements_) {
    const nlohmann::json* node = &object;
    std::string_view rest = r.field;
    while (node != nullptr) {
      const size_t dot = rest.find('.');
      node = Member(*node, rest.substr(0, dot));
      if (dot == std::string_view::npos) break;
      rest.remove_prefix(dot + 1);
    }
    std::string text;
    if (node != nullptr) {
      if (node->is_string()) {
        text = node->get_ref<const std::string&>();
      } else if (node->is_boolean() || node->is_number()) {
        text = node->dump();
      }
    }
    if ((text == r.value) != r.equals) return false;
  }
  return true;
}

std::string FieldSelector::String() const {
  std::string out;
  for (const Requirement& r : requirements_) {
    if (!out.empty()) out += ',';
    out += r.field;
    out += r.equals ? "=" : "!=";
    for (char c : r.value) {
      if (c == '\\' || c == ',' || c == '=') out += '\\';
      out += c;
    }
  }
  return out;
}

}  // namespace hami::kube
