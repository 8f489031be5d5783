// Resolves the engine's `acorn` import to the pinned tools' copy (KUBEWASM_ACORN): the
// repository holds no node_modules.
import { pathToFileURL } from 'node:url';

export async function resolve(specifier, context, next) {
  if (specifier !== 'acorn') return next(specifier, context);
  if (!process.env.KUBEWASM_ACORN) throw new Error('KUBEWASM_ACORN names acorn.mjs of the pinned tools (`make sdk-test` sets it)');
  return { url: pathToFileURL(process.env.KUBEWASM_ACORN).href, shortCircuit: true };
}
