#pragma once
/// Result<T>: a value or an error text. 9P errors are values (they become Rerror), never exceptions.

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace p9 {

struct Error {
  std::string ename;
};

inline Error error(std::string ename) { return Error{std::move(ename)}; }

template <class T = void>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}
  Result(Error e) : v_(std::move(e)) {}

  explicit operator bool() const { return v_.index() == 0; }
  bool ok() const { return v_.index() == 0; }
  T& operator*() { assert(ok()); return std::get<0>(v_); }
  const T& operator*() const { assert(ok()); return std::get<0>(v_); }
  T* operator->() { return &**this; }
  const T* operator->() const { return &**this; }
  const std::string& ename() const { assert(!ok()); return std::get<1>(v_).ename; }
  Error error() const { return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error e) : err_(std::move(e.ename)), failed_(true) {}

  explicit operator bool() const { return !failed_; }
  bool ok() const { return !failed_; }
  const std::string& ename() const { return err_; }
  Error error() const { return Error{err_}; }

 private:
  std::string err_;
  bool failed_ = false;
};

using Status = Result<void>;

}  // namespace p9
