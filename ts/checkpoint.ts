/**
 * hora.checkpoint: distributed checkpoints that every rank writes in parallel and that load at another
 * world size (docs/checkpoint.md).
 *
 * Layout of `dir`:
 *   dir/step-N/manifest.json        what the step holds: world size, each entry's dtype and global length,
 *                                   which rank's file holds which range at which byte offset, a checksum
 *                                   (CRC-32C; sha256 in version 1 manifests) per CHUNK_BYTES of every range
 *   dir/step-N/rank-RRRRR-T.bin     rank R's bytes (T: the save's token, chosen by rank 0)
 *   dir/latest                      "step-N": the last complete save
 *
 * How a save works, and why a crash leaves the previous checkpoint whole:
 *  1. Every rank checks its arguments; rank 0 also writes a probe file named by a fresh token. One
 *     allgatherObject shares every rank's plan (or its error), so every rank checks the same plans and
 *     agrees: an argument error on one rank is the error of every rank, and nothing is written.
 *  2. Every rank reads the probe (a rank that cannot see it is not on rank 0's filesystem), writes its file
 *     under a temporary name, fsyncs it, renames it to its final name and fsyncs the directory. A second
 *     allgatherObject shares where each range landed and its checksums (or the rank's error).
 *  3. Rank 0 writes the manifest under a temporary name, fsyncs and renames it: the step exists from this
 *     rename on. It then replaces `latest` the same way, removes files of the step that the manifest does
 *     not name (an earlier save of the same step) and the steps older than `keep`. A third collective
 *     (broadcastObject) shares rank 0's outcome, so the save resolves on every rank once the step is durable.
 * A step directory without a manifest is an unfinished save: load never reads it, a later save removes it.
 * Each save's files carry its token, so a save of a step that already exists never overwrites a file the
 * existing manifest names: until the new manifest's rename, the old step is whole.
 *
 * How a load works: every rank reads the manifest, works out its part of each entry at the CURRENT world
 * size (a sharded entry split evenly by the rule of reduceScatter's blocks, or the ranges the caller
 * passes), reads only the byte ranges of the chunks that overlap that part (at offsets, never a whole
 * file), checks each chunk's checksum, and copies the part out. One allgatherObject then agrees the outcome:
 * if any rank failed (a corrupt chunk, a truncated or missing file, another model than expected), every
 * rank throws that rank's error, naming the file, and no rank returns anything.
 *
 * Errors: ERR_INVALID_ARGUMENT for the arguments (and a `dir` that holds no checkpoint or not the step asked
 * for, or that is not shared by every rank); ERR_IO, with the OS's code (osCode) and the path, for a file
 * operation that fails (a full disk, a path that cannot be made or written, a read that fails);
 * ERR_MISMATCH for a checkpoint whose files do not match its manifest (missing, truncated, corrupt), or whose
 * manifest does not match what the caller expects, and for ranks whose calls differ.
 *
 * The module is five files, one job each, and this one, the one the rest of hora imports (hora.checkpoint in
 * ts/index.ts, the adapters' saveAgreed/loadAgreed through ts/internal.ts, elastic's State):
 *   checkpoint-save.ts      save: the ranks' plans and their agreement, this rank's file, the manifest, the commit
 *   checkpoint-load.ts      load: the options, this rank's part read by byte ranges and checked by chunk, the outcome
 *   checkpoint-manifest.ts  the manifest's format, its byte layout (chunks, dtypes) and its reading
 *   checkpoint-dir.ts       the directory: the shared-filesystem probe, `latest`, durable replacement, keep
 *   checkpoint-errors.ts    a rank's error as the collectives share it, the agreed error, the common argument checks
 */
export { save, saveAgreed } from './checkpoint-save';
export type { CheckpointShard, CheckpointArray, CheckpointEntry, CheckpointSaveOptions, CheckpointSaveRequest } from './checkpoint-save';
export { load, loadAgreed } from './checkpoint-load';
export type { CheckpointExpectation, CheckpointLoadOptions, LoadedShard, LoadedCheckpoint } from './checkpoint-load';
export { latestStep } from './checkpoint-dir';
