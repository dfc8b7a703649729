// The MLP of the project's ONNX Runtime artifacts (scripts/make-onnx-training-artifacts.js) computed in plain
// JavaScript, in float64: loss, gradients and the optimizer updates, written from the operators' definitions,
// as an independent reference for what ONNX Runtime computes from the graphs.
//
//   h = relu(x W1^T + b1), z = h W2^T + b2, loss = mean over the batch of -log softmax(z)[label]
//   AdamWOptimizer (com.microsoft), step t from 1, m1 = alpha m1 + (1 - alpha) g, m2 = beta m2 + (1 - beta) g^2:
//     adam_mode 1: w -= lr sqrt(1 - beta^t) / (1 - alpha^t) m1 / (sqrt(m2) + epsilon)  (lr alone without
//                  correct_bias), then w -= lr weight_decay w
//     adam_mode 0: w -= lr weight_decay w, then w -= lr / (1 - alpha^t) m1 / (sqrt(m2) / sqrt(1 - beta^t) + epsilon)
//   SGD: w -= lr g
// Parameters are one Float64Array in the graphs' order (fc1.weight [H, I], fc1.bias, fc2.weight [C, H], fc2.bias).

/** Where each parameter sits in the flat array. */
function layout({ inputs, hidden, classes }) {
  const sizes = [hidden * inputs, hidden, classes * hidden, classes];
  const offsets = sizes.map((_, k) => sizes.slice(0, k).reduce((a, b) => a + b, 0));
  return { w1: offsets[0], b1: offsets[1], w2: offsets[2], b2: offsets[3], total: sizes.reduce((a, b) => a + b, 0) };
}

/** Loss and gradient (same layout as the parameters) of the batch x [n, inputs], labels [n]. */
function lossAndGradient(shape, params, x, labels) {
  const { inputs: I, hidden: H, classes: C } = shape;
  const at = layout(shape);
  const n = labels.length;
  const grad = new Float64Array(at.total);
  let loss = 0;
  for (let s = 0; s < n; s++) {
    const xs = x.subarray(s * I, (s + 1) * I);
    const h = new Float64Array(H);
    for (let j = 0; j < H; j++) {
      let v = params[at.b1 + j];
      for (let i = 0; i < I; i++) v += xs[i] * params[at.w1 + j * I + i];
      h[j] = v > 0 ? v : 0;
    }
    const z = new Float64Array(C);
    for (let c = 0; c < C; c++) {
      let v = params[at.b2 + c];
      for (let j = 0; j < H; j++) v += h[j] * params[at.w2 + c * H + j];
      z[c] = v;
    }
    const top = Math.max(...z);
    let sum = 0;
    for (let c = 0; c < C; c++) sum += Math.exp(z[c] - top);
    const logSum = top + Math.log(sum);
    loss += (logSum - z[labels[s]]) / n;
    // d loss / d z = (softmax(z) - onehot(label)) / n
    const dz = new Float64Array(C);
    for (let c = 0; c < C; c++) dz[c] = (Math.exp(z[c] - logSum) - (c === labels[s] ? 1 : 0)) / n;
    const dh = new Float64Array(H);
    for (let c = 0; c < C; c++) {
      grad[at.b2 + c] += dz[c];
      for (let j = 0; j < H; j++) {
        grad[at.w2 + c * H + j] += dz[c] * h[j];
        dh[j] += dz[c] * params[at.w2 + c * H + j];
      }
    }
    for (let j = 0; j < H; j++) {
      if (h[j] <= 0) continue;
      grad[at.b1 + j] += dh[j];
      for (let i = 0; i < I; i++) grad[at.w1 + j * I + i] += dh[j] * xs[i];
    }
  }
  return { loss, grad };
}

/** One AdamWOptimizer step with the model's attributes `a` (adam_mode, alpha, beta, epsilon, weight_decay, correct_bias). */
function adamwStep(a, state, w, g, lr) {
  state.step = (state.step ?? 0) + 1;
  state.m1 ??= new Float64Array(w.length);
  state.m2 ??= new Float64Array(w.length);
  const t = state.step;
  const c1 = 1 - a.alpha ** t, c2 = 1 - a.beta ** t;
  for (let i = 0; i < w.length; i++) {
    state.m1[i] = a.alpha * state.m1[i] + (1 - a.alpha) * g[i];
    state.m2[i] = a.beta * state.m2[i] + (1 - a.beta) * g[i] * g[i];
    if (a.adam_mode === 1) {
      const rate = a.correct_bias ? (lr * Math.sqrt(c2)) / c1 : lr;
      w[i] -= rate * (state.m1[i] / (Math.sqrt(state.m2[i]) + a.epsilon));
      w[i] -= lr * a.weight_decay * w[i];
    } else {
      w[i] -= lr * a.weight_decay * w[i];
      w[i] -= (lr / c1) * (state.m1[i] / (Math.sqrt(state.m2[i]) / Math.sqrt(c2) + a.epsilon));
    }
  }
}

function sgdStep(w, g, lr) {
  for (let i = 0; i < w.length; i++) w[i] -= lr * g[i];
}

module.exports = { layout, lossAndGradient, adamwStep, sgdStep };
