#include "pipeline/report_files.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "pipeline/manifest.h"
#include "pipeline/report_html.h"

namespace fs = std::filesystem;

namespace hfx::pipeline {

namespace {

bool read_only_errno(int e) { return e == EROFS || e == EACCES || e == EPERM; }

// `dir` opened as a folder that is not a symlink (creating it when missing); Io errors say why not.
int open_report_dir(const fs::path& dir, const fs::path& out, bool default_dir) {
  auto refuse = [&](int e) -> int {
    std::error_code ec;
    if (fs::is_symlink(dir, ec)) fail(ErrorKind::Io, "{} is a symlink; not writing through it", dir.string());
    if (read_only_errno(e))
      fail(ErrorKind::Io, "{} is read-only: report not written ({}; use --report DIR)",
           (default_dir ? out : dir).string(), std::strerror(e));
    if (e == ENOTDIR || e == EEXIST)
      fail(ErrorKind::Io, "{} exists and is not a folder: report not written{}", dir.string(),
           default_dir ? " (use --report DIR)" : "");
    fail(ErrorKind::Io, "{}: cannot open the report folder: {}", dir.string(), std::strerror(e));
  };
  if (!default_dir && dir.has_parent_path()) {
    std::error_code ec;  // --report a/b/c: the parents are the caller's to name, links and all
    fs::create_directories(dir.parent_path(), ec);
    if (ec) refuse(ec.value());
  }
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) refuse(errno);
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) refuse(errno);
  return fd;
}

// Writes `text` to dirfd/name through a new temporary file renamed over it.
void write_report_file(int dirfd, const fs::path& dir, const std::string& name, const std::string& text, const fs::path& out,
                       bool default_dir) {
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; fd < 0 && attempt < 100; ++attempt) {
    tmp = fmt::format(".{}.{}.{}.tmp", name, ::getpid(), attempt);
    fd = ::openat(dirfd, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) {
    if (read_only_errno(errno))
      fail(ErrorKind::Io, "{} is read-only: report not written ({}; use --report DIR)", (default_dir ? out : dir).string(),
           std::strerror(errno));
    fail(ErrorKind::Io, "{}: cannot create {}: {}", dir.string(), tmp, std::strerror(errno));
  }
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += size_t(n);
  }
  const int write_errno = done == text.size() ? 0 : errno ? errno : EIO;
  const bool closed = ::close(fd) == 0;
  if (write_errno || !closed || ::renameat(dirfd, tmp.c_str(), dirfd, name.c_str()) != 0) {
    const int e = write_errno ? write_errno : errno;
    ::unlinkat(dirfd, tmp.c_str(), 0);  // nothing half-written stays behind
    fail(ErrorKind::Io, "{}: cannot write {}: {}", dir.string(), name, std::strerror(e));
  }
}

// `name` (one path component) inside the folder `parent_fd`, created when missing, opened as a
// folder that is not a symlink.
int open_subdir(int parent_fd, const fs::path& parent, const std::string& name) {
  const fs::path dir = parent / name;
  if (::mkdirat(parent_fd, name.c_str(), 0755) != 0 && errno != EEXIST) {
    if (read_only_errno(errno)) fail(ErrorKind::Io, "{} is read-only: report not written ({}; use --report DIR)", parent.string(), std::strerror(errno));
    fail(ErrorKind::Io, "{}: cannot create the report folder: {}", dir.string(), std::strerror(errno));
  }
  const int fd = ::openat(parent_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0) return fd;
  const int e = errno;
  std::error_code ec;
  if (fs::is_symlink(dir, ec)) fail(ErrorKind::Io, "{} is a symlink; not writing through it", dir.string());
  if (e == ENOTDIR) fail(ErrorKind::Io, "{} exists and is not a folder: report not written", dir.string());
  fail(ErrorKind::Io, "{}: cannot open the report folder: {}", dir.string(), std::strerror(e));
}

struct Closer {
  int fd;
  ~Closer() { ::close(fd); }
};

}  // namespace

fs::path write_reports(const VerifyReport& r, const fs::path& dir) {
  const bool default_dir = dir.empty();
  const fs::path base = default_dir ? r.dir / kReportDir : dir;
  const Closer base_fd{open_report_dir(base, r.dir, default_dir)};
  const fs::path target = base / r.runtime;
  const Closer fd{open_subdir(base_fd.fd, base, r.runtime)};
  write_report_file(fd.fd, target, "report.json", r.to_json().dump(2) + "\n", r.dir, default_dir);
  write_report_file(fd.fd, target, "report.md", r.to_markdown(), r.dir, default_dir);
  write_report_file(fd.fd, target, "report.html", render_html(r), r.dir, default_dir);
  return target;
}

fs::path write_report_index(const fs::path& out, const std::vector<RuntimeOutcome>& outcomes, const fs::path& dir) {
  const bool default_dir = dir.empty();
  const fs::path base = default_dir ? out / kReportDir : dir;
  const Closer fd{open_report_dir(base, out, default_dir)};
  write_report_file(fd.fd, base, "index.md", render_index_md(out, outcomes), out, default_dir);
  write_report_file(fd.fd, base, "index.html", render_index_html(out, outcomes), out, default_dir);
  return base;
}

std::string render_index_md(const fs::path& out, const std::vector<RuntimeOutcome>& outcomes) {
  size_t passed = 0;
  for (const auto& o : outcomes) passed += o.passed;
  std::string md = fmt::format("# hfx verify: {}\n\nResult: **{}** ({} of {} runtimes verified).\n\n", out.string(),
                               passed == outcomes.size() ? "PASS" : "FAIL", passed, outcomes.size());
  md += "| runtime | result | summary | report |\n|---|---|---|---|\n";
  auto cell = [](std::string text) {  // an error message may hold a `|`, which would end the cell
    for (size_t at = text.find('|'); at != std::string::npos; at = text.find('|', at + 2)) text.replace(at, 1, "\\|");
    return text;
  };
  for (const auto& o : outcomes)
    md += fmt::format("| {} | {} | {} | {} |\n", o.runtime, o.passed ? "pass" : "**FAIL**", cell(o.summary),
                      o.has_report ? fmt::format("[{0}/report.md]({0}/report.md)", o.runtime) : std::string("not written"));
  return md;
}

std::string render_index_html(const fs::path& out, const std::vector<RuntimeOutcome>& outcomes) {
  size_t passed = 0;
  for (const auto& o : outcomes) passed += o.passed;
  const bool all = passed == outcomes.size();
  std::string s = fmt::format("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>hfx verify: {}</title>"
                              "<style>{}</style></head><body><header><h1><span id=\"verdict\" class=\"verdict {}\">{}</span> "
                              "<span id=\"verdict-line\">{} of {} runtimes verified</span></h1><p class=\"meta\">Export "
                              "<code id=\"export-dir\">{}</code>.</p></header>",
                              html_escape(out.string()), report_css(), all ? "pass" : "fail", all ? "PASS" : "FAIL", passed,
                              outcomes.size(), html_escape(out.string()));
  s += "<table id=\"runtimes\"><tr><th>runtime</th><th>result</th><th>summary</th><th>report</th></tr>";
  for (const auto& o : outcomes)
    s += fmt::format("<tr class=\"runtime\" id=\"runtime-{0}\"><td>{0}</td><td class=\"result {1}\">{2}</td><td class=\"detail\">{3}"
                     "</td><td>{4}</td></tr>",
                     html_escape(o.runtime), o.passed ? "ok" : "bad", o.passed ? "pass" : "FAIL", html_escape(o.summary),
                     o.has_report ? fmt::format("<a href=\"{0}/report.html\">{0}/report.html</a>", html_escape(o.runtime))
                                  : std::string("not written"));
  return s + "</table></body></html>\n";
}

}  // namespace hfx::pipeline
