#include "kube/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <optional>
#include <string>

#include "common/temp_dir.h"
#include "kube/base64.h"

namespace hami::kube {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kCaPem[] = "-----BEGIN CERTIFICATE-----\nMIIBca\n-----END CERTIFICATE-----\n";
constexpr char kCertPem[] = "-----BEGIN CERTIFICATE-----\nMIIBcert\n-----END CERTIFICATE-----\n";
constexpr char kKeyPem[] = "-----BEGIN PRIVATE KEY-----\nMIIBkey\n-----END PRIVATE KEY-----\n";

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

// Sets (or with nullopt unsets) an environment variable for the life of the object.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = getenv(name)) old_ = old;
    if (value) {
      setenv(name, value->c_str(), 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// A kubeconfig with two contexts: "a" (current; CA and client certificate as data, namespace
// team-a) and "b" (token, insecure).
std::string TwoContextKubeconfig() {
  return "apiVersion: v1\n"
         "kind: Config\n"
         "current-context: a\n"
         "clusters:\n"
         "- name: ca\n"
         "  cluster:\n"
         "    server: https://10.0.0.1:6443/\n"
         "    certificate-authority-data: " +
         EncodeBase64(kCaPem) +
         "\n"
         "- name: cb\n"
         "  cluster:\n"
         "    server: http://127.0.0.1:8080\n"
         "    insecure-skip-tls-verify: true\n"
         "contexts:\n"
         "- name: a\n"
         "  context: {cluster: ca, user: ua, namespace: team-a}\n"
         "- name: b\n"
         "  context: {cluster: cb, user: ub}\n"
         "users:\n"
         "- name: ua\n"
         "  user:\n"
         "    client-certificate-data: " +
         EncodeBase64(kCertPem) +
         "\n"
         "    client-key-data: " +
         EncodeBase64(kKeyPem) +
         "\n"
         "- name: ub\n"
         "  user:\n"
         "    token: secret-token\n";
}

TEST(Base64, DecodesTheStandardAlphabetWithPadding) {
  EXPECT_EQ(*DecodeBase64("aGFtaQ=="), "hami");
  EXPECT_EQ(*DecodeBase64("aGFtaS0="), "hami-");
  EXPECT_EQ(*DecodeBase64("aGFtaS1j"), "hami-c");
  EXPECT_EQ(*DecodeBase64(""), "");
  EXPECT_EQ(*DecodeBase64("+/+/"), "\xfb\xff\xbf");
}

TEST(Base64, SkipsLineBreaksAsGoDoes) { EXPECT_EQ(*DecodeBase64("aGFt\r\naQ=\n="), "hami"); }

TEST(Base64, RejectsCharactersOutsideTheAlphabetNamingTheOffset) {
  auto r = DecodeBase64("aGF%aQ==");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(r.error().message(), "not base64: '%' at offset 3");
  EXPECT_THAT(DecodeBase64("aGF taQ==").error().message(), HasSubstr("' ' at offset 3"));
  EXPECT_THAT(DecodeBase64("aGF-aQ==").error().message(), HasSubstr("'-'"));  // URL alphabet
}

TEST(Base64, RejectsMissingOrMisplacedPadding) {
  EXPECT_THAT(DecodeBase64("aGFtaQ").error().message(), HasSubstr("multiple of 4"));
  EXPECT_THAT(DecodeBase64("aG=taQ==").error().message(), HasSubstr("data after '='"));
  EXPECT_THAT(DecodeBase64("a===").error().message(), HasSubstr("misplaced '='"));
  EXPECT_THAT(DecodeBase64("aGFtaQ==aGFt").error().message(), HasSubstr("after the final"));
}

TEST(Base64, EncodeRoundTripsEveryLength) {
  std::string bytes;
  for (int i = 0; i < 300; ++i) {
    ASSERT_EQ(*DecodeBase64(EncodeBase64(bytes)), bytes) << i;
    bytes.push_back(char(i * 37));
  }
}

TEST(Kubeconfig, ReadsTheCurrentContextsClusterUserAndNamespace) {
  auto c = ParseKubeconfig(TwoContextKubeconfig(), "/etc/kc");
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(c->server, "https://10.0.0.1:6443");  // trailing '/' dropped
  EXPECT_EQ(c->ca_pem, kCaPem);
  EXPECT_EQ(c->client_cert_pem, kCertPem);
  EXPECT_EQ(c->client_key_pem, kKeyPem);
  EXPECT_EQ(c->bearer_token, "");
  EXPECT_FALSE(c->insecure_skip_tls_verify);
  EXPECT_EQ(c->default_namespace, "team-a");
  EXPECT_EQ(c->source, "kubeconfig /etc/kc (context a)");
}

TEST(Kubeconfig, AContextArgumentOverridesCurrentContext) {
  auto c = ParseKubeconfig(TwoContextKubeconfig(), "/etc/kc", "b");
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(c->server, "http://127.0.0.1:8080");
  EXPECT_EQ(c->bearer_token, "secret-token");
  EXPECT_TRUE(c->insecure_skip_tls_verify);
  EXPECT_TRUE(c->ca_pem.empty());
  EXPECT_EQ(c->default_namespace, "default");
}

TEST(Kubeconfig, ReadsFilesRelativeToTheKubeconfigsDirectory) {
  TempDir dir("kc-files");
  ASSERT_TRUE(dir.ok());
  mkdir(dir.File("pki").c_str(), 0700);
  WriteFile(dir.File("pki/ca.crt"), kCaPem);
  WriteFile(dir.File("pki/client.crt"), kCertPem);
  WriteFile(dir.File("client.key"), kKeyPem);
  WriteFile(dir.File("token"), "  file-token\n");
  std::string yaml =
      "current-context: x\n"
      "clusters: [{name: c, cluster: {server: 'https://h:1', certificate-authority: pki/ca.crt}}]\n"
      "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
      "users: [{name: u, user: {client-certificate: pki/client.crt, client-key: " +
      dir.File("client.key") + ", tokenFile: token}}]\n";
  auto c = ParseKubeconfig(yaml, dir.File("config"));
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(c->ca_pem, kCaPem);
  EXPECT_EQ(c->client_cert_pem, kCertPem);
  EXPECT_EQ(c->client_key_pem, kKeyPem);
  EXPECT_EQ(c->bearer_token_file, dir.File("token"));
  EXPECT_EQ(c->bearer_token, "file-token");
}

TEST(Kubeconfig, DataFieldsTakePrecedenceOverFiles) {
  std::string yaml =
      "current-context: x\n"
      "clusters: [{name: c, cluster: {server: 'https://h:1', "
      "certificate-authority: /nonexistent/ca.crt, certificate-authority-data: " +
      EncodeBase64(kCaPem) +
      "}}]\n"
      "contexts: [{name: x, context: {cluster: c}}]\n";
  auto c = ParseKubeconfig(yaml, "/k");
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(c->ca_pem, kCaPem);
}

struct BadKubeconfig {
  const char* name;
  std::string yaml;
  std::string context;
  ErrorCode code;
  std::string message;  // the whole message after "kubeconfig /k: "
};

class KubeconfigErrors : public ::testing::TestWithParam<BadKubeconfig> {};

TEST_P(KubeconfigErrors, NameTheFileAndTheField) {
  const BadKubeconfig& b = GetParam();
  auto c = ParseKubeconfig(b.yaml, "/k", b.context);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code(), b.code) << c.error().message();
  EXPECT_THAT(c.error().message(), StartsWith("kubeconfig /k: " + b.message));
}

const std::string kCtx =
    "current-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n";
const std::string kCluster = "clusters: [{name: c, cluster: {server: 'https://h:1'}}]\n";

INSTANTIATE_TEST_SUITE_P(
    All, KubeconfigErrors,
    ::testing::Values(
        BadKubeconfig{"KeyNotBase64",
                      kCtx + kCluster + "users: [{name: u, user: {client-certificate-data: " +
                          EncodeBase64(kCertPem) + ", client-key-data: 'LS0t%%'}}]\n",
                      "", ErrorCode::kInvalidArgument,
                      "users[0].user.client-key-data: not base64: '%' at offset 4"},
        BadKubeconfig{"CaNotPem",
                      kCtx +
                          "clusters: [{name: c, cluster: {server: 'https://h:1', "
                          "certificate-authority-data: aGFtaQ==}}]\nusers: [{name: u, user: {}}]\n",
                      "", ErrorCode::kInvalidArgument,
                      "clusters[0].cluster.certificate-authority-data: not PEM"},
        BadKubeconfig{"CaFileMissing",
                      kCtx + "clusters: [{name: c, cluster: {server: 'https://h:1', "
                             "certificate-authority: ca.crt}}]\nusers: [{name: u, user: {}}]\n",
                      "", ErrorCode::kIo,
                      "clusters[0].cluster.certificate-authority: open /ca.crt: No such file"},
        BadKubeconfig{"NoCurrentContext", kCluster, "", ErrorCode::kInvalidArgument,
                      "current-context: not set"},
        BadKubeconfig{"UnknownCurrentContext", "current-context: zz\n" + kCluster, "",
                      ErrorCode::kNotFound, "current-context: no context named \"zz\" in contexts"},
        BadKubeconfig{"UnknownContextArgument", kCtx + kCluster, "zz", ErrorCode::kNotFound,
                      "context \"zz\": no context named \"zz\" in contexts"},
        BadKubeconfig{"UnknownCluster", kCtx + "users: [{name: u, user: {}}]\n", "",
                      ErrorCode::kNotFound,
                      "contexts[0].context.cluster: no cluster named \"c\" in clusters"},
        BadKubeconfig{"UnknownUser", kCtx + kCluster, "", ErrorCode::kNotFound,
                      "contexts[0].context.user: no user named \"u\" in users"},
        BadKubeconfig{"ServerMissing",
                      kCtx + "clusters: [{name: c, cluster: {}}]\nusers: [{name: u, user: {}}]\n",
                      "", ErrorCode::kInvalidArgument, "clusters[0].cluster.server: missing"},
        BadKubeconfig{"ServerNotAUrl",
                      kCtx + "clusters: [{name: c, cluster: {server: 'h:6443'}}]\n"
                             "users: [{name: u, user: {}}]\n",
                      "", ErrorCode::kInvalidArgument,
                      "clusters[0].cluster.server: \"h:6443\" is not an http:// or https:// URL"},
        BadKubeconfig{"ServerNotAString", kCtx + "clusters: [{name: c, cluster: {server: [1]}}]\n",
                      "", ErrorCode::kInvalidArgument, "clusters[0].cluster.server: not a string"},
        BadKubeconfig{"CertWithoutKey",
                      kCtx + kCluster + "users: [{name: u, user: {client-certificate-data: " +
                          EncodeBase64(kCertPem) + "}}]\n",
                      "", ErrorCode::kInvalidArgument,
                      "users[0].user: client-certificate without client-key"},
        BadKubeconfig{"ExecPlugin",
                      kCtx + kCluster + "users: [{name: u, user: {exec: {command: gcloud}}}]\n", "",
                      ErrorCode::kUnsupported, "users[0].user.exec: not supported"},
        BadKubeconfig{"InsecureWithCa",
                      kCtx +
                          "clusters: [{name: c, cluster: {server: 'https://h:1', "
                          "insecure-skip-tls-verify: true, certificate-authority-data: " +
                          EncodeBase64(kCaPem) + "}}]\nusers: [{name: u, user: {}}]\n",
                      "", ErrorCode::kInvalidArgument,
                      "clusters[0].cluster: insecure-skip-tls-verify is not allowed"},
        BadKubeconfig{"InsecureNotABool",
                      kCtx + "clusters: [{name: c, cluster: {server: 'https://h:1', "
                             "insecure-skip-tls-verify: maybe}}]\nusers: [{name: u, user: {}}]\n",
                      "", ErrorCode::kInvalidArgument,
                      "clusters[0].cluster.insecure-skip-tls-verify: not a boolean: \"maybe\""},
        BadKubeconfig{"ClustersNotAList", kCtx + "clusters: {c: 1}\n", "",
                      ErrorCode::kInvalidArgument, "clusters: not a list"},
        BadKubeconfig{"EntryNotAMap", kCtx + "clusters: [7]\n", "", ErrorCode::kInvalidArgument,
                      "clusters[0]: not a map"},
        BadKubeconfig{"TokenWithLineBreak",
                      kCtx + kCluster + "users: [{name: u, user: {token: \"a\\r\\nX-Evil: 1\"}}]\n",
                      "", ErrorCode::kInvalidArgument,
                      "users[0].user.token: contains a line break"},
        BadKubeconfig{"NotAMapping", "- just\n- a list\n", "", ErrorCode::kInvalidArgument,
                      "not a YAML mapping"},
        BadKubeconfig{"YamlSyntax", "clusters: [unclosed\n", "", ErrorCode::kInvalidArgument,
                      "YAML: "},
        BadKubeconfig{"DeepFlowNesting", std::string(100000, '['), "", ErrorCode::kInvalidArgument,
                      "YAML: "},
        BadKubeconfig{"DeepBlockNesting",
                      [] {
                        std::string s;
                        for (int i = 0; i < 50000; ++i) s += "- ";
                        return s + "x\n";
                      }(),
                      "", ErrorCode::kInvalidArgument, ""}),
    [](const auto& param_info) { return std::string(param_info.param.name); });

class EnvTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(dir_.ok()); }
  std::string Kubeconfig(const std::string& name, const std::string& server) {
    std::string path = dir_.File(name);
    WriteFile(path,
              "current-context: x\n"
              "clusters: [{name: c, cluster: {server: '" +
                  server +
                  "'}}]\n"
                  "contexts: [{name: x, context: {cluster: c}}]\n");
    return path;
  }
  std::string ServiceAccount(const std::string& token, const std::string& ns) {
    std::string sa = dir_.File("sa");
    mkdir(sa.c_str(), 0700);
    WriteFile(sa + "/token", token);
    WriteFile(sa + "/ca.crt", kCaPem);
    if (!ns.empty()) WriteFile(sa + "/namespace", ns);
    return sa;
  }
  TempDir dir_{"kc-env"};
};

TEST_F(EnvTest, LoadKubeconfigReadsAnExplicitPathFirst) {
  std::string a = Kubeconfig("a", "https://a:1");
  ScopedEnv env("KUBECONFIG", Kubeconfig("b", "https://b:1"));
  auto c = LoadKubeconfig(a);
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(c->server, "https://a:1");
}

TEST_F(EnvTest, KubeconfigVariableUsesTheFirstExistingFileOfTheList) {
  std::string b = Kubeconfig("b", "https://b:1");
  std::string c_file = Kubeconfig("c", "https://c:1");
  ScopedEnv env("KUBECONFIG", dir_.File("missing") + "::" + b + ":" + c_file);
  auto c = LoadKubeconfig();
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(c->server, "https://b:1");
  EXPECT_EQ(c->source, "kubeconfig " + b + " (context x)");
}

TEST_F(EnvTest, KubeconfigVariableWithNoExistingFileIsNotFound) {
  ScopedEnv env("KUBECONFIG", dir_.File("m1") + ":" + dir_.File("m2"));
  auto c = LoadKubeconfig();
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code(), ErrorCode::kNotFound);
  EXPECT_THAT(c.error().message(), HasSubstr("none of its files exists"));
}

TEST_F(EnvTest, WithoutPathOrVariableReadsHomeKubeConfig) {
  mkdir(dir_.File(".kube").c_str(), 0700);
  Kubeconfig(".kube/config", "https://home:1");
  ScopedEnv env("KUBECONFIG", std::nullopt);
  ScopedEnv home("HOME", dir_.path());
  auto c = LoadKubeconfig();
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(c->server, "https://home:1");
}

TEST_F(EnvTest, AMissingKubeconfigIsNotFoundNamingTheFile) {
  auto c = LoadKubeconfig(dir_.File("nope"));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code(), ErrorCode::kNotFound);
  EXPECT_THAT(c.error().message(), StartsWith("kubeconfig " + dir_.File("nope") + ": "));
}

TEST_F(EnvTest, KubeconfigThroughASymbolicLinkIsRead) {
  std::string real = Kubeconfig("real", "https://linked:1");
  ASSERT_EQ(symlink(real.c_str(), dir_.File("link").c_str()), 0);
  auto c = LoadKubeconfig(dir_.File("link"));
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(c->server, "https://linked:1");
}

TEST_F(EnvTest, InClusterReadsServiceAccountFilesAndEnvironment) {
  std::string sa = ServiceAccount("tok-1\n", "hami-system\n");
  ScopedEnv host("KUBERNETES_SERVICE_HOST", "10.96.0.1");
  ScopedEnv port("KUBERNETES_SERVICE_PORT", "443");
  auto c = LoadInClusterConfig(sa);
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(c->server, "https://10.96.0.1:443");
  EXPECT_EQ(c->bearer_token, "tok-1");
  EXPECT_EQ(c->bearer_token_file, sa + "/token");
  EXPECT_EQ(c->ca_pem, kCaPem);
  EXPECT_EQ(c->default_namespace, "hami-system");
}

TEST_F(EnvTest, InClusterPutsAnIpv6HostInBrackets) {
  std::string sa = ServiceAccount("t", "");
  ScopedEnv host("KUBERNETES_SERVICE_HOST", "fd00:10:96::1");
  ScopedEnv port("KUBERNETES_SERVICE_PORT", "6443");
  auto c = LoadInClusterConfig(sa);
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(c->server, "https://[fd00:10:96::1]:6443");
  EXPECT_EQ(c->default_namespace, "default");
}

TEST_F(EnvTest, InClusterErrorsNameTheVariableOrFile) {
  std::string sa = ServiceAccount("t", "");
  {
    ScopedEnv host("KUBERNETES_SERVICE_HOST", std::nullopt);
    auto c = LoadInClusterConfig(sa);
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.error().code(), ErrorCode::kNotFound);
    EXPECT_THAT(c.error().message(), HasSubstr("KUBERNETES_SERVICE_HOST"));
  }
  ScopedEnv host("KUBERNETES_SERVICE_HOST", "10.0.0.1");
  {
    ScopedEnv port("KUBERNETES_SERVICE_PORT", "https");
    EXPECT_THAT(LoadInClusterConfig(sa).error().message(),
                HasSubstr("KUBERNETES_SERVICE_PORT=\"https\" is not a port number"));
  }
  ScopedEnv port("KUBERNETES_SERVICE_PORT", "443");
  unlink((sa + "/token").c_str());
  auto c = LoadInClusterConfig(sa);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.error().message(), HasSubstr(sa + "/token"));
  WriteFile(sa + "/token", "\n\n");
  EXPECT_THAT(LoadInClusterConfig(sa).error().message(), HasSubstr("empty"));
  WriteFile(sa + "/token", "t");
  unlink((sa + "/ca.crt").c_str());
  EXPECT_THAT(LoadInClusterConfig(sa).error().message(), HasSubstr(sa + "/ca.crt"));
}

TEST_F(EnvTest, TokenFileWithAControlCharacterIsRefused) {
  WriteFile(dir_.File("tok"),
            "abc\x01"
            "def\n");
  auto t = ReadTokenFile(dir_.File("tok"));
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.error().message(), HasSubstr("control character"));
}

TEST_F(EnvTest, LoadConfigPrefersFlagThenVariableThenInClusterThenHome) {
  std::string flag = Kubeconfig("flag", "https://flag:1");
  std::string var = Kubeconfig("var", "https://var:1");
  mkdir(dir_.File(".kube").c_str(), 0700);
  Kubeconfig(".kube/config", "https://home:1");
  ServiceAccount("t", "");
  ScopedEnv home("HOME", dir_.path());
  ScopedEnv kc("KUBECONFIG", var);
  ScopedEnv host("KUBERNETES_SERVICE_HOST", "10.0.0.1");
  ScopedEnv port("KUBERNETES_SERVICE_PORT", "443");
  EXPECT_EQ(LoadConfig(flag)->server, "https://flag:1");
  EXPECT_EQ(LoadConfig()->server, "https://var:1");
  {
    ScopedEnv no_kc("KUBECONFIG", std::nullopt);
    // In-cluster is chosen (and fails here: the default service-account directory is absent).
    auto c = LoadConfig();
    if (c.ok()) {
      EXPECT_EQ(c->server, "https://10.0.0.1:443");
    } else {
      EXPECT_THAT(c.error().message(), StartsWith("in-cluster service account"));
    }
    ScopedEnv no_host("KUBERNETES_SERVICE_HOST", std::nullopt);
    EXPECT_EQ(LoadConfig()->server, "https://home:1");
  }
}

}  // namespace
}  // namespace hami::kube
