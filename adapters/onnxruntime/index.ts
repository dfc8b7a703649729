/** hora/onnxruntime: data-parallel training of ONNX Runtime training artifacts (see docs/onnxruntime.md). */
export { DistributedTrainingSession } from './session';
export type { DistributedMode, DistributedTrainingSessionOptions } from './session';
export { gradientModel, readOptimizer, sgdOptimizerModel } from './onnx';
export type { GradientModel, OptimizerSpec, ParameterInfo } from './onnx';
export { loadOrtTraining } from './ort';
export type { OrtTrainingModule, OrtTensor, OrtFeeds, OrtOutputs } from './ort';
