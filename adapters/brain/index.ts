/** hora/brain: data-parallel mini-batch training for brain.js's NeuralNetwork (see docs/brain.md). */
export { distributed } from './distributed';
export type { DistributedNet, DistributedOptions, TrainOptions, TrainStatus, TraceEvent } from './distributed';
export type { BrainNeuralNetwork, Sample } from './net';
export { ElasticState } from './elastic';
