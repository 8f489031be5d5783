// The JavaScript engine's `source` export in node: the ES module rewrite keeps lines, imports
// resolve to the SDK or the plugin's own files, and errors have their kind and place. (The
// engine in StarlingMonkey is tested against the API server: host/tests/all/js_sources.rs.)
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';

import { describe, source } from '../engine.js';
import { toCommonJS } from '../modules.js';

const encoder = new TextEncoder();
const file = (path, text) => ({ path, contents: encoder.encode(text) });
const ND = readFileSync(new URL('../../../js/namespace-defaults/namespace-defaults.js', import.meta.url), 'utf8');

/** The source error `f` throws. */
function thrown(f) {
  try {
    f();
  } catch (e) {
    return e;
  }
  assert.fail('nothing was thrown');
}

test('the rewrite of namespace-defaults keeps every line that is no import or export where it was', () => {
  const { text, esm } = toCommonJS(ND, 'nd.js');
  assert.ok(esm);
  const [before, after] = [ND.split('\n'), text.split('\n')];
  let kept = 0;
  before.forEach((line, i) => {
    if (/\b(import|export)\b|^\s+Kind, Registration|^\} from/.test(line)) return;
    assert.equal(after[i], line, `line ${i + 1}`);
    kept += 1;
  });
  assert.ok(kept > 25, `${kept} lines compared`);
});

test('namespace-defaults compiles, loads and describes itself as its packaged build does', () => {
  const code = source.compile([file('namespace-defaults.js', ND)]);
  source.load(code, 'namespace-defaults');
  const registration = describe();
  assert.equal(registration.forKind.kind, 'Namespace');
  assert.deepEqual(registration.owns.map((o) => o.kind.kind), ['ResourceQuota', 'NetworkPolicy']);
});

test('every export form reaches the importing module, and a plugin imports its own files', () => {
  const helpers = [
    "export * from './more.js';",
    'export default function registrationOf(kind) { return new Registration(kind); }',
    "import { Registration } from 'kubewasm-sdk';",
    'const hidden = 1; export { hidden as shown };',
    "export * as conditions from 'kubewasm';",
  ].join('\n');
  const main = [
    "import registrationOf, { shown, conditions, extra } from './helpers';",
    "import * as sdk from 'kubewasm-sdk';",
    "if (shown !== 1 || extra !== 'x' || typeof conditions.setStatusCondition !== 'function') throw new Error('bad');",
    "export const { describe, reconcile, map } = sdk.reconciler(registrationOf(new sdk.Kind('v1', 'Pod')), () => {});",
  ].join('\n');
  const code = source.compile([file('main.js', main), file('helpers.js', helpers), file('more.js', "export const extra = 'x';")]);
  source.load(code, 'main');
  assert.equal(describe().forKind.kind, 'Pod');
});

test('a CommonJS plugin requires the SDK and assigns module.exports', () => {
  const cjs = "const { reconciler, Registration, Kind } = require('kubewasm');\nmodule.exports = reconciler(new Registration(new Kind('v1', 'Secret')), () => {});\n";
  source.load([file('plain.js', cjs)], 'plain');
  assert.equal(describe().forKind.kind, 'Secret');
});

test('a syntax error is at its file, line and column', () => {
  const e = thrown(() => source.compile([file('nd.js', `${ND.trimEnd()}\nconst broken = (;\n`)]));
  assert.equal(e.kind, 'syntax');
  assert.match(e.message, /^SyntaxError: /);
  assert.deepEqual(e.location, { file: 'nd.js', line: ND.trimEnd().split('\n').length + 1, column: 17 });
});

test('an unknown module, or a name a module does not export, is an import error at its line', () => {
  const last = ND.trimEnd().split('\n').length + 1;
  for (const [line, says] of [
    ["import { x } from 'left-pad';", "Cannot find module 'left-pad'"],
    ["import { reconciller } from 'kubewasm-sdk';", "has no export named 'reconciller'"],
  ]) {
    const code = source.compile([file('nd.js', `${ND.trimEnd()}\n${line}\n`)]);
    const e = thrown(() => source.load(code, 'nd'));
    assert.equal(e.kind, 'import', e.message);
    assert.ok(e.message.includes(says), e.message);
    assert.deepEqual(e.location, { file: 'nd.js', line: last, column: 0 });
  }
});

test('an exception at the top level is at the innermost frame in the plugin', () => {
  const text = `${ND.trimEnd()}\nfunction fail() {\n  throw new RangeError('broken at import');\n}\nfail();\n`;
  const e = thrown(() => source.load(source.compile([file('nd.js', text)]), 'nd'));
  assert.equal(e.kind, 'exception');
  assert.equal(e.message, 'RangeError: broken at import');
  assert.deepEqual(e.location, { file: 'nd.js', line: ND.trimEnd().split('\n').length + 2, column: 9 });
});

test('a module without a reconciler, or an entry that is no file, is refused', () => {
  const e = thrown(() => source.load([file('empty.js', 'export const x = 1;\n')], 'empty'));
  assert.equal(e.kind, 'exception');
  assert.match(e.message, /exports no reconciler/);
  assert.equal(thrown(() => source.load([file('a.js', '')], 'b')).kind, 'import');
});
