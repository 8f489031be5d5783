// ES modules to CommonJS for the JavaScript engine: acorn parses a plugin's file, and only its
// import and export declarations are rewritten, each in place and on as many lines as it had, so
// that every line of the rest keeps its number (and, past the declarations, its column).
//
// The rewrite runs in the engine's wrapper for modules, `(function (__kubewasm) {"use strict";…})`
// (engine.js), whose `__kubewasm` gives `require` and the export helpers. Imports are bound when
// their declaration runs, not live; enough for the SDK and for a plugin's own modules that do not
// import each other in a cycle.

import { Parser } from 'acorn';

/** The line `compile` ends a file's code with, naming its wrapper: `load` takes such a file as it is. */
export const COMPILED = /\n\/\/# kubewasm-compiled: (esm|cjs)\n?$/;

/** A syntax error at a known place in one of the plugin's files. */
export class PlacedSyntaxError extends Error {
  constructor(message, file, line, column) {
    super(message);
    this.name = 'SyntaxError';
    Object.assign(this, { file, line, column });
  }
}

const OPTIONS = { ecmaVersion: 'latest', locations: true };
const LINE_BREAK = /\r\n|[\n\r\u2028\u2029]/g;

/** `text` followed by as many line breaks as `original` has. */
const sameLines = (original, text) => text + '\n'.repeat((original.match(LINE_BREAK) ?? []).length);

/** The names a declaration binds (`const { a, b: [c] } = …`, `function f`, `class C`). */
function boundNames(node, out = []) {
  if (!node) return out;
  switch (node.type) {
    case 'Identifier': out.push(node.name); break;
    case 'VariableDeclaration': node.declarations.forEach((d) => boundNames(d.id, out)); break;
    case 'FunctionDeclaration': case 'ClassDeclaration': boundNames(node.id, out); break;
    case 'ObjectPattern': node.properties.forEach((p) => boundNames(p.type === 'RestElement' ? p : p.value, out)); break;
    case 'ArrayPattern': node.elements.forEach((e) => boundNames(e, out)); break;
    case 'AssignmentPattern': boundNames(node.left, out); break;
    case 'RestElement': boundNames(node.argument, out); break;
    default: break;
  }
  return out;
}

const nameOf = (node) => (node.type === 'Identifier' ? node.name : node.value);
const str = JSON.stringify;

/** Parses `text` as a module, else as a CommonJS script; the module's syntax error if neither. */
function parse(text, path) {
  try {
    return Parser.parse(text, { ...OPTIONS, sourceType: 'module' });
  } catch (moduleError) {
    try {
      return Parser.parse(text, { ...OPTIONS, sourceType: 'script', allowReturnOutsideFunction: true });
    } catch {
      const { line, column } = moduleError.loc ?? { line: 0, column: -1 };
      throw new PlacedSyntaxError(moduleError.message.replace(/ \(\d+:\d+\)$/, ''), path, line, column + 1);
    }
  }
}

/** `text` (the file `path`) as CommonJS for the engine's wrapper, ending with the [`COMPILED`]
 * line; `esm`: it was an ES module (and runs in the module wrapper). A syntax error throws a
 * `PlacedSyntaxError`. */
export function toCommonJS(text, path) {
  const ast = parse(text, path);
  const edits = []; // [start, end, replacement], in source order
  const getters = []; // `"exported": () => local`, defined once the module's body ran
  const reexported = []; // modules whose every export is this one's (`export * from`)
  let modules = 0;
  const required = (source) => {
    const local = `__kw${modules++}`;
    return [local, `const ${local} = __kubewasm.require(${str(source.value)});`];
  };
  const edit = (node, end, replacement) => {
    edits.push([node.start, end, sameLines(text.slice(node.start, end), replacement)]);
  };
  for (const node of ast.body) {
    switch (node.type) {
      case 'ImportDeclaration': {
        const [m, head] = required(node.source);
        const source = str(node.source.value);
        const binds = node.specifiers.map((s) => {
          if (s.type === 'ImportNamespaceSpecifier') return `const ${s.local.name} = ${m};`;
          const name = s.type === 'ImportDefaultSpecifier' ? 'default' : nameOf(s.imported);
          return `const ${s.local.name} = __kubewasm.named(${m}, ${str(name)}, ${source});`;
        });
        edit(node, node.end, [head, ...binds].join(' '));
        break;
      }
      case 'ExportNamedDeclaration':
        if (node.declaration) {
          edit(node, node.declaration.start, '');
          for (const name of boundNames(node.declaration)) getters.push(`${str(name)}: () => ${name}`);
        } else if (node.source) {
          const [m, head] = required(node.source);
          edit(node, node.end, head);
          for (const s of node.specifiers) getters.push(`${str(nameOf(s.exported))}: () => ${m}[${str(nameOf(s.local))}]`);
        } else {
          edit(node, node.end, '');
          for (const s of node.specifiers) getters.push(`${str(nameOf(s.exported))}: () => ${s.local.name}`);
        }
        break;
      case 'ExportAllDeclaration': {
        const [m, head] = required(node.source);
        edit(node, node.end, head);
        if (node.exported) getters.push(`${str(nameOf(node.exported))}: () => ${m}`);
        else reexported.push(m);
        break;
      }
      case 'ExportDefaultDeclaration': {
        const named = /^(Function|Class)Declaration$/.test(node.declaration.type) && node.declaration.id;
        edit(node, node.declaration.start, named ? '' : 'const __kwDefault = ');
        getters.push(`default: () => ${named ? node.declaration.id.name : '__kwDefault'}`);
        break;
      }
      default: break;
    }
  }
  const esm = edits.length > 0;
  if (!esm) return { text: `${text}\n//# kubewasm-compiled: cjs\n`, esm };
  let out = '';
  let at = 0;
  for (const [start, end, replacement] of edits) {
    out += text.slice(at, start) + replacement;
    at = end;
  }
  out += text.slice(at);
  const tail = [`__kubewasm.exports({ ${getters.join(', ')} });`, ...reexported.map((m) => `__kubewasm.exportAll(${m});`)];
  return { text: `${out}\n;${tail.join(' ')}\n//# kubewasm-compiled: esm\n`, esm };
}
