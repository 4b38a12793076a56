#include "cli/commands.h"
#include "core/error.h"

namespace hfx::cli {

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    if (end > start) out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

std::vector<int64_t> parse_id_list(const std::string& text, const std::string& what) {
  std::vector<int64_t> ids;
  for (const auto& part : split_commas(text)) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(part, &used);
    } catch (...) {
      used = 0;
    }
    if (used != part.size() || v < 0) bad_input("{}: expected comma-separated token ids, found \"{}\"", what, part);
    ids.push_back(v);
  }
  if (ids.empty()) bad_input("{}: no token ids given", what);
  return ids;
}

}  // namespace hfx::cli
