// The options a format registers for itself (Backend::options): each one is a recipe field and a flag
// of `hfx export` (and of `hfx inspect` when it changes the I/O contract). The recipe, the command
// line and the export job read them through this table, so a format adds an option in its own folder
// and nowhere else: `hfx export --help`, the recipe's known fields, the refusal of a misspelt field or
// a bad value, the note that an option of a format not written is ignored, all follow from it.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace hfx::pipeline {

struct FormatOption {
  enum class Kind {
    Choice,    // a string among `values` (`--onnx-profile ort|portable`)
    Integer,   // an integer among `values` (`--onnx-opset 21|23`)
    Negation,  // a bare flag that sets a boolean field, true by default, to false (`--stateless`)
  };
  std::string format;  // the format that owns it (filled in by format_options())
  std::string field;   // its recipe field
  std::string flag;    // its flag on `hfx export`
  std::string noun;    // what a value is, in an error: "onnx profile `fast` (supported: ort, portable)"
  Kind kind = Kind::Choice;
  std::vector<std::string> values;  // Choice, Integer: the values it takes, as text
  nlohmann::json default_value;     // Choice: "" when Backend::complete_options derives it from other options
  // In a recipe: whenever the format is written, or (false) only when not the default, so recipes from
  // before the option existed keep their bytes.
  bool recorded_when_written = true;
  // Where the field sits among a recipe's format fields (ascending): each keeps the place it had when
  // hfx.json's bytes were fixed; a new option takes the next number.
  int recipe_position = 0;
  bool per_component = false;    // recipe "components".<role> may set it for one component
  bool shapes_contract = false;  // `hfx inspect` takes it: it changes the I/O contract shown
  std::string help;
};

// Every format's options, in the registry's order (all_backends()), with `format` filled in.
const std::vector<FormatOption>& format_options();
// The option whose recipe field is `field`, or null.
const FormatOption* find_format_option(const std::string& field);

// Values of the format options: every registered field, set to its default until parsed or set.
class FormatSettings {
 public:
  // Every option at its default, derived ones included (what a recipe that names none of them gets).
  static FormatSettings defaults();
  // Every option at its declared default, the derived ones still unset: set what a recipe or the
  // command line gives, then complete().
  static FormatSettings blank();

  const nlohmann::json& at(const std::string& field) const;
  std::string text(const std::string& field) const { return at(field).get<std::string>(); }
  int64_t integer(const std::string& field) const { return at(field).get<int64_t>(); }
  bool flag(const std::string& field) const { return at(field).get<bool>(); }
  bool has(const std::string& field) const { return values_.count(field) > 0; }

  // Sets `field` from JSON (a recipe) or from a flag's text; BadInput naming `where`, the field and
  // the values it takes when the value is not one of them.
  void set(const FormatOption& option, const nlohmann::json& value, const std::string& where);
  void set_text(const FormatOption& option, const std::string& text, const std::string& where);
  // Fills the defaults that follow other options (each format's Backend::complete_options).
  void complete();
  // The fields a recipe records for `formats`, in recipe order, into `j`.
  void record(nlohmann::ordered_json& j, const std::vector<std::string>& formats) const;
  const std::map<std::string, nlohmann::json>& values() const { return values_; }

 private:
  std::map<std::string, nlohmann::json> values_;
};

}  // namespace hfx::pipeline
