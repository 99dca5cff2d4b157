#include "html.hpp"

#include <curl/curl.h>
#include <gumbo.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <stdexcept>
#include <unordered_map>
#include <vector>

namespace web {

namespace {

// Deeper subtrees are left out: no real page nests this far, and the renderer recurses.
constexpr int max_depth = 1000;
/// Of the marks and indents of nested quotes and lists, what a line shows at most.
constexpr std::size_t max_prefix = 120;

bool blank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string collapse(std::string_view s) {
  std::string out;
  bool space = false;
  for (char c : s) {
    if (blank(c)) {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += c;
  }
  return out;
}

std::string trim(std::string_view s) {
  std::size_t b = 0, e = s.size();
  while (b < e && blank(s[b])) b++;
  while (e > b && blank(s[e - 1])) e--;
  return std::string(s.substr(b, e - b));
}

bool starts_with_ci(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (std::size_t i = 0; i < prefix.size(); i++)
    if (std::tolower(static_cast<unsigned char>(s[i])) != prefix[i]) return false;
  return true;
}

const GumboVector* kids(const GumboNode* n) {
  if (n->type == GUMBO_NODE_ELEMENT || n->type == GUMBO_NODE_TEMPLATE) return &n->v.element.children;
  if (n->type == GUMBO_NODE_DOCUMENT) return &n->v.document.children;
  return nullptr;
}

template <class F>
void each_child(const GumboNode* n, F&& f) {
  if (const GumboVector* v = kids(n))
    for (unsigned i = 0; i < v->length; i++) f(static_cast<const GumboNode*>(v->data[i]));
}

bool is(const GumboNode* n, GumboTag tag) { return n->type == GUMBO_NODE_ELEMENT && n->v.element.tag == tag; }

std::string attr(const GumboNode* n, const char* name) {
  if (n->type != GUMBO_NODE_ELEMENT) return "";
  const GumboAttribute* a = gumbo_get_attribute(&n->v.element.attributes, name);
  return a ? a->value : "";
}

bool has_attr(const GumboNode* n, const char* name) {
  return n->type == GUMBO_NODE_ELEMENT && gumbo_get_attribute(&n->v.element.attributes, name) != nullptr;
}

/// Elements whose content is not part of the reading: code, styling, navigation, controls,
/// embedded media, and anything marked hidden.
bool dropped(const GumboNode* n) {
  switch (n->v.element.tag) {
    case GUMBO_TAG_SCRIPT: case GUMBO_TAG_STYLE: case GUMBO_TAG_NOSCRIPT: case GUMBO_TAG_NAV:
    case GUMBO_TAG_TEMPLATE: case GUMBO_TAG_HEAD: case GUMBO_TAG_TITLE: case GUMBO_TAG_LINK:
    case GUMBO_TAG_META: case GUMBO_TAG_BASE: case GUMBO_TAG_IFRAME: case GUMBO_TAG_OBJECT:
    case GUMBO_TAG_EMBED: case GUMBO_TAG_PARAM: case GUMBO_TAG_CANVAS: case GUMBO_TAG_SVG:
    case GUMBO_TAG_VIDEO: case GUMBO_TAG_AUDIO: case GUMBO_TAG_SOURCE: case GUMBO_TAG_TRACK:
    case GUMBO_TAG_MAP: case GUMBO_TAG_AREA: case GUMBO_TAG_BUTTON: case GUMBO_TAG_INPUT:
    case GUMBO_TAG_SELECT: case GUMBO_TAG_OPTION: case GUMBO_TAG_OPTGROUP: case GUMBO_TAG_DATALIST:
    case GUMBO_TAG_TEXTAREA: case GUMBO_TAG_NOFRAMES: case GUMBO_TAG_NOEMBED: case GUMBO_TAG_APPLET:
      return true;
    default:
      return has_attr(n, "hidden") || attr(n, "aria-hidden") == "true";
  }
}

bool is_block(GumboTag t) {
  switch (t) {
    case GUMBO_TAG_HTML: case GUMBO_TAG_BODY: case GUMBO_TAG_P: case GUMBO_TAG_DIV:
    case GUMBO_TAG_SECTION: case GUMBO_TAG_ARTICLE: case GUMBO_TAG_MAIN: case GUMBO_TAG_HEADER:
    case GUMBO_TAG_FOOTER: case GUMBO_TAG_ASIDE: case GUMBO_TAG_FIGURE: case GUMBO_TAG_FIGCAPTION:
    case GUMBO_TAG_ADDRESS: case GUMBO_TAG_DETAILS: case GUMBO_TAG_SUMMARY: case GUMBO_TAG_FORM:
    case GUMBO_TAG_FIELDSET: case GUMBO_TAG_LEGEND: case GUMBO_TAG_CENTER: case GUMBO_TAG_HGROUP:
    case GUMBO_TAG_DL: case GUMBO_TAG_DT: case GUMBO_TAG_CAPTION: case GUMBO_TAG_FRAMESET:
    case GUMBO_TAG_FRAME:
      return true;
    default:
      return false;
  }
}

bool has_descendant(const GumboNode* n, GumboTag tag, int depth) {
  bool found = false;
  if (depth > max_depth) return false;
  each_child(n, [&](const GumboNode* c) { found = found || is(c, tag) || has_descendant(c, tag, depth + 1); });
  return found;
}

/// The text of a <pre> as written: line breaks and spaces kept.
void raw_text(const GumboNode* n, std::string& out, int depth) {
  if (depth > max_depth) return;
  each_child(n, [&](const GumboNode* c) {
    if (c->type == GUMBO_NODE_TEXT || c->type == GUMBO_NODE_WHITESPACE || c->type == GUMBO_NODE_CDATA) out += c->v.text.text;
    else if (is(c, GUMBO_TAG_BR)) out += '\n';
    else if (c->type == GUMBO_NODE_ELEMENT && !dropped(c)) raw_text(c, out, depth + 1);
  });
}

/// `language-x` or `lang-x` in the class of a <pre> or of its <code>.
std::string code_language(const GumboNode* pre) {
  std::vector<std::string> classes{attr(pre, "class")};
  each_child(pre, [&](const GumboNode* c) {
    if (is(c, GUMBO_TAG_CODE)) classes.push_back(attr(c, "class"));
  });
  for (const auto& cls : classes) {
    for (std::string_view prefix : {"language-", "lang-"}) {
      const auto at = cls.find(prefix);
      if (at == std::string::npos || (at > 0 && !blank(cls[at - 1]))) continue;
      std::string lang;
      for (std::size_t i = at + prefix.size(); i < cls.size() && !blank(cls[i]) && lang.size() < 32; i++) lang += cls[i];
      return lang;
    }
  }
  return "";
}

/// A run of inline text, with whether whitespace stood before and after it.
struct Inline {
  std::string text;
  bool lead = false, trail = false;
};

class Renderer {
 public:
  /// `flat`: everything on one line (the content of a link, a heading, a table cell).
  /// `too_deep` is set when a subtree deeper than max_depth was left out.
  Renderer(const std::string& base, bool plain, bool flat, bool& too_deep)
      : base_(base), plain_(plain), flat_(flat), too_deep_(too_deep) {}

  void node(const GumboNode* n, int depth) {
    switch (n->type) {
      case GUMBO_NODE_TEXT: case GUMBO_NODE_WHITESPACE: case GUMBO_NODE_CDATA: text(n->v.text.text); break;
      case GUMBO_NODE_ELEMENT: element(n, depth); break;
      case GUMBO_NODE_DOCUMENT: children(n, depth); break;
      default: break;  // comments, templates
    }
  }

  void children(const GumboNode* n, int depth) {
    each_child(n, [&](const GumboNode* c) { node(c, depth + 1); });
  }

  std::string finish() {
    flush();
    return out_;
  }

  Inline finish_inline() {
    const bool trail = space_;
    flush();
    return {out_, lead_, trail};
  }

 private:
  struct Level {
    std::string marker, indent;  ///< before the first line of the level, before the others
    bool used, item;             ///< marker written; a list item
  };

  void text(std::string_view s) {
    std::size_t i = 0;
    while (i < s.size()) {
      if (blank(s[i])) {
        space_ = true;
        i++;
        continue;
      }
      std::size_t j = i;
      while (j < s.size() && !blank(s[j])) j++;
      word(s.substr(i, j - i));
      i = j;
    }
  }

  void word(std::string_view w) {
    if (!started_) lead_ = space_;
    started_ = true;
    if (space_ && !para_.empty() && para_.back() != '\n') para_ += ' ';
    space_ = false;
    para_ += w;
  }

  void emit(const Inline& t) {
    if (t.lead) space_ = true;
    if (!t.text.empty()) word(t.text);
    if (t.trail) space_ = true;
  }

  void flush() {
    while (!para_.empty() && para_.back() == '\n') para_.pop_back();
    if (!para_.empty()) block(para_);
    para_.clear();
    space_ = false;
  }

  void block(const std::string& text) {
    if (flat_) {
      if (!out_.empty()) out_ += ' ';
      for (char c : text) out_ += c == '\n' ? ' ' : c;
      return;
    }
    bool item = false;
    for (const auto& l : levels_) item = item || l.item;
    if (!out_.empty()) {
      // A blank line inside a quote keeps the quote's marks, so the quote stays one.
      std::string gap;
      for (const auto& l : levels_)
        if (l.used) gap += l.indent;
      while (!gap.empty() && gap.back() == ' ') gap.pop_back();
      out_ += item && prev_item_ ? "\n" : "\n" + gap + "\n";
    }
    prev_item_ = item;
    std::size_t i = 0;
    while (true) {
      const auto nl = text.find('\n', i);
      const std::string_view line = std::string_view(text).substr(i, nl == std::string::npos ? std::string::npos : nl - i);
      std::string prefix;
      for (auto& l : levels_) {
        prefix += l.used ? l.indent : l.marker;
        l.used = true;
      }
      if (prefix.size() > max_prefix) prefix.resize(max_prefix);  // nests past reading: marks shown, not copied per line
      if (line.empty()) while (!prefix.empty() && prefix.back() == ' ') prefix.pop_back();
      out_ += prefix;
      out_ += line;
      if (nl == std::string::npos) break;
      out_ += '\n';
      i = nl + 1;
    }
  }

  Inline inline_of(const GumboNode* n, int depth) {
    Renderer sub(base_, plain_, true, too_deep_);
    sub.children(n, depth);
    return sub.finish_inline();
  }

  void nested(const GumboNode* n, int depth, Level level) {
    flush();
    levels_.push_back(std::move(level));
    children(n, depth);
    flush();
    levels_.pop_back();
  }

  void element(const GumboNode* n, int depth) {
    if (depth > max_depth) {
      too_deep_ = true;
      return;
    }
    if (dropped(n)) return;
    const GumboTag tag = n->v.element.tag;
    switch (tag) {
      case GUMBO_TAG_H1: case GUMBO_TAG_H2: case GUMBO_TAG_H3: case GUMBO_TAG_H4: case GUMBO_TAG_H5: case GUMBO_TAG_H6: {
        const Inline t = inline_of(n, depth);
        if (flat_) return emit(t);
        flush();
        if (!t.text.empty()) block(plain_ ? t.text : std::string(static_cast<std::size_t>(tag - GUMBO_TAG_H1 + 1), '#') + " " + t.text);
        return;
      }
      case GUMBO_TAG_A: return link(n, depth);
      case GUMBO_TAG_IMG: return image(n);
      case GUMBO_TAG_BR:
        if (flat_) space_ = true;
        else if (!para_.empty() && para_.back() != '\n') para_ += '\n';
        if (!flat_) space_ = false;
        return;
      case GUMBO_TAG_HR:
        flush();
        if (!flat_ && !plain_) block("---");
        return;
      case GUMBO_TAG_UL: case GUMBO_TAG_OL: case GUMBO_TAG_MENU: case GUMBO_TAG_DIR: return list(n, depth);
      case GUMBO_TAG_LI:
        if (flat_) return children(n, depth);
        return nested(n, depth, {"- ", "  ", false, true});
      case GUMBO_TAG_PRE: case GUMBO_TAG_LISTING: case GUMBO_TAG_XMP: case GUMBO_TAG_PLAINTEXT: return pre(n, depth);
      case GUMBO_TAG_CODE: case GUMBO_TAG_KBD: case GUMBO_TAG_SAMP: case GUMBO_TAG_TT: return wrapped(n, depth, "`");
      case GUMBO_TAG_STRONG: case GUMBO_TAG_B: return wrapped(n, depth, "**");
      case GUMBO_TAG_EM: case GUMBO_TAG_I: return wrapped(n, depth, "*");
      case GUMBO_TAG_DEL: case GUMBO_TAG_S: case GUMBO_TAG_STRIKE: return wrapped(n, depth, "~~");
      case GUMBO_TAG_TABLE: return table(n, depth);
      case GUMBO_TAG_BLOCKQUOTE:
        if (flat_) return children(n, depth);
        return nested(n, depth, plain_ ? Level{"  ", "  ", false, false} : Level{"> ", "> ", false, false});
      case GUMBO_TAG_DD:
        if (flat_) return children(n, depth);
        return nested(n, depth, {"  ", "  ", true, false});
      default:
        if (!is_block(tag)) return children(n, depth);
        flush();
        children(n, depth);
        flush();
    }
  }

  void wrapped(const GumboNode* n, int depth, const char* mark) {
    Inline t = inline_of(n, depth);
    if (!plain_ && !t.text.empty()) t.text = mark + t.text + mark;
    emit(t);
  }

  void link(const GumboNode* n, int depth) {
    Inline t = inline_of(n, depth);
    const std::string href = trim(attr(n, "href"));
    if (!plain_ && !t.text.empty() && !href.empty() && href[0] != '#' && !starts_with_ci(href, "javascript:"))
      t.text = "[" + t.text + "](" + resolve_url(base_, href) + ")";
    emit(t);
  }

  void image(const GumboNode* n) {
    const std::string alt = collapse(attr(n, "alt"));
    const std::string src = trim(attr(n, "src"));
    if (alt.empty()) return;
    if (plain_ || src.empty() || starts_with_ci(src, "data:")) return emit({alt});
    emit({"![" + alt + "](" + resolve_url(base_, src) + ")"});
  }

  void list(const GumboNode* n, int depth) {
    const bool ordered = is(n, GUMBO_TAG_OL);
    long number = ordered && !attr(n, "start").empty() ? std::strtol(attr(n, "start").c_str(), nullptr, 10) : 1;
    number = std::clamp(number, -1'000'000'000L, 1'000'000'000L);  // counted up per item
    flush();
    each_child(n, [&](const GumboNode* c) {
      if (!is(c, GUMBO_TAG_LI)) return node(c, depth + 1);
      if (depth + 1 > max_depth || dropped(c)) return;
      if (flat_) {
        space_ = true;
        children(c, depth + 1);
        space_ = true;
        return;
      }
      const std::string marker = ordered ? std::to_string(number++) + ". " : "- ";
      nested(c, depth + 1, {marker, std::string(marker.size(), ' '), false, true});
    });
    flush();
  }

  void pre(const GumboNode* n, int depth) {
    std::string raw;
    raw_text(n, raw, depth);
    if (!raw.empty() && raw.front() == '\n') raw.erase(0, 1);
    while (!raw.empty() && blank(raw.back())) raw.pop_back();
    if (raw.empty()) return;
    if (flat_) return emit({plain_ ? collapse(raw) : "`" + collapse(raw) + "`", true, true});
    flush();
    if (plain_) return block(raw);
    std::size_t run = 0, longest = 0;  // the fence is longer than any run of backticks in the code
    for (char c : raw) longest = std::max(longest, run = c == '`' ? run + 1 : 0);
    const std::string fence(std::max<std::size_t>(3, longest + 1), '`');
    block(fence + code_language(n) + "\n" + raw + "\n" + fence);
  }

  void table(const GumboNode* n, int depth) {
    // A table holding a table lays out a page: its cells are read as blocks.
    if (flat_ || has_descendant(n, GUMBO_TAG_TABLE, depth)) {
      flush();
      children(n, depth);
      flush();
      return;
    }
    flush();
    std::vector<std::vector<std::string>> rows;
    std::string caption;
    std::size_t cols = 0;
    auto row = [&](const GumboNode* tr, int d) {
      std::vector<std::string> cells;
      each_child(tr, [&](const GumboNode* c) {
        if (!is(c, GUMBO_TAG_TD) && !is(c, GUMBO_TAG_TH)) return;
        std::string cell;
        for (char ch : inline_of(c, d + 1).text) {
          if (ch == '|' && !plain_) cell += '\\';
          cell += ch;
        }
        cells.push_back(std::move(cell));
        const long span = std::strtol(attr(c, "colspan").c_str(), nullptr, 10);
        for (long k = 1; k < span && k < 20; k++) cells.emplace_back();
      });
      cols = std::max(cols, cells.size());
      if (!cells.empty()) rows.push_back(std::move(cells));
    };
    each_child(n, [&](const GumboNode* c) {
      if (is(c, GUMBO_TAG_TR)) row(c, depth + 1);
      else if (is(c, GUMBO_TAG_CAPTION)) caption = inline_of(c, depth + 1).text;
      else if (is(c, GUMBO_TAG_THEAD) || is(c, GUMBO_TAG_TBODY) || is(c, GUMBO_TAG_TFOOT))
        each_child(c, [&](const GumboNode* tr) {
          if (is(tr, GUMBO_TAG_TR)) row(tr, depth + 2);
        });
    });
    if (!caption.empty()) block(caption);
    if (cols <= 1) {  // one column is a list of paragraphs, not a table
      for (const auto& r : rows)
        if (!r.empty() && !r[0].empty()) block(r[0]);
      return;
    }
    std::string text;
    // Rows are padded to the widest only while that stays a table's size: a hostile one of 2000
    // rows and one row of 38000 cells would pad into hundreds of MB.
    const bool pad = rows.size() * cols <= 100000;
    for (std::size_t r = 0; r < rows.size(); r++) {
      if (pad) rows[r].resize(cols);
      std::string line;
      for (const auto& cell : rows[r]) {
        if (plain_) line += (line.empty() ? "" : " | ") + cell;
        else line += "| " + cell + " ";
      }
      if (!plain_) line += "|";
      text += (r ? "\n" : "") + line;
      if (r == 0 && !plain_) {
        text += "\n";
        for (std::size_t c = 0; c < cols; c++) text += "| --- ";
        text += "|";
      }
    }
    block(text);
  }

  const std::string& base_;
  const bool plain_, flat_;
  bool& too_deep_;
  std::vector<Level> levels_;
  std::string out_, para_;
  bool space_ = false, started_ = false, lead_ = false, prev_item_ = false;
};

const GumboNode* find(const GumboNode* n, GumboTag tag, int depth) {
  if (is(n, tag)) return n;
  const GumboNode* found = nullptr;
  if (depth < 4)
    each_child(n, [&](const GumboNode* c) {
      if (!found) found = find(c, tag, depth + 1);
    });
  return found;
}

}  // namespace

std::size_t nesting(std::string_view html) {
  std::string low(html);
  for (char& c : low) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  static const std::vector<std::string_view> flat{
      "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr", "param",
      "keygen", "p", "li", "dt", "dd", "option", "optgroup", "tr", "td", "th", "thead", "tbody", "tfoot", "colgroup",
      "caption", "rt", "rp", "html", "head", "body", "image", "frame", "basefont", "bgsound", "isindex"};
  static const std::vector<std::string_view> breakout{
      "b",  "big", "blockquote", "body", "br", "center", "code", "dd", "div", "dl", "dt", "em", "embed", "h1",
      "h2", "h3",  "h4", "h5", "h6", "head", "hr", "i", "img", "li", "listing", "menu", "meta", "nobr", "ol",
      "p",  "pre", "ruby", "s", "small", "span", "strong", "strike", "sub", "sup", "table", "tt", "u", "ul", "var"};
  static const std::vector<std::string_view> ending{"p", "li", "dt", "dd", "tr", "td", "th"};
  static const std::vector<std::string_view> phrasing{
      "a",   "abbr", "b",    "big",  "cite", "code",   "em",  "font", "i",   "kbd", "label", "nobr",
      "q",   "s",    "samp", "small", "span", "strike", "strong", "sub", "sup", "tt",  "u",     "var"};
  // The open elements: an end tag closes only one that is open (and those above it), as the
  // parser does; a stray one (`</x>`) closes nothing. `open` counts each name on the stack.
  std::vector<std::string_view> stack;
  std::unordered_map<std::string_view, std::size_t> open;
  std::size_t max = 0, foreign = 0;  // foreign: inside <svg> or <math>
  for (std::size_t i = low.find('<'); i != std::string::npos && i + 1 < low.size(); i = low.find('<', i + 1)) {
    if (low.compare(i, 4, "<!--") == 0) {
      i = low.find("-->", i + 4);
      if (i == std::string::npos) break;
      continue;
    }
    const bool close = low[i + 1] == '/';
    std::size_t e = i + 1 + (close ? 1 : 0);
    const std::size_t b = e;
    while (e < low.size() && std::isalnum(static_cast<unsigned char>(low[e]))) e++;
    const std::string_view name = std::string_view(low).substr(b, e - b);
    if (name.empty() || !std::isalpha(static_cast<unsigned char>(name[0]))) continue;
    if (!close && (name == "script" || name == "style")) {
      i = low.find("</" + std::string(name), e);
      if (i == std::string::npos) break;
      continue;
    }
    const std::size_t gt = low.find('>', e);
    if (gt == std::string::npos) break;
    // `/>` closes an element only in SVG and MathML (`<svg/>` too): HTML ignores it, so `<div/>`
    // opens a div. An HTML element such as `<div>` inside SVG ends the SVG (HTML's breakout).
    const bool outer = name == "svg" || name == "math";
    if (!close && foreign > 0 && std::find(breakout.begin(), breakout.end(), name) != breakout.end()) foreign = 0;
    i = gt;  // the next tag starts after this one: a `<` inside its attributes is not one
    // A paragraph, item or cell that begins or ends closes the inline elements left open in the
    // one before (`<p><font>…<p><font>…`): the parser closes them there.
    if (std::find(ending.begin(), ending.end(), name) != ending.end())
      while (!stack.empty() && std::find(phrasing.begin(), phrasing.end(), stack.back()) != phrasing.end()) {
        open[stack.back()]--;
        stack.pop_back();
      }
    if (std::find(flat.begin(), flat.end(), name) != flat.end()) continue;
    if (low[gt - 1] == '/' && (foreign > 0 || outer)) continue;
    if (close) {
      if (open[name] == 0) continue;
      while (!stack.empty()) {
        const auto top = stack.back();
        stack.pop_back();
        open[top]--;
        if (top == name) break;
      }
      foreign -= outer && foreign > 0 ? 1 : 0;
    } else {
      stack.push_back(name);
      open[name]++;
      max = std::max(max, stack.size());
      foreign += outer ? 1 : 0;
    }
  }
  return max;
}

std::string resolve_url(const std::string& base, const std::string& ref) {
  CURLU* u = curl_url();
  if (!u) return ref;
  std::string out = ref;
  char* s = nullptr;
  if (curl_url_set(u, CURLUPART_URL, base.c_str(), 0) == CURLUE_OK &&
      curl_url_set(u, CURLUPART_URL, ref.c_str(), CURLU_ALLOW_SPACE | CURLU_URLENCODE | CURLU_NON_SUPPORT_SCHEME) == CURLUE_OK &&
      curl_url_get(u, CURLUPART_URL, &s, 0) == CURLUE_OK) {
    out = s;
  }
  curl_free(s);
  curl_url_cleanup(u);
  return out;
}

Page html_to_markdown(std::string_view html, const std::string& url, bool plain) {
  if (const std::size_t depth = nesting(html); depth > max_nesting)
    throw std::runtime_error("cannot convert this HTML: its elements nest about " + std::to_string(depth) +
                             " deep (the limit is " + std::to_string(max_nesting) + "); fetch it with format raw");
  // No parse errors kept: gumbo copies the open elements into each (GBs for a page of stray end tags).
  GumboOptions options = kGumboDefaultOptions;
  options.max_errors = 0;
  GumboOutput* doc = gumbo_parse_with_options(&options, html.data(), html.size());
  Page page;
  std::string base = url;
  if (const GumboNode* head = find(doc->root, GUMBO_TAG_HEAD, 0)) {
    if (const GumboNode* t = find(head, GUMBO_TAG_TITLE, 0)) {
      std::string raw;
      raw_text(t, raw, 0);
      page.title = collapse(raw);
    }
    if (const GumboNode* b = find(head, GUMBO_TAG_BASE, 0); b && !trim(attr(b, "href")).empty())
      base = resolve_url(url, trim(attr(b, "href")));
  }
  bool too_deep = false;
  Renderer r(base, plain, false, too_deep);
  r.node(doc->root, 0);
  page.body = r.finish();
  if (too_deep) page.body += "\n\n[content nested more than " + std::to_string(max_depth) + " elements deep left out]";
  gumbo_destroy_output(&options, doc);
  return page;
}

}  // namespace web
