/** hora/tfjs: data-parallel (docs/tfjs.md) and pipeline-parallel (docs/pipeline.md) training for TensorFlow.js. */
export { DistributedOptimizer, setLearningRate } from './optimizer';
export type { Compression, DistributedOptimizerOptions, DistributedOptimizerStats } from './optimizer-options';
export { broadcastModel, broadcastOptimizer, joinEpoch, shard } from './broadcast';
export type { ModelWithWeights, ShardOptions } from './broadcast';
export { BroadcastWeightsCallback, MetricAverageCallback, LearningRateWarmupCallback } from './callbacks';
export type { LearningRateWarmupOptions } from './callbacks';
export { floatToHalf, halfToFloat, floatToBFloat16, bfloat16ToFloat } from './half';
export { pipeline, Pipeline, microBatchSizes } from './pipeline/pipeline';
export type { PipelineOptions, PipelinePlan, PipelineStats, BatchStats, PipelineFitArgs, PipelineCallback, PipelineHistory } from './pipeline/pipeline';
export { ElasticState, ElasticCallback, DEFAULT_COMMIT_EVERY } from './elastic';
export type { ElasticModel, ElasticFitArgs, ElasticCallbackOptions } from './elastic';
export { useFasterCpuKernels } from './cpu-kernels';
export { saveCheckpoint, loadCheckpoint } from './checkpoint';
export type { CheckpointModel, CheckpointableOptimizer, SaveCheckpointOptions, LoadCheckpointOptions } from './checkpoint';
