'use strict';
/**
 * ONNX Runtime's on-device training checkpoint (the file TrainingSession.create takes as checkpointState),
 * written and read without a FlatBuffers dependency.
 *
 * The format is a FlatBuffer of ORT's schema onnxruntime/core/flatbuffers/schema/ort_training_checkpoint.fbs
 * (file identifier "ODTC"); the fields used here, with their field ids:
 *   Checkpoint  { 0 version: int32, 1 module_state: ModuleState, 2 optimizer_groups: [OptimizerGroup],
 *                 3 property_bag: PropertyBag }
 *   ModuleState { 0 requires_grad_params: [Tensor], 1 frozen_params: [Tensor], 2 is_nominal_state: bool,
 *                 3 has_external_data: bool }
 *   Tensor      { 0 name: string, 1 doc_string: string, 2 dims: [int64], 3 data_type: int32 (ONNX's
 *                 TensorProto.DataType numbers: 1 is float32), 4 raw_data: [uint8], 5 string_data: [string],
 *                 6 external_data_offset: int64 = -1 }
 * A checkpoint holding only parameters (what ORT's offline tooling writes before training) has version 2,
 * the trainable parameters sorted by name, no frozen ones, and an empty optimizer_groups vector.
 *
 * How a FlatBuffer is laid out (what the writer must get right, since ORT verifies the buffer before reading):
 * the file starts with a uint32 offset to the root table and the 4-byte identifier. A table starts with an
 * int32 that, subtracted from the table's position, gives its vtable: uint16 vtable size, uint16 table size,
 * then one uint16 per field id, the field's offset inside the table or 0 when absent (absent = default).
 * A reference to a table, vector or string is a uint32 added to the position where it is stored, so it points
 * forward. A vector or string is a uint32 length and then its elements (a string also ends with a 0 byte).
 * Every scalar sits at a multiple of its size from the start of the buffer, which ORT's verifier checks.
 *
 * This writer lays the buffer out front to back: the root table first, each object's children after it, and
 * each table's vtable just before it. The layout differs from that of flatc's builders (which write back to
 * front and share vtables) but reads the same; for a given input it is always the same bytes.
 */

const IDENTIFIER = 'ODTC';
const CHECKPOINT_VERSION = 2;
const FLOAT = 1;

const SCALAR_SIZES = { bool: 1, i32: 4, f32: 4, i64: 8 };

/** A growing byte buffer that knows its position; offsets are patched once their target is written. */
class Builder {
  constructor() {
    this.buffer = Buffer.alloc(1024);
    this.length = 0;
  }

  reserve(n) {
    if (this.length + n <= this.buffer.length) return;
    const grown = Buffer.alloc(Math.max(this.buffer.length * 2, this.length + n));
    this.buffer.copy(grown, 0, 0, this.length);
    this.buffer = grown;
  }

  /** Zero bytes until (position + extra) is a multiple of `align`. */
  pad(align, extra = 0) {
    const n = (align - ((this.length + extra) % align)) % align;
    this.reserve(n);
    this.length += n; // Buffer.alloc gave zeros
  }

  put(size, write) {
    this.reserve(size);
    const at = this.length;
    write(this.buffer, at);
    this.length += size;
    return at;
  }

  u16(v) { return this.put(2, (b, at) => b.writeUInt16LE(v, at)); }
  u32(v) { return this.put(4, (b, at) => b.writeUInt32LE(v, at)); }
  i32(v) { return this.put(4, (b, at) => b.writeInt32LE(v, at)); }
  bytes(data) { return this.put(data.byteLength, (b, at) => Buffer.from(data.buffer, data.byteOffset, data.byteLength).copy(b, at)); }

  /** Points the uint32 at `slot` to `target` (which must come after it). */
  patch(slot, target) {
    this.buffer.writeUInt32LE(target - slot, slot);
  }

  finish() {
    return this.buffer.subarray(0, this.length);
  }
}

// The object model the writer takes: tables, vectors and strings, built by the helpers below.
const table = (fields) => ({ kind: 'table', fields }); // fields[id] = {type, value} or undefined
const scalar = (type, value) => ({ type, value });
const ref = (object) => ({ type: 'ref', value: object });
const string = (value) => ({ kind: 'string', value });
const refVector = (items) => ({ kind: 'refs', items });
const int64Vector = (values) => ({ kind: 'scalars', size: 8, data: new BigInt64Array(values.map((v) => BigInt(v))) });
const byteVector = (data) => ({ kind: 'scalars', size: 1, data });

/** Writes `object` (and, after it, everything it refers to); returns its position. */
function write(builder, object) {
  switch (object.kind) {
    case 'string': {
      const text = Buffer.from(object.value, 'utf8');
      builder.pad(4);
      const at = builder.u32(text.length);
      builder.bytes(text);
      builder.put(1, (b, p) => b.writeUInt8(0, p));
      return at;
    }
    case 'scalars': {
      builder.pad(Math.max(object.size, 4), 4); // the elements, after the length, at a multiple of their size
      const at = builder.u32(object.data.length);
      builder.bytes(object.data);
      return at;
    }
    case 'refs': {
      builder.pad(4);
      const at = builder.u32(object.items.length);
      const slots = object.items.map(() => builder.u32(0));
      object.items.forEach((item, k) => builder.patch(slots[k], write(builder, item)));
      return at;
    }
    case 'table':
      return writeTable(builder, object.fields);
    default:
      throw new Error(`ort-checkpoint: unknown object kind ${object.kind}`);
  }
}

function writeTable(builder, fields) {
  // Inside the table: the int32 to the vtable, then the fields, largest first, so each sits at a multiple of
  // its size once the table starts at 4 mod 8 (when it has 8-byte fields) or at a multiple of 4.
  const present = fields.map((f, id) => (f ? { id, ...f, size: f.type === 'ref' ? 4 : SCALAR_SIZES[f.type] } : null)).filter(Boolean);
  const placed = [...present].sort((a, b) => b.size - a.size || a.id - b.id);
  let offset = 4;
  for (const f of placed) {
    f.offset = offset;
    offset += f.size;
  }
  const tableSize = offset;
  const vtableSize = 4 + 2 * fields.length;
  builder.pad(2);
  const vtable = builder.u16(vtableSize);
  builder.u16(tableSize);
  for (let id = 0; id < fields.length; id++) builder.u16(fields[id] ? present.find((f) => f.id === id).offset : 0);
  if (placed.some((f) => f.size === 8)) builder.pad(8, 4);
  else builder.pad(4);
  const start = builder.i32(0);
  builder.buffer.writeInt32LE(start - vtable, start);
  builder.put(tableSize - 4, () => {});
  for (const f of placed) {
    const at = start + f.offset;
    if (f.type === 'bool') builder.buffer.writeUInt8(f.value ? 1 : 0, at);
    else if (f.type === 'i32') builder.buffer.writeInt32LE(f.value, at);
    else if (f.type === 'f32') builder.buffer.writeFloatLE(f.value, at);
    else if (f.type === 'i64') builder.buffer.writeBigInt64LE(BigInt(f.value), at);
  }
  for (const f of placed) if (f.type === 'ref') builder.patch(start + f.offset, write(builder, f.value));
  return start;
}

function tensor({ name, dims, data }) {
  if (!(data instanceof Float32Array)) throw new Error(`ort-checkpoint: parameter '${name}' must be a Float32Array`);
  const count = dims.reduce((a, b) => a * b, 1);
  if (count !== data.length) throw new Error(`ort-checkpoint: parameter '${name}' has dims [${dims}] (${count} values) but ${data.length} values`);
  const raw = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  return table([ref(string(name)), undefined, ref(int64Vector(dims)), scalar('i32', FLOAT), ref(byteVector(raw))]);
}

/**
 * The checkpoint of a model before training: `parameters` is [{name, dims, data: Float32Array}], all
 * trainable. Returns its bytes.
 */
function writeCheckpoint(parameters) {
  const sorted = [...parameters].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const moduleState = table([ref(refVector(sorted.map(tensor))), ref(refVector([]))]);
  const checkpoint = table([scalar('i32', CHECKPOINT_VERSION), ref(moduleState), ref(refVector([]))]);
  const builder = new Builder();
  const rootSlot = builder.u32(0);
  builder.bytes(Buffer.from(IDENTIFIER, 'latin1'));
  builder.patch(rootSlot, write(builder, checkpoint));
  return Buffer.from(builder.finish());
}

/**
 * Reads a checkpoint's version and trainable parameters ({name, dims, dataType, data: Float32Array} for
 * float32 tensors); for checking what a writer, this one or ORT's, put in a file.
 */
function readCheckpoint(bytes) {
  const b = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (b.toString('latin1', 4, 8) !== IDENTIFIER) throw new Error(`ort-checkpoint: not an ORT training checkpoint (identifier '${b.toString('latin1', 4, 8)}')`);
  const deref = (at) => at + b.readUInt32LE(at);
  const field = (t, id) => {
    const vtable = t - b.readInt32LE(t);
    const size = b.readUInt16LE(vtable);
    if (4 + 2 * id >= size) return null;
    const offset = b.readUInt16LE(vtable + 4 + 2 * id);
    return offset === 0 ? null : t + offset;
  };
  const str = (at) => b.toString('utf8', at + 4, at + 4 + b.readUInt32LE(at));
  const refs = (at) => Array.from({ length: b.readUInt32LE(at) }, (_, k) => deref(at + 4 + 4 * k));
  const root = deref(0);
  const version = field(root, 0) === null ? 0 : b.readInt32LE(field(root, 0));
  const moduleState = deref(field(root, 1));
  const parameters = refs(deref(field(moduleState, 0))).map((t) => {
    const dimsAt = deref(field(t, 2));
    const dims = Array.from({ length: b.readUInt32LE(dimsAt) }, (_, k) => Number(b.readBigInt64LE(dimsAt + 4 + 8 * k)));
    const dataType = field(t, 3) === null ? 0 : b.readInt32LE(field(t, 3));
    const rawAt = deref(field(t, 4));
    const raw = b.subarray(rawAt + 4, rawAt + 4 + b.readUInt32LE(rawAt));
    const data = dataType === FLOAT ? new Float32Array(raw.buffer.slice(raw.byteOffset, raw.byteOffset + raw.byteLength)) : null;
    return { name: str(deref(field(t, 0))), dims, dataType, data };
  });
  return { version, parameters };
}

module.exports = { writeCheckpoint, readCheckpoint };
