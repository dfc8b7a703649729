'use strict';
// Joins the job, prints its pid, and idles (timers only) until something ends it.
const hora = require('../../dist/ts/index.js');

(async () => {
  await hora.init();
  console.log(`ready pid ${process.pid}`);
  setInterval(() => undefined, 1000);
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
