// Registers the hooks the engine's tests run under: the SDK's fake host (its
// `kubewasm:controller/*` imports) and acorn from the pinned tools (KUBEWASM_ACORN, a path).
import { register } from 'node:module';

register('../../../sdk/js/test/fake-host.mjs', import.meta.url);
register('./acorn-hook.mjs', import.meta.url);
