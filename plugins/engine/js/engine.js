// kubewasm's JavaScript engine (wit/engine@0.1.0): StarlingMonkey, the SDK, acorn and the
// contract's bindings, pre-initialized by componentize-js at build time; a plugin's source
// arrives at run time through `source.compile` (once per plugin version, in the host) and
// `source.load` (once per instance).
//
// A plugin is written as packaged JS plugins are: an ES module importing the SDK
// (`import { reconciler } from 'kubewasm-sdk'`, or the repository's '../../sdk/js/kubewasm.js')
// and exporting what `reconciler` returns; plain CommonJS (`require`, `module.exports`) works too.
// StarlingMonkey cannot evaluate an ES module given as a string, so `compile` rewrites each
// module's import and export declarations into CommonJS in place (modules.js), keeping every
// line where it was, and `load` evaluates the result in Node's CommonJS wrapper.

import * as sdk from '../../sdk/js/kubewasm.js';
import * as conditions from '../../sdk/js/conditions.js';
import * as hostCache from 'kubewasm:controller/cache@0.3.0';
import * as hostClient from 'kubewasm:controller/client@0.3.0';
import * as hostConfig from 'kubewasm:controller/config@0.3.0';
import * as hostEvents from 'kubewasm:controller/events@0.3.0';
import * as hostLog from 'kubewasm:controller/log@0.3.0';
import { COMPILED, PlacedSyntaxError, toCommonJS } from './modules.js';

// The modules the engine holds: the SDK by its package names and its files' names (a relative
// import whose last segment is one of them, e.g. '../../sdk/js/kubewasm.js'), and the contract's
// interfaces. A module added is a new engine; none is removed within a minor version.
const BUILTIN = new Map([
  ['kubewasm-sdk', sdk],
  ['kubewasm', sdk],
  ['kubewasm:controller/cache@0.3.0', hostCache],
  ['kubewasm:controller/client@0.3.0', hostClient],
  ['kubewasm:controller/config@0.3.0', hostConfig],
  ['kubewasm:controller/events@0.3.0', hostEvents],
  ['kubewasm:controller/log@0.3.0', hostLog],
]);
const SDK_FILES = new Map([['kubewasm.js', sdk], ['conditions.js', conditions]]);

// The file name plugin code is evaluated under (`//# sourceURL`): tells the plugin's frames
// from the engine's, and reads as the file's own name in the SDK's reconcile errors.
const PREFIX = '<plugin>/';
const decoder = new TextDecoder();
const encoder = new TextEncoder();

/** A module a plugin requires that neither the engine nor the plugin holds. */
class ImportError extends Error {
  constructor(message) {
    super(message);
    this.name = 'ImportError';
  }
}

// Node's CommonJS wrapper, on the source's first line so that every line keeps its number; an
// ES module's rewrite (modules.js) runs in strict mode, as the module did, and reaches `require`
// and its exports through `__kubewasm` alone, so it may name its own `require` or `module`. Only
// line 1's columns move, by the wrapper's length, which `place` takes off again.
const head = (esm) => (esm ? '(function (__kubewasm) {"use strict";' : '(function (require, module, exports) {');
const wrap = (text, path, esm) => (0, eval)(`${head(esm)}${text}\n})\n//# sourceURL=${PREFIX}${path}`);

/** `{ file, line, column }` of the innermost plugin frame in `stack`, if there is one: SpiderMonkey's
 * `fn@<plugin>/file.js:3:7` frames (and V8's `    at fn (<plugin>/file.js:3:7)`, for the tests). */
function innermostPluginFrame(stack, esmOf) {
  for (const frame of String(stack ?? '').split('\n')) {
    const at = frame.indexOf(PREFIX);
    const m = at < 0 ? null : /^(.*):(\d+):(\d+)\)?$/.exec(frame.slice(at + PREFIX.length));
    if (m) return place(m[1], Number(m[2]), Number(m[3]), esmOf(m[1]));
  }
  return undefined;
}

/** The place in the file itself of `line:column` in its wrapped text. */
function place(file, line, column, esm) {
  return { file, line, column: line === 1 ? Math.max(1, column - head(esm).length) : column };
}

function sourceError(kind, e, location) {
  const message = e instanceof Error ? `${e.name}: ${e.message}` : `uncaught exception: ${String(e)}`;
  return { kind, message, location, traceback: e instanceof Error ? `${message}\n${e.stack ?? ''}` : message };
}

/** The file's text and whether it is an ES module's rewrite: compiled now when `compile` did not. */
function compiled(file) {
  const text = decoder.decode(file.contents);
  const marker = COMPILED.exec(text);
  return marker ? { text, esm: marker[1] === 'esm' } : toCommonJS(text, file.path);
}

/** Resolves `path` (`./x`, `../y/z.js`) from the directory of `from`: a path in the plugin. */
function resolve(from, path) {
  const parts = from.split('/').slice(0, -1);
  for (const part of path.split('/')) {
    if (part === '..') parts.pop();
    else if (part !== '.' && part !== '') parts.push(part);
  }
  return parts.join('/');
}

/** Evaluates the plugin's files on demand, as Node's CommonJS loader does, one module object per file. */
class Modules {
  constructor(files) {
    this.files = new Map(files.map((f) => [f.path, f]));
    this.cache = new Map();
    this.esm = new Map();
  }

  /** The file `name` names: itself, or with `.js`, `.mjs`, `.cjs` or `/index.js` added. */
  find(name) {
    return ['', '.js', '.mjs', '.cjs', '/index.js'].map((ext) => name + ext).find((p) => this.files.has(p));
  }

  require(name, from) {
    const relative = name.startsWith('./') || name.startsWith('../');
    const own = relative ? this.find(resolve(from, name)) : undefined;
    if (own) return this.evaluate(own);
    const builtin = relative ? SDK_FILES.get(name.split('/').pop()) : BUILTIN.get(name);
    if (builtin) return builtin;
    throw new ImportError(`Cannot find module '${name}': the engine holds kubewasm-sdk, and a plugin's own files by relative path`);
  }

  evaluate(path) {
    const cached = this.cache.get(path);
    if (cached) return cached.exports;
    const { text, esm } = compiled(this.files.get(path));
    this.esm.set(path, esm);
    const module = { exports: {} };
    this.cache.set(path, module);
    const fn = wrapped(text, path, esm);
    const require = (name) => this.require(String(name), path);
    if (!esm) {
      fn.call(module.exports, require, module, module.exports);
      return module.exports;
    }
    Object.defineProperty(module.exports, '__esModule', { value: true });
    fn.call(undefined, {
      require,
      /** `import { name } from source`: an error, as in a module, when `source` has no such export. */
      named(m, name, source) {
        const isModule = m !== null && (typeof m === 'object' || typeof m === 'function');
        const exported = isModule && (m.__esModule || m[Symbol.toStringTag] === 'Module');
        if (name === 'default' && !exported) return m; // a CommonJS module's default is its exports
        if (!isModule || !(name in m)) throw new ImportError(`module '${source}' has no export named '${name}'`);
        return m[name];
      },
      exports(getters) {
        for (const [name, get] of Object.entries(getters)) Object.defineProperty(module.exports, name, { enumerable: true, get });
      },
      exportAll(m) {
        for (const name of Object.keys(m)) {
          if (name !== 'default' && !(name in module.exports)) {
            Object.defineProperty(module.exports, name, { enumerable: true, get: () => m[name] });
          }
        }
      },
    });
    return module.exports;
  }
}

/** The error a failure to load the plugin is, placed at the plugin's line it comes from. */
function loadError(e, modules) {
  if (e instanceof PlacedSyntaxError) return sourceError('syntax', e, { file: e.file, line: e.line, column: e.column });
  const esmOf = (file) => modules.esm.get(file) ?? false;
  const location = e instanceof Error ? innermostPluginFrame(e.stack, esmOf) : undefined;
  if (!(e instanceof ImportError)) return sourceError('exception', e, location);
  // The import's line; its column would be the rewrite's, not the file's.
  return sourceError('import', e, location && { ...location, column: 0 });
}

/** `text` evaluated in the wrapper: the module's function, or the syntax error SpiderMonkey finds
 * (one acorn let through, e.g. a top-level `await`) at its place in the file. */
function wrapped(text, path, esm) {
  try {
    return wrap(text, path, esm);
  } catch (e) {
    if (!(e instanceof SyntaxError)) throw e;
    // An error in eval'd code names the caller's file: the place is the wrapped text's.
    const where = place(path, e.lineNumber ?? 0, e.columnNumber ?? 0, esm);
    throw new PlacedSyntaxError(e.message, where.file, where.line, where.column);
  }
}

let plugin; // the loaded plugin's exports

export const source = {
  compile(files) {
    const out = [];
    for (const file of files) {
      try {
        const { text, esm } = toCommonJS(decoder.decode(file.contents), file.path);
        wrapped(text, file.path, esm);
        out.push({ path: file.path, contents: encoder.encode(text) });
      } catch (e) {
        if (e instanceof PlacedSyntaxError) throw sourceError('syntax', e, { file: e.file, line: e.line, column: e.column });
        throw sourceError('exception', e, undefined);
      }
    }
    return out;
  },

  load(files, entry) {
    const modules = new Modules(files);
    const path = modules.find(entry) ?? modules.find(entry.replaceAll('.', '/'));
    if (!path) {
      const message = `ImportError: no file of the plugin is module ${entry}`;
      throw { kind: 'import', message, location: undefined, traceback: '' };
    }
    let exports;
    try {
      exports = modules.evaluate(path);
    } catch (e) {
      throw loadError(e, modules);
    }
    if (!exports || typeof exports.reconcile !== 'function' || typeof exports.describe !== 'function') {
      const message = `module ${entry} exports no reconciler: export const { describe, reconcile, map } = reconciler(…)`;
      throw { kind: 'exception', message, location: undefined, traceback: '' };
    }
    plugin = exports;
  },
};

function loaded() {
  if (!plugin) throw new Error('no plugin loaded: the host calls source.load first');
  return plugin;
}

export const describe = () => loaded().describe();
export const reconcile = (request) => loaded().reconcile(request);
export const map = (kind, object) => (loaded().map ?? (() => []))(kind, object);
