'use strict';
// The one way tests start a process and collect what it says.
//
// startProcess(cmd, args, options) spawns and returns a handle at once, for tests that act while the process runs
// (read its output so far, wait for a line, signal it, write to its stdin); spawnAndCollect(...) is startProcess(...).done.
// Every process is ended only by its own PID (or its own process group, when started detached), and only
// while it has not exited yet, so a test never signals a process it did not start.
const path = require('node:path');
const { spawn } = require('node:child_process');

const ROOT = path.join(__dirname, '..', '..');

/**
 * Starts `cmd args...`. Options:
 *   env        the whole environment (process.env unless given)
 *   cwd        where it starts (the checkout's root unless given)
 *   stdin      undefined: none; a string or Buffer: written, then closed; 'pipe': handle.child.stdin is the caller's
 *   stderr     'pipe' (collected, the default) or 'inherit' (passed through to the test's own stderr)
 *   detached   its own process group: the timeout and kill() signal the whole group
 *   timeoutMs  SIGKILLs it after this long, so that a hang fails the test; the result says so (timedOut)
 *   onStdout, onStderr  (chunk as text, handle) for each piece of output as it comes
 * The handle: child, pid, stdout/stderr/output (what came so far; output interleaves both as they arrived),
 * exited(), kill(signal), waitFor(test, timeoutMs) and done, which resolves
 * {code, signal, stdout, stderr, output, timedOut, error} once the process exited and its output closed
 * (error: why it could not be started, if it could not).
 */
function startProcess(cmd, args = [], { env = process.env, cwd = ROOT, stdin, stderr: stderrMode = 'pipe', detached = false, timeoutMs, onStdout, onStderr } = {}) {
  const stdinMode = stdin === undefined ? 'ignore' : 'pipe';
  const child = spawn(cmd, args, { cwd, env, detached, stdio: [stdinMode, 'pipe', stderrMode] });
  let timedOut = false;
  let closed = false;
  let timer;
  const handle = {
    child,
    pid: child.pid,
    stdout: '',
    stderr: '',
    output: '',
    exited: () => child.exitCode !== null || child.signalCode !== null,
    /**
     * Sends `signal` to this process unless it has exited, or, when detached, to its group until its output
     * closed (members of the group may hold it open after the leader exited); false if nothing was sent.
     */
    kill(signal = 'SIGKILL') {
      if (child.pid === undefined || (detached ? closed : handle.exited())) return false;
      try {
        process.kill(detached ? -child.pid : child.pid, signal);
        return true;
      } catch {
        return false; // gone meanwhile
      }
    },
    /**
     * Resolves true once test() holds (a RegExp is tried on the output so far), false if it still does not
     * after timeoutMs or when the process has ended without it.
     */
    async waitFor(test, timeoutMs = 30000) {
      const holds = typeof test === 'function' ? test : () => test.test(handle.output);
      const deadline = Date.now() + timeoutMs;
      let ended = false;
      handle.done.then(() => (ended = true));
      for (;;) {
        if (holds()) return true;
        if (ended || Date.now() > deadline) return false;
        await new Promise((r) => setTimeout(r, 20));
      }
    },
  };
  // Decoded as a stream, so that a character split between two chunks arrives whole.
  child.stdout.setEncoding('utf8');
  child.stdout.on('data', (d) => {
    const text = String(d);
    handle.stdout += text;
    handle.output += text;
    if (onStdout) onStdout(text, handle);
  });
  if (child.stderr) {
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (d) => {
      const text = String(d);
      handle.stderr += text;
      handle.output += text;
      if (onStderr) onStderr(text, handle);
    });
  }
  if (child.stdin) {
    child.stdin.on('error', () => undefined); // a process that exits without reading its input
    if (stdin !== 'pipe') child.stdin.end(stdin);
  }
  handle.done = new Promise((resolve) => {
    const finish = (code, signal, error) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout: handle.stdout, stderr: handle.stderr, output: handle.output, timedOut, error });
    };
    child.on('error', (error) => {
      if (child.pid === undefined) finish(null, null, error); // never started: no 'close' to wait for
    });
    child.on('close', (code, signal) => {
      closed = true;
      finish(code, signal, undefined);
    });
  });
  if (timeoutMs !== undefined && child.pid !== undefined) {
    timer = setTimeout(() => {
      timedOut = handle.kill('SIGKILL');
    }, timeoutMs);
  }
  return handle;
}

/** Runs `cmd args...` to its end (startProcess's options); resolves startProcess's result. */
function spawnAndCollect(cmd, args, options) {
  return startProcess(cmd, args, options).done;
}

/** Says, for an assertion's message, that a result came from the timeout's SIGKILL (empty when it did not). */
function timeoutNote(result) {
  return result && result.timedOut ? '\n(SIGKILLed by the test: it ran past its time limit)' : '';
}

module.exports = { startProcess, spawnAndCollect, timeoutNote, ROOT };
