#include "cli/format_flags.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

#include "cli/usage.h"

namespace hfx::cli {

using pipeline::FormatOption;

void add_format_flags(CLI::App& cmd, FormatFlags& flags, bool contract_only) {
  for (const auto& o : pipeline::format_options()) {
    if (contract_only && !o.shapes_contract) continue;
    if (o.kind == FormatOption::Kind::Negation) {
      cmd.add_flag(o.flag, flags.set[o.field], o.help);
      continue;
    }
    auto* opt = cmd.add_option(o.flag, flags.text[o.field], o.help);
    if (o.kind == FormatOption::Kind::Integer) opt->type_name("INT")->default_str(o.default_value.dump());
    else if (!o.default_value.get<std::string>().empty()) opt->default_str(o.default_value.get<std::string>());
  }
}

pipeline::FormatSettings format_settings(const CLI::App& cmd, const FormatFlags& flags) {
  auto s = pipeline::FormatSettings::blank();
  for (const auto& o : pipeline::format_options()) {
    if (!cmd.get_option_no_throw(o.flag) || !cmd.count(o.flag)) continue;
    if (o.kind == FormatOption::Kind::Negation)
      s.set(o, !flags.set.at(o.field), o.flag);
    else
      as_usage([&] { s.set_text(o, flags.text.at(o.field), o.flag); });
  }
  s.complete();
  return s;
}

std::vector<const FormatOption*> format_flags_given(const CLI::App& cmd) {
  std::vector<const FormatOption*> given;
  for (const auto& o : pipeline::format_options())
    if (cmd.get_option_no_throw(o.flag) && cmd.count(o.flag)) given.push_back(&o);
  return given;
}

void note_format_flags_not_applying(const CLI::App& cmd, const std::vector<std::string>& formats) {
  for (const FormatOption* o : format_flags_given(cmd))
    if (std::find(formats.begin(), formats.end(), o->format) == formats.end())
      fmt::print(stderr, "hfx: note: {} only applies to --format {}; ignored\n", o->flag, o->format);
}

}  // namespace hfx::cli
