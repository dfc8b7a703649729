#include "algorithms/cost.h"

#include <algorithm>

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

// Ring in rank order: every rank sends to rank + 1.
std::vector<PhaseShape> ringPhases(const Topology& t) {
  FlowCounter ring(t);
  for (int r = 0; r < t.size; ++r) ring.add(r, (r + 1) % t.size);
  return {ring.phase(2 * (t.size - 1), 1.0 / t.size)};
}

// Recursive doubling: the fold-in, lg(pof2) rounds of whole-buffer swaps, the hand-back.
std::vector<PhaseShape> doublingPhases(const Topology& t) {
  std::vector<PhaseShape> out;
  RecursiveDoublingSchedule plan(t.size);
  if (plan.rem > 0) {
    FlowCounter fold(t);
    for (int r = 0; r < 2 * plan.rem; r += 2) fold.add(r, r + 1);
    out.push_back(fold.phase(2, 1.0));
  }
  for (int mask = 1; mask < plan.pof2; mask <<= 1) {
    FlowCounter round(t);
    for (int i = 0; i < plan.pof2; ++i) round.add(plan.actual(i), plan.actual(i ^ mask));
    out.push_back(round.phase(1, 1.0));
  }
  return out;
}

}  // namespace

std::vector<PhaseShape> hierarchicalPhases(const Topology& t) {
  return t.uniform() ? gridPhases(t, t.hierarchicalGrid()) : std::vector<PhaseShape>{};
}

CostEstimate estimateAllreduce(const Topology& t, size_t bytes) {
  CostEstimate e;
  e.ring = phaseSeconds(t, ringPhases(t), bytes);
  e.recursiveDoubling = phaseSeconds(t, doublingPhases(t), bytes);
  const std::vector<PhaseShape> hierarchical = hierarchicalPhases(t);
  if (!hierarchical.empty()) e.hierarchical = phaseSeconds(t, hierarchical, bytes);
  const std::vector<PhaseShape> grid =
      !t.grid.empty() && t.gridProblem(t.grid).empty() ? gridPhases(t, t.grid) : std::vector<PhaseShape>{};
  if (!grid.empty()) e.multiDim = phaseSeconds(t, grid, bytes);
  return e;
}

double estimateGridAllreduce(const Topology& t, const std::vector<int>& dims, size_t bytes) {
  return phaseSeconds(t, gridPhases(t, dims), bytes);
}

}  // namespace hora
