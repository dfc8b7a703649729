/** hora/tfjs: data-parallel training for TensorFlow.js. See docs/tfjs.md. */
export { DistributedOptimizer, setLearningRate } from './optimizer';
export type { Compression, DistributedOptimizerOptions, DistributedOptimizerStats } from './optimizer';
export { broadcastModel, broadcastOptimizer, shard } from './broadcast';
export type { ModelWithWeights, ShardOptions } from './broadcast';
export { BroadcastWeightsCallback, MetricAverageCallback, LearningRateWarmupCallback } from './callbacks';
export type { LearningRateWarmupOptions } from './callbacks';
export { floatToHalf, halfToFloat, floatToBFloat16, bfloat16ToFloat } from './half';
