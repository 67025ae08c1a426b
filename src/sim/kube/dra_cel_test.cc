#include "sim/kube/dra_cel.h"

#include <gtest/gtest.h>

#include <string>

namespace hami::sim::kube {
namespace {

using nlohmann::json;

constexpr char kDriver[] = "hami-core-gpu.project-hami.io";

CelDevice Gpu() {
  json device = json::parse(R"({
    "name": "hami-gpu-0", "allowMultipleAllocations": true,
    "attributes": {"type": {"string": "hami-gpu"}, "index": {"int": 0},
                   "productName": {"string": "NVIDIA H100 80GB HBM3"},
                   "healthy": {"bool": true}, "driverVersion": {"version": "550.54.15"},
                   "resource.kubernetes.io/pciBusID": {"string": "0000:3b:00.0"}},
    "capacity": {"memory": {"value": "80Gi"}, "cores": {"value": "100"}}})");
  auto d = CelDeviceFromSlice(kDriver, device, "slice s: devices[0]");
  EXPECT_TRUE(d.ok()) << d.error().message();
  return d.ok() ? *d : CelDevice{};
}

Result<bool> Eval(const std::string& expression) {
  auto p = CelProgram::Compile(expression);
  if (!p.ok()) return std::move(p).error();
  return p->Evaluate(Gpu());
}

TEST(DraCel, EvaluatesTheSubsetDriversAndExamplesUse) {
  const char* truths[] = {
      R"(device.driver == "hami-core-gpu.project-hami.io")",
      R"(device.attributes["hami-core-gpu.project-hami.io"].type == "hami-gpu")",
      R"(device.attributes["hami-core-gpu.project-hami.io"]["type"] == 'hami-gpu')",
      R"(device.attributes["hami-core-gpu.project-hami.io"].index == 0)",
      R"(device.attributes["hami-core-gpu.project-hami.io"].index < 1)",
      R"(device.attributes["hami-core-gpu.project-hami.io"].healthy)",
      R"(device.attributes["resource.kubernetes.io"].pciBusID != "0000:00:00.0")",
      R"(device.capacity["hami-core-gpu.project-hami.io"].memory.compareTo(quantity("10Gi")) >= 0)",
      R"(device.capacity["hami-core-gpu.project-hami.io"].memory == quantity("80Gi"))",
      R"(device.capacity["hami-core-gpu.project-hami.io"].cores.isLessThan(quantity("101")))",
      R"(device.allowMultipleAllocations)",
      R"(!(device.driver == "gpu.nvidia.com"))",
      R"(device.driver == "x" || device.allowMultipleAllocations && true)",
      R"('type' in device.attributes["hami-core-gpu.project-hami.io"])",
      R"(!('minor' in device.attributes["hami-core-gpu.project-hami.io"]))",
      R"(device.attributes["hami-core-gpu.project-hami.io"].driverVersion.compareTo(semver("550.0.0")) > 0)",
      R"(device.attributes["hami-core-gpu.project-hami.io"].productName.startsWith('NVIDIA H100'))",
      R"(device.attributes["hami-core-gpu.project-hami.io"].index >= -1)",
      // The webhook's use-gputype selector: a case-insensitive substring.
      R"(device.attributes["hami-core-gpu.project-hami.io"].productName.lowerAscii().contains("h100"))",
      R"(!device.attributes["hami-core-gpu.project-hami.io"].productName.lowerAscii().contains("a100"))",
  };
  for (const char* e : truths) {
    auto r = Eval(e);
    ASSERT_TRUE(r.ok()) << e << ": " << r.error().message();
    EXPECT_TRUE(*r) << e;
  }
  auto r = Eval(R"(device.attributes["hami-core-gpu.project-hami.io"].type == "gpu")");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(*r);
}

TEST(DraCel, UnknownDomainIsAnEmptyMapAndUnknownKeyAnError) {
  auto absent = Eval(R"('type' in device.attributes["gpu.nvidia.com"])");
  ASSERT_TRUE(absent.ok()) << absent.error().message();
  EXPECT_FALSE(*absent);

  const std::string missing = R"(device.attributes["gpu.nvidia.com"].type == "gpu")";
  auto r = Eval(missing);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("CEL expression '" + missing + "'"), std::string::npos)
      << r.error().message();
  EXPECT_NE(r.error().message().find("no such key: 'type'"), std::string::npos);

  auto field = Eval("device.name == 'x'");
  ASSERT_FALSE(field.ok());
  EXPECT_NE(field.error().message().find("no such field: device.name"), std::string::npos);

  // As in CEL, a decided && or || absorbs an error on either side.
  auto absorbed = Eval(R"(device.attributes["gpu.nvidia.com"].type == "gpu" && false)");
  ASSERT_TRUE(absorbed.ok()) << absorbed.error().message();
  EXPECT_FALSE(*absorbed);
  auto either = Eval(R"(true || device.nothing)");
  ASSERT_TRUE(either.ok());
  EXPECT_TRUE(*either);
  EXPECT_FALSE(Eval(R"(false || device.nothing)").ok());
}

TEST(DraCel, MixedTypesAreUnequalAndCannotBeOrdered) {
  auto eq = Eval(R"(device.driver == 5)");
  ASSERT_TRUE(eq.ok());
  EXPECT_FALSE(*eq);
  auto lt = Eval(R"(device.driver < 5)");
  ASSERT_FALSE(lt.ok());
  EXPECT_NE(lt.error().message().find("no such overload: string < int"), std::string::npos);
  auto not_bool = Eval(R"(device.driver)");
  ASSERT_FALSE(not_bool.ok());
  EXPECT_NE(not_bool.error().message().find("evaluates to a string, not a bool"),
            std::string::npos);
}

TEST(DraCel, RefusesWhatIsOutsideTheSubsetNamingTheExpression) {
  struct Case {
    std::string expression;
    std::string why;
  };
  const Case cases[] = {
      {"cel.bind(x, device.driver, x == 'a')", "column 1: undeclared reference 'cel'"},
      {"has(device.attributes.x)", "column 1: unsupported function 'has'"},
      {"device.attributes['d'].exists(k, true)", "unsupported function 'exists'"},
      {"device.driver + 'x' == 'y'", "column 15: unsupported operator '+'"},
      {"device.driver in ['a', 'b']", "unsupported list literal"},
      {"device.attributes['d'].x > 1.5", "unsupported number '1.'"},
      {"device.allowMultipleAllocations ? true : false", "unsupported operator '?'"},
      {"device.driver == 'a", "unterminated string"},
      {"(device.driver == 'a'", "expected ')', found the end"},
      {"device.driver ==", "unexpected end of expression"},
      {"quantity('ten') == quantity('1')", "quantity 'ten'"},
      {"semver('1.2') == semver('1.2.0')", "not major.minor.patch"},
      {"device.driver.lowerAscii('x') == 'a'", "'lowerAscii' takes no argument"},
      {"device.driver.upperAscii() == 'A'", "unsupported function 'upperAscii'"},
      {"", "unexpected end of expression"},
      {std::string(70, '(') + "true" + std::string(70, ')'), "nested more than 64 levels"},
  };
  for (const Case& c : cases) {
    auto p = CelProgram::Compile(c.expression);
    ASSERT_FALSE(p.ok()) << c.expression;
    EXPECT_EQ(p.error().code(), ErrorCode::kInvalidArgument);
    EXPECT_EQ(p.error().message().rfind("CEL expression '", 0), 0u) << p.error().message();
    EXPECT_NE(p.error().message().find(c.why), std::string::npos)
        << c.expression << " -> " << p.error().message();
  }
  EXPECT_FALSE(CelProgram::Compile(std::string(11 * 1024, ' ')).ok());
}

TEST(DraCel, ReadsSliceDevicesAndRefusesMistypedAttributes) {
  CelDevice d = Gpu();
  EXPECT_EQ(d.driver, kDriver);
  ASSERT_TRUE(d.attributes.contains("resource.kubernetes.io"));
  EXPECT_EQ(std::get<std::string>(d.attributes["resource.kubernetes.io"]["pciBusID"]),
            "0000:3b:00.0");
  EXPECT_EQ(d.capacity[kDriver]["cores"], *hami::kube::ParseQuantity("100", ""));

  auto bad = CelDeviceFromSlice(kDriver, json::parse(R"({"attributes": {"index": {"int": "0"}}})"),
                                "slice s: devices[1]");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message(),
            "slice s: devices[1]: attributes['index']: not exactly one of int, bool, string, "
            "version");
  auto version = CelDeviceFromSlice(
      kDriver, json::parse(R"({"attributes": {"v": {"version": "1.x.0"}}})"), "s");
  ASSERT_FALSE(version.ok());
  EXPECT_NE(version.error().message().find("version '1.x.0'"), std::string::npos);
  auto capacity = CelDeviceFromSlice(
      kDriver, json::parse(R"({"capacity": {"memory": {"value": "lots"}}})"), "s");
  ASSERT_FALSE(capacity.ok());
  EXPECT_NE(capacity.error().message().find("capacity['memory'].value"), std::string::npos);
}

TEST(DraCel, SemVerOrdersByPrecedence) {
  auto v = [](const char* s) { return *ParseSemVer(s); };
  EXPECT_LT(CompareSemVer(v("1.2.3"), v("1.10.0")), 0);
  EXPECT_LT(CompareSemVer(v("1.0.0-alpha"), v("1.0.0")), 0);
  EXPECT_LT(CompareSemVer(v("1.0.0-alpha.2"), v("1.0.0-alpha.10")), 0);
  EXPECT_LT(CompareSemVer(v("1.0.0-2"), v("1.0.0-alpha")), 0);
  EXPECT_EQ(CompareSemVer(v("1.0.0+build.5"), v("1.0.0")), 0);
  EXPECT_FALSE(ParseSemVer("01.0.0").ok());
  EXPECT_FALSE(ParseSemVer("1.0.0-").ok());
}

}  // namespace
}  // namespace hami::sim::kube
