// Status: the outcome of every fallible operation in the core.
//
// The codes are the closed set that users see as HoraError.code (docs/internals.md, "Errors"). A Status
// names the rank it happened on and, where one is involved, the peer rank, so the message that reaches
// JavaScript can say "rank 2 lost rank 3 during allreduce 'grad/fc1'".
#pragma once

#include <string>
#include <utility>

#include "common/enums.h"

namespace hora {

class Status {
 public:
  Status() = default;
  Status(Code code, std::string message, int peer = -1)
      : code_(code), message_(std::move(message)), peer_(peer) {}

  static Status ok() { return Status(); }
  bool isOk() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  int peer() const { return peer_; }

 private:
  Code code_ = Code::kOk;
  std::string message_;
  int peer_ = -1;
};

// Propagates a failed Status to the caller.
#define HORA_RETURN_IF_ERROR(expr)            \
  do {                                        \
    ::hora::Status hora_status_ = (expr);     \
    if (!hora_status_.isOk()) return hora_status_; \
  } while (0)

}  // namespace hora
