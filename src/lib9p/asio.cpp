// Asio is built once here (ASIO_SEPARATE_COMPILATION), not in every translation unit that uses it.
#include <asio/impl/src.hpp>
