/**
 * Pipeline schedules: what each stage does, in order, for one batch of m micro-batches over S stages.
 *
 * Stage s (0-based) runs a list of instructions; each is the forward or the backward of one micro-batch,
 * together with the messages it implies: a forward receives its input activation from stage s - 1 and
 * sends its output activation to stage s + 1; a backward receives the gradient of its output from
 * stage s + 1 and sends the gradient of its input to stage s - 1. The first stage reads the data
 * instead of receiving, the last computes the loss instead of receiving a gradient. Both schedules
 * are synchronous: the gradients of all m micro-batches are summed and applied once per batch.
 *
 * 'gpipe': all m forwards, then all m backwards. Backwards run in micro-batch order 0..m-1 (as
 *   torch.distributed.pipelining's ScheduleGPipe does), not in reverse: 1F1B has no choice but to run
 *   its backwards in that order, so with both schedules a stage sums its micro-batch gradients in the
 *   same order and the two end with bit-identical weights. The makespan is the same either way (the
 *   backward wave is a mirror image of the forward wave). A stage holds all m micro-batches' stashed
 *   activations before its first backward.
 *
 * '1f1b' (PipeDream-Flush, as in Megatron and DeepSpeed's TrainSchedule): stage s runs
 *   w = min(S - s - 1, m) warm-up forwards, then m - w rounds of one forward and one backward, then w
 *   cool-down backwards. Written as torch's Schedule1F1B counts it, that is S - s forwards before the
 *   first backward and then backward/forward pairs: the same sequence. At most min(S - s, m)
 *   micro-batches are in flight on stage s (forwarded, not yet backwarded), so stage 0 keeps S, the
 *   last stage 1, whatever m is. With equal costs the bubble is the same as GPipe's,
 *   (S - 1) / (m + S - 1); 1F1B saves memory, not time.
 *
 * Messages between two adjacent stages travel in one direction per kind (activations s -> s + 1,
 * gradients s + 1 -> s), and both schedules send and receive each kind in micro-batch order on both
 * ends, so one ordered channel per direction (one tag) matches them without tags per micro-batch.
 * simulate() checks that, and that no stage waits forever. It also shows what 1F1B demands of sends:
 * in its steady state stage s sends an activation forward while stage s + 1 sends a gradient back, so
 * if a send held its stage until the receiver took the message, both would wait on each other (for
 * every S >= 2 and m >= 2; GPipe never). A stage must post its send and go on to its next receive.
 */

export type ScheduleKind = 'gpipe' | '1f1b';

/** One message between adjacent stages: an activation going forward or a gradient going back. */
export interface Message {
  kind: 'activation' | 'gradient';
  /** The other stage. */
  peer: number;
  microBatch: number;
}

export interface Instruction {
  op: 'forward' | 'backward';
  microBatch: number;
  /** What this instruction waits for before it starts (null: the data or the loss). */
  recv: Message | null;
  /** What it sends when it ends (null on the last stage's forward and the first stage's backward). */
  send: Message | null;
}

export const SCHEDULES: readonly ScheduleKind[] = ['gpipe', '1f1b'];

function instruction(op: 'forward' | 'backward', k: number, s: number, stages: number): Instruction {
  const first = s === 0;
  const last = s === stages - 1;
  if (op === 'forward') {
    return {
      op, microBatch: k,
      recv: first ? null : { kind: 'activation', peer: s - 1, microBatch: k },
      send: last ? null : { kind: 'activation', peer: s + 1, microBatch: k },
    };
  }
  return {
    op, microBatch: k,
    recv: last ? null : { kind: 'gradient', peer: s + 1, microBatch: k },
    send: first ? null : { kind: 'gradient', peer: s - 1, microBatch: k },
  };
}

function checkCount(fn: string, name: string, v: unknown): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 1) {
    throw new TypeError(`${fn}: argument '${name}' must be an integer >= 1; received ${typeof v === 'string' ? `'${v}'` : String(v)}`);
  }
  return v;
}

/** The instructions of stage `stage`, in the order it runs them. */
export function stageSchedule(kind: ScheduleKind, stage: number, stages: number, microBatches: number): Instruction[] {
  checkCount('stageSchedule', 'stages', stages);
  checkCount('stageSchedule', 'microBatches', microBatches);
  if (!Number.isInteger(stage) || stage < 0 || stage >= stages) {
    throw new TypeError(`stageSchedule: argument 'stage' must be an integer from 0 to ${stages - 1}; received ${String(stage)}`);
  }
  const m = microBatches;
  const ops: Array<['forward' | 'backward', number]> = [];
  if (kind === 'gpipe') {
    for (let k = 0; k < m; k++) ops.push(['forward', k]);
    for (let k = 0; k < m; k++) ops.push(['backward', k]);
  } else if (kind === '1f1b') {
    const warmup = Math.min(stages - stage - 1, m);
    let f = 0;
    let b = 0;
    while (f < warmup) ops.push(['forward', f++]);
    while (f < m) { ops.push(['forward', f++]); ops.push(['backward', b++]); }
    while (b < m) ops.push(['backward', b++]);
  } else {
    throw new TypeError(`stageSchedule: argument 'kind' must be 'gpipe' or '1f1b'; received ${typeof kind === 'string' ? `'${kind}'` : String(kind)}`);
  }
  return ops.map(([op, k]) => instruction(op, k, stage, stages));
}

/** Every stage's instructions: schedule[s] is stage s's list. */
export function buildSchedule(kind: ScheduleKind, stages: number, microBatches: number): Instruction[][] {
  checkCount('buildSchedule', 'stages', stages);
  return Array.from({ length: stages }, (_, s) => stageSchedule(kind, s, stages, microBatches));
}

/** Per-stage costs for simulate(), in any one time unit. */
export interface StageCosts {
  /** forward[s]: one micro-batch's forward on stage s. */
  forward: readonly number[];
  /** backward[s]: one micro-batch's backward on stage s. */
  backward: readonly number[];
  /** transfer[s]: one message over the link between stages s and s + 1, either way (S - 1 entries; default 0). */
  transfer?: readonly number[];
}

export interface Simulation {
  /** From the first instruction's start to the last one's end. */
  makespan: number;
  /** busy[s]: time stage s spent computing. */
  busy: number[];
  /** 1 - sum(busy) / (S x makespan): the share of stage-time spent waiting. */
  bubbleFraction: number;
  /** peakInFlight[s]: the most micro-batches forwarded but not yet backwarded on stage s at once. */
  peakInFlight: number[];
  /** start[s][i], end[s][i]: when stage s's i-th instruction ran. */
  start: number[][];
  end: number[][];
}

/**
 * How a stage sends. 'eager': a send never holds the sender (the communication thread carries it), but
 * each directed link carries one message at a time, in the order sent, so a message arrives transfer[s]
 * after the later of its send and the previous message's arrival on that link. 'rendezvous': the sender
 * is held until the receiver takes the message and the transfer is done, as a blocking send of a
 * message too large to buffer would be.
 */
export type SendMode = 'eager' | 'rendezvous';

/**
 * Runs the per-stage lists against each other. An instruction starts when its stage is free and its
 * message has arrived. Throws if a stage receives a message other than the one it expects next on that
 * link (the orders differ) or if the stages stop with work left (a deadlock), naming each stage and
 * what it waits for.
 */
export function simulate(schedule: Instruction[][], costs: StageCosts, sends: SendMode = 'eager'): Simulation {
  const S = schedule.length;
  const transfer = costs.transfer ?? new Array(Math.max(S - 1, 0)).fill(0);
  for (const [name, list, n] of [['forward', costs.forward, S], ['backward', costs.backward, S], ['transfer', transfer, S - 1]] as const) {
    if (!Array.isArray(list) || list.length !== n || !list.every((v) => typeof v === 'number' && v >= 0 && Number.isFinite(v))) {
      throw new TypeError(`simulate: argument 'costs.${name}' must be an array of ${n} finite numbers >= 0; received ${Array.isArray(list) ? `[${list.join(', ')}]` : String(list)}`);
    }
  }
  if (sends !== 'eager' && sends !== 'rendezvous') {
    throw new TypeError(`simulate: argument 'sends' must be 'eager' or 'rendezvous'; received ${typeof sends === 'string' ? `'${sends}'` : String(sends)}`);
  }
  // links[from][to]: messages sent and not yet received on that directed link, oldest first. With
  // rendezvous sends, `arrives` is when the sender offered it; the transfer starts once both are ready.
  type InTransit = { msg: Message; arrives: number; from: number };
  const links = new Map<string, InTransit[]>();
  const linkFree = new Map<string, number>();
  const key = (from: number, to: number) => `${from}>${to}`;
  const next = new Array(S).fill(0);
  const free = new Array(S).fill(0);
  const busy = new Array(S).fill(0);
  const inFlight = new Array(S).fill(0);
  const peakInFlight = new Array(S).fill(0);
  const start = schedule.map((list) => new Array<number>(list.length).fill(NaN));
  const end = schedule.map((list) => new Array<number>(list.length).fill(NaN));
  const forwarded = schedule.map(() => new Set<number>());
  // heldBy[s]: the message stage s is held sending (rendezvous only).
  const heldBy: Array<Message | null> = new Array(S).fill(null);
  let remaining = schedule.reduce((n, list) => n + list.length, 0);

  while (remaining > 0 || heldBy.some((h) => h !== null)) {
    let progressed = false;
    for (let s = 0; s < S; s++) {
      while (next[s] < schedule[s].length && heldBy[s] === null) {
        const ins = schedule[s][next[s]];
        let ready = free[s];
        if (ins.recv) {
          const queue = links.get(key(ins.recv.peer, s));
          if (!queue || queue.length === 0) break;
          const head = queue[0];
          if (head.msg.kind !== ins.recv.kind || head.msg.microBatch !== ins.recv.microBatch) {
            throw new Error(`simulate: stage ${s} expects the ${ins.recv.kind} of micro-batch ${ins.recv.microBatch} from stage ${ins.recv.peer} but the next message on that link is the ${head.msg.kind} of micro-batch ${head.msg.microBatch}`);
          }
          queue.shift();
          if (sends === 'rendezvous') {
            ready = Math.max(ready, head.arrives) + transfer[Math.min(s, head.from)];
            free[head.from] = ready;
            heldBy[head.from] = null;
          } else {
            ready = Math.max(ready, head.arrives);
          }
        }
        if (ins.op === 'backward' && !forwarded[s].has(ins.microBatch)) {
          throw new Error(`simulate: stage ${s} runs the backward of micro-batch ${ins.microBatch} before its forward`);
        }
        const cost = ins.op === 'forward' ? costs.forward[s] : costs.backward[s];
        start[s][next[s]] = ready;
        free[s] = ready + cost;
        end[s][next[s]] = free[s];
        busy[s] += cost;
        if (ins.op === 'forward') {
          forwarded[s].add(ins.microBatch);
          peakInFlight[s] = Math.max(peakInFlight[s], ++inFlight[s]);
        } else {
          inFlight[s] -= 1;
        }
        if (ins.send) {
          const k = key(s, ins.send.peer);
          let arrives = free[s];
          if (sends === 'rendezvous') {
            heldBy[s] = ins.send;
          } else {
            arrives = Math.max(free[s], linkFree.get(k) ?? 0) + transfer[Math.min(s, ins.send.peer)];
            linkFree.set(k, arrives);
          }
          if (!links.has(k)) links.set(k, []);
          (links.get(k) as InTransit[]).push({ msg: { ...ins.send, peer: s }, arrives, from: s });
        }
        next[s] += 1;
        remaining -= 1;
        progressed = true;
      }
    }
    if (!progressed) {
      const waiting = schedule.map((list, s) => {
        const held = heldBy[s];
        if (held) return `stage ${s} waits for stage ${held.peer} to take the ${held.kind} of micro-batch ${held.microBatch}`;
        if (next[s] >= list.length) return null;
        const r = list[next[s]].recv as Message;
        return `stage ${s} waits for the ${r.kind} of micro-batch ${r.microBatch} from stage ${r.peer}`;
      }).filter((w) => w !== null);
      throw new Error(`simulate: deadlock: ${waiting.join('; ')}`);
    }
  }
  const makespan = Math.max(0, ...end.flat(), ...free);
  const total = busy.reduce((a, b) => a + b, 0);
  return {
    makespan,
    busy,
    bubbleFraction: makespan > 0 ? 1 - total / (S * makespan) : 0,
    peakInFlight,
    start,
    end,
  };
}
