// Registers fake-host.mjs's hooks (see there).
import { register } from 'node:module';

register('./fake-host.mjs', import.meta.url);
