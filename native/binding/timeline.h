// The timeline's rows as JavaScript gets them: takeTimeline() hands over the works completed since the
// last call in bulk, kNumTimelineColumns numbers per work, so that recording costs no JS work per collective.
#pragma once

#include <napi.h>

#include <vector>

#include "engine/communicator.h"

namespace hora::binding {

// The numbers of one work in a takeTimeline() row, in order (ts/native.ts TimelineColumn): the id, the
// WorkTimes (nanoseconds, then counts), and indexes into the strings for the algorithm, the error code
// and the message (-1: none).
enum TimelineColumn {
  kColId, kColEnqueued, kColStarted, kColCopyInStart, kColCopyInEnd, kColNegotiateStart, kColNegotiateEnd,
  kColTransferEnd, kColCopyOutStart, kColCopyOutEnd, kColDone, kColReduceNanos, kColReduceCalls, kColFusedTensors,
  kColSeq, kColAlgorithm, kColCode, kColMessage,
};
constexpr int kNumTimelineColumns = kColMessage + 1;

constexpr const char* timelineColumnName(TimelineColumn c) {
  switch (c) {
    case kColId: return "id";
    case kColEnqueued: return "enqueued";
    case kColStarted: return "started";
    case kColCopyInStart: return "copyInStart";
    case kColCopyInEnd: return "copyInEnd";
    case kColNegotiateStart: return "negotiateStart";
    case kColNegotiateEnd: return "negotiateEnd";
    case kColTransferEnd: return "transferEnd";
    case kColCopyOutStart: return "copyOutStart";
    case kColCopyOutEnd: return "copyOutEnd";
    case kColDone: return "done";
    case kColReduceNanos: return "reduceNanos";
    case kColReduceCalls: return "reduceCalls";
    case kColFusedTensors: return "fusedTensors";
    case kColSeq: return "seq";
    case kColAlgorithm: return "algorithm";
    case kColCode: return "code";
    case kColMessage: return "message";
  }
  return "?";
}

// {rows, strings}: rows holds kNumTimelineColumns numbers per record (enum TimelineColumn), and strings the
// texts the rows point to by index.
Napi::Object timelineRows(Napi::Env env, const std::vector<hora::TimelineRecord>& records);

}  // namespace hora::binding
