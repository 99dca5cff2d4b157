#pragma once
/// Gate: at most a given number of holders at once; the others wait their turn, each a suspended
/// coroutine that a Tflush takes out of the line. A place is a Pass, given back when the Pass is
/// destroyed, however its holder ends (an error, a flush, a kill).

#include <cstddef>
#include <memory>
#include <mutex>

#include "signal.hpp"

namespace virtfs {

class Gate : public std::enable_shared_from_this<Gate> {
 public:
  class Pass {
   public:
    explicit Pass(std::shared_ptr<Gate> g) : g_(std::move(g)) {}
    Pass(Pass&&) noexcept = default;
    Pass& operator=(Pass&&) = delete;
    ~Pass();

   private:
    std::shared_ptr<Gate> g_;
  };

  /// Waits until fewer than `limit` passes are out, then takes one.
  /// Throws std::system_error(operation_aborted) when the waiting coroutine is cancelled.
  asio::awaitable<Pass> enter(std::size_t limit);

 private:
  std::mutex mu_;
  std::size_t held_ = 0;
  Signal freed_;
};

}  // namespace virtfs
