// `hora run` on a terminal: one live status line (ranks up, collectives/s,
// messages/s, bytes/s) kept at the bottom, below the workers' prefixed output.
//
// The line is drawn without a newline and redrawn every second. Output meant
// for the terminal goes through print(): erase the line, write the output
// (whole lines: prefixLines only writes those), draw the line again. The line
// is cut to the terminal's width, since a wrapped line could not be erased.
// Only used when stdout is a TTY; pipes and files see the output unchanged.

import { Writable } from 'node:stream';
import type { JobSnapshot } from '../control/monitor';

/** The part of a TTY WriteStream the status line uses. */
export interface StatusStream {
  write(chunk: string | Uint8Array): boolean;
  columns?: number;
}

const ERASE = '\r\x1b[2K';

export class StatusLine {
  private text = '';
  private timer: NodeJS.Timeout | undefined;
  /** Drawn between start() and stop(); before and after, output passes through untouched. */
  private drawn = false;
  private stopped = false;

  constructor(
    private readonly out: StatusStream,
    private readonly render: () => string,
  ) {}

  /** Draws the line now and every intervalMs. */
  start(intervalMs = 1000): void {
    if (this.stopped || this.drawn) return;
    this.drawn = true;
    this.redraw();
    this.timer = setInterval(() => this.redraw(), intervalMs);
    this.timer.unref();
  }

  /** Renders the line again and draws it. */
  redraw(): void {
    if (!this.drawn) return;
    try {
      this.text = fit(this.render(), this.out.columns);
    } catch {
      // keep the last text
    }
    this.out.write(`${ERASE}${this.text}`);
  }

  /** Writes `chunk` to dest (the same terminal) above the line; returns dest.write()'s answer. */
  print(dest: StatusStream, chunk: string | Uint8Array): boolean {
    if (!this.drawn) return dest.write(chunk);
    this.out.write(ERASE);
    const ok = dest.write(chunk);
    this.out.write(this.text);
    return ok;
  }

  /** Runs fn (which writes to the terminal) with the line out of the way. */
  around(fn: () => void): void {
    if (!this.drawn) return fn();
    this.out.write(ERASE);
    try {
      fn();
    } finally {
      this.out.write(this.text);
    }
  }

  /** A stream whose writes go to dest through print(), for prefixLines. */
  streamTo(dest: StatusStream & Partial<Pick<NodeJS.WriteStream, 'once'>>): Writable {
    return new Writable({
      write: (chunk: Buffer, _encoding, done) => {
        if (this.print(dest, chunk) || typeof dest.once !== 'function') done();
        else dest.once('drain', () => done());
      },
    });
  }

  /** Erases the line for good; later output is written as is. */
  stop(): void {
    if (this.stopped) return;
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    if (this.drawn) this.out.write(ERASE);
    this.drawn = false;
  }
}

/** Text cut to fit one terminal row (one column is left free: writing the last one wraps on some terminals). */
function fit(text: string, columns: number | undefined): string {
  const flat = text.replace(/[\r\n\x1b]/g, ' ');
  if (!columns || columns < 2) return flat;
  const points = Array.from(flat);
  return points.length < columns ? flat : points.slice(0, columns - 1).join('');
}

/** Bytes as 12.3 MB (SI prefixes, as bandwidth is quoted). */
export function formatBytes(n: number): string {
  for (const [f, p] of [[1e12, 'T'], [1e9, 'G'], [1e6, 'M'], [1e3, 'k']] as const) {
    if (n >= f) return `${(n / f).toFixed(1)} ${p}B`;
  }
  return `${Math.round(n)} B`;
}

/** The status line's text for a snapshot: messages/s once the job has sent any (bytes/s counts them too). */
export function formatStatus(s: JobSnapshot): string {
  const stalled = s.stalls.length > 0 ? ` | STALL: ${s.stalls[0].missing.length === 1 ? 'rank' : 'ranks'} ${s.stalls[0].missing.join(', ')} behind` : '';
  const rate = (v: number) => (v >= 100 ? v.toFixed(0) : v.toFixed(1));
  const messages = s.messages > 0 ? ` | ${rate(s.messagesPerS)} messages/s` : '';
  return `hora: ranks up ${s.ranksUp}/${s.size} | ${rate(s.collectivesPerS)} collectives/s${messages} | ${formatBytes(s.bytesPerS)}/s${stalled}`;
}
