/** hora.elastic: training that goes on when workers are lost or join. */
export { State } from './state';
export type { StateOptions } from './state';
export { run } from './run';
