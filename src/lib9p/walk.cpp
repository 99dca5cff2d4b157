#include "walk.hpp"

#include "errors.hpp"

namespace p9 {

Walk::Walk(std::string_view path, std::uint32_t fid, std::uint32_t newfid, Qid qid)
    : fid_(fid), newfid_(newfid), qid_(qid) {
  for (std::size_t i = 0; i <= path.size();) {
    auto j = path.find('/', i);
    if (j == std::string_view::npos) j = path.size();
    auto e = path.substr(i, j - i);
    if (!e.empty() && e != ".") names_.emplace_back(e);
    i = j + 1;
  }
}

Fcall Walk::next() const {
  Fcall t;
  t.type = Twalk;
  t.fid = created_ ? newfid_ : fid_;
  t.newfid = newfid_;
  t.wname.assign(names_.begin() + walked_, names_.begin() + walked_ + step());
  return t;
}

Status Walk::take(const Result<Fcall>& r) {
  if (!r) return r.error();
  const std::size_t n = step();
  if (r->wqid.size() < n) return error(names_[walked_ + r->wqid.size()] + ": " + err::file_not_found);
  created_ = true;
  if (n) qid_ = r->wqid.back();
  walked_ += n;
  return {};
}

}  // namespace p9
