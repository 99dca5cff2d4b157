#pragma once
/// HTML to readable Markdown (or plain text), through Gumbo's HTML5 parser: headings, paragraphs,
/// links with absolute URLs, lists, fenced code, simple tables, quotes; scripts, styles,
/// navigation, forms' controls and hidden elements dropped; whitespace collapsed.

#include <cstddef>
#include <string>
#include <string_view>

namespace web {

struct Page {
  std::string title;  ///< <title>, whitespace collapsed; may be empty
  std::string body;   ///< the document, as Markdown (or plain text)
};

/// `html` must be UTF-8. Relative links resolve against <base href> if there is one, else `url`.
/// `plain`: text without Markdown markup (no link targets, no `#`, no fences). HTML nesting
/// thousands of elements deep throws std::runtime_error (Gumbo would take minutes on it).
Page html_to_markdown(std::string_view html, const std::string& url, bool plain);

/// How deep the elements of `html` nest, roughly: the elements open at once, an end tag closing
/// only one that is open (a stray `</x>` closes nothing), leaving out void elements, elements
/// whose end tag may be omitted, comments and script or style text. Gumbo's
/// tree building takes time quadratic in the depth, so a page nesting deeper than max_nesting is
/// not parsed.
std::size_t nesting(std::string_view html);
inline constexpr std::size_t max_nesting = 3000;

/// An absolute URL for `ref` relative to `base` (spaces and the like percent-encoded); `ref`
/// unchanged when it cannot be resolved.
std::string resolve_url(const std::string& base, const std::string& ref);

}  // namespace web
