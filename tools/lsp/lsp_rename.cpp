// lsp_rename: renames the symbol at a position across the project, from the language server's
// WorkspaceEdit, applied here: every file's new text is made first, then each file is replaced
// atomically (a temporary file beside it, renamed over it).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "client.hpp"
#include "target.hpp"

using lsp::json;

namespace {

struct Edit {
  std::size_t begin, end;
  std::string text;
};

struct FileEdit {
  std::string path;
  std::vector<json> edits;
  std::string text;  ///< the new contents
};

/// The edits of a WorkspaceEdit by file (`changes` or `documentChanges`).
std::vector<FileEdit> edits_of(const json& we) {
  std::vector<FileEdit> out;
  const auto add = [&](const std::string& uri, const json& edits) {
    auto path = lsp::path_of(uri);
    if (!path) throw tool::Error("the language server wants to edit " + uri + ", which is not a local file; nothing was changed");
    if (!edits.is_array()) return;
    // By the file itself: a link is edited in the file it names (renaming over the link would
    // replace it with a copy), and the server may name a file by its link and by its own path.
    if (char* real = ::realpath(path->c_str(), nullptr)) {
      path = real;
      std::free(real);
    }
    auto it = std::find_if(out.begin(), out.end(), [&](const FileEdit& f) { return f.path == *path; });
    if (it == out.end()) it = out.insert(out.end(), FileEdit{*path, {}, {}});
    for (const auto& e : edits)
      if (std::find(it->edits.begin(), it->edits.end(), e) == it->edits.end()) it->edits.push_back(e);
  };
  if (we.is_object() && we.contains("documentChanges") && we["documentChanges"].is_array()) {
    for (const auto& c : we["documentChanges"]) {
      if (c.contains("kind"))
        throw tool::Error("the language server wants to " + c.value("kind", std::string("change")) +
                          " files for this rename, which lsp_rename does not do; nothing was changed");
      const json& doc = c.value("textDocument", json());
      if (doc.is_object() && doc.contains("uri") && doc["uri"].is_string()) add(doc["uri"], c.value("edits", json()));
    }
  } else if (we.is_object() && we.contains("changes") && we["changes"].is_object()) {
    for (const auto& [uri, edits] : we["changes"].items()) add(uri, edits);
  }
  return out;
}

std::size_t offset(const lsp::Source& s, const json& pos) {
  if (!pos.is_object() || !pos.value("line", json()).is_number_unsigned() || !pos.value("character", json()).is_number_unsigned())
    throw tool::Error("the language server sent a malformed edit; nothing was changed");
  return s.offset(pos["line"].get<std::size_t>(), pos["character"].get<std::size_t>());
}

void make_text(FileEdit& f) {
  const lsp::Source s(f.path, lsp::shown_path(f.path));
  std::vector<Edit> edits;
  for (const auto& e : f.edits) {
    const json& range = e.value("range", json());
    if (!range.is_object() || !e.value("newText", json()).is_string())
      throw tool::Error("the language server sent a malformed edit; nothing was changed");
    edits.push_back({offset(s, range.value("start", json())), offset(s, range.value("end", json())), e["newText"]});
    if (edits.back().end < edits.back().begin) throw tool::Error("the language server sent a malformed edit; nothing was changed");
  }
  std::stable_sort(edits.begin(), edits.end(), [](const Edit& a, const Edit& b) { return a.begin < b.begin; });
  std::string out;
  std::size_t at = 0;
  for (const auto& e : edits) {
    if (e.begin < at) throw tool::Error("the language server sent overlapping edits for " + lsp::shown_path(f.path) + "; nothing was changed");
    out.append(s.text(), at, e.begin - at);
    out += e.text;
    at = e.end;
  }
  out.append(s.text(), at);
  f.text = std::move(out);
}

/// Replaces `path` with `text`, keeping its mode: write a temporary file beside it, rename it over.
void replace(const std::string& path, const std::string& text) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw std::runtime_error(std::strerror(errno));
  const auto slash = path.rfind('/');
  std::string tmp = path.substr(0, slash + 1) + "." + path.substr(slash + 1) + ".rename-XXXXXX";
  const int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0) throw std::runtime_error(std::strerror(errno));
  bool ok = ::fchmod(fd, st.st_mode & 07777) == 0;
  for (std::size_t off = 0; ok && off < text.size();) {
    const ssize_t n = ::write(fd, text.data() + off, text.size() - off);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) off += static_cast<std::size_t>(n);
  }
  const int err = errno;
  ok = ::close(fd) == 0 && ok && ::rename(tmp.c_str(), path.c_str()) == 0;
  if (!ok) {
    ::unlink(tmp.c_str());
    throw std::runtime_error(std::strerror(err ? err : errno));
  }
}

}  // namespace

int main() {
  return tool::run([](const tool::Args& args) {
    const std::string new_name = args.string("new_name");
    if (new_name.empty() || new_name.size() > 200 ||
        std::any_of(new_name.begin(), new_name.end(), [](char c) { return std::iscntrl(static_cast<unsigned char>(c)) || c == ' '; }))
      throw tool::Error("invalid new_name: give the new identifier, without spaces");
    lsp::Target t = lsp::locate(args);
    std::string note = t.note;
    json params = t.params();
    params["newName"] = new_name;
    std::vector<FileEdit> files = edits_of(lsp::ask(t, "textDocument/rename", params, true, note));
    std::string out = note.empty() ? "" : note + "\n";
    std::size_t count = 0;
    for (auto& f : files) count += f.edits.size();
    if (count == 0) return out + "nothing to rename for `" + t.word + "` at " + t.where();
    for (auto& f : files) make_text(f);
    std::vector<std::string> lines, changed, failed;
    for (const auto& f : files) {
      try {
        replace(f.path, f.text);
        changed.push_back(f.path);
        lines.push_back(lsp::shown_path(f.path) + ": " + std::to_string(f.edits.size()) + (f.edits.size() == 1 ? " edit" : " edits"));
      } catch (const std::exception& e) {
        failed.push_back(lsp::shown_path(f.path) + ": " + e.what());
      }
    }
    try {  // the server reads the changed files again
      json paths = changed;
      lsp::ask_bridge(t.server, t.root, {{"op", "sync"}, {"paths", paths}});
    } catch (const std::exception&) {
    }
    out += "renamed `" + t.word + "` to `" + new_name + "`: " + std::to_string(count) + " edits in " +
           std::to_string(changed.size()) + (changed.size() == 1 ? " file\n" : " files\n") + lsp::capped(lines, 100, 8000, "files");
    if (!failed.empty()) {
      std::string why;
      for (const auto& f : failed) why += "\n" + f;
      throw tool::Error(out + "but " + std::to_string(failed.size()) + " files could not be written (left unchanged):" + why);
    }
    return out;
  });
}
