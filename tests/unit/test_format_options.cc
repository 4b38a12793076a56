// The options formats register (pipeline/format_options.h): the table every format fills in, and the
// recipe that reads, checks and records them.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "pipeline/backend.h"
#include "pipeline/export.h"
#include "pipeline/format_options.h"

using namespace hfx;
using namespace hfx::pipeline;

namespace {

std::string error_of(const nlohmann::json& recipe) {
  try {
    Recipe::from_json(recipe, "r.json");
  } catch (const Error& e) {
    return e.describe();
  }
  return "";
}

std::vector<std::string> keys(const nlohmann::ordered_json& j) {
  std::vector<std::string> k;
  for (const auto& [key, v] : j.items()) k.push_back(key);
  return k;
}

}  // namespace

TEST(FormatOptions, EveryFormatsOptionsAreRegisteredOnceWithAValidDefault) {
  std::set<std::string> fields, flags, formats;
  for (const Backend* b : all_backends()) formats.insert(b->info().name);
  for (const auto& o : format_options()) {
    EXPECT_TRUE(fields.insert(o.field).second) << o.field;
    EXPECT_TRUE(flags.insert(o.flag).second) << o.flag;
    EXPECT_TRUE(formats.count(o.format)) << o.field << " of " << o.format;
    EXPECT_FALSE(o.help.empty()) << o.field;
  }
  // What each format registers today; a recipe's known fields follow from it.
  for (const char* f : {"onnx_profile", "onnx_opset", "openvino_stateful", "executorch_backend"})
    EXPECT_TRUE(fields.count(f)) << f;
  // Every default, derived ones filled in, is a value the option takes.
  const FormatSettings d = FormatSettings::defaults();
  for (const auto& o : format_options()) {
    if (o.kind == FormatOption::Kind::Negation) continue;
    const std::string v = o.kind == FormatOption::Kind::Integer ? d.at(o.field).dump() : d.text(o.field);
    EXPECT_NE(std::find(o.values.begin(), o.values.end(), v), o.values.end()) << o.field << " = " << v;
  }
}

TEST(FormatOptions, DefaultsFollowOtherOptions) {
  const Recipe plain;
  EXPECT_EQ(plain.text_option("onnx_profile"), "ort");
  EXPECT_EQ(Recipe::from_json({{"onnx_opset", 23}}, "r").text_option("onnx_profile"), "portable");
  EXPECT_EQ(Recipe::from_json({{"onnx_opset", 23}, {"onnx_profile", "ort"}}, "r").text_option("onnx_profile"), "ort");
  EXPECT_FALSE(Recipe::from_json({{"openvino_stateful", false}}, "r").options.flag("openvino_stateful"));
}

TEST(FormatOptions, RecordedWhereTheFormatSaysInTheirHistoricalOrder) {
  Recipe r = Recipe::from_json({{"formats", {"onnx", "openvino", "executorch"}}, {"onnx_opset", 23}, {"task", "causal-lm"}}, "r");
  auto j = r.to_json();
  std::vector<std::string> format_fields;
  for (const auto& k : keys(j))
    if (find_format_option(k)) format_fields.push_back(k);
  // hfx.json's bytes: each field keeps the place it had before formats registered their options.
  EXPECT_EQ(format_fields, (std::vector<std::string>{"openvino_stateful", "onnx_profile", "executorch_backend", "onnx_opset"}));
  // A format not written records nothing; an option recorded only when not its default likewise.
  j = Recipe::from_json({{"formats", {"pt2"}}}, "r").to_json();
  for (const auto& k : keys(j)) EXPECT_EQ(find_format_option(k), nullptr) << k;
  // What is recorded reads back the same.
  EXPECT_EQ(Recipe::from_json(r.to_json(), "r").to_json().dump(), r.to_json().dump());
}

TEST(FormatOptions, ARecipeRefusesUnknownFieldsAndValuesAtEveryLevel) {
  EXPECT_NE(error_of({{"onnx_profle", "ort"}}).find("unknown recipe field \"onnx_profle\""), std::string::npos);
  EXPECT_NE(error_of({{"onnx_profile", "fast"}}).find("onnx profile `fast` (supported: ort, portable)"), std::string::npos);
  EXPECT_NE(error_of({{"onnx_opset", 17}}).find("onnx opset 17 (supported: 21, 23)"), std::string::npos);
  EXPECT_NE(error_of({{"onnx_opset", "23"}}).find("\"onnx_opset\" must be an integer"), std::string::npos);
  EXPECT_NE(error_of({{"executorch_backend", "cuda"}}).find("executorch backend `cuda`"), std::string::npos);
  EXPECT_NE(error_of({{"openvino_stateful", "no"}}).find("must be true or false"), std::string::npos);
  // Per component: only the options a format registers as per-component.
  EXPECT_NE(error_of({{"components", {{"decoder", {{"executorch_backend", "portable"}}}}}}).find("unknown field \"executorch_backend\""),
            std::string::npos);
  EXPECT_NE(error_of({{"components", {{"decoder", {{"onnx_profile", "fast"}}}}}}).find("onnx profile `fast`"), std::string::npos);
  const Recipe r = Recipe::from_json({{"components", {{"decode", {{"onnx_profile", "portable"}}}}}}, "r");
  EXPECT_EQ(r.text_option("onnx_profile", "decode"), "portable");
  EXPECT_EQ(r.text_option("onnx_profile", "prefill"), "ort");
}
