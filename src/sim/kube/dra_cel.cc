#include "sim/kube/dra_cel.h"

#include <utility>
#include <vector>

#include "common/quote.h"

namespace hami::sim::kube {

using hami::kube::Quantity;
using nlohmann::json;

namespace {

constexpr size_t kMaxExpressionBytes = 10 * 1024;
constexpr int kMaxDepth = 64;

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsIdentStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsIdentChar(char c) { return IsIdentStart(c) || IsDigit(c); }

Result<uint64_t> SemVerNumber(std::string_view s, std::string_view what) {
  if (s.empty() || (s.size() > 1 && s[0] == '0') || s.size() > 19) {
    return Error(ErrorCode::kInvalidArgument, std::string(what) + ": not a number");
  }
  uint64_t v = 0;
  for (char c : s) {
    if (!IsDigit(c))
      return Error(ErrorCode::kInvalidArgument, std::string(what) + ": not a number");
    v = v * 10 + uint64_t(c - '0');
  }
  return v;
}

}  // namespace

Result<SemVer> ParseSemVer(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return Error(ErrorCode::kInvalidArgument,
                 "version " + QuoteInput(text) + ": " + std::string(why));
  };
  std::string_view s = text;
  if (size_t plus = s.find('+'); plus != std::string_view::npos) s = s.substr(0, plus);
  SemVer v;
  if (size_t dash = s.find('-'); dash != std::string_view::npos) {
    v.prerelease = std::string(s.substr(dash + 1));
    s = s.substr(0, dash);
    if (v.prerelease.empty()) return bad("empty pre-release");
  }
  std::string_view parts[3];
  for (int i = 0; i < 3; ++i) {
    size_t dot = s.find('.');
    if ((i < 2) != (dot != std::string_view::npos)) return bad("not major.minor.patch");
    parts[i] = s.substr(0, dot);
    s = dot == std::string_view::npos ? std::string_view() : s.substr(dot + 1);
  }
  auto major = SemVerNumber(parts[0], "major");
  auto minor = SemVerNumber(parts[1], "minor");
  auto patch = SemVerNumber(parts[2], "patch");
  if (!major.ok()) return bad(major.error().message());
  if (!minor.ok()) return bad(minor.error().message());
  if (!patch.ok()) return bad(patch.error().message());
  v.major = *major;
  v.minor = *minor;
  v.patch = *patch;
  return v;
}

int CompareSemVer(const SemVer& a, const SemVer& b) {
  auto cmp = [](auto x, auto y) { return x < y ? -1 : (x > y ? 1 : 0); };
  if (int c = cmp(a.major, b.major)) return c;
  if (int c = cmp(a.minor, b.minor)) return c;
  if (int c = cmp(a.patch, b.patch)) return c;
  if (a.prerelease.empty() || b.prerelease.empty()) {
    return cmp(a.prerelease.empty() ? 1 : 0, b.prerelease.empty() ? 1 : 0);
  }
  // Dot-separated identifiers: numeric ones by value and below alphanumeric ones.
  std::string_view x = a.prerelease, y = b.prerelease;
  for (;;) {
    if (x.empty() || y.empty()) return cmp(x.empty() ? 0 : 1, y.empty() ? 0 : 1);
    size_t dx = x.find('.'), dy = y.find('.');
    std::string_view ix = x.substr(0, dx), iy = y.substr(0, dy);
    x = dx == std::string_view::npos ? std::string_view() : x.substr(dx + 1);
    y = dy == std::string_view::npos ? std::string_view() : y.substr(dy + 1);
    auto numeric = [](std::string_view s) {
      if (s.empty() || s.size() > 18) return false;
      for (char c : s) {
        if (!IsDigit(c)) return false;
      }
      return true;
    };
    const bool nx = numeric(ix), ny = numeric(iy);
    int c = 0;
    if (nx && ny) {
      c = cmp(std::stoull(std::string(ix)), std::stoull(std::string(iy)));
    } else if (nx != ny) {
      c = nx ? -1 : 1;
    } else {
      c = cmp(ix, iy);
    }
    if (c != 0) return c;
  }
}

Result<CelDevice> CelDeviceFromSlice(std::string_view driver, const json& device,
                                     std::string_view where) {
  auto bad = [&](const std::string& field, std::string_view why) {
    return Error(ErrorCode::kInvalidArgument,
                 std::string(where) + ": " + field + ": " + std::string(why));
  };
  CelDevice d;
  d.driver = std::string(driver);
  if (!device.is_object()) return bad("device", "not an object");
  if (auto it = device.find("allowMultipleAllocations"); it != device.end() && !it->is_null()) {
    if (!it->is_boolean()) return bad("allowMultipleAllocations", "not a boolean");
    d.allow_multiple_allocations = it->get<bool>();
  }
  auto split = [&](const std::string& name) {
    size_t slash = name.find('/');
    if (slash == std::string::npos) return std::pair(std::string(driver), name);
    return std::pair(name.substr(0, slash), name.substr(slash + 1));
  };
  if (auto attrs = device.find("attributes"); attrs != device.end() && !attrs->is_null()) {
    if (!attrs->is_object()) return bad("attributes", "not an object");
    for (auto it = attrs->begin(); it != attrs->end(); ++it) {
      const std::string field = "attributes[" + QuoteInput(it.key()) + "]";
      if (!it->is_object() || it->size() != 1) {
        return bad(field, "not exactly one of int, bool, string, version");
      }
      AttributeValue value;
      const auto& [kind, v] = *it->items().begin();
      if (kind == "int" && v.is_number_integer()) {
        value = v.get<int64_t>();
      } else if (kind == "bool" && v.is_boolean()) {
        value = v.get<bool>();
      } else if (kind == "string" && v.is_string()) {
        value = v.get<std::string>();
      } else if (kind == "version" && v.is_string()) {
        auto parsed = ParseSemVer(v.get_ref<const std::string&>());
        if (!parsed.ok()) return bad(field, parsed.error().message());
        value = std::move(*parsed);
      } else {
        return bad(field, "not exactly one of int, bool, string, version");
      }
      auto [domain, id] = split(it.key());
      d.attributes[domain][id] = std::move(value);
    }
  }
  if (auto caps = device.find("capacity"); caps != device.end() && !caps->is_null()) {
    if (!caps->is_object()) return bad("capacity", "not an object");
    for (auto it = caps->begin(); it != caps->end(); ++it) {
      const std::string field = "capacity[" + QuoteInput(it.key()) + "].value";
      const json* value = it->is_object() && it->contains("value") ? &(*it)["value"] : nullptr;
      if (value == nullptr || !value->is_string()) return bad(field, "not a quantity string");
      auto q = hami::kube::ParseQuantity(value->get_ref<const std::string&>(), "");
      if (!q.ok()) return bad(field, q.error().message());
      auto [domain, id] = split(it.key());
      d.capacity[domain][id] = *q;
    }
  }
  return d;
}

// ---- The tree -----------------------------------------------------------------------------------

namespace {

struct DeviceRef {};
struct AttrRoot {};
struct CapRoot {};
struct AttrMap {
  const std::map<std::string, AttributeValue>* map;
};
struct CapMap {
  const std::map<std::string, Quantity>* map;
};
using Value = std::variant<int64_t, bool, std::string, SemVer, Quantity, DeviceRef, AttrRoot,
                           CapRoot, AttrMap, CapMap>;

const char* KindName(const Value& v) {
  static constexpr const char* kNames[] = {"int",    "bool", "string", "version", "quantity",
                                           "device", "map",  "map",    "map",     "map"};
  return kNames[v.index()];
}

}  // namespace

struct CelProgram::Node {
  enum class Kind {
    kLiteral,
    kDevice,
    kSelect,  // operand.name
    kIndex,   // operand[children[1]]
    kCall,    // name(children...)
    kMethod,  // children[0].name(children[1...])
    kNot,
    kNeg,
    kAnd,
    kOr,
    kCompare,  // name is the operator
    kIn,
  };
  Kind kind = Kind::kLiteral;
  std::string name;
  std::vector<Node> children;
  int64_t int_value = 0;
  bool bool_value = false;
  std::string string_value;
  int literal = 0;  // 0 int, 1 bool, 2 string
};

namespace {

using Node = CelProgram::Node;

// ---- Parsing ------------------------------------------------------------------------------------

struct Token {
  enum class Kind { kEnd, kIdent, kInt, kString, kOp };
  Kind kind = Kind::kEnd;
  std::string text;
  size_t column = 0;  // 1-based
};

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  Result<Node> Parse() {
    HAMI_TRY(Lex());
    Node root = HAMI_TRY(Or(0));
    if (Peek().kind != Token::Kind::kEnd) return Unexpected(Peek());
    return root;
  }

 private:
  Error Fail(size_t column, const std::string& what) const {
    return Error(ErrorCode::kInvalidArgument, "column " + std::to_string(column) + ": " + what);
  }
  Error Unexpected(const Token& t) const {
    if (t.kind == Token::Kind::kEnd) return Fail(t.column, "unexpected end of expression");
    return Fail(t.column, "unexpected " + QuoteInput(t.text));
  }

  Status Lex() {
    size_t i = 0;
    while (i < text_.size()) {
      const char c = text_[i];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++i;
        continue;
      }
      Token t;
      t.column = i + 1;
      if (IsIdentStart(c)) {
        size_t j = i;
        while (j < text_.size() && IsIdentChar(text_[j])) ++j;
        t.kind = Token::Kind::kIdent;
        t.text = std::string(text_.substr(i, j - i));
        i = j;
      } else if (IsDigit(c)) {
        size_t j = i;
        while (j < text_.size() && IsDigit(text_[j])) ++j;
        if (j < text_.size() && (text_[j] == '.' || text_[j] == 'e' || text_[j] == 'E' ||
                                 text_[j] == 'u' || text_[j] == 'x')) {
          return Fail(t.column, "unsupported number " + QuoteInput(text_.substr(i, j - i + 1)) +
                                    " (only decimal integers)");
        }
        t.kind = Token::Kind::kInt;
        t.text = std::string(text_.substr(i, j - i));
        i = j;
      } else if (c == '"' || c == '\'') {
        if (text_.substr(i, 3) == std::string(3, c)) {
          return Fail(t.column, "unsupported triple-quoted string");
        }
        size_t j = i + 1;
        std::string value;
        for (;;) {
          if (j >= text_.size() || text_[j] == '\n') return Fail(t.column, "unterminated string");
          const char d = text_[j];
          if (d == c) break;
          if (d == '\\') {
            if (j + 1 >= text_.size()) return Fail(t.column, "unterminated string");
            const char e = text_[j + 1];
            switch (e) {
              case '\\':
              case '\'':
              case '"':
                value += e;
                break;
              case 'n':
                value += '\n';
                break;
              case 't':
                value += '\t';
                break;
              default:
                return Fail(j + 1, "unsupported escape " + QuoteInput(text_.substr(j, 2)));
            }
            j += 2;
            continue;
          }
          value += d;
          ++j;
        }
        t.kind = Token::Kind::kString;
        t.text = std::move(value);
        i = j + 1;
      } else {
        static constexpr std::string_view kOps[] = {"==", "!=", "<=", ">=", "&&", "||", "<", ">",
                                                    "!",  "(",  ")",  "[",  "]",  ".",  ",", "-"};
        std::string_view op;
        for (std::string_view o : kOps) {
          if (text_.substr(i, o.size()) == o) {
            op = o;
            break;
          }
        }
        if (op.empty()) {
          return Fail(t.column, "unsupported operator " + QuoteInput(text_.substr(i, 1)));
        }
        t.kind = Token::Kind::kOp;
        t.text = std::string(op);
        i += op.size();
      }
      tokens_.push_back(std::move(t));
    }
    Token end;
    end.column = text_.size() + 1;
    tokens_.push_back(std::move(end));
    return OkStatus();
  }

  const Token& Peek() const { return tokens_[pos_]; }
  bool IsOp(std::string_view op) const {
    return Peek().kind == Token::Kind::kOp && Peek().text == op;
  }
  Status Expect(std::string_view op) {
    if (!IsOp(op)) {
      const Token& t = Peek();
      return Fail(t.column,
                  "expected " + QuoteInput(op) + ", found " +
                      (t.kind == Token::Kind::kEnd ? std::string("the end") : QuoteInput(t.text)));
    }
    ++pos_;
    return OkStatus();
  }
  Status Deeper(int depth) const {
    if (depth > kMaxDepth) {
      return Fail(Peek().column, "nested more than " + std::to_string(kMaxDepth) + " levels");
    }
    return OkStatus();
  }

  // `operand (op operand)*`, grouped to the left as nodes of `kind`.
  template <typename Operand>
  Result<Node> LeftAssociative(std::string_view op, Node::Kind kind, Operand operand) {
    Node left = HAMI_TRY(operand());
    while (IsOp(op)) {
      ++pos_;
      Node right = HAMI_TRY(operand());
      Node n;
      n.kind = kind;
      n.children = {std::move(left), std::move(right)};
      left = std::move(n);
    }
    return left;
  }

  Result<Node> Or(int depth) {
    HAMI_TRY(Deeper(depth));
    return LeftAssociative("||", Node::Kind::kOr, [&] { return And(depth + 1); });
  }

  Result<Node> And(int depth) {
    return LeftAssociative("&&", Node::Kind::kAnd, [&] { return Relation(depth); });
  }

  Result<Node> Relation(int depth) {
    Node left = HAMI_TRY(Unary(depth));
    static constexpr std::string_view kCompare[] = {"==", "!=", "<", "<=", ">", ">="};
    for (std::string_view op : kCompare) {
      if (IsOp(op)) {
        ++pos_;
        Node right = HAMI_TRY(Unary(depth));
        Node n;
        n.kind = Node::Kind::kCompare;
        n.name = std::string(op);
        n.children = {std::move(left), std::move(right)};
        return n;
      }
    }
    if (Peek().kind == Token::Kind::kIdent && Peek().text == "in") {
      ++pos_;
      Node right = HAMI_TRY(Unary(depth));
      Node n;
      n.kind = Node::Kind::kIn;
      n.children = {std::move(left), std::move(right)};
      return n;
    }
    return left;
  }

  Result<Node> Unary(int depth) {
    HAMI_TRY(Deeper(depth));
    if (IsOp("!") || IsOp("-")) {
      const bool negate = Peek().text == "-";
      ++pos_;
      Node operand = HAMI_TRY(Unary(depth + 1));
      Node n;
      n.kind = negate ? Node::Kind::kNeg : Node::Kind::kNot;
      n.children = {std::move(operand)};
      return n;
    }
    return Member(depth);
  }

  Result<std::vector<Node>> Arguments(int depth) {
    HAMI_TRY(Expect("("));
    std::vector<Node> args;
    if (IsOp(")")) {
      ++pos_;
      return args;
    }
    for (;;) {
      args.push_back(HAMI_TRY(Or(depth + 1)));
      if (IsOp(",")) {
        ++pos_;
        continue;
      }
      HAMI_TRY(Expect(")"));
      return args;
    }
  }

  Result<Node> Member(int depth) {
    Node n = HAMI_TRY(Primary(depth));
    for (;;) {
      if (IsOp(".")) {
        ++pos_;
        const Token& t = Peek();
        if (t.kind != Token::Kind::kIdent) return Unexpected(t);
        std::string name = t.text;
        ++pos_;
        if (IsOp("(")) {
          static constexpr std::string_view kMethods[] = {
              "compareTo", "isGreaterThan", "isLessThan", "startsWith", "endsWith", "contains"};
          bool known = false;
          for (std::string_view m : kMethods) known = known || m == name;
          // lowerAscii() (CEL's strings extension) is the one method without an argument.
          const size_t arity = name == "lowerAscii" ? 0 : 1;
          if (!known && arity != 0) {
            return Fail(t.column, "unsupported function " + QuoteInput(name));
          }
          std::vector<Node> args = HAMI_TRY(Arguments(depth));
          if (args.size() != arity) {
            return Fail(t.column, QuoteInput(name) +
                                      (arity == 0 ? " takes no argument" : " takes one argument"));
          }
          Node m;
          m.kind = Node::Kind::kMethod;
          m.name = std::move(name);
          m.children.push_back(std::move(n));
          for (Node& a : args) m.children.push_back(std::move(a));
          n = std::move(m);
        } else {
          Node s;
          s.kind = Node::Kind::kSelect;
          s.name = std::move(name);
          s.children.push_back(std::move(n));
          n = std::move(s);
        }
      } else if (IsOp("[")) {
        ++pos_;
        Node index = HAMI_TRY(Or(depth + 1));
        HAMI_TRY(Expect("]"));
        Node x;
        x.kind = Node::Kind::kIndex;
        x.children.push_back(std::move(n));
        x.children.push_back(std::move(index));
        n = std::move(x);
      } else {
        return n;
      }
    }
  }

  Result<Node> Primary(int depth) {
    const Token t = Peek();
    Node n;
    switch (t.kind) {
      case Token::Kind::kEnd:
        return Unexpected(t);
      case Token::Kind::kInt: {
        ++pos_;
        uint64_t v = 0;
        for (char c : t.text) {
          if (v > (uint64_t(1) << 63) / 10) return Fail(t.column, "integer out of range");
          v = v * 10 + uint64_t(c - '0');
        }
        if (v > uint64_t(INT64_MAX)) return Fail(t.column, "integer out of range");
        n.kind = Node::Kind::kLiteral;
        n.literal = 0;
        n.int_value = int64_t(v);
        return n;
      }
      case Token::Kind::kString:
        ++pos_;
        n.kind = Node::Kind::kLiteral;
        n.literal = 2;
        n.string_value = t.text;
        return n;
      case Token::Kind::kOp:
        if (t.text == "(") {
          ++pos_;
          n = HAMI_TRY(Or(depth + 1));
          HAMI_TRY(Expect(")"));
          return n;
        }
        if (t.text == "[") return Fail(t.column, "unsupported list literal");
        return Unexpected(t);
      case Token::Kind::kIdent:
        break;
    }
    ++pos_;
    if (t.text == "true" || t.text == "false") {
      n.kind = Node::Kind::kLiteral;
      n.literal = 1;
      n.bool_value = t.text == "true";
      return n;
    }
    if (IsOp("(")) {
      if (t.text != "quantity" && t.text != "semver") {
        return Fail(t.column, "unsupported function " + QuoteInput(t.text));
      }
      std::vector<Node> args = HAMI_TRY(Arguments(depth));
      if (args.size() != 1 || args[0].kind != Node::Kind::kLiteral || args[0].literal != 2) {
        return Fail(t.column, t.text + "() takes one string literal");
      }
      // Checked now, so that a bad literal is a compile error, as cel-go's are.
      if (t.text == "quantity") {
        auto q = hami::kube::ParseQuantity(args[0].string_value, "");
        if (!q.ok()) return Fail(t.column, q.error().message());
      } else {
        auto v = ParseSemVer(args[0].string_value);
        if (!v.ok()) return Fail(t.column, v.error().message());
      }
      n.kind = Node::Kind::kCall;
      n.name = t.text;
      n.children = std::move(args);
      return n;
    }
    if (t.text == "device") {
      n.kind = Node::Kind::kDevice;
      return n;
    }
    if (t.text == "null") return Fail(t.column, "unsupported literal null");
    return Fail(t.column, "undeclared reference " + QuoteInput(t.text) + " (only device)");
  }

  std::string_view text_;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
};

// ---- Evaluation ---------------------------------------------------------------------------------

const std::map<std::string, AttributeValue> kNoAttributes;
const std::map<std::string, Quantity> kNoCapacity;

Error RuntimeError(std::string what) { return Error(ErrorCode::kInvalidArgument, std::move(what)); }

Value FromAttribute(const AttributeValue& a) {
  return std::visit([](const auto& v) -> Value { return v; }, a);
}

class Evaluator {
 public:
  explicit Evaluator(const CelDevice& device) : device_(device) {}

  Result<Value> Eval(const Node& n) {
    switch (n.kind) {
      case Node::Kind::kLiteral:
        if (n.literal == 0) return Value(n.int_value);
        if (n.literal == 1) return Value(n.bool_value);
        return Value(n.string_value);
      case Node::Kind::kDevice:
        return Value(DeviceRef{});
      case Node::Kind::kSelect: {
        Value operand = HAMI_TRY(Eval(n.children[0]));
        return Field(operand, n.name);
      }
      case Node::Kind::kIndex: {
        Value operand = HAMI_TRY(Eval(n.children[0]));
        Value index = HAMI_TRY(Eval(n.children[1]));
        if (!std::holds_alternative<std::string>(index)) {
          return RuntimeError(std::string("no such overload: map index of type ") +
                              KindName(index));
        }
        if (std::holds_alternative<DeviceRef>(operand)) {
          return RuntimeError("no such overload: device is not a map");
        }
        return Field(operand, std::get<std::string>(index));
      }
      case Node::Kind::kCall: {
        const std::string& arg = n.children[0].string_value;
        if (n.name == "quantity") return Value(*hami::kube::ParseQuantity(arg, ""));
        return Value(*ParseSemVer(arg));
      }
      case Node::Kind::kMethod:
        return Method(n);
      case Node::Kind::kNot: {
        Value v = HAMI_TRY(Eval(n.children[0]));
        if (!std::holds_alternative<bool>(v)) {
          return RuntimeError(std::string("no such overload: !") + KindName(v));
        }
        return Value(!std::get<bool>(v));
      }
      case Node::Kind::kNeg: {
        Value v = HAMI_TRY(Eval(n.children[0]));
        if (!std::holds_alternative<int64_t>(v) || std::get<int64_t>(v) == INT64_MIN) {
          return RuntimeError(std::string("no such overload: -") + KindName(v));
        }
        return Value(-std::get<int64_t>(v));
      }
      case Node::Kind::kAnd:
      case Node::Kind::kOr:
        return Logical(n);
      case Node::Kind::kCompare:
        return Compare(n);
      case Node::Kind::kIn: {
        Value key = HAMI_TRY(Eval(n.children[0]));
        Value map = HAMI_TRY(Eval(n.children[1]));
        if (!std::holds_alternative<std::string>(key)) {
          return RuntimeError(std::string("no such overload: ") + KindName(key) + " in map");
        }
        const std::string& k = std::get<std::string>(key);
        if (const AttrMap* a = std::get_if<AttrMap>(&map)) return Value(a->map->contains(k));
        if (const CapMap* c = std::get_if<CapMap>(&map)) return Value(c->map->contains(k));
        if (std::holds_alternative<AttrRoot>(map)) return Value(device_.attributes.contains(k));
        if (std::holds_alternative<CapRoot>(map)) return Value(device_.capacity.contains(k));
        return RuntimeError(std::string("no such overload: string in ") + KindName(map));
      }
    }
    return RuntimeError("internal: unknown node");
  }

 private:
  Result<Value> Field(const Value& operand, const std::string& name) {
    if (std::holds_alternative<DeviceRef>(operand)) {
      if (name == "driver") return Value(device_.driver);
      if (name == "allowMultipleAllocations") return Value(device_.allow_multiple_allocations);
      if (name == "attributes") return Value(AttrRoot{});
      if (name == "capacity") return Value(CapRoot{});
      return RuntimeError("no such field: device." + name);
    }
    if (std::holds_alternative<AttrRoot>(operand)) {
      auto it = device_.attributes.find(name);
      return Value(AttrMap{it == device_.attributes.end() ? &kNoAttributes : &it->second});
    }
    if (std::holds_alternative<CapRoot>(operand)) {
      auto it = device_.capacity.find(name);
      return Value(CapMap{it == device_.capacity.end() ? &kNoCapacity : &it->second});
    }
    if (const AttrMap* a = std::get_if<AttrMap>(&operand)) {
      auto it = a->map->find(name);
      if (it == a->map->end()) return RuntimeError("no such key: " + QuoteInput(name));
      return FromAttribute(it->second);
    }
    if (const CapMap* c = std::get_if<CapMap>(&operand)) {
      auto it = c->map->find(name);
      if (it == c->map->end()) return RuntimeError("no such key: " + QuoteInput(name));
      return Value(it->second);
    }
    return RuntimeError(std::string("no such field ") + QuoteInput(name) + " on a value of type " +
                        KindName(operand));
  }

  Result<Value> Method(const Node& n) {
    Value receiver = HAMI_TRY(Eval(n.children[0]));
    if (n.name == "lowerAscii") {
      const std::string* s = std::get_if<std::string>(&receiver);
      if (s == nullptr) {
        return RuntimeError("no such overload: " + std::string(KindName(receiver)) +
                            ".lowerAscii()");
      }
      std::string lower = *s;
      for (char& ch : lower) {
        if (ch >= 'A' && ch <= 'Z') ch = char(ch - 'A' + 'a');
      }
      return Value(std::move(lower));
    }
    Value arg = HAMI_TRY(Eval(n.children[1]));
    auto overload = [&] {
      return RuntimeError("no such overload: " + std::string(KindName(receiver)) + "." + n.name +
                          "(" + KindName(arg) + ")");
    };
    if (n.name == "startsWith" || n.name == "endsWith" || n.name == "contains") {
      const std::string* s = std::get_if<std::string>(&receiver);
      const std::string* p = std::get_if<std::string>(&arg);
      if (s == nullptr || p == nullptr) return overload();
      if (n.name == "startsWith") return Value(s->starts_with(*p));
      if (n.name == "endsWith") return Value(s->ends_with(*p));
      return Value(s->find(*p) != std::string::npos);
    }
    int c = 0;
    if (receiver.index() != arg.index()) return overload();
    if (const Quantity* q = std::get_if<Quantity>(&receiver)) {
      const Quantity& r = std::get<Quantity>(arg);
      c = *q < r ? -1 : (*q > r ? 1 : 0);
    } else if (const SemVer* v = std::get_if<SemVer>(&receiver)) {
      c = CompareSemVer(*v, std::get<SemVer>(arg));
    } else {
      return overload();
    }
    if (n.name == "compareTo") return Value(int64_t(c));
    if (n.name == "isGreaterThan") return Value(c > 0);
    return Value(c < 0);  // isLessThan
  }

  Result<Value> Logical(const Node& n) {
    const bool is_and = n.kind == Node::Kind::kAnd;
    // The value that decides the result on its own: false for &&, true for ||.
    const bool decisive = !is_and;
    auto side = [&](const Node& c) -> Result<bool> {
      Value v = HAMI_TRY(Eval(c));
      if (!std::holds_alternative<bool>(v)) {
        return RuntimeError(std::string("no such overload: ") + KindName(v) +
                            (is_and ? " && " : " || ") + "bool");
      }
      return std::get<bool>(v);
    };
    Result<bool> left = side(n.children[0]);
    if (left.ok() && *left == decisive) return Value(decisive);
    Result<bool> right = side(n.children[1]);
    if (right.ok() && *right == decisive) return Value(decisive);
    if (!left.ok()) return std::move(left).error();
    if (!right.ok()) return std::move(right).error();
    return Value(!decisive);
  }

  Result<Value> Compare(const Node& n) {
    Value a = HAMI_TRY(Eval(n.children[0]));
    Value b = HAMI_TRY(Eval(n.children[1]));
    const std::string& op = n.name;
    const bool equality = op == "==" || op == "!=";
    if (a.index() != b.index()) {
      // CEL's heterogeneous equality: values of different types are not equal.
      if (equality) return Value(op == "!=");
      return RuntimeError("no such overload: " + std::string(KindName(a)) + " " + op + " " +
                          KindName(b));
    }
    int c = 0;
    if (const int64_t* x = std::get_if<int64_t>(&a)) {
      int64_t y = std::get<int64_t>(b);
      c = *x < y ? -1 : (*x > y ? 1 : 0);
    } else if (const std::string* s = std::get_if<std::string>(&a)) {
      c = s->compare(std::get<std::string>(b));
      c = c < 0 ? -1 : (c > 0 ? 1 : 0);
    } else if (const Quantity* q = std::get_if<Quantity>(&a)) {
      const Quantity& r = std::get<Quantity>(b);
      c = *q < r ? -1 : (*q > r ? 1 : 0);
    } else if (const SemVer* v = std::get_if<SemVer>(&a)) {
      c = CompareSemVer(*v, std::get<SemVer>(b));
    } else if (const bool* flag = std::get_if<bool>(&a)) {
      if (!equality) {
        return RuntimeError("no such overload: bool " + op + " bool");
      }
      c = *flag == std::get<bool>(b) ? 0 : 1;
    } else {
      return RuntimeError("no such overload: " + std::string(KindName(a)) + " " + op + " " +
                          KindName(b));
    }
    if (op == "==") return Value(c == 0);
    if (op == "!=") return Value(c != 0);
    if (op == "<") return Value(c < 0);
    if (op == "<=") return Value(c <= 0);
    if (op == ">") return Value(c > 0);
    return Value(c >= 0);
  }

  const CelDevice& device_;
};

std::string Named(std::string_view expression) {
  return "CEL expression " + QuoteInput(expression, 200) + ": ";
}

}  // namespace

Result<CelProgram> CelProgram::Compile(std::string_view expression) {
  if (expression.size() > kMaxExpressionBytes) {
    return Error(ErrorCode::kInvalidArgument, Named(expression) + "longer than " +
                                                  std::to_string(kMaxExpressionBytes) + " bytes");
  }
  Parser parser(expression);
  auto root = parser.Parse();
  if (!root.ok()) {
    return Error(ErrorCode::kInvalidArgument, Named(expression) + root.error().message());
  }
  CelProgram p;
  p.expression_ = std::make_shared<const std::string>(expression);
  p.root_ = std::make_shared<const Node>(std::move(*root));
  return p;
}

Result<bool> CelProgram::Evaluate(const CelDevice& device) const {
  Evaluator e(device);
  auto v = e.Eval(*root_);
  if (!v.ok()) {
    return Error(ErrorCode::kInvalidArgument, Named(*expression_) + v.error().message());
  }
  if (!std::holds_alternative<bool>(*v)) {
    return Error(ErrorCode::kInvalidArgument,
                 Named(*expression_) + "evaluates to a " + KindName(*v) + ", not a bool");
  }
  return std::get<bool>(*v);
}

}  // namespace hami::sim::kube
