#pragma once
/// Walk: the Twalks of a slash-separated path, 16 elements at a time (fid → newfid, then
/// newfid → newfid, like plan9port), and what their replies mean; shared by both clients, which
/// only send next() and hand its reply to take().

#include <string>
#include <string_view>
#include <vector>

#include "fcall.hpp"
#include "result.hpp"

namespace p9 {

class Walk {
 public:
  /// Empty, "." and "/" clone fid: one Twalk of no names.
  Walk(std::string_view path, std::uint32_t fid, std::uint32_t newfid, Qid qid);

  /// The next Twalk.
  Fcall next() const;
  /// Takes the reply to next(): its error, `<element>: file not found` for a short walk, or
  /// progress.
  Status take(const Result<Fcall>& r);
  /// Every element walked.
  bool done() const { return created_ && walked_ == names_.size(); }
  /// newfid exists on the server (a Twalk succeeded): a walk that fails later must clunk it.
  bool created() const { return created_; }
  /// The path takes one Twalk.
  bool single() const { return names_.size() <= MAXWELEM; }
  std::uint32_t newfid() const { return newfid_; }
  const Qid& qid() const { return qid_; }

 private:
  std::size_t step() const { return std::min(names_.size() - walked_, MAXWELEM); }

  std::vector<std::string> names_;
  std::uint32_t fid_, newfid_;
  Qid qid_;
  std::size_t walked_ = 0;
  bool created_ = false;
};

}  // namespace p9
