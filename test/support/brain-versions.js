'use strict';
// The brain.js releases hora/brain is tested against: 1.6.1 under its own name and 2.0.0-beta installed as
// the npm alias brain.js-2 (see package.json devDependencies).
const BRAIN_VERSIONS = [
  { version: require('brain.js/package.json').version, moduleName: 'brain.js' },
  { version: require('brain.js-2/package.json').version, moduleName: 'brain.js-2' },
];

module.exports = { BRAIN_VERSIONS };
