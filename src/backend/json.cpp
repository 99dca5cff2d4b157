#include "backend/json.hpp"

#include <algorithm>
#include <climits>
#include <cmath>

#include "backend/limits.hpp"

namespace ollie::backend {

namespace {

// The deepest nesting of arrays and objects in JSON text, outside strings.
int nesting(std::string_view s) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : s) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

}  // namespace

bool too_deep(std::string_view s, int limit) { return nesting(s) > limit; }

json parse_json(std::string_view s) {
  if (too_deep(s)) return json(json::value_t::discarded);
  return json::parse(s, nullptr, false);
}

Error unparsable(std::string_view backend, std::string_view text, int http_status) {
  std::string why;
  if (too_deep(text)) {
    why = "nested deeper than " + std::to_string(limits::json_depth);
  } else {
    try {
      why = std::string(type_phrase(json::parse(text))) + ", not an object";
    } catch (const json::parse_error& e) {
      // "[json.exception.parse_error.101] parse error at line 1, column 3: syntax error while
      // parsing value - invalid literal; last read: 'x'": the part after " - ", without the
      // bytes read (they may be anything).
      const std::string_view w = e.what();
      const auto dash = w.find(" - ");
      const auto last = w.find("; last read");
      why = dash == std::string_view::npos ? "invalid JSON" : std::string(w.substr(dash + 3, last - (dash + 3)));
      why += " at byte " + std::to_string(e.byte);
    }
  }
  return Error{ErrorClass::client, std::string(backend) + ": unparsable response: " + why, http_status, {}};
}

std::string dump_json(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string_view type_phrase(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::object: return "an object";
    case json::value_t::array: return "an array";
    case json::value_t::string: return "a string";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    case json::value_t::number_float: return "a number";
    case json::value_t::binary: return "binary";
    case json::value_t::discarded: return "invalid";
  }
  return "invalid";
}

namespace {

const json* find(const json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

std::optional<std::int64_t> integer_of(const json& v) {
  if (v.is_number_integer() && !v.is_number_unsigned()) return v.get<std::int64_t>();
  if (v.is_number_unsigned() && v.get<std::uint64_t>() <= std::uint64_t(INT64_MAX))
    return static_cast<std::int64_t>(v.get<std::uint64_t>());
  return std::nullopt;
}

}  // namespace

std::string str_field(const json& j, const char* key) {
  const json* v = find(j, key);
  return v && v->is_string() ? v->get<std::string>() : std::string();
}

std::optional<std::int64_t> int_field(const json& j, const char* key) {
  const json* v = find(j, key);
  return v ? integer_of(*v) : std::nullopt;
}

std::optional<std::int64_t> count_field(const json& j, const char* key) {
  const auto n = int_field(j, key);
  return n && *n >= 0 && *n <= max_count ? n : std::nullopt;
}

std::optional<double> cost_field(const json& j, const char* key) {
  const auto c = num_field(j, key);
  return c && std::isfinite(*c) && *c >= 0 && *c <= max_cost ? c : std::nullopt;
}

std::optional<double> num_field(const json& j, const char* key) {
  const json* v = find(j, key);
  return v && v->is_number() ? std::optional(v->get<double>()) : std::nullopt;
}

const json* obj_field(const json& j, const char* key) {
  const json* v = find(j, key);
  return v && v->is_object() ? v : nullptr;
}

const json* arr_field(const json& j, const char* key) {
  const json* v = find(j, key);
  return v && v->is_array() ? v : nullptr;
}

std::optional<int> as_length(const json& v) {
  auto n = integer_of(v);
  if (!n || *n <= 0 || *n > INT_MAX) return std::nullopt;
  return static_cast<int>(*n);
}

std::optional<int> length_field(const json& j, const char* key) {
  const json* v = find(j, key);
  return v ? as_length(*v) : std::nullopt;
}

const json& empty_object() {
  static const json none = json::object();
  return none;
}

void Strict::problem(std::string p) {
  if (problem_.empty()) problem_ = std::move(p);
}

void Strict::wrong(const char* key, const json& v, std::string_view want) {
  problem('"' + std::string(key) + "\" is " + std::string(type_phrase(v)) + ", not " + std::string(want));
}

const json* Strict::field(const json& j, const char* key) {
  if (!j.is_object()) {
    problem(std::string(type_phrase(j)) + " in place of an object with \"" + key + "\"");
    return nullptr;
  }
  return find(j, key);
}

std::string Strict::str(const json& j, const char* key) {
  const json* v = field(j, key);
  if (!v) return {};
  if (v->is_string()) return v->get<std::string>();
  wrong(key, *v, "a string");
  return {};
}

std::optional<std::int64_t> Strict::integer(const json& j, const char* key) {
  const json* v = field(j, key);
  if (!v) return std::nullopt;
  if (auto n = integer_of(*v)) return n;
  wrong(key, *v, "an integer");
  return std::nullopt;
}

std::optional<bool> Strict::boolean(const json& j, const char* key) {
  const json* v = field(j, key);
  if (!v) return std::nullopt;
  if (v->is_boolean()) return v->get<bool>();
  wrong(key, *v, "a boolean");
  return std::nullopt;
}

const json* Strict::object(const json& j, const char* key) {
  const json* v = field(j, key);
  if (!v || v->is_object()) return v;
  wrong(key, *v, "an object");
  return nullptr;
}

const json* Strict::array(const json& j, const char* key) {
  const json* v = field(j, key);
  if (!v || v->is_array()) return v;
  wrong(key, *v, "an array");
  return nullptr;
}

const json* Strict::any(const json& j, const char* key) { return field(j, key); }

const json* Strict::element(const json& v, std::string_view what) {
  if (v.is_object()) return &v;
  problem(std::string(what) + " is " + std::string(type_phrase(v)) + ", not an object");
  return nullptr;
}

Error malformed(std::string_view backend, std::string_view problem) {
  return Error{ErrorClass::client, std::string(backend) + ": malformed response: " + std::string(problem), 200, {}};
}

}  // namespace ollie::backend
