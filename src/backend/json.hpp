#pragma once
// Internal: how the backends touch JSON. Provider JSON is parsed with a nesting bound and read
// only through the typed accessors below, never with json::value(), get<>() or operator[] on
// a value whose type was not checked: those throw on a type mismatch, and the decoders run
// inside libcurl's callbacks. Every JSON text we send is dumped with dump_json(), which
// replaces invalid UTF-8 instead of throwing.
//
// A field that is absent or null reads as absent. A field of another type reads as absent
// through the lenient functions (fields whose loss is harmless: usage counts, model-list
// metadata, the details of an error already being reported) and is recorded by a Strict
// reader (fields the answer cannot be understood without), whose first problem ends the
// stream as `<backend>: malformed response: <problem>`.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "backend/error.hpp"
#include "backend/limits.hpp"

namespace ollie::backend {

using json = nlohmann::json;

/// Parses JSON text; a discarded value when it is invalid or nested deeper than
/// limits::json_depth.
json parse_json(std::string_view s);

/// Whether JSON text nests arrays and objects deeper than `limit`: copying or dumping such a
/// value recurses past the stack.
bool too_deep(std::string_view s, int limit = limits::json_depth);

/// `j` as compact JSON text, invalid UTF-8 in its strings replaced by U+FFFD.
std::string dump_json(const json& j);

/// `<backend>: unparsable response: <why>`, the client error for JSON text that parse_json()
/// refused or that is no object: why names the parser's complaint and its byte (an invalid UTF-8
/// sequence, a stray character), the nesting, or the type found.
Error unparsable(std::string_view backend, std::string_view text, int http_status = 200);

/// "a string", "an integer", "null", ...: the type of `v` as messages name it.
std::string_view type_phrase(const json& v);

/// Lenient reads of field `key` of object `j`: the value when it has the type asked for,
/// else "" / nullopt / nullptr (also when `j` is not an object).
std::string str_field(const json& j, const char* key);
std::optional<std::int64_t> int_field(const json& j, const char* key);
std::optional<double> num_field(const json& j, const char* key);
const json* obj_field(const json& j, const char* key);
const json* arr_field(const json& j, const char* key);
/// A usage count: an integer from 0 to max_count; anything else (negative, larger, another
/// type) reads as absent, so sums of them never overflow.
std::optional<std::int64_t> count_field(const json& j, const char* key);
constexpr std::int64_t max_count = std::int64_t{1} << 40;
/// A cost a provider reports: a finite number from 0 to max_cost, else absent.
std::optional<double> cost_field(const json& j, const char* key);
constexpr double max_cost = 1e9;
/// A token count that must fit an int and be positive (context lengths).
std::optional<int> length_field(const json& j, const char* key);
/// `v` when it is an integer in 1..INT_MAX.
std::optional<int> as_length(const json& v);

/// The empty object, for a lookup that found none.
const json& empty_object();

/// Strict reads: the same, but a field present with another type is remembered (the first
/// one) as the problem of the value being decoded; so is a value that is not an object.
class Strict {
 public:
  std::string str(const json& j, const char* key);
  std::optional<std::int64_t> integer(const json& j, const char* key);
  std::optional<bool> boolean(const json& j, const char* key);
  const json* object(const json& j, const char* key);
  const json* array(const json& j, const char* key);
  /// Field `key` of any type but null; nullptr when absent.
  const json* any(const json& j, const char* key);
  /// `v` itself when it is an object; `what` names it in the problem ("a tool call").
  const json* element(const json& v, std::string_view what);
  /// Records a problem found by the caller.
  void problem(std::string p);

  bool ok() const { return problem_.empty(); }
  /// "\"index\" is a string, not an integer"; empty while ok().
  const std::string& problem() const { return problem_; }

 private:
  const json* field(const json& j, const char* key);
  void wrong(const char* key, const json& v, std::string_view want);
  std::string problem_;
};

/// The error of a response that broke a Strict read: `<backend>: malformed response: <p>`.
Error malformed(std::string_view backend, std::string_view problem);

}  // namespace ollie::backend
