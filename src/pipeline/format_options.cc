#include "pipeline/format_options.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "pipeline/backend.h"

namespace hfx::pipeline {

const std::vector<FormatOption>& format_options() {
  static const std::vector<FormatOption> options = [] {
    std::vector<FormatOption> all;
    for (const Backend* b : all_backends())
      for (FormatOption o : b->options()) {
        o.format = b->info().name;
        all.push_back(std::move(o));
      }
    return all;
  }();
  return options;
}

const FormatOption* find_format_option(const std::string& field) {
  for (const auto& o : format_options())
    if (o.field == field) return &o;
  return nullptr;
}

FormatSettings FormatSettings::blank() {
  FormatSettings s;
  for (const auto& o : format_options()) s.values_[o.field] = o.default_value;
  return s;
}

FormatSettings FormatSettings::defaults() {
  FormatSettings s = blank();
  s.complete();
  return s;
}

const nlohmann::json& FormatSettings::at(const std::string& field) const {
  auto it = values_.find(field);
  HFX_CHECK(it != values_.end(), "format option {} is not registered", field);
  return it->second;
}

void FormatSettings::set(const FormatOption& o, const nlohmann::json& value, const std::string& where) {
  switch (o.kind) {
    case FormatOption::Kind::Negation:
      if (!value.is_boolean()) bad_input("{}: recipe field \"{}\" must be true or false", where, o.field);
      values_[o.field] = value;
      return;
    case FormatOption::Kind::Integer:
      if (!value.is_number_integer()) bad_input("{}: recipe field \"{}\" must be an integer", where, o.field);
      set_text(o, std::to_string(value.get<int64_t>()), where);
      return;
    case FormatOption::Kind::Choice:
      if (!value.is_string()) bad_input("{}: recipe field \"{}\" must be a string", where, o.field);
      set_text(o, value.get<std::string>(), where);
      return;
  }
}

void FormatSettings::set_text(const FormatOption& o, const std::string& text, const std::string& where) {
  HFX_CHECK(o.kind != FormatOption::Kind::Negation, "{} is a flag", o.flag);
  const bool integer = o.kind == FormatOption::Kind::Integer;
  if (std::find(o.values.begin(), o.values.end(), text) == o.values.end())
    bad_input("{}: {} {} (supported: {})", where, o.noun, integer ? text : "`" + text + "`", fmt::join(o.values, ", "));
  if (integer)
    values_[o.field] = std::stoll(text);
  else
    values_[o.field] = text;
}

void FormatSettings::complete() {
  for (const Backend* b : all_backends()) b->complete_options(*this);
}

void FormatSettings::record(nlohmann::ordered_json& j, const std::vector<std::string>& formats) const {
  std::vector<const FormatOption*> order;
  for (const auto& o : format_options()) order.push_back(&o);
  std::stable_sort(order.begin(), order.end(),
                   [](const FormatOption* a, const FormatOption* b) { return a->recipe_position < b->recipe_position; });
  for (const FormatOption* o : order) {
    const bool written = std::find(formats.begin(), formats.end(), o->format) != formats.end();
    if (o->recorded_when_written ? written : at(o->field) != o->default_value) j[o->field] = at(o->field);
  }
}

}  // namespace hfx::pipeline
