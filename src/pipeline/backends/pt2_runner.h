// TEMPORARY interface stub; the torch driver lands from the torchrun branch.
#pragma once
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>
#include "runtime/generate.h"
namespace hfx::pipeline {
std::unique_ptr<runtime::StepRunner> make_torch_runner(const std::filesystem::path& pt2, const std::vector<std::string>& input_names,
                                                       const std::vector<std::pair<std::string, std::string>>& shared_buffers,
                                                       const std::string& python);
std::string torch_version(const std::string& python);
}  // namespace hfx::pipeline
