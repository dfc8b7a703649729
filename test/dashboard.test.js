'use strict';
// `hora run --dashboard` end to end: a 2-rank job of training-like steps, its page opened in headless
// Chromium (Debian's chromium, driven by playwright-core), the figures read from the page, and a
// screenshot decoded and checked: the chart holds both ranks' lines and the step bar both shares.
//
// Needs /usr/bin/chromium (apt-get install chromium; HORA_CHROMIUM=/path for another) and playwright-core
// (a devDependency; HORA_PLAYWRIGHT_CORE=/path/to/playwright-core to use one installed elsewhere).
// Without them the browser part is skipped with the reason; the HTTP part always runs.
const t = require('tap');
const fs = require('node:fs');
const http = require('node:http');
const os = require('node:os');
const path = require('node:path');
const zlib = require('node:zlib');
const { startProcess } = require('./support/spawn');
const { HORA, NODE, ROOT } = require('./support/hora-job');

const WORKER = path.join(__dirname, 'workers', 'stats-worker.js');
const CHROMIUM = process.env.HORA_CHROMIUM || '/usr/bin/chromium';

function loadPlaywright() {
  const tried = [];
  for (const id of [process.env.HORA_PLAYWRIGHT_CORE, 'playwright-core'].filter(Boolean)) {
    try {
      return { playwright: require(id) };
    } catch (e) {
      tried.push(`${id}: ${e.code || e.message}`);
    }
  }
  return { missing: `playwright-core not found (${tried.join('; ')}); npm install it or set HORA_PLAYWRIGHT_CORE` };
}

/** Starts the job; resolves {url, kill(signal), output(), done} once the launcher has printed the dashboard's URL. */
function startJob(stopFile, extraArgs = [], { np = 2, mode = 'steps' } = {}) {
  const job = startProcess(NODE, [HORA, 'run', '-np', String(np), '--dashboard', ...extraArgs, '--', NODE, WORKER], {
    cwd: ROOT, env: { ...process.env, HORA_TEST_MODE: mode, HORA_TEST_STOP_FILE: stopFile, HORA_TIMEOUT_S: '60' },
    timeoutMs: 90000,
  });
  const done = job.done.then((r) => r.code);
  const urlLine = /hora run: dashboard on (http:\/\/127\.0\.0\.1:\d+\/)/;
  const url = job.waitFor(urlLine, 90000).then((seen) => {
    if (!seen) throw new Error(`the launcher exited without a dashboard URL:\n${job.output}`);
    return urlLine.exec(job.output)[1];
  });
  return { kill: (signal) => job.kill(signal), url, done, output: () => job.output };
}

function get(url, headers = {}) {
  return new Promise((resolve, reject) => {
    http.get(url, { headers }, (res) => {
      let body = '';
      res.on('data', (d) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body }));
    }).on('error', reject);
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ---------------------------------------------------------------------------------------------------
// A PNG decoder for the screenshot: 8-bit RGB or RGBA, not interlaced (what Chromium writes).

function decodePng(buf) {
  if (buf.readUInt32BE(0) !== 0x89504e47) throw new Error('not a PNG');
  let at = 8;
  let width = 0, height = 0, channels = 0;
  const idat = [];
  while (at < buf.length) {
    const len = buf.readUInt32BE(at);
    const type = buf.toString('latin1', at + 4, at + 8);
    const data = buf.subarray(at + 8, at + 8 + len);
    if (type === 'IHDR') {
      width = data.readUInt32BE(0);
      height = data.readUInt32BE(4);
      const depth = data[8], colorType = data[9], interlace = data[12];
      if (depth !== 8 || interlace !== 0 || (colorType !== 2 && colorType !== 6)) throw new Error(`unsupported PNG: depth ${depth}, color type ${colorType}, interlace ${interlace}`);
      channels = colorType === 6 ? 4 : 3;
    } else if (type === 'IDAT') {
      idat.push(data);
    } else if (type === 'IEND') {
      break;
    }
    at += 12 + len;
  }
  const raw = zlib.inflateSync(Buffer.concat(idat));
  const stride = width * channels;
  const px = Buffer.alloc(height * stride);
  for (let y = 0; y < height; y++) {
    const filter = raw[y * (stride + 1)];
    const line = raw.subarray(y * (stride + 1) + 1, (y + 1) * (stride + 1));
    for (let x = 0; x < stride; x++) {
      const a = x >= channels ? px[y * stride + x - channels] : 0;
      const b = y > 0 ? px[(y - 1) * stride + x] : 0;
      const c = x >= channels && y > 0 ? px[(y - 1) * stride + x - channels] : 0;
      let v;
      switch (filter) {
        case 0: v = 0; break;
        case 1: v = a; break;
        case 2: v = b; break;
        case 3: v = (a + b) >> 1; break;
        case 4: {
          const p = a + b - c, pa = Math.abs(p - a), pb = Math.abs(p - b), pc = Math.abs(p - c);
          v = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
          break;
        }
        default: throw new Error(`bad PNG filter ${filter} on row ${y}`);
      }
      px[y * stride + x] = (line[x] + v) & 0xff;
    }
  }
  return { width, height, channels, pixel: (x, y) => Array.from(px.subarray((y * width + x) * channels, (y * width + x) * channels + 3)) };
}

/** Pixels within `box` (CSS px = screenshot px at scale 1) no farther than `tolerance` from rgb. */
function countColor(png, box, rgb, tolerance = 40) {
  let n = 0;
  for (let y = Math.ceil(box.y); y < Math.floor(box.y + box.height) && y < png.height; y++) {
    for (let x = Math.ceil(box.x); x < Math.floor(box.x + box.width) && x < png.width; x++) {
      const [r, g, b] = png.pixel(x, y);
      if (Math.abs(r - rgb[0]) + Math.abs(g - rgb[1]) + Math.abs(b - rgb[2]) <= tolerance) n++;
    }
  }
  return n;
}

const RANK0 = [0x3b, 0x82, 0xc4];
const RANK1 = [0xe0, 0x7b, 0x39];

// ---------------------------------------------------------------------------------------------------

t.test('the dashboard serves its page and figures on loopback only', async (t) => {
  const stopFile = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'hora-dash-')), 'stop');
  const job = startJob(stopFile);
  t.teardown(() => job.kill('SIGKILL'));
  const url = await job.url;
  const page = await get(url);
  t.equal(page.status, 200);
  t.match(page.headers['content-type'], /text\/html/);
  t.notMatch(page.body, /<(script|link|img)[^>]+(src|href)=/i, 'the page loads nothing from elsewhere');
  t.match(page.headers['content-security-policy'], /default-src 'none'/);
  let stats;
  for (let i = 0; i < 40; i++) {
    stats = JSON.parse((await get(`${url}stats.json`)).body);
    if (stats.ranks.every((r) => r.collectivesPerS > 0) && stats.kinds.length > 0) break;
    await sleep(250);
  }
  t.equal(stats.size, 2);
  t.equal(stats.ranksUp, 2);
  t.ok(stats.ranks.every((r) => r.collectivesPerS > 0 && r.bytesPerS > 0), 'both ranks report rates');
  const allreduce = stats.kinds.find((k) => k.kind === 'allreduce');
  t.ok(allreduce && allreduce.busbw > 0, `allreduce busbw ${allreduce && allreduce.busbw}`);
  t.ok(stats.steps.count > 0 && stats.steps.commShare > 0 && stats.steps.commShare < 1, `steps ${JSON.stringify(stats.steps)}`);
  t.equal(stats.pipeline, null, 'no rank reports a pipeline stage: no pipeline section');
  const foreign = await get(url, { host: 'attacker.example:80' });
  t.equal(foreign.status, 403, 'a request naming another host is refused (DNS rebinding)');
  t.equal((await get(`${url}nothing`)).status, 404);
  fs.writeFileSync(stopFile, '');
  t.equal(await job.done, 0, job.output());
});

// The dashboard at `url` in headless Chromium (closed when the test ends), or null after a skip that says
// what is missing.
async function openPage(t, url, height) {
  const { playwright, missing } = loadPlaywright();
  const why = !playwright ? missing
    : !fs.existsSync(CHROMIUM) ? `${CHROMIUM} not found (apt-get install chromium, or set HORA_CHROMIUM)` : null;
  if (why) {
    t.skip(`the page: ${why}`);
    return null;
  }
  const browser = await playwright.chromium.launch({ executablePath: CHROMIUM, headless: true });
  t.teardown(() => browser.close());
  const page = await browser.newPage({ viewport: { width: 1100, height }, deviceScaleFactor: 1 });
  await page.goto(url);
  return page;
}

t.test('headless Chromium shows the figures, the chart and the step split', async (t) => {
  const { playwright, missing } = loadPlaywright();
  if (!playwright) return t.skip(missing);
  if (!fs.existsSync(CHROMIUM)) return t.skip(`${CHROMIUM} not found (apt-get install chromium, or set HORA_CHROMIUM)`);

  const stopFile = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'hora-dash-')), 'stop');
  const job = startJob(stopFile);
  t.teardown(() => job.kill('SIGKILL'));
  const url = await job.url;
  const browser = await playwright.chromium.launch({ executablePath: CHROMIUM, headless: true });
  t.teardown(() => browser.close());
  const page = await browser.newPage({ viewport: { width: 1100, height: 1200 }, deviceScaleFactor: 1 });
  await page.goto(url);
  // Wait for both ranks to run and for a few seconds of chart history.
  await page.waitForFunction(() => {
    const rates = [...document.querySelectorAll('#ranks tbody tr td[data-field=collectivesPerS]')].map((td) => parseFloat(td.textContent));
    const busbw = document.querySelector('#kinds tr[data-kind=allreduce] td[data-field=busbw]');
    return rates.length === 2 && rates.every((r) => r > 0) && busbw && /\d/.test(busbw.textContent);
  }, null, { timeout: 30000, polling: 250 });
  await sleep(3500);

  const rows = await page.$$eval('#ranks tbody tr', (trs) => trs.map((tr) => ({
    rank: tr.dataset.rank,
    text: tr.textContent,
    rate: parseFloat(tr.querySelector('td[data-field=collectivesPerS]').textContent),
    bytes: tr.querySelector('td[data-field=bytesPerS]').textContent,
  })));
  t.same(rows.map((r) => r.rank), ['0', '1'], 'one row per rank');
  for (const r of rows) {
    t.ok(r.rate > 0, `rank ${r.rank}: ${r.rate} collectives/s`);
    t.match(r.bytes, /[kMG]B\/s$/, `rank ${r.rank}: ${r.bytes}`);
  }
  const busbw = await page.textContent('#kinds tr[data-kind=allreduce] td[data-field=busbw]');
  t.match(busbw, /^\d+(\.\d+)? [kMG]?B\/s$/, `allreduce busbw ${busbw}`);
  t.ok(parseFloat(busbw) > 0, 'allreduce busbw is not zero');
  t.match(await page.textContent('#summary'), /ranks up 2\/2/);
  t.match(await page.textContent('#split-text'), /compute \d+%, communication \d+%/);
  t.equal(await page.textContent('#stalls'), 'no stalled ranks');
  t.ok(await page.isHidden('#pipeline-panel'), 'no pipeline: no Pipeline panel');

  const shot = await page.screenshot();
  const dir = process.env.HORA_TEST_SCREENSHOT_DIR;
  if (dir) fs.writeFileSync(path.join(dir, 'dashboard.png'), shot);
  const png = decodePng(shot);
  t.equal(png.width, 1100);
  const chart = await page.locator('#chart').boundingBox();
  const inner = { x: chart.x + 60, y: chart.y + 8, width: chart.width - 70, height: chart.height - 34 };
  // The ranks run in lockstep, so rank 1's line may cover rank 0's: count them together.
  const lines = countColor(png, inner, RANK0) + countColor(png, inner, RANK1);
  t.ok(lines > 40, `the ranks' lines in the chart: ${lines} pixels`);
  const empty = await browser.newPage({ viewport: { width: 1100, height: 1200 }, deviceScaleFactor: 1 });
  await empty.setContent('<canvas width=760 height=220></canvas>');
  const emptyPng = decodePng(await empty.screenshot());
  t.equal(countColor(emptyPng, inner, RANK0) + countColor(emptyPng, inner, RANK1), 0,
    'the same region of a page without the chart has no such pixels (the check can fail)');
  const legend = await page.locator('#legend').boundingBox();
  t.ok(countColor(png, legend, RANK0, 10) > 20 && countColor(png, legend, RANK1, 10) > 20, 'the legend shows both ranks\' colors');
  const split = await page.locator('#split').boundingBox();
  const compute = countColor(png, split, RANK0, 10);
  const comm = countColor(png, split, RANK1, 10);
  t.ok(compute > 100 && comm > 100, `step bar: ${compute} compute and ${comm} communication pixels`);

  fs.writeFileSync(stopFile, '');
  t.equal(await job.done, 0, job.output());
});

t.test('4 ranks as 2 pipeline stages x 2 replicas: per-stage utilization in /stats.json and the Pipeline panel', async (t) => {
  const stopFile = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'hora-dash-')), 'stop');
  const job = startJob(stopFile, [], { np: 4, mode: 'pipeline' });
  t.teardown(() => job.kill('SIGKILL'));
  const url = await job.url;
  let stats;
  for (let i = 0; i < 120; i++) {
    stats = JSON.parse((await get(`${url}stats.json`)).body);
    if (stats.pipeline && stats.pipeline.byStage.every((s) => s.ranks.length === 2 && s.batches > 0)) break;
    await sleep(250);
  }
  const p = stats.pipeline;
  t.ok(p, 'the pipeline section is there');
  t.same({ stages: p.stages, replicas: p.replicas }, { stages: 2, replicas: 2 });
  t.same(p.byStage.map((s) => s.ranks), [[0, 2], [1, 3]], 'rank = replica x stages + stage');
  t.same(p.byStage.map((s) => s.utilization), [0.75, 0.25], 'busy over wall time, averaged over replicas');
  t.same(p.byStage.map((s) => s.bubble), [0.25, 0.75]);
  t.same(p.byStage.map((s) => s.weightBytes), [1000, 2000]);
  t.same(p.byStage.map((s) => s.peakStashBytes), [300, 400], 'the largest stash of any replica');

  const page = await openPage(t, url, 1600);
  if (page) {
    await page.waitForFunction(() => document.querySelectorAll('#pipeline tbody tr').length === 2, null, { timeout: 30000, polling: 250 });
    t.ok(await page.isVisible('#pipeline-panel'), 'the Pipeline panel shows');
    const rows = await page.$$eval('#pipeline tbody tr', (trs) => trs.map((tr) => Object.fromEntries(
      [...tr.querySelectorAll('td')].map((td) => [td.dataset.field, td.textContent]))));
    t.same(rows.map((r) => [r.stage, r.ranks, r.utilization, r.bubble, r.weightBytes, r.peakStashBytes]), [
      ['0', '0, 2', '75%', '25%', '1.00 kB', '300 B'],
      ['1', '1, 3', '25%', '75%', '2.00 kB', '400 B'],
    ], 'one row per stage');
    const widths = await page.$$eval('#pipeline .util', (bars) => bars.map((b) => b.firstChild.getBoundingClientRect().width / b.getBoundingClientRect().width));
    t.same(widths.map((w) => Math.round(100 * w)), [75, 25], 'each stage\'s bar is as long as its utilization');
    if (process.env.HORA_TEST_SCREENSHOT_DIR) await page.screenshot({ path: path.join(process.env.HORA_TEST_SCREENSHOT_DIR, 'dashboard-pipeline.png'), fullPage: true });
  }
  fs.writeFileSync(stopFile, '');
  t.equal(await job.done, 0, job.output());
});

t.test('send and recv in the figures: messages/s per rank, their kinds without a bandwidth, and the step split\'s legend', async (t) => {
  const stopFile = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'hora-dash-')), 'stop');
  const job = startJob(stopFile, [], { mode: 'messages' });
  t.teardown(() => job.kill('SIGKILL'));
  const url = await job.url;
  let stats;
  for (let i = 0; i < 80; i++) {
    stats = JSON.parse((await get(`${url}stats.json`)).body);
    if (stats.ranks.every((r) => r.messagesPerS > 0) && stats.kinds.some((k) => k.kind === 'recv')) break;
    await sleep(250);
  }
  t.ok(stats.ranks.every((r) => r.messagesPerS > 0), `both ranks report messages/s: ${stats.ranks.map((r) => r.messagesPerS.toFixed(1)).join(', ')}`);
  t.ok(stats.messages > 0 && stats.messagesPerS > 0, `the job: ${stats.messages} messages, ${stats.messagesPerS.toFixed(1)}/s`);
  for (const name of ['send', 'recv']) {
    const k = stats.kinds.find((x) => x.kind === name);
    t.ok(k && k.count > 0 && k.bytes === k.count * 16384, `${name}: ${k && k.count} calls of 16 KiB`);
    t.same(k && [k.algbw, k.busbw], [null, null], `${name}: no bandwidth`);
  }
  t.ok(stats.steps.commShare > 0, `waiting for messages counts as communication: ${stats.steps.commShare}`);

  const page = await openPage(t, url, 1400);
  if (page) {
    await page.waitForFunction(() => {
      const rates = [...document.querySelectorAll('#ranks tbody tr td[data-field=messagesPerS]')].map((td) => parseFloat(td.textContent));
      return rates.length === 2 && rates.every((r) => r > 0) && document.querySelector('#kinds tr[data-kind=recv]');
    }, null, { timeout: 30000, polling: 250 });
    t.match(await page.textContent('#summary'), /collectives\/s \u2022 [\d.]+ messages\/s \u2022/, 'the summary counts messages');
    for (const name of ['send', 'recv']) {
      t.ok(parseInt(await page.textContent(`#kinds tr[data-kind=${name}] td[data-field=count]`), 10) > 0, `${name} row: a count`);
      t.equal(await page.textContent(`#kinds tr[data-kind=${name}] td[data-field=busbw]`), '-', `${name} row: no busbw`);
    }
    t.ok(await page.isVisible('#kinds-note'), 'a note says why messages have no bandwidth');
    const legend = await page.textContent('#split-legend');
    t.match(legend, /compute/);
    t.match(legend, /communication: waiting for collectives and for messages \(send, recv\)/);
    const shot = decodePng(await page.screenshot());
    const box = await page.locator('#split-legend').boundingBox();
    t.ok(countColor(shot, box, RANK0, 10) > 20 && countColor(shot, box, RANK1, 10) > 20, 'the legend shows the bar\'s two colors');
    if (process.env.HORA_TEST_SCREENSHOT_DIR) await page.screenshot({ path: path.join(process.env.HORA_TEST_SCREENSHOT_DIR, 'dashboard-messages.png'), fullPage: true });
  }
  fs.writeFileSync(stopFile, '');
  t.equal(await job.done, 0, job.output());
});
