#include "kube/config.h"

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <utility>
#include <vector>

#include "common/file.h"
#include "common/parse.h"
#include "kube/base64.h"

namespace hami::kube {
namespace {

constexpr size_t kMaxKubeconfigBytes = 4 << 20;
constexpr size_t kMaxPemBytes = 1 << 20;
constexpr size_t kMaxTokenBytes = 64 << 10;

// Reads a whole regular file, following symbolic links (the kubelet projects service-account
// files as links into a ..data directory, and kubeconfigs are often links too).
Result<std::string> ReadFile(const std::string& path, size_t max_bytes) {
  return ReadFileToString(path, max_bytes, Symlinks::kFollow);
}

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

bool LooksLikePem(std::string_view text) { return text.find("-----BEGIN ") != text.npos; }

std::string_view TrimSpace(std::string_view s) {
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

std::string Quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s.substr(0, 200)) {
    if (uint8_t(c) < 0x20 || uint8_t(c) == 0x7f) {
      out += '?';
    } else {
      out += c;
    }
  }
  if (s.size() > 200) out += "...";
  return out + "\"";
}

std::string HomeDir() {
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') return home;
  if (const passwd* pw = getpwuid(getuid()); pw != nullptr && pw->pw_dir != nullptr) {
    return pw->pw_dir;
  }
  return "/";
}

// One kubeconfig being read: its name for messages and its directory for relative files.
class KubeconfigReader {
 public:
  explicit KubeconfigReader(std::string_view file) : file_(file) {
    size_t slash = file_.rfind('/');
    dir_ = slash == std::string::npos ? "." : slash == 0 ? "/" : file_.substr(0, slash);
  }

  Error Fail(std::string_view field, std::string_view what,
             ErrorCode code = ErrorCode::kInvalidArgument) const {
    std::string msg = "kubeconfig " + file_ + ": ";
    if (!field.empty()) msg += std::string(field) + ": ";
    msg += what;
    return Error(code, std::move(msg));
  }

  // A string field of `map`; "" when absent or null.
  Result<std::string> String(const YAML::Node& map, const char* key,
                             const std::string& field) const {
    YAML::Node n = map[key];
    if (!n.IsDefined() || n.IsNull()) return std::string();
    if (!n.IsScalar()) return Fail(field, "not a string");
    return n.Scalar();
  }

  Result<bool> Bool(const YAML::Node& map, const char* key, const std::string& field) const {
    YAML::Node n = map[key];
    if (!n.IsDefined() || n.IsNull()) return false;
    bool b = false;
    if (!n.IsScalar() || !YAML::convert<bool>::decode(n, b)) {
      return Fail(field, "not a boolean" + (n.IsScalar() ? ": " + Quote(n.Scalar()) : ""));
    }
    return b;
  }

  // The entry of the list `key` ("clusters") whose name is `name`, and its index; its body
  // (entry[body_key], e.g. "cluster") must be a map.
  struct Entry {
    YAML::Node body;
    std::string field;  // "clusters[2].cluster"
  };
  Result<Entry> Find(const YAML::Node& root, const char* key, const char* body_key,
                     std::string_view name, const std::string& referrer) const {
    const YAML::Node list = root[key];
    bool present = list.IsDefined() && !list.IsNull();
    if (present && !list.IsSequence()) return Fail(key, "not a list");
    size_t n = present ? list.size() : 0;
    for (size_t i = 0; i < n; ++i) {
      std::string field = std::string(key) + "[" + std::to_string(i) + "]";
      const YAML::Node entry = list[i];
      if (!entry.IsMap()) return Fail(field, "not a map");
      std::string entry_name = HAMI_TRY(String(entry, "name", field + ".name"));
      if (entry_name != name) continue;
      field += std::string(".") + body_key;
      const YAML::Node body = entry[body_key];
      if (!body.IsDefined() || body.IsNull()) return Fail(field, "missing");
      if (!body.IsMap()) return Fail(field, "not a map");
      return Entry{body, field};
    }
    return Fail(referrer, "no " + std::string(body_key) + " named " + Quote(name) + " in " + key,
                ErrorCode::kNotFound);
  }

  std::string Resolve(const std::string& path) const {
    if (!path.empty() && path[0] == '/') return path;
    return dir_.back() == '/' ? dir_ + path : dir_ + "/" + path;
  }

  // PEM from `<key>-data` (base64) or from the file `<key>`; "" when neither is set.
  Result<std::string> Pem(const YAML::Node& map, const std::string& key,
                          const std::string& field) const {
    std::string data_field = field + "." + key + "-data";
    std::string data = HAMI_TRY(String(map, (key + "-data").c_str(), data_field));
    std::string pem;
    if (!data.empty()) {
      auto decoded = DecodeBase64(data);
      if (!decoded.ok()) return Fail(data_field, decoded.error().message());
      pem = std::move(*decoded);
      if (!LooksLikePem(pem)) return Fail(data_field, "not PEM (no -----BEGIN line)");
      return pem;
    }
    std::string file_field = field + "." + key;
    std::string file = HAMI_TRY(String(map, key.c_str(), file_field));
    if (file.empty()) return std::string();
    auto read = ReadFile(Resolve(file), kMaxPemBytes);
    if (!read.ok()) return Fail(file_field, read.error().message(), read.error().code());
    if (!LooksLikePem(*read)) {
      return Fail(file_field, Resolve(file) + ": not PEM (no -----BEGIN line)");
    }
    return std::move(*read);
  }

  Result<Config> Parse(std::string_view yaml, std::string_view context) const {
    const YAML::Node root = YAML::Load(std::string(yaml));
    if (!root.IsMap()) return Fail("", "not a YAML mapping");
    Config c;
    std::string context_name(context);
    std::string referrer = "context " + Quote(context);
    if (context_name.empty()) {
      context_name = HAMI_TRY(String(root, "current-context", "current-context"));
      referrer = "current-context";
      if (context_name.empty()) {
        return Fail("current-context", "not set, and no context was given");
      }
    }
    Entry ctx = HAMI_TRY(Find(root, "contexts", "context", context_name, referrer));
    std::string cluster_name = HAMI_TRY(String(ctx.body, "cluster", ctx.field + ".cluster"));
    if (cluster_name.empty()) return Fail(ctx.field + ".cluster", "missing");
    std::string user_name = HAMI_TRY(String(ctx.body, "user", ctx.field + ".user"));
    std::string ns = HAMI_TRY(String(ctx.body, "namespace", ctx.field + ".namespace"));
    if (!ns.empty()) c.default_namespace = ns;

    Entry cluster =
        HAMI_TRY(Find(root, "clusters", "cluster", cluster_name, ctx.field + ".cluster"));
    c.server = HAMI_TRY(String(cluster.body, "server", cluster.field + ".server"));
    if (c.server.empty()) return Fail(cluster.field + ".server", "missing");
    if (c.server.rfind("https://", 0) != 0 && c.server.rfind("http://", 0) != 0) {
      return Fail(cluster.field + ".server",
                  Quote(c.server) + " is not an http:// or https:// URL");
    }
    while (c.server.back() == '/') c.server.pop_back();
    if (c.server.find_first_of(" \t\r\n") != std::string::npos) {
      return Fail(cluster.field + ".server", Quote(c.server) + " contains white space");
    }
    c.ca_pem = HAMI_TRY(Pem(cluster.body, "certificate-authority", cluster.field));
    c.insecure_skip_tls_verify = HAMI_TRY(Bool(cluster.body, "insecure-skip-tls-verify",
                                               cluster.field + ".insecure-skip-tls-verify"));
    if (c.insecure_skip_tls_verify && !c.ca_pem.empty()) {
      return Fail(cluster.field,
                  "insecure-skip-tls-verify is not allowed together with a certificate authority");
    }

    if (!user_name.empty()) {
      Entry user = HAMI_TRY(Find(root, "users", "user", user_name, ctx.field + ".user"));
      for (const char* key : {"exec", "auth-provider", "username", "password"}) {
        const YAML::Node n = std::as_const(user.body)[key];
        if (n.IsDefined() && !n.IsNull()) {
          return Fail(user.field + "." + key,
                      "not supported (use a token, a token file or a client certificate)",
                      ErrorCode::kUnsupported);
        }
      }
      c.client_cert_pem = HAMI_TRY(Pem(user.body, "client-certificate", user.field));
      c.client_key_pem = HAMI_TRY(Pem(user.body, "client-key", user.field));
      if (c.client_cert_pem.empty() != c.client_key_pem.empty()) {
        return Fail(user.field, c.client_cert_pem.empty()
                                    ? "client-key without client-certificate"
                                    : "client-certificate without client-key");
      }
      c.bearer_token = HAMI_TRY(String(user.body, "token", user.field + ".token"));
      if (c.bearer_token.find_first_of("\r\n") != std::string::npos) {
        return Fail(user.field + ".token", "contains a line break");
      }
      std::string token_file = HAMI_TRY(String(user.body, "tokenFile", user.field + ".tokenFile"));
      if (!token_file.empty()) {
        c.bearer_token_file = Resolve(token_file);
        auto token = ReadTokenFile(c.bearer_token_file);
        if (!token.ok()) {
          return Fail(user.field + ".tokenFile", token.error().message(), token.error().code());
        }
        c.bearer_token = std::move(*token);
      }
    }
    c.source = "kubeconfig " + file_ + " (context " + context_name + ")";
    return c;
  }

 private:
  std::string file_;
  std::string dir_;
};

}  // namespace

Result<std::string> ReadTokenFile(const std::string& path) {
  std::string text = HAMI_TRY(ReadFile(path, kMaxTokenBytes));
  std::string_view token = TrimSpace(text);
  if (token.empty()) return Error(ErrorCode::kInvalidArgument, "token file " + path + ": empty");
  for (char c : token) {
    if (uint8_t(c) < 0x20 || uint8_t(c) == 0x7f) {
      return Error(ErrorCode::kInvalidArgument,
                   "token file " + path + ": control character inside the token");
    }
  }
  return std::string(token);
}

Result<Config> ParseKubeconfig(std::string_view yaml, std::string_view file,
                               std::string_view context) {
  KubeconfigReader reader(file);
  try {
    return reader.Parse(yaml, context);
  } catch (const YAML::Exception& e) {
    return reader.Fail("", std::string("YAML: ") + e.what());
  } catch (const std::exception& e) {
    return reader.Fail("", e.what());
  }
}

Result<Config> LoadKubeconfig(std::string_view path, std::string_view context) {
  std::string file(path);
  if (file.empty()) {
    const char* env = std::getenv("KUBECONFIG");
    if (env != nullptr && *env != '\0') {
      std::string_view list(env);
      while (file.empty() && !list.empty()) {
        size_t colon = list.find(':');
        std::string item(list.substr(0, colon));
        list = colon == list.npos ? std::string_view() : list.substr(colon + 1);
        if (!item.empty() && FileExists(item)) file = item;
      }
      if (file.empty()) {
        return Error(ErrorCode::kNotFound,
                     "KUBECONFIG=" + std::string(env) + ": none of its files exists");
      }
    } else {
      file = HomeDir() + "/.kube/config";
    }
  }
  auto text = ReadFile(file, kMaxKubeconfigBytes);
  if (!text.ok()) {
    ErrorCode code =
        text.error().sys_errno() == ENOENT ? ErrorCode::kNotFound : text.error().code();
    return Error(code, "kubeconfig " + file + ": " + text.error().message(),
                 text.error().sys_errno());
  }
  return ParseKubeconfig(*text, file, context);
}

Result<Config> LoadInClusterConfig(std::string_view sa_dir) {
  const std::string what = "in-cluster service account";
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (host == nullptr || *host == '\0' || port == nullptr || *port == '\0') {
    return Error(ErrorCode::kNotFound,
                 what + ": KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be set");
  }
  auto port_number = ParseUint64(port, "KUBERNETES_SERVICE_PORT");
  if (!port_number.ok() || *port_number == 0 || *port_number > 65535) {
    return Error(ErrorCode::kInvalidArgument,
                 what + ": KUBERNETES_SERVICE_PORT=" + Quote(port) + " is not a port number");
  }
  std::string_view h(host);
  if (h.find_first_of(" \t\r\n/[]") != h.npos) {
    return Error(ErrorCode::kInvalidArgument,
                 what + ": KUBERNETES_SERVICE_HOST=" + Quote(h) + " is not a host name or address");
  }
  Config c;
  bool ipv6 = h.find(':') != h.npos;
  c.server = "https://" + (ipv6 ? "[" + std::string(h) + "]" : std::string(h)) + ":" +
             std::to_string(*port_number);
  std::string dir(sa_dir);
  c.bearer_token_file = dir + "/token";
  auto token = ReadTokenFile(c.bearer_token_file);
  if (!token.ok()) return Error(token.error().code(), what + ": " + token.error().message());
  c.bearer_token = std::move(*token);
  auto ca = ReadFile(dir + "/ca.crt", kMaxPemBytes);
  if (!ca.ok()) return Error(ca.error().code(), what + ": " + ca.error().message());
  if (!LooksLikePem(*ca)) {
    return Error(ErrorCode::kInvalidArgument,
                 what + ": " + dir + "/ca.crt: not PEM (no -----BEGIN line)");
  }
  c.ca_pem = std::move(*ca);
  auto ns = ReadFile(dir + "/namespace", 4096);
  if (ns.ok()) {
    std::string_view n = TrimSpace(*ns);
    if (!n.empty()) c.default_namespace = std::string(n);
  } else if (ns.error().sys_errno() != ENOENT) {
    return Error(ns.error().code(), what + ": " + ns.error().message());
  }
  c.source = what + " " + dir;
  return c;
}

Result<Config> LoadConfig(std::string_view kubeconfig_flag) {
  if (!kubeconfig_flag.empty()) return LoadKubeconfig(kubeconfig_flag);
  const char* env = std::getenv("KUBECONFIG");
  if (env != nullptr && *env != '\0') return LoadKubeconfig();
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  if (host != nullptr && *host != '\0') return LoadInClusterConfig();
  return LoadKubeconfig();
}

}  // namespace hami::kube
