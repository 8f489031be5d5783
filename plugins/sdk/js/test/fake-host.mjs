// Module hooks for `node --test`: resolves the SDK's `kubewasm:controller/<iface>@0.3.0` imports
// to modules whose functions call `globalThis.kubewasmFakeHost[iface][fn]`, so tests run the SDK
// outside a component with a fake host. Registered by `node --import ./test/register.mjs`.

const EXPORTS = {
  cache: ['get', 'list', 'byIndex'],
  client: ['apply', 'applyStatus', 'patch', 'patchStatus', 'create', 'delete', 'get'],
  config: ['settings'],
  events: ['publish'],
  log: ['log'],
};

export async function resolve(specifier, context, next) {
  const match = /^kubewasm:controller\/([a-z]+)@0\.3\.0$/.exec(specifier);
  if (match) return { url: `kubewasm-fake:${match[1]}`, shortCircuit: true };
  return next(specifier, context);
}

export async function load(url, context, next) {
  if (!url.startsWith('kubewasm-fake:')) return next(url, context);
  const iface = url.slice('kubewasm-fake:'.length);
  const source = EXPORTS[iface]
    .map((fn) => `const f_${fn} = (...a) => globalThis.kubewasmFakeHost.${iface}.${fn}(...a);\nexport { f_${fn} as ${fn} };`)
    .join('\n');
  return { format: 'module', source, shortCircuit: true };
}
