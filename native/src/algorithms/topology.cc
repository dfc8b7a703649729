#include "algorithms/topology.h"

#include <algorithm>
#include <map>

#include "algorithms/recursive_doubling.h"

namespace hora {
namespace {

// Counts, for a set of simultaneous exchanges from -> to, the most that leave any one host.
class FlowCounter {
 public:
  explicit FlowCounter(const Topology& t) : t_(t), perHost_(t.numHosts, 0) {}
  void add(int from, int to) {
    if (t_.hostOf[from] != t_.hostOf[to]) {
      int& n = perHost_[t_.hostOf[from]];
      max_ = std::max(max_, ++n);
    } else {
      local_ = true;
    }
  }
  PhaseShape phase(int steps, double fraction) const { return {steps, fraction, max_, local_}; }

 private:
  const Topology& t_;
  std::vector<int> perHost_;
  int max_ = 0;
  bool local_ = false;
};

// Reduce-scatter then allgather along each dimension of `dims` in turn over grid positions (see
// multidim.cc): 2(d-1) steps per dimension, each moving 1/d of what is left at that level.
std::vector<PhaseShape> gridPhases(const Topology& t, const std::vector<int>& dims) {
  std::vector<PhaseShape> out;
  double left = 1;
  int stride = 1;
  for (int d : dims) {
    if (d > 1) {
      FlowCounter flows(t);
      for (int pos = 0; pos < t.size; ++pos) {
        int coord = (pos / stride) % d;
        int next = pos + ((coord + 1) % d - coord) * stride;
        flows.add(t.order[pos], t.order[next]);
      }
      out.push_back(flows.phase(2 * (d - 1), left / d));
      left /= d;
    }
    stride *= d;
  }
  return out;
}

double phaseSeconds(const Topology& t, const std::vector<PhaseShape>& phases, size_t bytes) {
  double total = 0;
  for (const PhaseShape& ph : phases) {
    double n = ph.fraction * static_cast<double>(bytes);
    double step = 0;
    if (ph.hasLocal) step = t.local.alpha + n * t.local.beta;
    if (ph.crossFlows > 0) step = std::max(step, t.cross.alpha + n * t.cross.beta * ph.crossFlows);
    total += ph.steps * step;
  }
  return total;
}

}  // namespace

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
  t.shapes();
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

void Topology::shapes() {
  // Ring in rank order: every rank sends to rank + 1.
  FlowCounter ring(*this);
  for (int r = 0; r < size; ++r) ring.add(r, (r + 1) % size);
  ringShape = {ring.phase(2 * (size - 1), 1.0 / size)};

  // Recursive doubling: the fold-in, lg(pof2) rounds of whole-buffer swaps, the hand-back.
  doublingShape.clear();
  RecursiveDoublingSchedule plan(size);
  if (plan.rem > 0) {
    FlowCounter fold(*this);
    for (int r = 0; r < 2 * plan.rem; r += 2) fold.add(r, r + 1);
    doublingShape.push_back(fold.phase(2, 1.0));
  }
  for (int mask = 1; mask < plan.pof2; mask <<= 1) {
    FlowCounter round(*this);
    for (int i = 0; i < plan.pof2; ++i) round.add(plan.actual(i), plan.actual(i ^ mask));
    doublingShape.push_back(round.phase(1, 1.0));
  }

  hierarchicalShape = uniform() ? gridPhases(*this, hierarchicalGrid()) : std::vector<PhaseShape>{};
  gridShape = !grid.empty() && gridProblem(grid).empty() ? gridPhases(*this, grid) : std::vector<PhaseShape>{};
}

CostEstimate estimateAllreduce(const Topology& t, size_t bytes) {
  CostEstimate e;
  e.ring = phaseSeconds(t, t.ringShape, bytes);
  e.recursiveDoubling = phaseSeconds(t, t.doublingShape, bytes);
  if (!t.hierarchicalShape.empty()) e.hierarchical = phaseSeconds(t, t.hierarchicalShape, bytes);
  if (!t.gridShape.empty()) e.multiDim = phaseSeconds(t, t.gridShape, bytes);
  return e;
}

double estimateGridAllreduce(const Topology& t, const std::vector<int>& dims, size_t bytes) {
  return phaseSeconds(t, gridPhases(t, dims), bytes);
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
