#pragma once
/// What the file tools share about files: how a path is shown, how a failed system call is
/// told to the model, what counts as text, and the atomic replacement of a file.

#include <sys/stat.h>

#include <cstddef>
#include <string>
#include <string_view>

namespace filetool {

/// `abs` as the model should read it: relative to the working directory when it lies under it,
/// else absolute.
std::string shown(const std::string& abs);

/// A path as a line of a listing shows it: as it is, or, when it holds a control character (a
/// file name may hold a newline, which would make it read as two entries), in double quotes
/// with C escapes (`"a\nb.txt"`).
std::string listed(const std::string& path);

/// The absolute path of the file `given` names, for the tools that write one: a name ending in
/// `/` names a directory, never the file before it (tool::Error).
std::string file_to_write(const std::string& given);

/// A tool::Error for a failed system call on `abs`: `file not found: x`, `permission denied: x
/// (outside the sandbox's paths)`, `not a directory: …`, else `<what> x: <strerror>`.
[[noreturn]] void fail(int err, const std::string& abs, std::string_view what = "cannot open");

/// A directory that can be listed, else tool::Error (EACCES: outside the sandbox).
void readable_dir(const std::string& abs);

/// Valid UTF-8; `truncated_ok` accepts a sequence cut short at the very end (a block boundary).
bool valid_utf8(std::string_view s, bool truncated_ok);
/// A block of a file that is not text: a NUL byte or invalid UTF-8.
bool binary_block(std::string_view block, bool more_follows);

/// 12 B, 3.4 KiB, 5.0 MiB.
std::string human_size(long long bytes);

/// Lines of `text` as an editor counts them: the final line needs no newline.
std::size_t count_lines(std::string_view text);

/// Replaces `abs` with `content`: a temporary file in the same directory, fsync, rename; in
/// place when the directory refuses the temporary (EACCES, EPERM) and the file can be written.
/// `mode` is the mode of the new file. Throws tool::Error.
void replace_file(const std::string& abs, std::string_view content, mode_t mode);

/// The whole of a regular file, at most `cap` bytes (else tool::Error naming the cap).
std::string slurp(const std::string& abs, std::size_t cap);

}  // namespace filetool
