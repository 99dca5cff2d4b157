#include "parse.hpp"

#include <utility>

namespace shell {

namespace {

// Deeper substitutions stay literal text: a bound on the work a crafted command can cause.
constexpr int max_depth = 16;

bool blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }
bool meta(char c) { return blank(c) || c == '\n' || c == '|' || c == '&' || c == ';' || c == '(' || c == ')' || c == '<' || c == '>'; }
bool name_start(char c) { return c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }
bool name_char(char c) { return name_start(c) || (c >= '0' && c <= '9'); }

// Reserved words that may stand before a command: they are not its name.
bool keyword(const std::string& w) {
  for (const char* k : {"!", "{", "}", "if", "then", "else", "elif", "fi", "do", "done", "while", "until", "time", "esac"})
    if (w == k) return true;
  return false;
}

class Parser {
 public:
  Parser(std::string_view s, std::vector<Command>& out, int depth) : s_(s), out_(out), depth_(depth) {}

  void run() {
    while (i_ < s_.size()) {
      const char c = s_[i_];
      if (blank(c)) {
        i_++;
      } else if (c == '\\' && i_ + 1 < s_.size() && s_[i_ + 1] == '\n') {
        i_ += 2;
      } else if (c == '\n') {
        i_++;
        finish(false);
        heredoc_bodies();
      } else if (c == '#') {
        while (i_ < s_.size() && s_[i_] != '\n') i_++;
      } else if ((c == '<' || c == '>') && peek(1) == '(') {
        word();
      } else if (c == '<' || c == '>' || (c == '&' && peek(1) == '>')) {
        redirect();
      } else if (c == '|') {
        const bool pipe = peek(1) != '|';
        i_ += (peek(1) == '|' || peek(1) == '&') ? 2 : 1;
        finish(pipe);
      } else if (c == '&' || c == ';' || c == '(' || c == ')') {
        i_ += (c == '&' && peek(1) == '&') || (c == ';' && (peek(1) == ';' || peek(1) == '&')) ? 2 : 1;
        finish(false);
      } else {
        word();
      }
    }
    finish(false);
  }

 private:
  char peek(std::size_t ahead) const { return i_ + ahead < s_.size() ? s_[i_ + ahead] : '\0'; }

  // Ends the current simple command; `pipe`: its output feeds the next one.
  void finish(bool pipe) {
    if (!cur_.words.empty() || !cur_.writes.empty() || !cur_.inner.empty()) {
      cur_.pipe_from = pipe_from_;
      out_.push_back(std::move(cur_));
      cur_ = {};
      last_ = static_cast<long>(out_.size()) - 1;
    }
    // `( curl … ) | sh`: the group's last command feeds the pipe.
    pipe_from_ = pipe ? last_ : -1;
  }

  void word() {
    const std::size_t start = i_;
    bool plain = true;  // no quotes: a candidate descriptor number or assignment
    std::string w = read_word(plain);
    if (plain && !w.empty() && w.find_first_not_of("0123456789") == std::string::npos && i_ < s_.size() &&
        (s_[i_] == '<' || s_[i_] == '>') && peek(1) != '(')
      return;  // `2>`: the descriptor of the redirection that follows
    if (cur_.words.empty()) {
      if (plain && keyword(w)) return;
      std::size_t n = start;
      if (n < s_.size() && name_start(s_[n])) {
        while (n < s_.size() && name_char(s_[n])) n++;
        if (n < s_.size() && s_[n] == '=') return;  // an assignment before the command
      }
    }
    cur_.words.push_back(std::move(w));
  }

  void redirect() {
    bool write = true, heredoc = false, strip = false;
    if (s_.compare(i_, 3, "<<<") == 0) {
      i_ += 3, write = false;
    } else if (s_.compare(i_, 3, "<<-") == 0) {
      i_ += 3, write = false, heredoc = strip = true;
    } else if (s_.compare(i_, 2, "<<") == 0) {
      i_ += 2, write = false, heredoc = true;
    } else if (s_.compare(i_, 2, "<>") == 0) {
      i_ += 2;
    } else if (s_.compare(i_, 2, "<&") == 0) {
      i_ += 2, write = false;
    } else if (s_[i_] == '<') {
      i_ += 1, write = false;
    } else if (s_.compare(i_, 3, "&>>") == 0) {
      i_ += 3;
    } else if (s_.compare(i_, 2, ">>") == 0 || s_.compare(i_, 2, ">|") == 0 || s_.compare(i_, 2, ">&") == 0 ||
               s_.compare(i_, 2, "&>") == 0) {
      i_ += 2;
    } else {
      i_ += 1;
    }
    while (i_ < s_.size() && blank(s_[i_])) i_++;
    if (i_ >= s_.size() || (meta(s_[i_]) && !((s_[i_] == '<' || s_[i_] == '>') && peek(1) == '('))) return;
    bool plain = true;
    std::string target = read_word(plain);
    if (heredoc) heredocs_.emplace_back(std::move(target), strip);
    else if (write) cur_.writes.push_back(std::move(target));
  }

  // Skips the bodies of the here-documents opened on the line that just ended.
  void heredoc_bodies() {
    for (auto& [delim, strip] : heredocs_) {
      while (i_ < s_.size()) {
        auto nl = s_.find('\n', i_);
        if (nl == std::string_view::npos) nl = s_.size();
        std::string_view line = s_.substr(i_, nl - i_);
        i_ = nl < s_.size() ? nl + 1 : nl;
        if (strip) line.remove_prefix(std::min(line.find_first_not_of('\t'), line.size()));
        if (line == delim) break;
      }
    }
    heredocs_.clear();
  }

  // One word from i_, quotes removed; substitutions are parsed as commands of their own and
  // kept as their raw text in the word.
  std::string read_word(bool& plain) {
    std::string w;
    while (i_ < s_.size()) {
      const char c = s_[i_];
      if ((c == '<' || c == '>') && peek(1) == '(') {
        plain = false;
        w += substitution(i_ + 2, ')');
      } else if (meta(c)) {
        break;
      } else if (c == '\\') {
        if (i_ + 1 < s_.size() && s_[i_ + 1] != '\n') w += s_[i_ + 1];
        plain = false;
        i_ += 2;
      } else if (c == '\'') {
        plain = false;
        const auto end = s_.find('\'', i_ + 1);
        const auto stop = end == std::string_view::npos ? s_.size() : end;
        w.append(s_.substr(i_ + 1, stop - i_ - 1));
        i_ = stop + 1;
      } else if (c == '"') {
        plain = false;
        double_quoted(w);
      } else if (c == '$' && peek(1) == '\'') {
        plain = false;
        i_ += 2;
        while (i_ < s_.size() && s_[i_] != '\'') {
          if (s_[i_] == '\\' && i_ + 1 < s_.size()) i_++;
          w += s_[i_++];
        }
        i_++;
      } else if (c == '$' || c == '`') {
        w += dollar_or_backquote();
      } else {
        w += c;
        i_++;
      }
    }
    if (i_ > s_.size()) i_ = s_.size();
    return w;
  }

  void double_quoted(std::string& w) {
    i_++;
    while (i_ < s_.size() && s_[i_] != '"') {
      const char c = s_[i_];
      if (c == '\\' && i_ + 1 < s_.size()) {
        const char n = s_[i_ + 1];
        if (n == '$' || n == '`' || n == '"' || n == '\\') w += n;
        else if (n != '\n') (w += c) += n;
        i_ += 2;
      } else if (c == '$' || c == '`') {
        w += dollar_or_backquote();
      } else {
        w += c;
        i_++;
      }
    }
    i_++;
  }

  // At `$` or a backquote: `$(…)`, `$((…))`, backquotes and `${…}` are copied whole (the
  // first three parsed as commands); any other `$` is itself.
  std::string dollar_or_backquote() {
    if (s_[i_] == '`') {
      const std::size_t start = i_;
      std::string inner;
      i_++;
      while (i_ < s_.size() && s_[i_] != '`') {
        if (s_[i_] == '\\' && i_ + 1 < s_.size()) i_++;
        inner += s_[i_++];
      }
      i_++;
      nested(inner);
      return std::string(s_.substr(start, std::min(i_, s_.size()) - start));
    }
    if (peek(1) == '(') return substitution(i_ + 2, ')');
    if (peek(1) == '{') {
      const std::size_t start = i_;
      int depth = 0;
      for (; i_ < s_.size(); i_++) {
        if (s_[i_] == '{') depth++;
        else if (s_[i_] == '}' && --depth == 0) break;
      }
      i_++;
      return std::string(s_.substr(start, std::min(i_, s_.size()) - start));
    }
    i_++;
    return "$";
  }

  // The text from `from` to the matching `close` (quotes respected), parsed as commands;
  // returns the whole construct as written and leaves i_ after it.
  std::string substitution(std::size_t from, char close) {
    const std::size_t start = i_;
    const char open = close == ')' ? '(' : close;
    int depth = 1;
    std::size_t j = from;
    for (; j < s_.size(); j++) {
      const char c = s_[j];
      if (c == '\\') {
        j++;
      } else if (c == '\'') {
        const auto end = s_.find('\'', j + 1);
        j = end == std::string_view::npos ? s_.size() : end;
      } else if (c == '"') {
        for (j++; j < s_.size() && s_[j] != '"'; j++)
          if (s_[j] == '\\') j++;
      } else if (c == open) {
        depth++;
      } else if (c == close && --depth == 0) {
        break;
      }
    }
    const std::size_t end = std::min(j, s_.size());
    nested(s_.substr(from, end - from));
    i_ = std::min(end + 1, s_.size());
    return std::string(s_.substr(start, i_ - start));
  }

  void nested(std::string_view text) {
    if (depth_ >= max_depth) return;
    const std::size_t first = out_.size();
    Parser(text, out_, depth_ + 1).run();
    for (std::size_t k = first; k < out_.size(); k++) cur_.inner.push_back(k);
  }

  std::string_view s_;
  std::size_t i_ = 0;
  std::vector<Command>& out_;
  int depth_;
  Command cur_;
  long pipe_from_ = -1, last_ = -1;
  std::vector<std::pair<std::string, bool>> heredocs_;
};

}  // namespace

std::vector<Command> parse(std::string_view text) {
  std::vector<Command> out;
  Parser(text, out, 0).run();
  return out;
}

}  // namespace shell
