#pragma once
/// Files file_read does not dump: images (PNG, JPEG, GIF, WebP, with their dimensions when the
/// header gives them) and PDFs, told by their first bytes.

#include <optional>
#include <string>
#include <string_view>

namespace filetool {

/// "PNG image, 640x480" or "PDF document"; nullopt for anything else.
std::optional<std::string> media_kind(std::string_view head);

}  // namespace filetool
