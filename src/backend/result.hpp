#pragma once
/// Result<T>: a value or a backend Error. Failures are values; nothing in this library throws
/// across its public interface.

#include <cassert>
#include <utility>
#include <variant>

#include "backend/error.hpp"

namespace ollie::backend {

template <class T>
class [[nodiscard]] Result {
 public:
  /// A successful result.
  Result(T value) : v_(std::move(value)) {}
  /// A failed result.
  Result(Error e) : v_(std::move(e)) {}

  /// True when the result holds a value.
  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& operator*() { assert(ok()); return std::get<0>(v_); }
  const T& operator*() const { assert(ok()); return std::get<0>(v_); }
  T* operator->() { return &**this; }
  const T* operator->() const { return &**this; }
  /// The error of a failed result.
  const Error& error() const { assert(!ok()); return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

}  // namespace ollie::backend
