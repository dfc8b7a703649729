#include "transport/topology.h"

#include <algorithm>
#include <map>

namespace hora {

Topology Topology::fromHostIds(const std::vector<std::string>& hostIds) {
  Topology t;
  t.size = static_cast<int>(hostIds.size());
  std::map<std::string, int> index;
  for (int r = 0; r < t.size; ++r) {
    auto it = index.find(hostIds[r]);
    if (it == index.end()) {
      it = index.emplace(hostIds[r], static_cast<int>(t.hostSizes.size())).first;
      t.hostSizes.push_back(0);
    }
    t.hostOf.push_back(it->second);
    t.localRankOf.push_back(t.hostSizes[it->second]++);
  }
  t.numHosts = static_cast<int>(t.hostSizes.size());
  t.order.resize(t.size);
  for (int r = 0; r < t.size; ++r) t.order[r] = r;
  std::stable_sort(t.order.begin(), t.order.end(), [&](int a, int b) { return t.hostOf[a] < t.hostOf[b]; });
  t.positionOf.resize(t.size);
  for (int i = 0; i < t.size; ++i) t.positionOf[t.order[i]] = i;
  return t;
}

bool Topology::uniform() const {
  for (int n : hostSizes) {
    if (n != hostSizes[0]) return false;
  }
  return true;
}

std::string Topology::gridProblem(const std::vector<int>& dims) const {
  long product = 1;
  for (int d : dims) {
    if (d < 1) return "dimension " + std::to_string(d) + " is not positive";
    product *= d;
    if (product > size) break;
  }
  if (product != size) {
    return describeGrid(dims) + " has " + std::to_string(product) + " positions for a world of " +
           std::to_string(size) + " ranks";
  }
  return "";
}

bool Topology::noteChoice(size_t bytes) const {
  size_t bucket = 0;
  while ((size_t(1) << bucket) < bytes && bucket < 63) ++bucket;
  if (choiceNoted.size() <= bucket) choiceNoted.resize(bucket + 1, false);
  if (choiceNoted[bucket]) return false;
  choiceNoted[bucket] = true;
  return true;
}

std::string describeGrid(const std::vector<int>& dims) {
  std::string s;
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? "x" : "") + std::to_string(dims[i]);
  return s;
}

}  // namespace hora
