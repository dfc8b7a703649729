#include "timeline.h"

#include <string>
#include <unordered_map>

namespace hora::binding {

using hora::Code;

Napi::Object timelineRows(Napi::Env env, const std::vector<hora::TimelineRecord>& records) {
  Napi::Float64Array rows = Napi::Float64Array::New(env, records.size() * kNumTimelineColumns);
  std::vector<std::string> strings;
  std::unordered_map<std::string, int> index;
  auto indexOf = [&](const std::string& s) {
    auto found = index.emplace(s, static_cast<int>(strings.size()));
    if (found.second) strings.push_back(s);
    return double(found.first->second);
  };
  double* row = rows.Data();
  for (const hora::TimelineRecord& r : records) {
    const hora::WorkTimes& t = r.times;
    row[kColId] = double(r.id);
    row[kColEnqueued] = double(t.enqueued);
    row[kColStarted] = double(t.started);
    row[kColCopyInStart] = double(t.copyInStart);
    row[kColCopyInEnd] = double(t.copyInEnd);
    row[kColNegotiateStart] = double(t.negotiateStart);
    row[kColNegotiateEnd] = double(t.negotiateEnd);
    row[kColTransferEnd] = double(t.transferEnd);
    row[kColCopyOutStart] = double(t.copyOutStart);
    row[kColCopyOutEnd] = double(t.copyOutEnd);
    row[kColDone] = double(t.done);
    row[kColReduceNanos] = double(t.reduceNanos);
    row[kColReduceCalls] = double(t.reduceCalls);
    row[kColFusedTensors] = double(t.fusedTensors);
    row[kColSeq] = double(t.seq);
    row[kColAlgorithm] = t.algorithm != nullptr ? indexOf(t.algorithm) : -1.0;
    row[kColCode] = r.code != Code::kOk ? indexOf(hora::codeName(r.code)) : -1.0;
    row[kColMessage] = r.code != Code::kOk ? indexOf(r.message) : -1.0;
    row += kNumTimelineColumns;
  }
  Napi::Array names = Napi::Array::New(env, strings.size());
  for (size_t i = 0; i < strings.size(); ++i) names.Set(static_cast<uint32_t>(i), strings[i]);
  Napi::Object result = Napi::Object::New(env);
  result.Set("rows", rows);
  result.Set("strings", names);
  return result;
}

}  // namespace hora::binding
